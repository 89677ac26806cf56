package rewrite

import "testing"

// A 200-byte single-row UPDATE of a protected table, decided with the
// session's fence and with its own fence comment (the same text), under
// the default caches: what a pooled or ORM client pays per write.
var benchStmtUpdate = "UPDATE invoices SET paid = 1, note = '08566691963-88624912351-16662227201-46648573979-64646226163-77505759394' WHERE id = 7"

func benchStmtFence(b *testing.B, q []byte, wantPresented bool, opts Options) {
	e := New(testPolicy(b), opts)
	s := appSession()
	check := func(d Decision) {
		if d.Action != Send || len(d.Stmts) != 1 || d.Stmts[0].Fence == nil ||
			(d.Stmts[0].Fence.Presented != nil) != wantPresented {
			b.Fatal(d.Action, d.Refusal)
		}
	}
	check(e.Query(q, maria, s))
	b.ReportAllocs()
	b.SetBytes(int64(len(q)))
	for b.Loop() {
		check(e.Query(q, maria, s))
	}
}

func BenchmarkStmtFenceSession200(b *testing.B) {
	benchStmtFence(b, []byte(benchStmtUpdate), false, Options{})
}

// The session's fence without the caches: the full path, for comparison.
func BenchmarkStmtFenceSessionUncached200(b *testing.B) {
	benchStmtFence(b, []byte(benchStmtUpdate), false, Options{CacheEntries: -1, ShapeEntries: -1})
}

func BenchmarkStmtFenceComment200(b *testing.B) {
	benchStmtFence(b, []byte(benchStmtUpdate+" /*"+fcBody+"*/"), true, Options{})
}
