package proxy

import (
	"testing"

	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// TestRewriteCacheZeroDisablesCaching: a cached decision is shared between
// callers (the same fenced text), an uncached one is built anew each time.
func TestRewriteCacheZeroDisablesCaching(t *testing.T) {
	pol, err := policy.NewPolicy(1, policy.Fencing{}, []policy.Table{{Name: "app.invoices"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := rewrite.Server{Flavor: rewrite.MariaDB, Version: 101119}
	const stmt = "UPDATE invoices SET amount = 1 WHERE id = 7"
	for _, tc := range []struct {
		name    string
		entries int
		shared  bool
	}{
		{"default size", policy.DefaultRewriteCache, true},
		{"zero disables", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRewriter(pol, policy.Limits{RewriteCache: tc.entries}, nil, "")
			sess := rewrite.Session{Schema: "app", ANSIQuotes: rewrite.Off, NoBackslashEscapes: rewrite.Off}
			a := r.Query([]byte(stmt), srv, &sess)
			b := r.Query([]byte(stmt), srv, &sess)
			// A different literal: served from the shape cache when there is one.
			c := r.Query([]byte("UPDATE invoices SET amount = 2 WHERE id = 8"), srv, &sess)
			d := r.Query([]byte("UPDATE invoices SET amount = 3 WHERE id = 9"), srv, &sess)
			if a.Action != rewrite.Send || b.Action != rewrite.Send || c.Action != rewrite.Send || d.Action != rewrite.Send {
				t.Fatalf("want fenced statements, got actions %v %v %v %v", a.Action, b.Action, c.Action, d.Action)
			}
			if shared := &a.SQL[0] == &b.SQL[0]; shared != tc.shared {
				t.Fatalf("decision shared between calls: %v, want %v", shared, tc.shared)
			}
			if !tc.shared {
				if r.Cached() {
					t.Fatal("rewrite_cache 0: engine still caches")
				}
			}
		})
	}
}
