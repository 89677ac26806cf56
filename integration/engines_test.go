package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// The engines the fence suite runs against. On Galera the proxy is in front
// of node 1 and other workers take leases over on node 2 (fencedEnv.other);
// on TiDB, in another session of the same tidb-server.
const (
	engMariaDB = "mariadb"
	engGalera  = "galera"
	engTiDB    = "tidb"
)

var allEngines = []string{engMariaDB, engGalera, engTiDB}

// The two deployments every engine test runs in (subtests of the engine's):
//
//	bare     no proxy account: catalog.refresh: 0s, said knowingly; lease
//	         functions run in the client's session
//	account  the proxy's own account (backend.user) with the grants the
//	         documentation gives: the schema catalog is read and kept
//	         fresh, lease functions and the audit table use the account
//
// The second is the one the documentation tells operators to run; the
// first is what the suite ran alone before, and missed that the catalog
// could not be read on TiDB at all.
const (
	deployBare    = "bare"
	deployAccount = "account"
)

// accountTests holds the names of the "account" subtests forEachEngine
// started; newFencedEnv looks its test (or an ancestor) up.
var accountTests sync.Map

// forEachEngine runs f as a subtest per engine, named after it, once per
// deployment (engine/bare, engine/account).
func forEachEngine(t *testing.T, f func(t *testing.T, eng string)) {
	t.Helper()
	for _, eng := range allEngines {
		t.Run(eng, func(t *testing.T) {
			for _, dep := range []string{deployBare, deployAccount} {
				t.Run(dep, func(t *testing.T) {
					if dep == deployAccount {
						accountTests.Store(t.Name(), true)
						defer accountTests.Delete(t.Name())
					}
					f(t, eng)
				})
			}
		})
	}
}

// withAccount tells whether t runs in forEachEngine's account deployment.
func withAccount(t testing.TB) bool {
	for name := t.Name(); ; {
		if _, ok := accountTests.Load(name); ok {
			return true
		}
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			return false
		}
		name = name[:i]
	}
}

// notOn skips the (sub)test on the named engines: a case that cannot apply
// there, for the reason given.
func notOn(t *testing.T, eng, why string, engines ...string) {
	t.Helper()
	if slices.Contains(engines, eng) {
		t.Skipf("not on %s: %s", eng, why)
	}
}

// proxyAccountGrants are the proxy's own account's grants, as
// docs/configuration-checks.md gives them: %s is the account, %d the
// schema of the protected tables.
var proxyAccountGrants = []string{
	"GRANT SELECT, SHOW VIEW, TRIGGER, EVENT ON *.* TO %[1]s",
	"GRANT SELECT, INSERT, UPDATE ON `%[2]s`.fenced_job_leases TO %[1]s",
	"GRANT SELECT, INSERT, DELETE ON `%[2]s`.fenced_audit TO %[1]s",
}

var accountSeq struct {
	sync.Mutex
	n int
}

// proxyAccount creates an account for the proxy on s with the documented
// grants for database db (whose lease and audit tables exist), and
// returns the backend YAML lines that name it (user, password_file).
func proxyAccount(t testing.TB, s *dbserver.Server, db string) []string {
	t.Helper()
	accountSeq.Lock()
	accountSeq.n++
	user := fmt.Sprintf("fp_px%d_%s", accountSeq.n, db[len(db)-6:])
	accountSeq.Unlock()
	pw := "px-Pw1-" + db[len(db)-6:]
	root := dbtest.Open(t, s.RootDSN(""))
	acct := "'" + user + "'@'%'"
	stmts := []string{"CREATE USER " + acct + " IDENTIFIED BY '" + pw + "'"}
	for _, g := range proxyAccountGrants {
		stmts = append(stmts, fmt.Sprintf(g, acct, db))
	}
	for _, q := range stmts {
		if _, err := root.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { root.Exec("DROP USER IF EXISTS " + acct) })
	file := filepath.Join(t.TempDir(), "proxy-password")
	if err := os.WriteFile(file, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"user: " + user, "password_file: " + file}
}
