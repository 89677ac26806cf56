package integration

import (
	"context"
	"database/sql"
	"sort"
	"strings"
	"testing"
	"time"
)

// BenchmarkTiDBFenceShapes measures an autocommit single-row UPDATE and
// INSERT on a real tidb-server, unfenced and under each candidate shape with
// a valid fence (the guard shape as the proxy would send it in autocommit:
// START TRANSACTION, guard, statement, COMMIT), directly and through the
// proxy (unfenced table, and fenced), and reports p50/p99.
//
//	go test -run '^$' -bench TiDBFenceShapes ./integration/
func BenchmarkTiDBFenceShapes(b *testing.B) {
	for _, kind := range []string{"UPDATE", "INSERT"} {
		for _, shape := range append([]string{"none", "none-via-proxy", shapeProxy}, tidbShapes...) {
			b.Run(kind+"/"+shape, func(b *testing.B) {
				benchTiDBShape(b, kind, shape)
			})
		}
	}
}

func benchTiDBShape(b *testing.B, kind, shape string) {
	ctx := context.Background()
	var e *tidbEnv
	var c *sql.Conn
	if shape == shapeProxy || shape == "none-via-proxy" {
		// The proxy fences items; "none-via-proxy" writes an unprotected
		// table of the same shape through it.
		p := newTiDBProxy(b)
		e = p.tidbEnv
		var err error
		if c, err = appDB(b, p.tp, p.db).Conn(ctx); err != nil {
			b.Fatal(err)
		}
		defer c.Close()
	} else {
		e = newTiDBEnv(b)
		c = e.conn(b)
	}
	mustExec(b, e.root, "CREATE TABLE plain_items LIKE items")
	mustExec(b, e.root, "INSERT INTO plain_items (id, v, token) VALUES (0, 0, 0)")
	mustExec(b, e.root, "INSERT INTO fenced_job_leases (lease_name, owner_token, fence_token, leased_until) VALUES ('bench', 'owner', 1, SYSDATE(3) + INTERVAL 1 HOUR)")
	mustExec(b, e.root, "INSERT INTO items (id, v, token) VALUES (0, 0, 0)")
	if err := setFenceVars(ctx, c, "bench", "owner", 1); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := int64(0)
		if kind == "INSERT" {
			id = int64(i + 1)
		}
		start := time.Now()
		var n int64
		var err error
		switch shape {
		case "none", "none-via-proxy":
			r, xerr := c.ExecContext(ctx, strings.Replace(clientSQL(kind, id), "items", "plain_items", 1))
			if err = xerr; err == nil {
				n, _ = r.RowsAffected()
			}
		case shapeGuard:
			if _, err = c.ExecContext(ctx, "START TRANSACTION"); err == nil {
				if n, err = fencedWrite(ctx, c, shape, kind, id, "@fence_lease"); err == nil {
					_, err = c.ExecContext(ctx, "COMMIT")
				}
			}
		default:
			n, err = fencedWrite(ctx, c, shape, kind, id, "@fence_lease")
		}
		lat = append(lat, time.Since(start))
		if err != nil || n != 1 {
			b.Fatalf("%s %s: %d rows, %v", shape, kind, n, err)
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
