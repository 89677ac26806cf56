package lease_test

import (
	"context"
	"math/rand"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

func TestFenceCommentEncoding(t *testing.T) {
	l := lease.Lease{Name: "invoice:acme büro", Owner: "a'b*/c\x00\xff+", Token: 42}
	got := lease.FenceComment(l)
	want := "/*fence_lease='invoice%3Aacme%20b%C3%BCro',fence_owner='a%27b%2A%2Fc%00%FF%2B',fence_token='42'*/"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	for _, bad := range []lease.Lease{{Name: "", Owner: "o", Token: 1}, {Name: "x", Owner: "", Token: 1},
		{Name: "x ", Owner: "o", Token: 1}, {Name: "x", Owner: strings.Repeat("o", 65), Token: 1}} {
		if c := lease.FenceComment(bad); c != "" {
			t.Errorf("%q/%q: %s", bad.Name, bad.Owner, c)
		}
		if _, err := lease.WithFenceComment("UPDATE t SET a = 1", bad); err == nil {
			t.Errorf("%q: no error", bad.Name)
		}
	}
	ctx := lease.WithFence(context.Background(), l)
	if got, ok := lease.FenceFrom(ctx); !ok || got != l {
		t.Fatalf("FenceFrom: %v %v", got, ok)
	}
	if _, ok := lease.FenceFrom(context.Background()); ok {
		t.Fatal("FenceFrom of a plain context")
	}
}

// Whatever the lease name and owner bytes, the proxy's reader gets back
// exactly the lease (the comment is the contract between the two) and the
// text it sends holds no owner.
func TestFenceCommentRoundTrip(t *testing.T) {
	p, err := policy.NewPolicy(1, policy.Fencing{}, []policy.Table{{Name: "app.invoices"}})
	if err != nil {
		t.Fatal(err)
	}
	e := rewrite.New(p, rewrite.Options{})
	sess := &rewrite.Session{Schema: "app", ANSIQuotes: rewrite.Off, NoBackslashEscapes: rewrite.Off}
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 500; i++ {
		owner := make([]byte, 1+r.Intn(64))
		r.Read(owner)
		name := []rune{}
		for j := 0; j < 1+r.Intn(20); j++ {
			name = append(name, []rune("ab:/'\"\\*%+ é漢😀_-.~")[r.Intn(17)])
		}
		n := strings.TrimRight(string(name), " ")
		if n == "" {
			n = "x"
		}
		l := lease.Lease{Name: n, Owner: string(owner), Token: r.Uint64()}
		q, err := lease.WithFenceComment("UPDATE invoices SET paid = 1 WHERE id = 7", l)
		if err != nil {
			t.Fatal(err)
		}
		for _, srv := range []rewrite.Server{{Flavor: rewrite.MariaDB, Version: 101119}, {Flavor: rewrite.TiDB, Version: 80400}} {
			d := e.Query([]byte(q), srv, sess)
			if d.Action != rewrite.Send || len(d.Stmts) != 1 || d.Stmts[0].Fence == nil || d.Stmts[0].Fence.Presented == nil {
				t.Fatalf("%q: %v %v", q, d.Action, d.Refusal)
			}
			want := lease.Presented{Lease: l.Name, Owner: l.Owner, Token: l.Token}
			if got := *d.Stmts[0].Fence.Presented; got != want {
				t.Fatalf("%q: got %+v", q, got)
			}
			if strings.Contains(string(d.SQL), "fence_owner=") {
				t.Fatalf("sent %s", d.SQL)
			}
		}
	}
}
