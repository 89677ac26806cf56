package integration

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Outcomes of one open-transaction case. Everything but outcomeStale and
// outcomeBroken is safe.
const (
	outcomeStale         = "STALE: the write with the old token committed after the takeover"
	outcomeBroken        = "BROKEN: the write with a valid fence was refused"
	outcomeRefusedRows   = "refused: 0 rows"
	outcomeTakeoverWaits = "safe: the takeover waited for the writer's commit"
)

// TestTiDBFenceShapesOpenTransactions plays, for every candidate shape,
// statement kind, lease-name form, transaction mode and isolation level,
// the two orders of a writer A's fenced statement in an open transaction and
// a takeover by session B:
//
//   - takeover first: A's transaction has read the lease row (its snapshot
//     shows A's token as current), B takes the lease over and commits, then
//     A's fenced statement runs and A commits;
//   - write first: A's fenced statement runs with a valid fence, B's
//     takeover starts and is awaited until it has committed or waits for a
//     lock, then A commits.
//
// Commit order is TiDB's: the commit timestamps of @@tidb_last_txn_info. A
// case is stale when A's write committed after B's takeover. The guard
// shape must be safe everywhere; EXISTS with the lease name in a variable
// must show the stale write issue 9 measured (which also shows this test
// can see one).
func TestTiDBFenceShapesOpenTransactions(t *testing.T) {
	e := newTiDBEnv(t)
	ctx := context.Background()
	a, b, obs := e.conn(t), e.conn(t), e.conn(t)
	var bSession uint64
	if err := b.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&bSession); err != nil {
		t.Fatal(err)
	}
	outcomes := map[string][]string{} // outcome -> cases
	var mu sync.Mutex
	record := func(name, outcome string) {
		mu.Lock()
		defer mu.Unlock()
		outcomes[outcome] = append(outcomes[outcome], name)
	}
	n := int64(0)
	for _, shape := range tidbShapes {
		for _, literal := range []bool{false, true} {
			form := "var"
			if literal {
				form = "literal"
			}
			for _, kind := range tidbKinds {
				for _, mode := range []string{"pessimistic", "optimistic"} {
					for _, iso := range []string{"READ COMMITTED", "REPEATABLE READ"} {
						for _, order := range []string{"takeover-first", "write-first"} {
							n++
							id := n
							name := fmt.Sprintf("%s/%s/%s/%s/%s/%s", shape, form, kind, mode, strings.ReplaceAll(iso, " ", "-"), order)
							t.Run(name, func(t *testing.T) {
								lname := fmt.Sprintf("lease-%d", id)
								e.newLease(t, lname, "owner-A")
								if kind != "INSERT" {
									mustExec(t, e.root, "INSERT INTO items (id, v, token) VALUES (?, 0, 0)", id)
								}
								c := openTxnCase{e: e, a: a, b: b, obs: obs, bSession: bSession,
									shape: shape, kind: kind, mode: mode, iso: iso, id: id, lease: lname, ref: leaseRef(lname, literal)}
								var out string
								if order == "takeover-first" {
									out = c.takeoverFirst(t)
								} else {
									out = c.writeFirst(t)
								}
								t.Log(out)
								record(name, out)
								if shape == shapeGuard && (out == outcomeStale || out == outcomeBroken) {
									t.Errorf("guard shape: %s", out)
								}
							})
						}
					}
				}
			}
		}
	}
	var keys []string
	for k := range outcomes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		cases := outcomes[k]
		byShape := map[string]int{}
		for _, c := range cases {
			byShape[strings.Join(strings.SplitN(c, "/", 3)[:2], "/")]++
		}
		t.Logf("%-60s %3d cases %v", k, len(cases), byShape)
	}
	staleExistsVar := 0
	for _, c := range outcomes[outcomeStale] {
		if strings.HasPrefix(c, shapeExists+"/var/") {
			staleExistsVar++
		}
	}
	if staleExistsVar == 0 {
		t.Errorf("EXISTS (... FOR UPDATE) with the lease name in a variable let no stale write commit; issue 9 measured that it is folded at plan time and unsafe: if TiDB now locks it, re-measure the shapes")
	}
}

