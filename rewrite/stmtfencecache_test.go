package rewrite

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/lease"
)

// encodeValue URL-encodes s, escaping some plain bytes too (a client may).
func encodeValue(r *rand.Rand, s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~') && r.Intn(8) != 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

func randFence(r *rand.Rand) (string, lease.Presented) {
	alpha := "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:-._~/ é'\"\\*"
	pick := func(n int) string {
		var b strings.Builder
		for b.Len() < n {
			b.WriteString(string([]rune(alpha)[r.Intn(len([]rune(alpha)))]))
		}
		return b.String()
	}
	p := lease.Presented{Lease: pick(1 + r.Intn(40)), Owner: pick(1 + r.Intn(60)), Token: r.Uint64() >> uint(r.Intn(64))}
	tok := fmt.Sprint(p.Token)
	if r.Intn(5) == 0 {
		tok = "00" + tok
	}
	body := "fence_lease='" + encodeValue(r, p.Lease) + "',fence_owner='" + encodeValue(r, p.Owner) + "',fence_token='" + encodeValue(r, tok) + "'"
	return body, p
}

var probeKey = regexp.MustCompile(`fence_lease='(Q|%51)+',fence_owner='(Q|%51)+',fence_token='(1|%31)+'`)

// The statement fence cache decides exactly as the full path: the same
// Decision, field by field, for the statement fence tests' statements
// with random fence values (every value through the cache after the
// first of its shape), on every server; and it kept entries.
func TestStmtFenceCacheMatchesFullPath(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	stmts := []string{
		"UPDATE invoices SET paid = 1 WHERE id = 7 /*%s*/",
		"/*%s*/ UPDATE invoices SET paid = 1 WHERE id = 7",
		"DELETE FROM invoices WHERE id = 7 /* %s */",
		"INSERT INTO invoices (id, paid) VALUES (7, 1) /*%s*/",
		"REPLACE INTO invoices (id, paid) VALUES (7, 1)/*%s*/",
		"UPDATE invoices SET paid = 1 WHERE id = 7 /*%s*/;",
		"UPDATE reconciliation_runs SET status = 'x' WHERE id = 1 /*traceparent='00-ab-cd-01',%s*/",
		"UPDATE billing.ledger l JOIN invoices i ON i.id = l.id SET l.v = 1, i.paid = 1 /*%s,route='a%%2Fb'*/",
		"UPDATE invoices SET note = 'fence' WHERE id = 7 /*%s*/",
		"SELECT * FROM invoices /*%s*/",
		"UPDATE notes SET v = 1 /*%s*/",
		"UPDATE invoice_rows SET paid = 1 WHERE customer_id = 'acme' /*%s*/",
		"INSERT INTO invoice_rows (customer_id, paid) VALUES ('acme', 1) /*%s*/",
		"UPDATE invoices SET fence_token = 1 WHERE id = 7 /*%s*/",
		"UPDATE invoices SET paid = 1 WHERE id = 7 /*%s*/ /*%s*/",
		"UPDATE invoices /*%s*/ SET paid = 1 WHERE id = 7",
	}
	kept := 0
	for _, srv := range []Server{maria, mysql8, tidb, {Flavor: MariaDB, Version: 101119, Galera: true}} {
		pol := testPolicy(t)
		cached := New(pol, Options{CacheEntries: 64})
		full := New(pol, Options{CacheEntries: -1, ShapeEntries: -1})
		for _, q := range stmts {
			for i := 0; i < 40; i++ {
				var args []any
				for j := 0; j < strings.Count(q, "%s"); j++ {
					b, _ := randFence(r)
					args = append(args, b)
				}
				text := []byte(fmt.Sprintf(q, args...))
				got := cached.Query(text, srv, appSession())
				want := full.Query(text, srv, appSession())
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%v %s:\n got %+v %v %s %+v\nwant %+v %v %s %+v", srv, text, got.Stmts, got.Refusal, got.SQL, got.Stmts[0].Fence, want.Stmts, want.Refusal, want.SQL, want.Stmts[0].Fence)
				}
			}
		}
		kept += cached.stmtCache.len()
		// No fence value of any statement is kept.
		cached.stmtCache.each(func(k []byte, d *Decision) {
			if !probeKey.Match(k) {
				t.Errorf("a key that is no probe text: %s", k)
			}
		})
	}
	if kept == 0 {
		t.Fatal("the statement fence cache kept nothing")
	}
}

// A cached statement fence decision is the packet's own: the same text
// with another comment, then with none, gets its own fence; the owner and
// its digest are in no cache.
func TestStmtFenceCacheOwnFence(t *testing.T) {
	e := New(testPolicy(t), Options{CacheEntries: 64})
	q := "UPDATE invoices SET paid = 1 WHERE id = 7"
	for i, owner := range []string{"owner-one", "owner-two", "owner-one"} {
		p := lease.Presented{Lease: "invoice:acme", Owner: owner, Token: uint64(40 + i)}
		text := q + " /*fence_lease='invoice%3Aacme',fence_owner='" + owner + "',fence_token='" + fmt.Sprint(p.Token) + "'*/"
		d := e.Query([]byte(text), maria, appSession())
		if d.Action != Send || len(d.Stmts) != 1 || d.Stmts[0].Fence == nil || d.Stmts[0].Fence.Presented == nil || *d.Stmts[0].Fence.Presented != p {
			t.Fatalf("%s: %+v", text, d)
		}
		sum := sha256.Sum256([]byte(owner))
		if !bytes.Contains(d.SQL, []byte(hex.EncodeToString(sum[:]))) || !bytes.Contains(d.SQL, []byte(fmt.Sprintf("fence_token = %d ", p.Token))) {
			t.Errorf("%s: sent %s", text, d.SQL)
		}
		noSecrets(t, text, d.SQL)
	}
	if n := e.stmtCache.len(); n != 1 {
		t.Errorf("%d statement fence cache entries, want 1", n)
	}
	d := e.Query([]byte(q), maria, appSession())
	if d.Action != Send || d.Stmts[0].Fence.Presented != nil {
		t.Fatalf("without a comment: %+v", d)
	}
	for _, owner := range []string{"owner-one", "owner-two"} {
		sum := sha256.Sum256([]byte(owner))
		for _, c := range []*cache[*Decision]{e.cache, e.stmtCache} {
			c.each(func(k []byte, d *Decision) {
				for _, s := range [][]byte{k, d.SQL, d.Stripped, []byte(fmt.Sprint(d.Stmts))} {
					if bytes.Contains(s, []byte(owner)) || bytes.Contains(s, []byte(hex.EncodeToString(sum[:]))) {
						t.Errorf("a cache holds owner %s: %s", owner, s)
					}
				}
			})
		}
	}
}

// each calls f on every entry of c.
func (c *cache[V]) each(f func(key []byte, v V)) {
	if c == nil {
		return
	}
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.RLock()
		for _, m := range []map[string][]cacheEntry[V]{sh.cur, sh.old} {
			for k, list := range m {
				for _, en := range list {
					f([]byte(k), en.v)
				}
			}
		}
		sh.mu.RUnlock()
	}
}

func (c *cache[V]) len() int {
	n := 0
	c.each(func([]byte, V) { n++ })
	return n
}
