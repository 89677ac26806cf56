package integration

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
)

// The SQL lease functions through proxies in front of two Galera nodes:
// clients of both acquire, renew and release one lease as fast as they
// can. Acquirers of a just released lease on different nodes conflict in
// certification (1213), which the proxy must retry, not return: every call
// answers (a token or NULL, 1 for the holder's renew and release), and the
// tokens handed out are 1, 2, 3, ... with none lost or given twice.
func TestGaleraLeaseFunctionsRetryConflicts(t *testing.T) {
	c := dbtest.SharedGalera(t)
	// Both deployments, each with a schema of its own (the race counts
	// tokens from 1): lease functions in the client's session (bare) and
	// with the proxy's own account (the documented one).
	for _, dep := range []string{deployBare, deployAccount} {
		t.Run(dep, func(t *testing.T) {
			name := dbtest.NewDatabase(t, c.Nodes[0])
			root := dbtest.Open(t, c.Nodes[0].RootDSN(name))
			mustExec(t, root, "CREATE TABLE runs (id INT PRIMARY KEY, n INT NOT NULL)")
			if err := lease.CreateSchema(context.Background(), root, ""); err != nil {
				t.Fatal(err)
			}
			var backend []string
			if dep == deployAccount {
				backend = proxyAccount(t, c.Nodes[0], name)
			}
			dbtest.AwaitGalera(t, c)
			tables := "tables:\n  - name: " + name + ".runs\n"
			galeraLeaseFunctionsRace(t, name, []*testProxy{startProxy(t, c.Nodes[0].Addr, tables, backend...),
				startProxy(t, c.Nodes[1].Addr, tables, backend...)})
		})
	}
}

func galeraLeaseFunctionsRace(t *testing.T, name string, proxies []*testProxy) {

	conns := make([]*sql.Conn, 6)
	for w := range conns {
		// wsrep_retry_autocommit=0: each conflict reaches the proxy (with
		// the default, only a second one in a row does).
		db := appDB(t, proxies[w%2], name, "wsrep_retry_autocommit=0", "wsrep_sync_wait=1")
		conn, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conns[w] = conn
	}
	tokens := raceLeaseFunctions(t, conns, 4*time.Second)
	var calls float64
	for _, p := range proxies {
		calls += testutilCounter(t, p.Reg, "fenceproxy_lease_calls_total")
	}
	t.Logf("%d acquires through proxies on two nodes, %v lease calls answered", len(tokens), calls)
	checkTokens(t, tokens)
}
