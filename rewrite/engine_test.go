package rewrite

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/fenceproxy/fenceproxy/policy"
)

func TestForwardHasNoStmts(t *testing.T) {
	e := New(testPolicy(t), Options{})
	for _, q := range []string{"SELECT 1", "SELECT * FROM invoices", "UPDATE x SET a = 1; SELECT 2", "BEGIN", "COMMIT"} {
		d := e.Query([]byte(q), maria, appSession())
		if d.Action != Forward || d.Stmts != nil || d.SQL != nil {
			t.Errorf("%q: %+v", q, d)
		}
	}
}

func TestNilPolicyAndSession(t *testing.T) {
	e := New(nil, Options{})
	d := e.Query([]byte("UPDATE invoices SET a = 1"), maria, nil)
	if d.Action != Forward {
		t.Fatalf("nil policy: %+v", d)
	}
	// Session effects are still reported.
	d = e.Query([]byte("USE app"), maria, nil)
	if len(d.Stmts) != 1 || d.Stmts[0].Kind != Use || d.Stmts[0].Schema != "app" {
		t.Fatalf("USE without tables: %+v", d)
	}
}

func TestCacheKeyedBySession(t *testing.T) {
	e := New(testPolicy(t), Options{CacheEntries: 64})
	q := []byte("UPDATE invoices SET paid = 1")
	app := appSession()
	other := &Session{Schema: "other", ANSIQuotes: Off, NoBackslashEscapes: Off}
	for i := 0; i < 3; i++ {
		if d := e.Query(q, maria, app); d.Action != Send {
			t.Fatalf("app: %v", d.Action)
		}
		if d := e.Query(q, maria, other); d.Action != Forward {
			t.Fatalf("other: %v", d.Action)
		}
		if d := e.Prepare(q, maria, app); d.Action != Send {
			t.Fatalf("prepare: %v", d.Action)
		}
		// The same text under TiDB is guarded, not fenced in its text.
		if d := e.Query(q, tidb, app); d.Action != Forward || len(d.Stmts) != 1 || d.Stmts[0].Fence == nil || !d.Stmts[0].Fence.Guard {
			t.Fatalf("tidb: %v %+v", d.Action, d.Stmts)
		}
	}
}

// TestCacheKeepsItsOwnCopyOfTheText: the proxy decides on statement text
// in its read buffer and reuses the buffer for the next packet, so the
// cache must key on a copy. After the caller's buffer changed, the old
// text is still served from the cache (the same decision, its SQL shared),
// and the buffer's new text gets its own decision. A cache that kept the
// caller's bytes as its key would miss the old text and answer nothing
// sensible for the new one.
func TestCacheKeepsItsOwnCopyOfTheText(t *testing.T) {
	e := New(testPolicy(t), Options{})
	const update = "UPDATE invoices SET paid = 1 WHERE id = 1"
	buf := []byte(update)
	d1 := e.Query(buf, maria, appSession())
	if d1.Action != Send || len(d1.SQL) == 0 {
		t.Fatalf("want a fenced UPDATE, got %v", d1.Action)
	}
	buf = buf[:copy(buf, "DELETE FROM invoices WHERE id = 1")]
	d2 := e.Query([]byte(update), maria, appSession())
	if len(d2.SQL) == 0 || &d2.SQL[0] != &d1.SQL[0] {
		t.Fatalf("the cached decision for %q was lost when the caller reused its buffer:\n%s\n%s", update, d1.SQL, d2.SQL)
	}
	d3 := e.Query(buf, maria, appSession())
	if d3.Action != Send || !strings.HasPrefix(string(d3.SQL), "DELETE") {
		t.Fatalf("the reused buffer's DELETE got %v %q", d3.Action, d3.SQL)
	}
}

