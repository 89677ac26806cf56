package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/lease"
)

const (
	short = 300 * time.Millisecond // a lease that expires within a test
	long  = time.Hour              // a lease that does not
)

func TestLeaseEdges(t *testing.T) {
	e := newEnv(t)
	s := e.store
	tests := []struct {
		name string
		run  func(t *testing.T, name string)
	}{
		{"acquire on absent", func(t *testing.T, name string) {
			l := mustAcquire(t, s, name, long)
			if l.Token != 1 || len(l.Owner) != 32 || l.Name != name {
				t.Fatalf("got %#v, want token 1, a 32-byte random owner, name %q", l, name)
			}
			st := mustGet(t, s, name)
			if !st.Held || st.Token != 1 || st.Owner != l.Owner || !st.Until.Equal(l.Until) {
				t.Fatalf("Get = %+v, want held at token 1 by %s until %v", st, lease.OwnerHash(l.Owner), l.Until)
			}
			if st.Remaining <= long-time.Minute || st.Remaining > long {
				t.Fatalf("remaining %v, want about %v", st.Remaining, long)
			}
		}},
		{"random owners differ", func(t *testing.T, name string) {
			a := mustAcquire(t, s, name+" a", long)
			b := mustAcquire(t, s, name+" b", long)
			if a.Owner == b.Owner {
				t.Fatalf("two acquires got the same owner %s", lease.OwnerHash(a.Owner))
			}
		}},
		{"acquire on held", func(t *testing.T, name string) {
			a := mustAcquire(t, s, name, long, lease.WithOwner("A"))
			_, err := s.Acquire(ctxT(t), name, long, lease.WithOwner("B"))
			wantErr(t, "acquire by B", err, lease.ErrHeld)
			_, err = s.Acquire(ctxT(t), name, long)
			wantErr(t, "acquire by a random owner", err, lease.ErrHeld)
			st := mustGet(t, s, name)
			if st.Owner != "A" || st.Token != a.Token || !st.Until.Equal(a.Until) {
				t.Fatalf("a refused acquire changed the row: %+v", st)
			}
		}},
		{"acquire on held by the same owner", func(t *testing.T, name string) {
			mustAcquire(t, s, name, long, lease.WithOwner("A"))
			_, err := s.Acquire(ctxT(t), name, long, lease.WithOwner("A"))
			wantErr(t, "second acquire by A", err, lease.ErrHeld)
		}},
		{"acquire on expired", func(t *testing.T, name string) {
			mustAcquire(t, s, name, short, lease.WithOwner("A"))
			awaitExpired(t, s, name)
			b := mustAcquire(t, s, name, long, lease.WithOwner("B"))
			if b.Token != 2 || b.Owner != "B" {
				t.Fatalf("takeover: %#v, want token 2 for B", b)
			}
		}},
		{"re-acquire by the same owner after expiry increments the token", func(t *testing.T, name string) {
			a1 := mustAcquire(t, s, name, short, lease.WithOwner("A"))
			awaitExpired(t, s, name)
			a2 := mustAcquire(t, s, name, long, lease.WithOwner("A"))
			if a2.Token != a1.Token+1 {
				t.Fatalf("re-acquire got token %d, want %d", a2.Token, a1.Token+1)
			}
		}},
		{"renew extends", func(t *testing.T, name string) {
			l := mustAcquire(t, s, name, time.Minute)
			nl, err := s.Renew(ctxT(t), l, long)
			if err != nil {
				t.Fatal(err)
			}
			if nl.Token != l.Token || nl.Owner != l.Owner || !nl.Until.After(l.Until) {
				t.Fatalf("renew: %#v from %#v", nl, l)
			}
			if st := mustGet(t, s, name); !st.Until.Equal(nl.Until) {
				t.Fatalf("row until %v, renew said %v", st.Until, nl.Until)
			}
		}},
		{"renew in quick succession", func(t *testing.T, name string) {
			l := mustAcquire(t, s, name, long)
			for i := 0; i < 20; i++ {
				var err error
				if l, err = s.Renew(ctxT(t), l, long); err != nil {
					t.Fatalf("renewal %d: %v", i, err)
				}
			}
		}},
		{"renew after expiry fails", func(t *testing.T, name string) {
			l := mustAcquire(t, s, name, short)
			awaitExpired(t, s, name)
			_, err := s.Renew(ctxT(t), l, long)
			wantErr(t, "renew after expiry", err, lease.ErrLost)
			if st := mustGet(t, s, name); st.Held {
				t.Fatalf("a failed renewal revived the lease: %+v", st)
			}
		}},
		{"renew with a stale token fails", func(t *testing.T, name string) {
			old := mustAcquire(t, s, name, short, lease.WithOwner("A"))
			awaitExpired(t, s, name)
			cur := mustAcquire(t, s, name, long, lease.WithOwner("A"))
			_, err := s.Renew(ctxT(t), old, long)
			wantErr(t, "renew at the old token", err, lease.ErrLost)
			if _, err := s.Renew(ctxT(t), cur, long); err != nil {
				t.Fatalf("renew at the current token: %v", err)
			}
		}},
		{"renew after takeover fails", func(t *testing.T, name string) {
			a := mustAcquire(t, s, name, short)
			awaitExpired(t, s, name)
			mustAcquire(t, s, name, long)
			_, err := s.Renew(ctxT(t), a, long)
			wantErr(t, "renew by the old owner", err, lease.ErrLost)
		}},
		{"release by an old owner fails", func(t *testing.T, name string) {
			a := mustAcquire(t, s, name, short, lease.WithOwner("A"))
			awaitExpired(t, s, name)
			b := mustAcquire(t, s, name, long, lease.WithOwner("B"))
			wantErr(t, "release by A", s.Release(ctxT(t), a), lease.ErrLost)
			if st := mustGet(t, s, name); !st.Held || st.Owner != "B" || st.Token != b.Token || !st.Until.Equal(b.Until) {
				t.Fatalf("A's release touched B's lease: %+v", st)
			}
		}},
		{"release then acquire increments the token and keeps the row", func(t *testing.T, name string) {
			a := mustAcquire(t, s, name, long)
			if err := s.Release(ctxT(t), a); err != nil {
				t.Fatal(err)
			}
			st := mustGet(t, s, name)
			if st.Held || st.Token != a.Token || st.Owner != a.Owner {
				t.Fatalf("after release: %+v, want the row kept, expired, token %d", st, a.Token)
			}
			b := mustAcquire(t, s, name, long)
			if b.Token != a.Token+1 {
				t.Fatalf("acquire after release: token %d, want %d", b.Token, a.Token+1)
			}
		}},
		{"release twice", func(t *testing.T, name string) {
			a := mustAcquire(t, s, name, long)
			if err := s.Release(ctxT(t), a); err != nil {
				t.Fatal(err)
			}
			wantErr(t, "second release", s.Release(ctxT(t), a), lease.ErrLost)
		}},
		{"release of an expired lease by its last owner is lost", func(t *testing.T, name string) {
			a := mustAcquire(t, s, name, short)
			awaitExpired(t, s, name)
			wantErr(t, "release after expiry", s.Release(ctxT(t), a), lease.ErrLost)
		}},
		{"renew after release fails", func(t *testing.T, name string) {
			a := mustAcquire(t, s, name, long)
			if err := s.Release(ctxT(t), a); err != nil {
				t.Fatal(err)
			}
			_, err := s.Renew(ctxT(t), a, long)
			wantErr(t, "renew after release", err, lease.ErrLost)
		}},
		{"owners compare byte for byte", func(t *testing.T, name string) {
			b := mustAcquire(t, s, name, long, lease.WithOwner("owner-B"))
			folded := b
			folded.Owner = "OWNER-b  "
			_, err := s.Renew(ctxT(t), folded, long)
			wantErr(t, "renew by a case/space-folded owner", err, lease.ErrLost)
			wantErr(t, "release by a case/space-folded owner", s.Release(ctxT(t), folded), lease.ErrLost)
			_, err = s.Acquire(ctxT(t), name, long, lease.WithOwner("OWNER-b  "))
			wantErr(t, "acquire by a case/space-folded owner", err, lease.ErrHeld)
			if st := mustGet(t, s, name); !st.Held || st.Owner != "owner-B" {
				t.Fatalf("row: %+v", st)
			}
		}},
		{"names compare byte for byte", func(t *testing.T, name string) {
			upper := mustAcquire(t, s, strings.ToUpper(name), long)
			lower := mustAcquire(t, s, name, long)
			if upper.Token != 1 || lower.Token != 1 {
				t.Fatalf("case-distinct names share a row: %d, %d", upper.Token, lower.Token)
			}
		}},
		{"get of a missing lease", func(t *testing.T, name string) {
			_, err := s.Get(ctxT(t), name)
			wantErr(t, "Get", err, lease.ErrNotFound)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, tc.name)
		})
	}
}

