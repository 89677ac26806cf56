package integration

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// EnvTiDBRace sets the length of TestTiDBFenceShapesRace (a Go duration;
// default 30s).
const EnvTiDBRace = "FENCEPROXY_TIDB_RACE"

// raceCommit is one committed writer transaction that carried at least one
// write the fence let through.
type raceCommit struct {
	token, ts uint64
	mode      string
}

// raceStats is what one shape's writers and takeovers did.
type raceStats struct {
	mu        sync.Mutex
	commits   []raceCommit
	takeovers map[uint64]uint64 // token -> commit timestamp of the takeover that made it
	rejected  int               // fenced statements refused (0 rows, or the guard said no)
	conflicts map[string]int    // "code at statement|COMMIT" -> count
}

// TestTiDBFenceShapesRace runs, for each candidate shape with the lease name
// as a variable and as a literal, two writers that write with the token
// they last saw (UPDATE, DELETE and INSERT; explicit pessimistic and
// optimistic transactions at READ COMMITTED and REPEATABLE READ, and
// autocommit) until the fence refuses them, and a session that takes the
// lease over at random moments. From TiDB's commit timestamps it counts the
// writer transactions with token t that committed after the takeover to
// t+1. The guard shape must have none. The run lasts FENCEPROXY_TIDB_RACE
// (30 s), longer while a guard configuration has not yet exercised the race
// (raceStop).
func TestTiDBFenceShapesRace(t *testing.T) {
	if testing.Short() {
		t.Skip("randomized race of 30 s")
	}
	runFor := tidbRaceDuration(t)
	e := newTiDBEnv(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %s", seed, runFor)
	type config struct {
		shape   string
		literal bool
	}
	var configs []config
	for _, s := range tidbShapes {
		configs = append(configs, config{s, false}, config{s, true})
	}
	const writers = 2
	stats := make([]*raceStats, len(configs))
	var guards []*raceStats
	for i, cfg := range configs {
		stats[i] = &raceStats{takeovers: map[uint64]uint64{}, conflicts: map[string]int{}}
		if cfg.shape == shapeGuard {
			guards = append(guards, stats[i])
		}
	}
	stop, cancel := raceStop(runFor, guards...)
	defer cancel()
	began := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, len(configs)*(writers+1))
	for i, cfg := range configs {
		st := stats[i]
		lname := fmt.Sprintf("race-%d", i)
		e.newLease(t, lname, "owner-0")
		ref := leaseRef(lname, cfg.literal)
		b := e.conn(t)
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(1000+i)))
			for n := 1; stop.Err() == nil; n++ {
				time.Sleep(time.Duration(1+rng.IntN(15)) * time.Millisecond) // pacing, not synchronisation
				mode := []string{"pessimistic", "optimistic"}[rng.IntN(2)]
				// A takeover in flight when the run ends finishes: one that
				// commits unrecorded would hide the stale commits after it.
				tok, ts, err := takeover(context.Background(), b, mode, lname, fmt.Sprintf("owner-%d", n))
				if err != nil {
					errc <- fmt.Errorf("takeover: %w", err)
					return
				}
				st.mu.Lock()
				st.takeovers[tok] = ts
				st.mu.Unlock()
			}
		}(i)
		for w := 0; w < writers; w++ {
			wr := &raceWriter{c: e.conn(t), root: e.root, st: st, shape: cfg.shape, lease: lname, ref: ref,
				rng:    rand.New(rand.NewPCG(seed, uint64(i*10+w))),
				nextID: int64(i)*100_000_000 + int64(w)*10_000_000, counter: int64(i)*100_000_000 + int64(w)*10_000_000}
			mustExec(t, e.root, "INSERT INTO items (id, v, token) VALUES (?, 0, 0)", wr.counter)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := wr.run(stop); err != nil {
					errc <- fmt.Errorf("%s writer: %w", cfg.shape, err)
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("ran %s", time.Since(began).Round(time.Millisecond))
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	for i, cfg := range configs {
		st := stats[i]
		stale, staleByMode := st.staleCommits()
		form := "var"
		if cfg.literal {
			form = "literal"
		}
		t.Logf("%-8s %-7s takeovers %4d  committed writer txns %5d  refused statements %5d  stale commits %3d %v  not committed %v",
			cfg.shape, form, len(st.takeovers), len(st.commits), st.rejected, stale, staleByMode, sortedCounts(st.conflicts))
		if cfg.shape == shapeGuard {
			if stale > 0 {
				t.Errorf("guard shape (%s lease name): %d writer transactions committed after the takeover to the next token", form, stale)
			}
			if !st.exercised() {
				t.Errorf("guard shape (%s): the run did not exercise the race in %s: %d takeovers, %d commits, %d refused", form, raceLimit*runFor, len(st.takeovers), len(st.commits), st.rejected)
			}
		}
	}
}

// raceLimit bounds a race at raceLimit times its set length while it has
// not exercised the race.
const raceLimit = 10

// raceStop returns the context that ends a race: once runFor has passed
// and each of need has exercised the race (exercised), or after raceLimit
// times runFor. A fixed length was too short under load: at load average
// 30-200, the guard shapes made 5-18 committed writer transactions in runs
// of 10 s and 9-16 in 2 of 6 runs of 30 s (20 needed), and the test failed
// although nothing was wrong.
func raceStop(runFor time.Duration, need ...*raceStats) (context.Context, context.CancelFunc) {
	stop, cancel := context.WithTimeout(context.Background(), raceLimit*runFor)
	go func() {
		select {
		case <-stop.Done():
			return
		case <-time.After(runFor):
		}
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			done := true
			for _, st := range need {
				done = done && st.exercised()
			}
			if done {
				cancel()
				return
			}
			select {
			case <-stop.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return stop, cancel
}

// exercised reports whether the race happened often enough for "no stale
// commit" to mean something: takeovers, writer commits and refusals.
func (st *raceStats) exercised() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.takeovers) >= 20 && len(st.commits) >= 20 && st.rejected >= 10
}

func tidbRaceDuration(t *testing.T) time.Duration {
	t.Helper()
	if v := os.Getenv(EnvTiDBRace); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: %v", EnvTiDBRace, err)
		}
		return d
	}
	return 30 * time.Second
}