// openTxnCase is one case of TestTiDBFenceShapesOpenTransactions.
type openTxnCase struct {
	e                 *tidbEnv
	a, b, obs         *sql.Conn
	bSession          uint64
	shape, kind, mode string
	iso               string
	id                int64
	lease, ref        string
}

// begin opens A's transaction with a snapshot that shows A's token 1.
func (c *openTxnCase) begin(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	c.a.ExecContext(ctx, "ROLLBACK")
	if err := setFenceVars(ctx, c.a, c.lease, "owner-A", 1); err != nil {
		t.Fatal(err)
	}
	mustExec(t, c.a, "SET SESSION TRANSACTION ISOLATION LEVEL "+c.iso)
	mustExec(t, c.a, "BEGIN "+strings.ToUpper(c.mode))
	var tok uint64
	if err := c.a.QueryRowContext(ctx, "SELECT fence_token FROM fenced_job_leases WHERE lease_name = ?", c.lease).Scan(&tok); err != nil || tok != 1 {
		t.Fatalf("snapshot read: token %d, %v", tok, err)
	}
}

func (c *openTxnCase) takeoverFirst(t *testing.T) string {
	ctx := context.Background()
	c.begin(t)
	if tok, _, err := takeover(ctx, c.b, "pessimistic", c.lease, "owner-B"); err != nil || tok != 2 {
		t.Fatalf("takeover: token %d, %v", tok, err)
	}
	rows, err := fencedWrite(ctx, c.a, c.shape, c.kind, c.id, c.ref)
	if err != nil {
		c.a.ExecContext(ctx, "ROLLBACK")
		if notCommitted(err) {
			return fmt.Sprintf("refused: error %d at the statement", errCode(err))
		}
		t.Fatalf("fenced %s: %v", c.kind, err)
	}
	if _, err := c.a.ExecContext(ctx, "COMMIT"); err != nil {
		if notCommitted(err) {
			return fmt.Sprintf("refused: error %d at COMMIT", errCode(err))
		}
		t.Fatalf("COMMIT: %v", err)
	}
	if rows == 0 {
		return outcomeRefusedRows
	}
	return outcomeStale
}

func (c *openTxnCase) writeFirst(t *testing.T) string {
	ctx := context.Background()
	c.begin(t)
	rows, err := fencedWrite(ctx, c.a, c.shape, c.kind, c.id, c.ref)
	if err != nil {
		t.Fatalf("fenced %s with a valid fence: %v", c.kind, err)
	}
	if rows == 0 {
		c.a.ExecContext(ctx, "ROLLBACK")
		return outcomeBroken
	}
	type result struct {
		ts  uint64
		err error
	}
	done := make(chan result, 1)
	go func() {
		_, ts, err := takeover(ctx, c.b, "pessimistic", c.lease, "owner-B")
		done <- result{ts, err}
	}()
	// Await the takeover: committed, or waiting for a lock (TiDB's own
	// view of B's transaction).
	var early *result
	eventually(t, 20*time.Second, "the takeover to commit or wait for a lock", func() bool {
		select {
		case r := <-done:
			early = &r
			return true
		default:
		}
		var waiting int
		if err := c.obs.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tidb_trx WHERE session_id = ? AND state = 'LockWaiting'", c.bSession).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting > 0
	})
	_, commitErr := c.a.ExecContext(ctx, "COMMIT")
	var aTS uint64
	if commitErr == nil {
		if aTS, err = lastCommitTS(ctx, c.a); err != nil {
			t.Fatal(err)
		}
	}
	r := early
	if r == nil {
		got := <-done
		r = &got
	}
	if r.err != nil {
		t.Fatalf("takeover: %v", r.err)
	}
	switch {
	case commitErr != nil && notCommitted(commitErr):
		return fmt.Sprintf("refused: error %d at COMMIT", errCode(commitErr))
	case commitErr != nil:
		t.Fatalf("COMMIT: %v", commitErr)
	case r.ts < aTS:
		return outcomeStale
	}
	return outcomeTakeoverWaits
}
