package integration

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

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
)

// On TiDB an optimistic transaction (and an autocommit statement under
// tidb_txn_mode = 'optimistic') that changed a row another transaction
// committed after it began fails with 9007 (write conflict) and commits
// nothing. TiDB retries a conflicting autocommit statement itself up to
// tidb_retry_limit times (default 10; measured: not one 9007 reached the
// client in 111 acquires of six optimistic sessions in 4 s), so the
// sessions here set it to 0, as a server configured so would: then 51 of
// the lease statements got 9007 in as many acquires. Workers that acquire,
// renew and release one lease as fast as they can, each in its own such
// session, make the lease statements conflict on the lease row for real; lease.Store's operations and the SQL
// lease functions must retry those and stay atomic: every call answers,
// and the tokens handed out are 1, 2, 3, ... with none lost or given twice.
// This mirrors TestGaleraLeaseFunctionsRetryConflicts (1213 on Galera).

// tidbLeaseWorkers race on one lease for tidbLeaseRun.
const (
	tidbLeaseWorkers = 6
	tidbLeaseRun     = 4 * time.Second
)

// conflictCounter is a lease.Conn that counts the write conflicts its
// statements got, below lease's retries: it shows the conflicts were real.
type conflictCounter struct {
	c lease.Conn
	n *atomic.Int64
}

func (cc conflictCounter) count(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 9007 {
		cc.n.Add(1)
	}
	return err
}

func (cc conflictCounter) Exec(ctx context.Context, q string) (int64, error) {
	n, err := cc.c.Exec(ctx, q)
	return n, cc.count(err)
}

func (cc conflictCounter) Query(ctx context.Context, q string) ([][]string, error) {
	rows, err := cc.c.Query(ctx, q)
	return rows, cc.count(err)
}

// checkTokens requires tokens to be 1..n, each once.
func checkTokens(t *testing.T, tokens []int64) {
	t.Helper()
	if len(tokens) == 0 {
		t.Fatal("no acquire succeeded")
	}
	slices.Sort(tokens)
	for i, tok := range tokens {
		if tok != int64(i+1) {
			t.Fatalf("token %d at place %d of %d (an acquire lost or applied twice)", tok, i+1, len(tokens))
		}
	}
}

// raceLeaseFunctions has one worker per connection acquire, renew and
// release lease "job" with the SQL lease functions as fast as it can for d:
// every call must answer (a token or NULL; 1 for the holder's renew and
// release). It returns the tokens acquired, for checkTokens.
func raceLeaseFunctions(t *testing.T, conns []*sql.Conn, d time.Duration) []int64 {
	t.Helper()
	var mu sync.Mutex
	var tokens []int64
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, len(conns))
	for w, conn := range conns {
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
	return tokens
}

func TestTiDBLeaseStoreRetriesWriteConflicts(t *testing.T) {
	e := newTiDBEnv(t)
	table := e.db + ".fenced_job_leases"
	var conflicts atomic.Int64
	var mu sync.Mutex
	var tokens []int64
	ctx, cancel := context.WithTimeout(context.Background(), tidbLeaseRun)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, tidbLeaseWorkers)
	for w := 0; w < tidbLeaseWorkers; w++ {
		db := dbtest.Open(t, withParam(e.srv.RootDSN(e.db), "tidb_txn_mode=%27optimistic%27&tidb_retry_limit=0"))
		conn, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		c := conflictCounter{c: lease.NewConn(conn), n: &conflicts}
		wg.Add(1)
		go func() {
			defer wg.Done()
			bg := context.Background() // a call in flight finishes: its outcome must be known
			for ctx.Err() == nil {
				l, err := lease.AcquireOn(bg, c, table, "job", time.Minute)
				if errors.Is(err, lease.ErrHeld) {
					continue
				}
				if err != nil {
					errc <- fmt.Errorf("worker %d: acquire: %w", w, err)
					return
				}
				mu.Lock()
				tokens = append(tokens, int64(l.Token))
				mu.Unlock()
				if l, err = lease.RenewOn(bg, c, table, l, time.Minute); err != nil {
					errc <- fmt.Errorf("worker %d: renew by the holder: %w", w, err)
					return
				}
				if err := lease.ReleaseOn(bg, c, table, l); err != nil {
					errc <- fmt.Errorf("worker %d: release by the holder: %w", w, err)
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
	t.Logf("%d acquires by %d optimistic sessions in %s, %d write conflicts (9007) retried", len(tokens), tidbLeaseWorkers, tidbLeaseRun, conflicts.Load())
	checkTokens(t, tokens)
	if conflicts.Load() == 0 {
		t.Error("no statement got 9007: the race did not make the lease statements conflict")
	}
	if got := queryString(t, e.root, "SELECT fence_token FROM fenced_job_leases WHERE lease_name = 'job'"); got != fmt.Sprint(len(tokens)) {
		t.Errorf("the lease row's token is %s after %d acquires", got, len(tokens))
	}
}

// The SQL lease functions through the proxy, the clients' sessions
// optimistic with tidb_retry_limit 0 (without backend.user the lease
// statements run in them, so they conflict as in the test above).
func TestTiDBLeaseFunctionsRetryWriteConflicts(t *testing.T) {
	p := newTiDBProxy(t)
	conns := make([]*sql.Conn, tidbLeaseWorkers)
	for w := range conns {
		conn, err := appDB(t, p.tp, p.db, "tidb_txn_mode=%27optimistic%27", "tidb_retry_limit=0").Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conns[w] = conn
	}
	tokens := raceLeaseFunctions(t, conns, tidbLeaseRun)
	t.Logf("%d acquires through the proxy by %d optimistic sessions in %s, %v lease calls answered",
		len(tokens), tidbLeaseWorkers, tidbLeaseRun, testutilCounter(t, p.tp.Reg, "fenceproxy_lease_calls_total"))
	checkTokens(t, tokens)
}
