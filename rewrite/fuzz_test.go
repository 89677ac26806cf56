package rewrite

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
	"github.com/pingcap/tidb/pkg/parser/ast"
)

// Seeds: every golden input and every bypass attempt.
func fuzzSeeds(f *testing.F) []string {
	var seeds []string
	files, _ := filepath.Glob("testdata/*.golden")
	t := &testing.T{}
	for _, path := range files {
		if _, err := os.Stat(path); err != nil {
			continue
		}
		_, cases := parseGolden(t, path)
		for _, c := range cases {
			seeds = append(seeds, c.in)
		}
	}
	for _, bc := range bypassCases() {
		seeds = append(seeds, bc.sql)
	}
	return append(seeds, aggregateSeeds...)
}

// aggregateSeeds: aggregates, window functions and correlated subqueries,
// which decide whether a query returns a row whatever its WHERE says
// (issue 8), in every write form.
var aggregateSeeds = []string{
	"INSERT INTO invoices (code, amount) VALUES ('x', 7 + COUNT(*))",
	"INSERT INTO invoices SET code = 'x', amount = COUNT(*)",
	"REPLACE INTO runs (id, name, status, n) VALUES (1, 'r1', 'hacked', 7 + COUNT(*))",
	"INSERT INTO runs (id, name) VALUES (2, CONCAT('r2', LEFT(COUNT(*), 0))) ON DUPLICATE KEY UPDATE status = 'pwned'",
	"INSERT INTO invoices (code, amount) VALUES ('x', SUM(1) OVER ())",
	"INSERT INTO invoices (code, amount) SELECT 'x', (SELECT COUNT(o.id)) FROM other o",
	"INSERT INTO invoices (code, amount) SELECT 'x', 1 FROM other o ORDER BY (SELECT COUNT(o.id)) LIMIT 1",
	"INSERT INTO invoices (code, amount) SELECT 'x', 1 FROM other o HAVING (SELECT MAX(o.id)) > 0",
	"INSERT INTO invoices (code, amount) SELECT 'x', ROW_NUMBER() OVER w FROM other o WINDOW w AS (ORDER BY o.id)",
	"INSERT INTO invoices (code) SELECT o.code FROM other o WHERE EXISTS (SELECT 1 FROM staging s WHERE s.id = o.id HAVING COUNT(o.id) > 0)",
	"UPDATE invoices SET amount = (SELECT COUNT(*) FROM other o WHERE o.id = invoices.id) WHERE id = 1",
	"UPDATE invoices i SET amount = 1 WHERE (SELECT COUNT(i.id)) > 0",
	"UPDATE invoices SET amount = (SELECT SUM(x) OVER () FROM other LIMIT 1)",
	"UPDATE invoices i JOIN (SELECT id, RANK() OVER (ORDER BY id) r FROM other) o ON o.id = i.id SET i.amount = o.r",
	"DELETE FROM invoices WHERE id IN (SELECT MAX(o.id) FROM other o GROUP BY o.code)",
	"DELETE FROM invoices WHERE (SELECT COUNT(invoices.id)) > 0",
	"DELETE i FROM invoices i WHERE EXISTS (SELECT 1 FROM other o WHERE o.id = i.id HAVING COUNT(i.id) > 0)",
	"DELETE FROM invoices WHERE id = (SELECT FIRST_VALUE(id) OVER (ORDER BY id) FROM other LIMIT 1)",
}

var fuzzServers = []Server{maria, mysql8, mysql84, tidb, {Flavor: MariaDB, Version: 50560}, {Flavor: MySQL, Version: 50744}}

// FuzzTokenize: the lexer never panics, its tokens are ordered, disjoint
// and inside the text; the normalized text has the same length, keeps
// every token byte and blanks only what lies between tokens.
func FuzzTokenize(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s, uint8(0))
	}
	f.Fuzz(func(t *testing.T, sql string, flags uint8) {
		mode := lexMode{ansiQuotes: flags&1 != 0, noBackslash: flags&2 != 0,
			server: fuzzServers[int(flags>>2)%len(fuzzServers)]}
		src := []byte(sql)
		norm := []byte(sql)
		lx := newLexer(src, mode, norm)
		last := 0
		covered := make([]bool, len(src))
		for n := 0; ; n++ {
			tk, ok := lx.Next()
			if !ok {
				break
			}
			if n > len(src)+1 {
				t.Fatalf("lexer does not advance")
			}
			if tk.Start < last || tk.End <= tk.Start || tk.End > len(src) {
				t.Fatalf("bad token [%d,%d) after %d in %q", tk.Start, tk.End, last, sql)
			}
			for i := tk.Start; i < tk.End; i++ {
				covered[i] = true
			}
			last = tk.End
		}
		if len(norm) != len(src) {
			t.Fatalf("normalized length %d != %d", len(norm), len(src))
		}
		for i := range src {
			if covered[i] {
				if norm[i] != src[i] {
					t.Fatalf("token byte %d changed in normalization of %q", i, sql)
				}
			} else if !sqlread.IsSpace(norm[i]) {
				t.Fatalf("byte %d (%q) outside tokens not blanked in %q", i, norm[i], sql)
			}
		}
	})
}

