package integration

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
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
	name := dbtest.NewDatabase(t, c.Nodes[0])
	root := dbtest.Open(t, c.Nodes[0].RootDSN(name))
	mustExec(t, root, "CREATE TABLE runs (id INT PRIMARY KEY, n INT NOT NULL)")
	if err := lease.CreateSchema(context.Background(), root, ""); err != nil {
		t.Fatal(err)
	}
	dbtest.AwaitGalera(t, c)
	tables := "tables:\n  - name: " + name + ".runs\n"
	proxies := []*testProxy{startProxy(t, c.Nodes[0].Addr, tables), startProxy(t, c.Nodes[1].Addr, tables)}

	var mu sync.Mutex
	var tokens []int64
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for w := 0; w < 6; w++ {
		// wsrep_retry_autocommit=0: each conflict reaches the proxy (with
		// the default, only a second one in a row does).
		db := appDB(t, proxies[w%2], name, "wsrep_retry_autocommit=0", "wsrep_sync_wait=1")
		conn, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			bg := context.Background()
			for ctx.Err() == nil {
				var tok sql.NullInt64
				if err := conn.QueryRowContext(bg, "SELECT fence_acquire('job', 60)").Scan(&tok); err != nil {
					errc <- fmt.Errorf("worker %d: fence_acquire: %w", w, err)
					return
				}
				if !tok.Valid {
					continue
				}
				mu.Lock()
				tokens = append(tokens, tok.Int64)
				mu.Unlock()
				for _, q := range []string{"SELECT fence_renew(60)", "SELECT fence_release()"} {
					var ok int
					if err := conn.QueryRowContext(bg, q).Scan(&ok); err != nil || ok != 1 {
						errc <- fmt.Errorf("worker %d: %s by the holder: %d, %v", w, q, ok, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	slices.Sort(tokens)
	var calls float64
	for _, p := range proxies {
		calls += testutilCounter(t, p.Reg, "fenceproxy_lease_calls_total")
	}
	t.Logf("%d acquires through proxies on two nodes, %v lease calls answered", len(tokens), calls)
	if len(tokens) == 0 {
		t.Fatal("no acquire succeeded")
	}
	for i, tok := range tokens {
		if tok != int64(i+1) {
			t.Fatalf("token %d at place %d (an acquire lost or applied twice)", tok, i+1)
		}
	}
}
