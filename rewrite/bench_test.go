package rewrite

import (
	"strconv"
	"testing"
)

// The performance targets: fast path <= 1 µs and 0 allocs, cache hit
// <= 2 µs, uncached short fenced UPDATE <= 40 µs, shape cache hit (the
// same statement with other literals) a few µs.

var (
	benchSelect = []byte("SELECT c FROM sbtest1 WHERE id=?")
	benchUpdate = []byte("UPDATE sbtest1 SET k=k+1, c='08566691963-88624912351-16662227201-46648573979-64646226163-77505759394-75470094713-41097360717-15161106334-50535565977' WHERE id=5012 AND pad = 'x' /* trace */")
	benchFenced = []byte("UPDATE invoices SET paid = 1, note = 'x' WHERE id = 7")
)

func BenchmarkFastPathSelect(b *testing.B) {
	e := New(testPolicy(b), Options{})
	s := appSession()
	b.ReportAllocs()
	b.SetBytes(int64(len(benchSelect)))
	for b.Loop() {
		if d := e.Query(benchSelect, maria, s); d.Action != Forward {
			b.Fatal(d.Action)
		}
	}
}

func BenchmarkFastPathUpdate200(b *testing.B) {
	e := New(testPolicy(b), Options{})
	s := appSession()
	b.ReportAllocs()
	b.SetBytes(int64(len(benchUpdate)))
	for b.Loop() {
		if d := e.Query(benchUpdate, maria, s); d.Action != Forward {
			b.Fatal(d.Action)
		}
	}
}

func BenchmarkCacheHitFenced(b *testing.B) {
	e := New(testPolicy(b), Options{})
	s := appSession()
	if d := e.Query(benchFenced, maria, s); d.Action != Send {
		b.Fatal(d.Action)
	}
	b.ReportAllocs()
	for b.Loop() {
		if d := e.Query(benchFenced, maria, s); d.Action != Send {
			b.Fatal(d.Action)
		}
	}
}

func BenchmarkUncachedFencedUpdate(b *testing.B) {
	e := New(testPolicy(b), Options{CacheEntries: -1, ShapeEntries: -1})
	s := appSession()
	b.ReportAllocs()
	for b.Loop() {
		if d := e.Query(benchFenced, maria, s); d.Action != Send {
			b.Fatal(d.Action)
		}
	}
}

func BenchmarkUncachedFencedInsert(b *testing.B) {
	e := New(testPolicy(b), Options{CacheEntries: -1, ShapeEntries: -1})
	s := appSession()
	q := []byte("INSERT INTO invoices (id, customer, amount) VALUES (?, ?, ?)")
	b.ReportAllocs()
	for b.Loop() {
		if d := e.Prepare(q, maria, s); !guardedWrites(d) {
			b.Fatal(d.Action)
		}
	}
}

func BenchmarkParseOnly(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseOne(string(benchFenced), lexMode{server: maria}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUncachedInsert1000Rows(b *testing.B) {
	e := New(testPolicy(b), Options{CacheEntries: -1, ShapeEntries: -1})
	s := appSession()
	q := []byte("INSERT INTO invoices (id, customer, amount) VALUES ")
	for i := 0; i < 1000; i++ {
		if i > 0 {
			q = append(q, ", "...)
		}
		q = append(q, "(?, ?, ?)"...)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(q)))
	for b.Loop() {
		if d := e.Prepare(q, maria, s); !guardedWrites(d) {
			b.Fatal(d.Action, d.Refusal)
		}
	}
}

// The shape cache: a fenced UPDATE whose literal changes every time (apps
// that inline their values), so that the text cache never hits.
func BenchmarkShapeHit(b *testing.B) {
	e := New(testPolicy(b), Options{})
	s := appSession()
	prefix := "UPDATE invoices SET k = k + 1 WHERE id = "
	q := []byte(prefix + "1")
	if d := e.Query(q, maria, s); d.Action != Send {
		b.Fatal(d.Action)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		q = strconv.AppendInt(q[:len(prefix)], int64(i), 10)
		if d := e.Query(q, maria, s); d.Action != Send {
			b.Fatal(d.Action)
		}
	}
}

// sysbench's INSERT (guarded, sent as written): four literals, two of them 120 and 60 bytes.
func BenchmarkShapeHitInsert(b *testing.B) {
	e := New(testPolicy(b), Options{})
	s := appSession()
	prefix := "INSERT INTO invoices (id, k, c, pad) VALUES ("
	suffix := ", 4982, '08566691963-88624912351-16662227201-46648573979-64646226163-77505759394-75470094713-41097360717-15161106334-50535565977', '63188288836-92351140030-06390587585-66802097351-49282961843')"
	q := []byte(prefix + "1" + suffix)
	if d := e.Query(q, maria, s); !guardedWrites(d) {
		b.Fatal(d.Action)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		q = append(strconv.AppendInt(q[:len(prefix)], int64(i), 10), suffix...)
		if d := e.Query(q, maria, s); !guardedWrites(d) {
			b.Fatal(d.Action)
		}
	}
}

// A read of a protected table with an inlined value: no fast path, no
// text cache hit, a shape hit.
func BenchmarkShapeHitSelect(b *testing.B) {
	e := New(testPolicy(b), Options{})
	s := appSession()
	prefix := "SELECT c FROM invoices WHERE id = "
	q := []byte(prefix + "1")
	e.Query(q, maria, s)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		q = strconv.AppendInt(q[:len(prefix)], int64(i), 10)
		if d := e.Query(q, maria, s); d.Action != Forward {
			b.Fatal(d.Action)
		}
	}
}

// A new shape every time: the full path, plus what the shape cache adds
// to it on a miss (reading the shape, tracing, making the plan); and the
// same without the shape cache.
func BenchmarkShapeMissFencedUpdate(b *testing.B) {
	for _, c := range []struct {
		name string
		opts Options
	}{{"shapes", Options{}}, {"no-shapes", Options{ShapeEntries: -1}}} {
		b.Run(c.name, func(b *testing.B) {
			e := New(testPolicy(b), c.opts)
			s := appSession()
			prefix := "UPDATE invoices SET paid = 1, note = 'x' WHERE id = 7 AND c"
			q := []byte(prefix)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				q = append(strconv.AppendInt(q[:len(prefix)], int64(i), 10), " = 0"...)
				if d := e.Query(q, maria, s); d.Action != Send {
					b.Fatal(d.Action)
				}
			}
		})
	}
}