// FuzzRewrite: Query and Prepare never panic; a sent text lexes cleanly,
// keeps the placeholder count, carries the fence in every write, and each
// fenced statement parses; and a statement the parser reads as a write to
// a protected table is never forwarded.
func FuzzRewrite(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s, uint8(0))
	}
	// The shape cache is on: inputs of one shape are answered from its plan.
	e := New(testPolicy(f), Options{CacheEntries: -1, ShapeEntries: 4096})
	f.Fuzz(func(t *testing.T, sql string, flags uint8) {
		srv := fuzzServers[int(flags>>3)%len(fuzzServers)]
		tri := func(b uint8) Tri { return []Tri{Off, On, Unknown, Off}[b&3] }
		sess := Session{Schema: "app", ANSIQuotes: tri(flags), NoBackslashEscapes: tri(flags >> 2 & 1),
			UnsafeCharset: flags&0x80 != 0}
		prepare := flags&0x40 != 0
		var d Decision
		if prepare {
			d = e.Prepare([]byte(sql), srv, &sess)
		} else {
			d = e.Query([]byte(sql), srv, &sess)
		}
		mode := lexMode{ansiQuotes: sess.ANSIQuotes == On, noBackslash: sess.NoBackslashEscapes == On, server: srv}
		switch d.Action {
		case Send:
			if countParams([]byte(sql), mode) != countParams(d.SQL, mode) {
				t.Fatalf("placeholder count changed:\n%q\n%q", sql, d.SQL)
			}
			modeChanges := false
			for _, s := range d.Stmts {
				modeChanges = modeChanges || s.Kind == SetSQLMode
			}
			lx := newLexer(d.SQL, mode, nil)
			for {
				if _, ok := lx.Next(); !ok {
					break
				}
			}
			if lx.Issue() != "" && !modeChanges {
				t.Fatalf("sent text lexes with an issue (%s): %q", lx.Issue(), d.SQL)
			}
			known := true
			for _, s := range d.Stmts {
				if s.Span[0] < 0 || s.Span[1] > len(d.SQL) || s.Span[0] > s.Span[1] {
					t.Fatalf("span %v outside %d bytes", s.Span, len(d.SQL))
				}
				if s.Kind == SetSQLMode {
					// Later statements are read with the new mode.
					known = known && s.ANSIQuotes != Unknown && s.NoBackslashEscapes != Unknown
					mode.ansiQuotes, mode.noBackslash = s.ANSIQuotes == On, s.NoBackslashEscapes == On
				}
				if s.Kind != Write || !known {
					continue
				}
				if s.Fence.Guard {
					// Sent as written: the proxy guards it.
					if strings.Contains(string(d.SQL[s.Span[0]:s.Span[1]]), "fence_l.") {
						t.Fatalf("a guarded write was changed: %q", d.SQL[s.Span[0]:s.Span[1]])
					}
					continue
				}
				part := d.SQL[s.Span[0]:s.Span[1]]
				if !strings.Contains(string(part), "fence_l.fence_token = @fence_token") {
					t.Fatalf("write without fence: %q", part)
				}
				norm := append([]byte(nil), part...)
				plx := newLexer(part, mode, norm)
				depth := 0
				analyze := false
				for n := 0; ; n++ {
					tk, ok := plx.Next()
					if !ok {
						break
					}
					switch w := string(part[tk.Start:tk.End]); {
					case n == 0 && strings.EqualFold(w, "analyze") && srv.Flavor == MariaDB:
						analyze = true
						fallthrough
					case analyze && !(strings.EqualFold(w, "update") || strings.EqualFold(w, "delete") ||
						strings.EqualFold(w, "insert") || strings.EqualFold(w, "replace")):
						// MariaDB's ANALYZE prefix: the parser does not read it.
						for i := tk.Start; i < tk.End; i++ {
							norm[i] = ' '
						}
						continue
					case analyze:
						analyze = false
					case w == "(":
						depth++
					case w == ")":
						depth--
					case depth == 0 && tk.Kind == sqlread.Word && strings.EqualFold(w, "returning") && srv.Flavor == MariaDB:
						// MariaDB's RETURNING: the parser does not read it.
						norm = norm[:tk.Start]
					}
					if len(norm) <= tk.Start {
						break
					}
				}
				// EXECUTE IMMEDIATE, SET STATEMENT: MariaDB syntax the parser
				// does not read.
				head := strings.ToUpper(strings.TrimSpace(string(norm)))
				if _, err := parseOne(string(norm), mode); err != nil && !strings.HasPrefix(head, "EXECUTE") &&
					!strings.HasPrefix(head, "SET STATEMENT") {
					t.Fatalf("fenced statement does not parse (%v): %q", err, part)
				}
			}
		case Forward:
			if sess.ANSIQuotes == Unknown || sess.NoBackslashEscapes == Unknown {
				return
			}
			if target := oracleWrite(e, sql, mode, sess.Schema); target != "" && !guardedWrites(d) {
				t.Fatalf("forwarded a write to %s: %q", target, sql)
			}
		}
	})
}

