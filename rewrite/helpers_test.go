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
		{Name: "app.invoice_rows", Lease: "invoice:{customer_id}"},
		{Name: "app.order_rows", Lease: "order:{region}/{cust_no}"},
		{Name: "app.loose_rows", Lease: "loose:{customer_id}"},
		{Name: "app.unchecked_rows", Lease: "unchecked:{customer_id}"},
	})
	if err != nil {
		t.Fatal(err)
	}
	// What the start-up check would find (proxy.CheckSchema): invoice_rows
	// and order_rows have unique keys holding their template columns with
	// a binary collation, and are InnoDB tables; loose_rows has neither;
	// unchecked_rows was never checked.
	for i := range p.Tables {
		tb := &p.Tables[i]
		switch tb.Table {
		case "invoice_rows":
			tb.Template.SetSchema(&policy.TemplateSchema{KeysCovered: true, Transactional: true, Columns: []policy.TemplateColumn{
				{Name: "customer_id", Kind: policy.KindString, Length: 16, Exact: true}}})
		case "order_rows":
			tb.Template.SetSchema(&policy.TemplateSchema{KeysCovered: true, Transactional: true, Columns: []policy.TemplateColumn{
				{Name: "region", Kind: policy.KindString, Length: 4, Padded: true, Exact: true},
				{Name: "cust_no", Kind: policy.KindInteger, Unsigned: true, UMax: 65535, Exact: true}}})
		case "loose_rows":
			tb.Template.SetSchema(&policy.TemplateSchema{KeysCovered: false, Columns: []policy.TemplateColumn{
				{Name: "customer_id", Kind: policy.KindString, Length: 16}}})
		}
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
