package dbtest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
)

// EnvTiDBDSN names a running TiDB to use instead of starting a tidb-server.
const EnvTiDBDSN = "FENCEPROXY_TEST_TIDB_DSN"

var tidb shared

// tidbStartTimeout is longer than startTimeout: a fresh tidb-server
// bootstraps its system tables first.
const tidbStartTimeout = 4 * time.Minute

// SharedTiDB returns the test binary's tidb-server, started on first use
// (dbserver.StartTiDB), or the server of FENCEPROXY_TEST_TIDB_DSN. Without
// a tidb-server binary the test is skipped, unless
// FENCEPROXY_REQUIRE_SERVER=1: then it fails.
func SharedTiDB(t testing.TB) *dbserver.Server {
	t.Helper()
	tidb.once.Do(func() {
		if dsn := os.Getenv(EnvTiDBDSN); dsn != "" {
			tidb.srv, tidb.err = dbserver.FromDSN(dsn)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), tidbStartTimeout)
		defer cancel()
		tidb.srv, tidb.err = dbserver.StartTiDB(ctx)
	})
	if tidb.err != nil {
		Unavailable(t, tidb.err)
	}
	return tidb.srv
}