// oracleWrite is an independent, simpler reading: a single statement the
// parser reads as INSERT/REPLACE into, or single-table UPDATE/DELETE of, a
// protected table. It returns the table, or "".
func oracleWrite(e *Engine, sql string, mode lexMode, schema string) string {
	norm := []byte(sql)
	lx := newLexer([]byte(sql), mode, norm)
	for {
		tk, ok := lx.Next()
		if !ok {
			break
		}
		if tk.Kind == sqlread.Op && sql[tk.Start] == ';' && strings.TrimSpace(string(norm[tk.End:])) != "" {
			return "" // several statements: not this oracle's business
		}
	}
	if lx.Issue() != "" {
		return ""
	}
	n, err := parseOne(strings.TrimSuffix(strings.TrimSpace(string(norm)), ";"), mode)
	if err != nil {
		return ""
	}
	if x, ok := n.(*ast.ExplainStmt); ok && x.Analyze {
		n = x.Stmt.(ast.StmtNode)
	}
	var tn *ast.TableName
	switch x := n.(type) {
	case *ast.InsertStmt:
		if ts, ok := x.Table.TableRefs.Left.(*ast.TableSource); ok {
			tn, _ = ts.Source.(*ast.TableName)
		}
	case *ast.UpdateStmt:
		if x.TableRefs != nil && x.TableRefs.TableRefs.Right == nil {
			if ts, ok := x.TableRefs.TableRefs.Left.(*ast.TableSource); ok {
				tn, _ = ts.Source.(*ast.TableName)
			}
		}
	case *ast.DeleteStmt:
		if !x.IsMultiTable && x.TableRefs != nil && x.TableRefs.TableRefs.Right == nil {
			if ts, ok := x.TableRefs.TableRefs.Left.(*ast.TableSource); ok {
				tn, _ = ts.Source.(*ast.TableName)
			}
		}
	}
	if tn == nil {
		return ""
	}
	s := tn.Schema.O
	if s == "" {
		s = schema
	}
	if t, ok := e.pol.Lookup(s, tn.Name.O); ok {
		return t.Name
	}
	return ""
}

// without one (unless the parser cannot read it, see below).
func FuzzCatalogFastPath(f *testing.F) {
	seeds := fuzzSeeds(f)
	files, _ := filepath.Glob("testdata/catalog/*.golden")
	for _, path := range files {
		_, cases := parseGolden(&testing.T{}, path)
		for _, c := range cases {
			seeds = append(seeds, c.in)
		}
	}
	for _, s := range seeds {
		f.Add(s, uint8(0))
	}
	e := catalogEngine(f, "", false)
	plain := New(testPolicy(f), Options{CacheEntries: -1, ShapeEntries: -1})
	f.Fuzz(func(t *testing.T, sql string, flags uint8) {
		srv := fuzzServers[int(flags>>3)%len(fuzzServers)]
		tri := func(b uint8) Tri { return []Tri{Off, On, Unknown, Off}[b&3] }
		sess := Session{Schema: "app", ANSIQuotes: tri(flags), NoBackslashEscapes: tri(flags >> 2 & 1),
			UnsafeCharset: flags&0x80 != 0}
		prepare := flags&0x40 != 0
		if !e.fastAll([]byte(sql), srv, sess) {
			return
		}
		with := e.slow([]byte(sql), srv, sess, prepare, nil)
		without := plain.slow([]byte(sql), srv, sess, prepare, nil)
		if with.Refusal != nil && strings.Contains(with.Refusal.Reason, "cannot parse this statement") && without.Action == Forward {
			// The slow path's last resort for text its parser cannot
			// read searches the raw text, strings and comments included
			// (DELETE FROM "v_inv" without ANSI_QUOTES): the fast path
			// judges by the identifiers the server's lexer reads.
			return
		}
		if !reflect.DeepEqual(with, without) {
			t.Fatalf("the fast path passed %q, but the catalog changes its decision:\nwith    %+v\nwithout %+v", sql, with, without)
		}
	})
}
