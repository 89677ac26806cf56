package integration

import (
	"context"
	"sort"
	"testing"
	"time"
)

// BenchmarkStmtFenceCost measures through the proxy on MariaDB what a
// statement's own fence costs against the session's: one autocommit
// single-row UPDATE of a protected table at a time, on one connection,
// with the session's fence (a cached decision) and then with the same
// fence in a comment on every statement. It reports the p50 and p99 of
// each (the numbers of docs/statement-fences.md); every UPDATE must
// change its row.
//
//	FENCEPROXY_REQUIRE_SERVER=1 go test -run XXX -bench StmtFenceCost -benchtime 2000x ./integration/
func BenchmarkStmtFenceCost(b *testing.B) {
	e := newFencedEnv(b, envOptions{})
	l := e.acquire(b, "invoice:acme", time.Hour)
	mustExec(b, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (7, 'acme', '2026-01', 0)")
	ctx := context.Background()
	c := e.session(b)
	mustExec(b, c, "SET @fence_lease = ?, @fence_owner = ?, @fence_token = ?", l.Name, l.Owner, l.Token)
	run := func(b *testing.B, name string, q func(i int) string) {
		lat := make([]time.Duration, 0, b.N)
		i := 0
		for b.Loop() {
			i++
			text := q(i)
			start := time.Now()
			r, err := c.ExecContext(ctx, text)
			d := time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			if n, _ := r.RowsAffected(); n != 1 {
				b.Fatalf("%s: %d rows changed, want 1", name, n)
			}
			lat = append(lat, d)
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
	// The amount changes each time so that every UPDATE changes its row;
	// the statement's text is fixed (the text cache decides it).
	b.Run("session", func(b *testing.B) {
		run(b, "session", func(i int) string { return "UPDATE invoices SET amount = amount + 1 WHERE id = 7" })
	})
	b.Run("comment", func(b *testing.B) {
		run(b, "comment", func(i int) string {
			return withComment(b, "UPDATE invoices SET amount = amount + 1 WHERE id = 7", l)
		})
	})
}
