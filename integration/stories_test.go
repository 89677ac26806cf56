package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// The seeds' stories, played by apps that use only SQL through the proxy:
// the lease functions to take and keep leases, and plain writes that the
// proxy fences.

// TestInvoiceRunStory is the invoice incident: per-customer leases whose TTL
// is shorter than the slowest job, 8 workers, a unique (customer, period)
// key. No customer is invoiced twice, every write that arrives after its
// lease was lost is rejected and audited, and no stale write commits after
// a takeover.
func TestInvoiceRunStory(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-worker story")
	}
	e := newFencedEnv(t, envOptions{})
	installEventLog(t, e)
	const (
		workers   = 8
		customers = 12
		period    = "2026-11"
		ttl       = 0.4 // seconds; jobs take up to 0.9 s
	)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var stale, written, dup atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	deadline := time.Now().Add(20 * time.Second)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			db := appDB(t, e.proxy, e.db)
			c, err := db.Conn(context.Background())
			if err != nil {
				errc <- err
				return
			}
			defer c.Close()
			ctx := context.Background()
			for time.Now().Before(deadline) {
				var pending int
				if err := c.QueryRowContext(ctx, "SELECT ? - COUNT(*) FROM invoices WHERE period = ?", customers, period).Scan(&pending); err != nil {
					errc <- err
					return
				}
				if pending == 0 {
					return
				}
				cust := fmt.Sprintf("cust-%02d", rng.IntN(customers))
				var tok sql.NullInt64
				if err := c.QueryRowContext(ctx, fmt.Sprintf("SELECT fence_acquire('invoice:%s', %g)", cust, ttl)).Scan(&tok); err != nil {
					errc <- err
					return
				}
				if !tok.Valid {
					continue // someone else is invoicing this customer
				}
				var exists int
				if err := c.QueryRowContext(ctx, "SELECT COUNT(*) FROM invoices WHERE customer = ? AND period = ?", cust, period).Scan(&exists); err != nil {
					errc <- err
					return
				}
				if exists == 0 {
					time.Sleep(time.Duration(50+rng.IntN(850)) * time.Millisecond) // render the PDF, call the payment API
					r, err := c.ExecContext(ctx, "INSERT INTO invoices (customer, period, amount, token) VALUES (?, ?, ?, @fence_token)", cust, period, w)
					var me *mysql.MySQLError
					switch {
					case errors.As(err, &me) && me.Number == 1062:
						dup.Add(1) // the unique key caught a second invoice: the fence should have
					case err != nil:
						errc <- err
						return
					case rowsAffected(r) == 0:
						stale.Add(1)
					default:
						written.Add(1)
					}
				}
				c.ExecContext(ctx, "SELECT fence_release()")
			}
		}(w)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if got := queryString(t, e.root, "SELECT COUNT(*) FROM invoices WHERE period = ?", period); got != fmt.Sprint(customers) {
		t.Fatalf("%s invoices for %d customers", got, customers)
	}
	if d := dup.Load(); d != 0 {
		t.Fatalf("%d inserts reached the unique key: a stale writer got past its fence", d)
	}
	var audited int64
	for _, r := range e.auditRecords(t) {
		if r.Table == e.db+".invoices" && strings.HasPrefix(r.Lease, "invoice:") {
			audited++
		}
	}
	if audited != stale.Load() {
		t.Fatalf("%d stale inserts, %d audit records", stale.Load(), audited)
	}
	if stale.Load() == 0 {
		t.Fatal("no worker overran its lease: the story did not happen")
	}
	checkEventLog(t, e)
	t.Logf("%d invoices written, %d stale inserts rejected and audited", written.Load(), stale.Load())
}

// TestHeartbeatTakeoverStory is the heartbeat lease for long jobs: A renews
// while it works and saves progress under the lease; it then misses its
// heartbeats during a long external call, B takes over after expiry and
// continues from the last saved progress; A's late save, renewal and
// release all fail, and B's progress is intact.
func TestHeartbeatTakeoverStory(t *testing.T) {
	e := newFencedEnv(t, envOptions{tables: []string{"job_progress"}})
	ctx := context.Background()
	mustExec(t, e.root, "CREATE TABLE job_progress (job VARCHAR(40) PRIMARY KEY, step INT NOT NULL, worker CHAR(1) NOT NULL, token BIGINT UNSIGNED)")
	const job = "report:2026-11"
	a, b := e.session(t), e.session(t)
	if tok := scanToken(t, a.QueryRowContext(ctx, "SELECT fence_acquire('"+job+"', 0.4)")); !tok.Valid {
		t.Fatal("A could not acquire")
	}
	mustExec(t, a, "INSERT INTO job_progress VALUES ('"+job+"', 0, 'A', @fence_token)")
	for step := 1; step <= 3; step++ {
		var ok int
		if err := a.QueryRowContext(ctx, "SELECT fence_renew(0.4)").Scan(&ok); err != nil || ok != 1 {
			t.Fatalf("A's heartbeat %d: %d %v", step, ok, err)
		}
		if r := mustExec(t, a, "UPDATE job_progress SET step = ?, token = @fence_token WHERE job = ?", step, job); rowsAffected(r) != 1 {
			t.Fatalf("A's save %d rejected", step)
		}
	}
	// A's long external call: no heartbeats. B watches and takes over.
	e.awaitExpired(t, job)
	tokB := scanToken(t, b.QueryRowContext(ctx, "SELECT fence_acquire('"+job+"', 30)"))
	if !tokB.Valid {
		t.Fatal("B could not take over")
	}
	var resume int
	if err := b.QueryRowContext(ctx, "SELECT step FROM job_progress WHERE job = ?", job).Scan(&resume); err != nil || resume != 3 {
		t.Fatalf("B resumes at %d, %v", resume, err)
	}
	if r := mustExec(t, b, "UPDATE job_progress SET step = 4, worker = 'B', token = @fence_token WHERE job = ?", job); rowsAffected(r) != 1 {
		t.Fatal("B's save rejected")
	}
	// A comes back.
	if r := mustExec(t, a, "UPDATE job_progress SET step = 4, worker = 'A', token = @fence_token WHERE job = ?", job); rowsAffected(r) != 0 {
		t.Fatal("A's late save landed")
	}
	var ok int
	if err := a.QueryRowContext(ctx, "SELECT fence_renew(0.4)").Scan(&ok); err != nil || ok != 0 {
		t.Fatalf("A's late heartbeat: %d %v", ok, err)
	}
	if err := a.QueryRowContext(ctx, "SELECT fence_release()").Scan(&ok); err != nil || ok != 0 {
		t.Fatalf("A's late release: %d %v", ok, err)
	}
	if got := queryString(t, e.root, "SELECT CONCAT(step, worker, token) FROM job_progress"); got != fmt.Sprintf("4B%d", tokB.Int64) {
		t.Fatalf("progress: %s", got)
	}
	recs := e.auditRecords(t)
	if len(recs) != 1 || recs[0].Reason != "stale_token" || recs[0].Table != e.db+".job_progress" {
		t.Fatalf("audit: %+v", recs)
	}
}