func TestCacheBounded(t *testing.T) {
	e := New(testPolicy(t), Options{CacheEntries: 64})
	for i := 0; i < 10000; i++ {
		e.Query([]byte(fmt.Sprintf("UPDATE invoices SET paid = %d", i)), maria, appSession())
	}
	n := 0
	for i := range e.cache.shards {
		sh := &e.cache.shards[i]
		n += len(sh.cur) + len(sh.old)
	}
	if n > 64 {
		t.Fatalf("cache holds %d entries, bound 64", n)
	}
}

func TestConcurrentUse(t *testing.T) {
	e := New(testPolicy(t), Options{CacheEntries: 128})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				q := fmt.Sprintf("UPDATE invoices SET paid = %d WHERE id = %d", i%7, g)
				d := e.Query([]byte(q), maria, appSession())
				if d.Action != Send {
					t.Errorf("%q: %v", q, d.Action)
					return
				}
				e.Query([]byte("SELECT c FROM sbtest1 WHERE id = 1"), maria, appSession())
				e.Prepare([]byte("INSERT INTO invoices (id) VALUES (?)"), mysql8, appSession())
			}
		}(g)
	}
	wg.Wait()
}

func TestPolicyWithOwnLeaseTableAndVariables(t *testing.T) {
	p, err := policy.NewPolicy(2, policy.Fencing{
		LeaseTable: "locks.leases",
		Variables:  policy.Variables{Lease: "my_lease", Owner: "my_owner", Token: "my_token"},
	}, []policy.Table{{Name: "app.invoices"}})
	if err != nil {
		t.Fatal(err)
	}
	e := New(p, Options{})
	d := e.Query([]byte("DELETE FROM invoices"), maria, appSession())
	want := "DELETE FROM invoices WHERE EXISTS (SELECT 1 FROM `locks`.`leases` AS fence_l WHERE fence_l.lease_name = @my_lease " +
		"AND fence_l.owner_token = @my_owner AND fence_l.fence_token = @my_token AND fence_l.leased_until > SYSDATE(3) LOCK IN SHARE MODE)"
	if string(d.SQL) != want {
		t.Fatalf("got  %s\nwant %s", d.SQL, want)
	}
}

func TestSpansCoverStatements(t *testing.T) {
	e := New(testPolicy(t), Options{})
	q := "SELECT 1; UPDATE invoices SET paid = 1 WHERE id = 1 -- x\n; INSERT INTO invoices (id) VALUES (1);USE app"
	d := e.Query([]byte(q), maria, appSession())
	if d.Action != Send || len(d.Stmts) != 4 {
		t.Fatalf("%+v", d)
	}
	want := []string{"SELECT 1", " UPDATE invoices SET paid = 1 WHERE (id = 1) AND ", " INSERT INTO invoices (id) VALUES (1)", "USE app"}
	for i, s := range d.Stmts {
		got := string(d.SQL[s.Span[0]:s.Span[1]])
		if len(got) < len(want[i]) || got[:len(want[i])] != want[i] {
			t.Errorf("stmt %d span %v = %q, want prefix %q", i, s.Span, got, want[i])
		}
		if s.Span[1] < len(d.SQL) && d.SQL[s.Span[1]] != ';' {
			t.Errorf("stmt %d span does not end at ';'", i)
		}
	}
}

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }

func TestFastPathDoesNotAllocate(t *testing.T) {
	e := New(testPolicy(t), Options{})
	s := appSession()
	for _, q := range [][]byte{benchSelect, benchUpdate, []byte("BEGIN"), []byte("SELECT 1; COMMIT")} {
		if n := testing.AllocsPerRun(100, func() { e.Query(q, maria, s) }); n != 0 {
			t.Errorf("%q: %v allocations", q, n)
		}
	}
	// A cache hit does not allocate either.
	q := []byte("UPDATE invoices SET paid = 1 WHERE id = 1")
	e.Query(q, maria, s)
	if n := testing.AllocsPerRun(100, func() { e.Query(q, maria, s) }); n != 0 {
		t.Errorf("cache hit: %v allocations", n)
	}
}