// staleCommits counts the writer transactions that committed with token t
// after the takeover to t+1 committed, by mode.
func (st *raceStats) staleCommits() (int, map[string]int) {
	byMode := map[string]int{}
	stale := 0
	for _, c := range st.commits {
		if ts, ok := st.takeovers[c.token+1]; ok && ts < c.ts {
			stale++
			byMode[c.mode]++
		}
	}
	return stale, byMode
}

func sortedCounts(m map[string]int) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %d", k, m[k])
	}
	return "{" + b.String() + "}"
}

// raceWriter is one writer of TestTiDBFenceShapesRace.
type raceWriter struct {
	c            *sql.Conn
	root         *sql.DB
	st           *raceStats
	shape        string
	lease, ref   string
	rng          *rand.Rand
	nextID       int64   // last id this writer inserted
	counter      int64   // the row its UPDATEs change
	deletable    []int64 // ids it inserted in committed transactions
	owner        string
	token        uint64
	pendingIns   []int64 // inserted by the open transaction
	pendingDel   []int64 // deleted by the open transaction
	passedInTxn  int
	refusedInTxn bool
	// autocommitOnly: never an explicit transaction (BEGIN would end a
	// LOCK TABLES the writer holds).
	autocommitOnly bool
}

// run writes until stop ends. stop only says when to start nothing new: no
// statement runs under it, so every error is the test's failure.
//
// The writers' statements once ran under the run's deadline, and an error
// was taken for the run's end when stop.Err() was set afterwards. Under
// load that failed the test with "dial tcp ...: i/o timeout" on w.root
// (measured: 3 such errors in 15 runs of 10 s at load average 18-42, each
// 20-130 ms after the deadline while stop.Err() was still nil; it was set
// 1-4 ms later): a dial started once the deadline has passed fails at once
// on its own clock (net's partialDeadline), while stop.Err() stays nil until
// the timer's goroutine runs, late on busy cores. Only a dial does that: on
// an open connection go-sql-driver reports a context's end after Done. A
// statement cut off at the end also left its outcome unknown, which the
// exact counts cannot have.
func (w *raceWriter) run(stop context.Context) error {
	bg := context.Background()
	for stop.Err() == nil {
		// Learn the current holder, as a worker does when it acquires; then
		// write with that token until the fence refuses it.
		if err := w.root.QueryRowContext(bg, "SELECT owner_token, fence_token FROM fenced_job_leases WHERE lease_name = ?", w.lease).Scan(&w.owner, &w.token); err != nil {
			return err
		}
		if err := setFenceVars(bg, w.c, w.lease, w.owner, w.token); err != nil {
			return err
		}
		for stop.Err() == nil {
			refused, err := w.txn()
			if err != nil {
				return err
			}
			if refused {
				break
			}
		}
	}
	return nil
}

