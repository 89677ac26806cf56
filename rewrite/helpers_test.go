package rewrite

import (
	"testing"

	"github.com/fenceproxy/fenceproxy/policy"
)

// testPolicy protects app.invoices (session lease) and
// app.reconciliation_runs (fixed lease admin:reconciliation).
func testPolicy(t testing.TB) *policy.Policy {
	t.Helper()
	p, err := policy.NewPolicy(1, policy.Fencing{}, []policy.Table{
		{Name: "app.invoices"},
		{Name: "app.reconciliation_runs", Lease: "admin:reconciliation"},
		{Name: "billing.ledger"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var (
	maria   = Server{Flavor: MariaDB, Version: 101119}
	mysql8  = Server{Flavor: MySQL, Version: 80036}
	mysql84 = Server{Flavor: MySQL, Version: 80400}
	tidb    = Server{Flavor: TiDB, Version: 80400}
)

func appSession() *Session {
	return &Session{Schema: "app", ANSIQuotes: Off, NoBackslashEscapes: Off}
}
