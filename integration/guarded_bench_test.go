package integration

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkGuardedInsert: one guarded INSERT through the proxy, in
// autocommit mode (the proxy's own transaction) and inside the client's
// transaction, against the same INSERT sent directly in the same run.
// go test -run '^$' -bench GuardedInsert -benchtime 2000x ./integration/
func BenchmarkGuardedInsert(b *testing.B) {
	for _, eng := range allEngines {
		b.Run(eng, func(b *testing.B) {
			e := newFencedEnv(b, envOptions{engine: eng})
			l := e.acquire(b, "bench:job", time.Hour)
			ctx := context.Background()
			direct, err := e.root.Conn(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer direct.Close()
			proxied := e.session(b)
			setFence(b, proxied, l)
			n := 0
			for _, tc := range []struct {
				name string
				run  func() error
			}{
				{"direct", func() error {
					n++
					_, err := direct.ExecContext(ctx, "INSERT INTO invoices (customer, period, amount) VALUES (?, 'p', 1)", fmt.Sprint("d", n))
					return err
				}},
				{"proxy autocommit", func() error {
					n++
					_, err := proxied.ExecContext(ctx, "INSERT INTO invoices (customer, period, amount) VALUES (?, 'p', 1)", fmt.Sprint("a", n))
					return err
				}},
				{"proxy in transaction", func() error {
					n++
					if _, err := proxied.ExecContext(ctx, "BEGIN"); err != nil {
						return err
					}
					if _, err := proxied.ExecContext(ctx, "INSERT INTO invoices (customer, period, amount) VALUES (?, 'p', 1)", fmt.Sprint("t", n)); err != nil {
						return err
					}
					_, err := proxied.ExecContext(ctx, "COMMIT")
					return err
				}},
			} {
				b.Run(tc.name, func(b *testing.B) {
					for i := 0; i < b.N; i++ {
						if err := tc.run(); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}