// txn runs one writer transaction to its end; refused reports that the
// fence refused a statement or TiDB did not commit it.
func (w *raceWriter) txn() (refused bool, err error) {
	bg := context.Background()
	iso := []string{"READ COMMITTED", "REPEATABLE READ"}[w.rng.IntN(2)]
	if _, err := w.c.ExecContext(bg, "SET SESSION TRANSACTION ISOLATION LEVEL "+iso); err != nil {
		return false, err
	}
	mode := []string{"pessimistic", "optimistic", "autocommit"}[w.rng.IntN(3)]
	if w.autocommitOnly {
		mode = "autocommit"
	}
	label := mode
	stmts := 1 + w.rng.IntN(3)
	if mode == "autocommit" {
		// Which kind of transaction an autocommit statement (and the
		// proxy's wrap of guard + statement) runs in is the session's
		// tidb_txn_mode.
		txnMode := []string{"pessimistic", "optimistic"}[w.rng.IntN(2)]
		label = "autocommit/" + txnMode
		if _, err := w.c.ExecContext(bg, "SET SESSION tidb_txn_mode = '"+txnMode+"'"); err != nil {
			return false, err
		}
		stmts = 1
	}
	explicit := mode != "autocommit" || w.shape == shapeGuard
	w.pendingIns, w.pendingDel, w.passedInTxn, w.refusedInTxn = nil, nil, 0, false
	if explicit {
		begin := "BEGIN " + strings.ToUpper(mode)
		if mode == "autocommit" {
			begin = "START TRANSACTION"
		}
		if _, err := w.c.ExecContext(bg, begin); err != nil {
			return false, err
		}
		if mode != "autocommit" && w.rng.IntN(2) == 0 {
			var tok uint64
			if err := w.c.QueryRowContext(bg, "SELECT fence_token FROM fenced_job_leases WHERE lease_name = ?", w.lease).Scan(&tok); err != nil {
				return false, w.abort(bg, "snapshot read", err)
			}
		}
	}
	for i := 0; i < stmts; i++ {
		if mode != "autocommit" {
			time.Sleep(time.Duration(w.rng.IntN(3)) * time.Millisecond)
		}
		kind := tidbKinds[w.rng.IntN(3)]
		var id int64
		switch {
		case kind == "DELETE" && len(w.deletable) > 0:
			j := w.rng.IntN(len(w.deletable))
			id = w.deletable[j]
			w.deletable = append(w.deletable[:j], w.deletable[j+1:]...)
		case kind == "INSERT":
			w.nextID++
			id = w.nextID
		default:
			kind, id = "UPDATE", w.counter
		}
		n, err := fencedWrite(bg, w.c, w.shape, kind, id, w.ref)
		if err != nil {
			if kind == "DELETE" {
				w.deletable = append(w.deletable, id)
			}
			if explicit {
				return true, w.abort(bg, "statement", err)
			}
			// An autocommit statement that fails ran: through the proxy,
			// after its guard passed (the error is the COMMIT's).
			w.passedInTxn = 1
			return true, w.lost("autocommit statement", err)
		}
		if n == 0 {
			if kind == "DELETE" {
				w.deletable = append(w.deletable, id)
			}
			w.st.mu.Lock()
			w.st.rejected++
			w.st.mu.Unlock()
			w.refusedInTxn = true
			continue
		}
		switch kind {
		case "INSERT":
			w.pendingIns = append(w.pendingIns, id)
		case "DELETE":
			w.pendingDel = append(w.pendingDel, id)
		}
		w.passedInTxn++
	}
	if explicit {
		if _, err := w.c.ExecContext(bg, "COMMIT"); err != nil {
			return true, w.lost("COMMIT", err)
		}
	}
	if w.passedInTxn > 0 {
		ts, err := lastCommitTS(bg, w.c)
		if err != nil {
			return false, err
		}
		w.st.mu.Lock()
		w.st.commits = append(w.st.commits, raceCommit{token: w.token, ts: ts, mode: label})
		w.st.mu.Unlock()
	}
	w.deletable = append(w.deletable, w.pendingIns...)
	return w.refusedInTxn, nil
}

// abort rolls back after a failed statement inside a transaction.
func (w *raceWriter) abort(ctx context.Context, where string, err error) error {
	w.c.ExecContext(ctx, "ROLLBACK")
	return w.lost(where, err)
}

// lost counts a transaction TiDB did not commit; other errors end the run.
func (w *raceWriter) lost(where string, err error) error {
	w.deletable = append(w.deletable, w.pendingDel...)
	if !notCommitted(err) {
		return fmt.Errorf("%s: %w", where, err)
	}
	key := fmt.Sprintf("%d at %s", errCode(err), where)
	if w.passedInTxn == 0 {
		// Only refused statements (or none) ran: no write of the
		// transaction got past its fence.
		key += " (no write passed)"
	}
	w.st.mu.Lock()
	w.st.conflicts[key]++
	w.st.mu.Unlock()
	return nil
}