func TestList(t *testing.T) {
	e := newEnv(t)
	if got, err := e.store.List(ctxT(t)); err != nil || len(got) != 0 {
		t.Fatalf("empty table: %v, %v", got, err)
	}
	names := []string{"b", "a", "C", "ü"}
	for _, n := range names {
		mustAcquire(t, e.store, n, long)
	}
	if err := e.store.Release(ctxT(t), mustAcquire(t, e.store, "released", long)); err != nil {
		t.Fatal(err)
	}
	got, err := e.store.List(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, st := range got {
		order = append(order, st.Name)
		if st.Held != (st.Name != "released") {
			t.Errorf("%s: held %v", st.Name, st.Held)
		}
	}
	// utf8mb4_bin orders by code point.
	if want := "C a b released ü"; strings.Join(order, " ") != want {
		t.Fatalf("order %q, want %q", strings.Join(order, " "), want)
	}
}

func TestConcurrentAcquirers(t *testing.T) {
	e := newEnv(t)
	const workers, rounds = 32, 4
	stores := make([]*lease.Store, workers)
	for i := range stores {
		db := e.session(t, nil) // one connection each
		var err error
		if stores[i], err = lease.NewStore(db, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := stores[i].Get(ctxT(t), "warm-up"); !errors.Is(err, lease.ErrNotFound) {
			t.Fatal(err)
		}
	}
	const name = "admin:reconciliation"
	for round := 1; round <= rounds; round++ {
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			results = make([]lease.Lease, workers)
			errs    = make([]error, workers)
		)
		for i := range stores {
			wg.Go(func() {
				<-start
				results[i], errs[i] = stores[i].Acquire(ctxT(t), name, long)
			})
		}
		close(start)
		wg.Wait()
		var winners []lease.Lease
		for i, err := range errs {
			switch {
			case err == nil:
				winners = append(winners, results[i])
			case !errors.Is(err, lease.ErrHeld):
				t.Fatalf("round %d worker %d: %v", round, i, err)
			}
		}
		if len(winners) != 1 {
			t.Fatalf("round %d: %d winners, want exactly 1", round, len(winners))
		}
		if winners[0].Token != uint64(round) {
			t.Fatalf("round %d: token %d", round, winners[0].Token)
		}
		// The next round races on a released (expired) row; the first
		// raced on an absent one.
		if err := e.store.Release(ctxT(t), winners[0]); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSessionClockAndZoneDoNotMoveExpiry(t *testing.T) {
	e := newEnv(t)
	// A session whose clock says 2000-01-01 and whose zone is +13:00
	// acquires; one whose clock says 2036 and zone -12:00 looks.
	past, err := lease.NewStore(e.session(t, nil, "SET timestamp = 946684800", "SET time_zone = '+13:00'"), "")
	if err != nil {
		t.Fatal(err)
	}
	future, err := lease.NewStore(e.session(t, nil, "SET timestamp = 2082758400", "SET time_zone = '-12:00'"), "")
	if err != nil {
		t.Fatal(err)
	}
	l := mustAcquire(t, past, "clock", long)
	for _, v := range []struct {
		name string
		s    *lease.Store
	}{{"acquiring session", past}, {"future session", future}, {"plain session", e.store}} {
		st := mustGet(t, v.s, "clock")
		if !st.Held || st.Remaining <= long-time.Minute || st.Remaining > long || !st.Until.Equal(l.Until) {
			t.Errorf("%s sees %+v, want held for about %v until %v", v.name, st, long, l.Until)
		}
	}
	_, err = future.Acquire(ctxT(t), "clock", long)
	wantErr(t, "acquire from a session living in 2036", err, lease.ErrHeld)
	if _, err := past.Renew(ctxT(t), l, long); err != nil {
		t.Fatalf("renew from the session living in 2000: %v", err)
	}

	// The expiry is real time for everyone: a short lease taken in the
	// past session expires, and the future session cannot take it early.
	sl := mustAcquire(t, past, "clock short", 2*time.Second)
	_, err = future.Acquire(ctxT(t), "clock short", long)
	wantErr(t, "early takeover from 2036", err, lease.ErrHeld)
	awaitExpired(t, e.store, "clock short")
	if _, err := past.Renew(ctxT(t), sl, long); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("renewal from 2000 after real expiry: %v, want ErrLost", err)
	}
	if got := mustAcquire(t, future, "clock short", long); got.Token != 2 {
		t.Fatalf("takeover token %d", got.Token)
	}
}

func TestInvalidArguments(t *testing.T) {
	e := newEnv(t)
	l := lease.Lease{Name: "x", Owner: "o", Token: 1}
	tests := []struct {
		name string
		err  error
	}{
		{"empty name", e.store.Release(ctxT(t), lease.Lease{Owner: "o", Token: 1})},
		{"name with trailing space", func() error { _, err := e.store.Acquire(ctxT(t), "job ", long); return err }()},
		{"name of 192 bytes", func() error { _, err := e.store.Acquire(ctxT(t), strings.Repeat("n", 192), long); return err }()},
		{"name not UTF-8", func() error { _, err := e.store.Acquire(ctxT(t), "bad\xff", long); return err }()},
		{"name with a newline", func() error { _, err := e.store.Acquire(ctxT(t), "a\nb", long); return err }()},
		{"owner of 65 bytes", func() error {
			_, err := e.store.Acquire(ctxT(t), "x", long, lease.WithOwner(strings.Repeat("o", 65)))
			return err
		}()},
		{"zero ttl", func() error { _, err := e.store.Acquire(ctxT(t), "x", 0); return err }()},
		{"negative ttl", func() error { _, err := e.store.Renew(ctxT(t), l, -time.Second); return err }()},
		{"ttl beyond the limit", func() error { _, err := e.store.Acquire(ctxT(t), "x", lease.MaxTTL+time.Second); return err }()},
		{"empty owner on release", e.store.Release(ctxT(t), lease.Lease{Name: "x", Token: 1})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantErr(t, tc.name, tc.err, lease.ErrInvalid) })
	}
	if got, err := e.store.List(ctxT(t)); err != nil || len(got) != 0 {
		t.Fatalf("invalid calls wrote rows: %v %v", got, err)
	}
	// The longest allowed name and owner work.
	ok := mustAcquire(t, e.store, strings.Repeat("é", 95)+"n", long, lease.WithOwner(strings.Repeat("\xff", 64)))
	if st := mustGet(t, e.store, ok.Name); st.Owner != ok.Owner {
		t.Fatal("binary owner did not round-trip")
	}
}

// TestOperationsLockOnlyTheirRow: a transaction holding one lease row's lock
// (as an open fenced transaction does) must not delay operations on other
// leases: each operation locks its own row through the primary key only.
func TestOperationsLockOnlyTheirRow(t *testing.T) {
	e := newEnv(t)
	s := e.store
	for _, n := range []string{"a", "c", "e"} {
		mustAcquire(t, s, n, long)
	}
	tx, err := e.root.BeginTx(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var token uint64
	if err := tx.QueryRowContext(ctxT(t), "SELECT fence_token FROM fenced_job_leases WHERE lease_name = 'c' FOR UPDATE").Scan(&token); err != nil {
		t.Fatal(err)
	}
	bounded := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctxT(t), 3*time.Second) }
	for _, n := range []string{"a", "b", "d", "e", "f"} {
		ctx, cancel := bounded()
		l, err := s.Acquire(ctx, n, long)
		if errors.Is(err, lease.ErrHeld) { // a, e: take them over after a release
			st := mustGet(t, s, n)
			if err = s.Release(ctx, st.Lease); err == nil {
				l, err = s.Acquire(ctx, n, long)
			}
		}
		if err == nil {
			l, err = s.Renew(ctx, l, long)
		}
		if err == nil {
			_, err = s.Get(ctx, n)
		}
		if err == nil {
			_, err = s.List(ctx)
		}
		if err == nil {
			err = s.Release(ctx, l)
		}
		cancel()
		if err != nil {
			t.Fatalf("lease %s next to a locked row: %v", n, err)
		}
	}
	// The locked row itself does wait: the lock is real.
	ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	defer cancel()
	if _, err := s.Acquire(ctx, "c", long); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire of the locked row: %v, want a timeout", err)
	}
}
