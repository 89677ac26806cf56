package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
)

// conflictCounter is a lease.Conn that counts the 1213 answers the
// operations saw (and retried) underneath.
type conflictCounter struct {
	lease.Conn
	n *atomic.Int64
}

func (c conflictCounter) Exec(ctx context.Context, q string) (int64, error) {
	n, err := c.Conn.Exec(ctx, q)
	if lease.IsConflict(err) {
		c.n.Add(1)
	}
	return n, err
}

func (c conflictCounter) Query(ctx context.Context, q string) ([][]string, error) {
	rows, err := c.Conn.Query(ctx, q)
	if lease.IsConflict(err) {
		c.n.Add(1)
	}
	return rows, err
}

// Workers on two Galera nodes acquire, renew and release one lease as fast
// as they can. Acquirers of a just released lease on different nodes both
// update its row, and certification fails all but one with 1213, which the
// operations must retry: no error other than "held" may reach a worker, a
// holder's renew and release must succeed (no one else can change a held
// lease), and every acquire must move the token by exactly one (no
// acquire is lost or applied twice by a retry).
func TestGaleraLeaseOperationsRetryConflicts(t *testing.T) {
	c := dbtest.SharedGalera(t)
	name := dbtest.NewDatabase(t, c.Nodes[0])
	// wsrep_retry_autocommit=0: the server does not retry a conflicting
	// autocommit statement itself, so each conflict reaches the lease code
	// (with the default 1, only a second conflict in a row does).
	open := func(s *dbserver.Server) *sql.DB {
		return dbtest.Open(t, s.DSN(dbserver.AppUser, dbserver.AppPassword, name)+"&wsrep_retry_autocommit=0&wsrep_sync_wait=1")
	}
	first := open(c.Nodes[0])
	if err := lease.CreateSchema(ctxT(t), first, ""); err != nil {
		t.Fatal(err)
	}
	dbtest.AwaitGalera(t, c)
	const table = lease.DefaultTable
	var conflicts atomic.Int64
	var mu sync.Mutex
	var tokens []uint64
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for w := 0; w < 6; w++ {
		db := open(c.Nodes[w%2])
		if err := db.PingContext(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := db.Conn(context.Background())
			if err != nil {
				errc <- err
				return
			}
			defer conn.Close()
			lc := conflictCounter{lease.NewConn(conn), &conflicts}
			bg := context.Background()
			for ctx.Err() == nil {
				l, err := lease.AcquireOn(bg, lc, table, "job", time.Minute)
				if errors.Is(err, lease.ErrHeld) {
					continue
				}
				if err != nil {
					errc <- fmt.Errorf("worker %d: acquire: %w", w, err)
					return
				}
				mu.Lock()
				tokens = append(tokens, l.Token)
				mu.Unlock()
				if _, err := lease.RenewOn(bg, lc, table, l, time.Minute); err != nil {
					errc <- fmt.Errorf("worker %d: renew of a held lease: %w", w, err)
					return
				}
				if err := lease.ReleaseOn(bg, lc, table, l); err != nil {
					errc <- fmt.Errorf("worker %d: release of a held lease: %w", w, err)
					return
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
	t.Logf("%d acquires across two nodes, %d conflicts (1213) retried", len(tokens), conflicts.Load())
	if len(tokens) == 0 {
		t.Fatal("no acquire succeeded")
	}
	for i, tok := range tokens {
		if tok != uint64(i+1) {
			t.Fatalf("acquired tokens %v...: token %d at place %d (an acquire lost or applied twice)", tokens[:min(i+1, 20)], tok, i+1)
		}
	}
	st, err := lease.GetOn(ctxT(t), lease.NewConn(first), table, "job")
	if err != nil {
		t.Fatal(err)
	}
	if st.Token != uint64(len(tokens)) {
		t.Errorf("the lease's token is %d after %d acquires", st.Token, len(tokens))
	}
	if conflicts.Load() == 0 {
		t.Error("no conflict happened: the test did not exercise the retries it is about")
	}
}
