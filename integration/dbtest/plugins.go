package dbtest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
)

var pluginMu sync.Mutex

// Engine makes the storage engine available on s, installing the plugin
// soname (INSTALL SONAME) when the server does not have it yet: e.g.
// Engine(t, s, "FEDERATED", "ha_federatedx"). The plugin stays installed
// in the disposable server.
func Engine(t testing.TB, s *dbserver.Server, engine, soname string) {
	t.Helper()
	pluginMu.Lock()
	defer pluginMu.Unlock()
	root := Open(t, s.RootDSN(""))
	// Measured: INSTALL SONAME 'ha_spider' can take over 30 s on a busy
	// machine (it creates its system tables).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	have := func() bool {
		var support string
		err := root.QueryRowContext(ctx, "SELECT SUPPORT FROM information_schema.ENGINES WHERE ENGINE = ?", engine).Scan(&support)
		if err != nil && err != sql.ErrNoRows {
			t.Fatalf("information_schema.ENGINES: %v", err)
		}
		return strings.EqualFold(support, "YES") || strings.EqualFold(support, "DEFAULT")
	}
	if have() {
		return
	}
	if _, err := root.ExecContext(ctx, "INSTALL SONAME '"+soname+"'"); err != nil {
		// The plugin's package is not installed (error 1126: cannot open
		// the shared library): a skip, unless this binary's own server
		// is required (CI, whose scripts/test.sh installs the packages);
		// a server named by FENCEPROXY_TEST_DSN may not have them.
		if os.Getenv(EnvRequire) != "1" || os.Getenv(EnvDSN) != "" {
			t.Skipf("storage engine %s: INSTALL SONAME '%s': %v", engine, soname, err)
		}
		t.Fatalf("storage engine %s: INSTALL SONAME '%s': %v", engine, soname, err)
	}
	if !have() {
		t.Fatalf("INSTALL SONAME '%s' did not make the %s engine available", soname, engine)
	}
}

var linkSeq atomic.Uint64

// Link returns the prefix of a FEDERATED / CONNECT connection string that
// names database db on s through an account of its own (all privileges on
// db, dropped when the test ends): CONNECTION='<prefix>jobs' is db.jobs.
// FederatedX connects when the table is created, so the account must work.
func Link(t testing.TB, s *dbserver.Server, db string) (prefix, user, password string) {
	t.Helper()
	root := Open(t, s.RootDSN(""))
	user = fmt.Sprintf("fplink%d_%s", linkSeq.Add(1), db[len(db)-6:])
	password = "link-Pw1"
	for _, q := range []string{
		"CREATE USER '" + user + "'@'%' IDENTIFIED BY '" + password + "'",
		"GRANT ALL ON `" + db + "`.* TO '" + user + "'@'%'",
	} {
		if _, err := root.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { root.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	host, port, err := net.SplitHostPort(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	return "mysql://" + user + ":" + password + "@" + host + ":" + port + "/" + db + "/", user, password
}
