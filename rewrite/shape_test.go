package rewrite

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// shapeAnswer is what the shape cache alone answers for a packet, after
// the fast path (false: the fast path takes it, it has no shape, or there
// is no plan for its shape).
func shapeAnswer(e *Engine, sql []byte, srv Server, sess Session, prepare bool) (Decision, bool) {
	if e.fastAll(sql, srv, sess) {
		return Decision{}, false
	}
	sc := e.readShape(sql, srv, &sess)
	if sc == nil {
		return Decision{}, false
	}
	defer releaseShapeScan(sc)
	ctx := ctxOf(srv, &sess, prepare)
	return e.shapeDecision(sql, sc, &ctx)
}

// shapeKey is the packet's shape key, or nil.
func shapeKey(e *Engine, sql []byte, srv Server, sess Session) []byte {
	sc := e.readShape(sql, srv, &sess)
	if sc == nil {
		return nil
	}
	defer releaseShapeScan(sc)
	return append([]byte(nil), sc.key...)
}

func decide(e *Engine, sql []byte, srv Server, sess Session, prepare bool) Decision {
	if prepare {
		return e.Prepare(sql, srv, &sess)
	}
	return e.Query(sql, srv, &sess)
}

// diffDecisions describes how two decisions differ ("" if they do not):
// the sent bytes, the action, and every field of every statement.
func diffDecisions(got, want Decision) string {
	if reflect.DeepEqual(got, want) {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "action %v, want %v\n", got.Action, want.Action)
	if !bytes.Equal(got.SQL, want.SQL) {
		fmt.Fprintf(&b, "sql  %q\nwant %q\n", got.SQL, want.SQL)
	}
	fmt.Fprintf(&b, "refusal %+v, want %+v\ncall %+v, want %+v\n", got.Refusal, want.Refusal, got.Call, want.Call)
	for i := 0; i < len(got.Stmts) || i < len(want.Stmts); i++ {
		var g, w string
		if i < len(got.Stmts) {
			g = fmt.Sprintf("%+v fence=%+v", got.Stmts[i], got.Stmts[i].Fence)
		}
		if i < len(want.Stmts) {
			w = fmt.Sprintf("%+v fence=%+v", want.Stmts[i], want.Stmts[i].Fence)
		}
		if g != w {
			fmt.Fprintf(&b, "stmt %d %s\n  want %s\n", i, g, w)
		}
	}
	return b.String()
}

// short abbreviates a statement for messages.
func short(b []byte) string {
	if len(b) > 400 {
		return string(b[:200]) + "..." + string(b[len(b)-200:])
	}
	return string(b)
}

// shapeLiterals lists the packet's shape literals and their forms.
func shapeLiterals(sql []byte, srv Server, sess Session) ([]litSpan, []byte) {
	mode := lexMode{ansiQuotes: readings(sess.ANSIQuotes, sql, '"')[0],
		noBackslash: readings(sess.NoBackslashEscapes, sql, '\\')[0], server: srv}
	lx := newLexer(sql, mode, nil)
	var lits []litSpan
	var forms []byte
	for {
		t, ok := lx.Next()
		if !ok {
			return lits, forms
		}
		if form, lit := literalForm(sql, t, mode.noBackslash); lit && form != 0 {
			lits = append(lits, litSpan{t.Start, t.End})
			forms = append(forms, form)
		}
	}
}

// substitute replaces each literal of sql by lit(i, form).
func substitute(sql []byte, lits []litSpan, forms []byte, lit func(i int, form byte) string) []byte {
	var out []byte
	prev := 0
	for i, l := range lits {
		out = append(out, sql[prev:l.start]...)
		out = append(out, lit(i, forms[i])...)
		prev = l.end
	}
	return append(out, sql[prev:]...)
}

// literalGen makes random literals of a form: numbers of every length the
// form allows, strings with quotes, backslashes, multibyte UTF-8, SQL-like
// text, control bytes, very long and empty ones.
type literalGen struct {
	r *rand.Rand
	// noBackslash: the session reads backslashes as plain bytes (no
	// backslash then: such a string is not a shape literal).
	noBackslash bool
	// noDoubleQuote: a '"' would make an unknown ANSI_QUOTES matter.
	noDoubleQuote bool
	// raw, if set, supplies bytes for string bodies (the fuzzer's).
	raw []byte
}

func (g *literalGen) digits(n int, set string) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = set[g.r.IntN(len(set))]
	}
	return string(b)
}

func (g *literalGen) literal(form byte) string {
	r := g.r
	const dec = "0123456789"
	const hex = "0123456789abcdefABCDEF"
	switch form {
	case formInt:
		switch r.IntN(5) {
		case 0:
			return "0"
		case 1:
			return strconv.FormatInt(r.Int64(), 10) // up to 19 digits
		case 2:
			return "000" + g.digits(1+r.IntN(6), dec)
		}
		return g.digits(1+r.IntN(18), dec)
	case formUint:
		return strconv.FormatUint(1<<63+r.Uint64N(1<<63), 10)
	case formDec:
		return g.digits(1+r.IntN(14), dec) + "." + g.digits(1+r.IntN(14), dec)
	case formFloat:
		whole := 1 + r.IntN(9)
		s := g.digits(whole, dec)
		if r.IntN(2) == 0 {
			s += "." + g.digits(1+r.IntN(17-whole), dec)
		}
		s += []string{"e", "E"}[r.IntN(2)] + []string{"", "+", "-"}[r.IntN(3)]
		return s + g.digits(1+r.IntN(2), dec)
	case '\'', '"':
		return string(form) + g.body(form) + string(form)
	case 'N', 'n':
		return string(form) + "'" + g.body('\'') + "'"
	case formHex0x:
		return "0x" + g.digits(1+r.IntN(16), hex)
	case 'X', 'x':
		return string(form) + "'" + g.digits(2*r.IntN(9), hex) + "'"
	case formBit0b:
		return "0b" + g.digits(1+r.IntN(16), "01")
	case 'B', 'b':
		return string(form) + "'" + g.digits(r.IntN(17), "01") + "'"
	}
	panic("unknown form " + string(form))
}

// body is the text of a string literal quoted with q.
func (g *literalGen) body(q byte) string {
	r := g.r
	var b strings.Builder
	plain := func(s string) {
		for i := 0; i < len(s); i++ {
			c := s[i]
			switch {
			case c == q:
				b.WriteByte(q)
				b.WriteByte(q)
			case c == '\\':
				if !g.noBackslash {
					b.WriteString(`\\`)
				}
			case c == '"' && g.noDoubleQuote:
			default:
				b.WriteByte(c)
			}
		}
	}
	pieces := []func(){
		func() {
			plain(g.digits(1+r.IntN(12), "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-.,:"))
		},
		func() { plain([]string{"é", "中文", "😀", "İNDEX", "ı", "ß", "\u212a", "\u00a0"}[r.IntN(8)]) },
		func() { plain([]string{"'", "\"", "''", "`", "\\"}[r.IntN(5)]) },
		func() {
			if !g.noBackslash {
				b.WriteString([]string{`\n`, `\'`, `\"`, `\%`, `\_`, `\0`, `\Z`, `\\`, `\t`, `\x`}[r.IntN(10)])
			}
		},
		func() {
			plain([]string{"*/", "/*", "--", "-- ", "#", ";", "?", "invoices", "app.invoices", "fence_acquire(",
				"'; DELETE FROM invoices; --", "*/ DELETE FROM invoices /*", "\x00", "\n", "\r\n", "\t", "%", "_",
				"sql_mode", "/*!40000 x */", "*", "index"}[r.IntN(22)])
		},
		func() { plain(strings.Repeat(g.digits(1, "abcxyz'\"\\é"), 500+r.IntN(2500))) },
		func() {
			if len(g.raw) > 0 {
				n := r.IntN(len(g.raw) + 1)
				plain(string(g.raw[:n]))
			}
		},
	}
	n := r.IntN(5)
	if r.IntN(8) == 0 {
		n = 0 // empty
	}
	for i := 0; i < n; i++ {
		pieces[r.IntN(len(pieces))]()
	}
	return b.String()
}

type goldenInput struct {
	file string
	c    *goldenCase
}

func goldenInputs(t *testing.T) []goldenInput {
	files, err := filepath.Glob("testdata/*.golden")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	var out []goldenInput
	for _, path := range files {
		_, cases := parseGolden(t, path)
		for _, c := range cases {
			out = append(out, goldenInput{filepath.Base(path), c})
		}
	}
	return out
}

// TestShapeCacheMatchesFullPath: for every golden input whose decision the
// shape cache keeps, the same statement with random literals of the same
// forms gets from the shape cache exactly what the full path decides for
// it: the same bytes, the same statements, spans and digests.
func TestShapeCacheMatchesFullPath(t *testing.T) {
	pol := testPolicy(t)
	full := New(pol, Options{CacheEntries: -1, ShapeEntries: -1})
	r := rand.New(rand.NewPCG(7, 11))
	rounds := 40
	if testing.Short() {
		rounds = 5
	}
	var kept, notKept, hits int
	for _, gi := range goldenInputs(t) {
		c := gi.c
		name := gi.file + " " + strconv.Quote(c.name)
		in := []byte(c.in)
		e := New(pol, Options{CacheEntries: -1, ShapeEntries: 64})
		first := decide(e, in, c.srv, c.sess, c.prepare)
		if diff := diffDecisions(first, decide(full, in, c.srv, c.sess, c.prepare)); diff != "" {
			t.Errorf("%s: the traced full path differs from the plain one:\n%s", name, diff)
		}
		again, ok := shapeAnswer(e, in, c.srv, c.sess, c.prepare)
		if !ok {
			notKept++
			t.Logf("not a kept shape: %s", name)
			continue
		}
		kept++
		if diff := diffDecisions(again, first); diff != "" {
			t.Errorf("%s: the shape cache's answer for the same statement differs:\n%s", name, diff)
		}
		key := shapeKey(e, in, c.srv, c.sess)
		lits, forms := shapeLiterals(in, c.srv, c.sess)
		g := &literalGen{r: r, noBackslash: c.sess.NoBackslashEscapes != Off,
			noDoubleQuote: c.sess.ANSIQuotes == Unknown}
		for k := 0; k < rounds; k++ {
			sql := substitute(in, lits, forms, func(_ int, form byte) string { return g.literal(form) })
			if !bytes.Equal(shapeKey(e, sql, c.srv, c.sess), key) || e.fastAll(sql, c.srv, c.sess) {
				// A generated string folded to '*' or 'index', or the
				// protected name was only in a literal.
				continue
			}
			got, ok := shapeAnswer(e, sql, c.srv, c.sess, c.prepare)
			if !ok {
				t.Errorf("%s: the same shape without an answer: %q", name, short(sql))
				continue
			}
			hits++
			if diff := diffDecisions(got, decide(full, sql, c.srv, c.sess, c.prepare)); diff != "" {
				t.Errorf("%s: shape cache and full path differ for\n%q\n%s", name, short(sql), diff)
			}
		}
	}
	t.Logf("%d golden inputs keep a shape, %d do not; %d substituted statements answered by the shape cache", kept, notKept, hits)
	if kept < 100 || hits < kept*rounds/2 {
		t.Errorf("too few shapes exercised: %d kept, %d hits", kept, hits)
	}
}

// Statements that must not leave a plan: their decision looks at literal
// values, or they are outside what the shape cache analyses.
func TestShapeExclusions(t *testing.T) {
	app := *appSession()
	unknown := Session{Schema: "app"}
	nbe := Session{Schema: "app", ANSIQuotes: Off, NoBackslashEscapes: On}
	unsafe := Session{Schema: "app", ANSIQuotes: Off, NoBackslashEscapes: Off, UnsafeCharset: true}
	cases := []struct {
		name string
		sql  string
		sess Session
		prep bool
	}{
		{"lease call", "SELECT fence_acquire('job', 30)", app, false},
		{"lease renew", "SELECT fence_renew(30)", app, false},
		{"prepare from literal", "PREPARE s FROM 'UPDATE invoices SET paid = 1 WHERE id = 5'", app, false},
		{"execute immediate", "EXECUTE IMMEDIATE 'DELETE FROM invoices WHERE id = 5'", app, false},
		{"set sql_mode", "SET sql_mode = 'ANSI_QUOTES'; UPDATE invoices SET paid = 1", app, false},
		{"set names", "SET NAMES 'utf8mb4'; UPDATE invoices SET paid = 1", app, false},
		{"set variable", "SET @x = 5; UPDATE invoices SET paid = 1", app, false},
		{"use", "USE app; UPDATE invoices SET paid = 1 WHERE id = 5", app, false},
		{"refused", "TRUNCATE invoices; SELECT 5", app, false},
		{"refused write", "UPDATE x JOIN invoices ON invoices.id = x.id SET paid = 5", app, false},
		{"order by position", "UPDATE invoices SET paid = 1 WHERE id = 3 ORDER BY 1", app, false},
		{"group by position", "INSERT INTO invoices (n) SELECT COUNT(*) FROM invoices WHERE id > 5 GROUP BY 1", app, false},
		{"like escape", "DELETE FROM invoices WHERE note LIKE 'a!%' ESCAPE '!'", app, false},
		{"cast length", "UPDATE invoices SET note = CAST(paid AS CHAR(10)) WHERE id = 5", app, false},
		{"cast float precision", "INSERT INTO invoices (c) VALUES (CAST(1 AS FLOAT(10))), (CAST(2 AS FLOAT(30)))", app, false},
		{"adjacent strings", "UPDATE invoices SET note = 'a' 'b' WHERE id = 5", app, false},
		{"fetch first", "SELECT id FROM invoices ORDER BY id FETCH FIRST 5 ROWS ONLY", app, false},
		{"date literal", "DELETE FROM invoices WHERE created < DATE '2020-01-01'", app, false},
		{"json path", "SELECT note->'$.a' FROM invoices WHERE id = 1", app, false},
		{"string alias", "SELECT id AS 'x' FROM invoices WHERE id = 1", app, false},
		{"datetime precision", "UPDATE invoices SET created = CURRENT_TIMESTAMP(3) WHERE id = 5", app, false},
		{"string star", "UPDATE invoices SET note = '*' WHERE id = 5", app, false},
		{"string index", "UPDATE invoices SET note = 'INDEX' WHERE id = 5", app, false},
		{"huge integer", "DELETE FROM invoices WHERE id = 18446744073709551616", app, false},
		{"huge decimal", "DELETE FROM invoices WHERE amount = 1234567890123456789012345678.901", app, false},
		{"huge float", "DELETE FROM invoices WHERE c = 1e400", app, false},
		{"odd hex", "DELETE FROM invoices WHERE note = X'414'", app, false},
		{"invalid utf-8 string", "UPDATE invoices SET note = 'a\xff' WHERE id = 5", app, false},
		{"backslash under nbe", `UPDATE invoices SET note = 'a\' WHERE id = 5`, nbe, false},
		{"unsafe charset", "UPDATE invoices SET note = 'x' WHERE id = 5", unsafe, false},
		{"unknown modes with a quote", `UPDATE invoices SET note = '"' WHERE id = 5`, unknown, false},
		{"literal glued to a name", "UPDATE invoices SET note = 'x'AS WHERE id = 5", app, false},
		{"invalid utf-8 name", "UPDATE invoices SET `n\xffote` = 'x' WHERE id = 5", app, false},
		{"explain", "EXPLAIN UPDATE invoices SET paid = 1 WHERE id = 5", app, false},
		{"returning", "DELETE FROM invoices WHERE id = 5 RETURNING id", app, false},
		{"analyze", "ANALYZE DELETE FROM invoices WHERE id = 5", app, false},
		{"compound", "BEGIN NOT ATOMIC SELECT 5; END", app, false},
		{"unparsed", "UPDATE invoices SET paid = 5 WHERE", app, false},
		{"no literal", "UPDATE invoices SET paid = paid + id", app, false},
		{"prepared lease call", "SELECT fence_acquire(?, 30)", app, true},
		{"two statements prepared", "SELECT 1; DELETE FROM invoices WHERE id = 5", app, true},
	}
	for _, c := range cases {
		e := New(testPolicy(t), Options{CacheEntries: -1, ShapeEntries: 64})
		d := decide(e, []byte(c.sql), maria, c.sess, c.prep)
		if _, ok := shapeAnswer(e, []byte(c.sql), maria, c.sess, c.prep); ok {
			t.Errorf("%s: a plan was kept for %q (%v)", c.name, c.sql, d.Action)
		}
	}
}

// Statements that must leave a plan.
func TestShapeKept(t *testing.T) {
	app := *appSession()
	for _, c := range []struct {
		sql  string
		srv  Server
		sess Session
		prep bool
	}{
		{"UPDATE invoices SET k = k + 1 WHERE id = 5012", maria, app, false},
		{"UPDATE invoices SET k = k + 1 WHERE id = 1541815603606036480", maria, app, false},
		{"UPDATE invoices SET k = k + 1 WHERE id = 18446744073709551615", maria, app, false},
		// An unsigned integer is never a column position, whatever its value.
		{"SELECT id FROM invoices WHERE id > 5 ORDER BY 18446744073709551615", maria, app, false},
		{"UPDATE invoices SET c = '08566691963-88624912351' WHERE id = 5012", maria, app, false},
		{"DELETE FROM invoices WHERE id = 5012", maria, app, false},
		{"INSERT INTO invoices (id, k, c, pad) VALUES (5012, 4, 'x', 'y')", maria, app, false},
		{"INSERT INTO invoices (id, note) VALUES (1, 'a'), (2, 'b'), (3, 'c')", maria, app, false},
		{"INSERT INTO invoices SET id = 5, note = _utf8mb4'x', amount = 1.5", maria, app, false},
		{"INSERT INTO invoices (id, amount) VALUES (1, 5) ON DUPLICATE KEY UPDATE amount = amount + 5", maria, app, false},
		{"INSERT INTO invoices (id) SELECT id + 100 FROM staging WHERE note = 'x'", maria, app, false},
		{"REPLACE INTO invoices (id, note) VALUES (1, N'x')", mysql8, app, false},
		{"SELECT c FROM invoices WHERE id = 5", maria, app, false},
		{"SELECT c FROM invoices WHERE id > 5 ORDER BY id LIMIT 10 OFFSET 20", maria, app, false},
		{"SELECT c FROM invoices WHERE id > 5 LIMIT 20, 10", maria, app, false},
		{"DELETE FROM invoices WHERE paid = 1 LIMIT 10", maria, app, false},
		{"UPDATE invoices SET paid = paid + 1 WHERE customer = 'acme' ORDER BY id DESC LIMIT 10", maria, app, false},
		{"BEGIN; UPDATE invoices SET paid = 1 WHERE id = 1; COMMIT", maria, app, false},
		{"SELECT 1; UPDATE invoices SET paid = 1 WHERE id = 7; SELECT 'x'", maria, app, false},
		{"UPDATE invoices SET paid = ? WHERE id = 5", maria, app, true},
		{"UPDATE reconciliation_runs SET state = 'done' WHERE id = 5", tidb, app, false},
		{"UPDATE invoices SET note = 'x' WHERE id IN (1, 2.5, 3e4, 0x41, X'42', b'1', 0b1)", maria, app, false},
		{"UPDATE `invoices` SET note = \"x\" WHERE id = 1 /* trace 42 */", maria, app, false},
	} {
		e := New(testPolicy(t), Options{CacheEntries: -1, ShapeEntries: 64})
		d := decide(e, []byte(c.sql), c.srv, c.sess, c.prep)
		got, ok := shapeAnswer(e, []byte(c.sql), c.srv, c.sess, c.prep)
		if !ok {
			t.Errorf("no plan kept for %q (%v %v)", c.sql, d.Action, d.Refusal)
			continue
		}
		if diff := diffDecisions(got, d); diff != "" {
			t.Errorf("%q:\n%s", c.sql, diff)
		}
	}
}

// Pairs of statements of one key whose full-path decisions differ in more
// than their literals: after the first, the second still gets exactly
// what the full path decides for it.
func TestShapeValueTraps(t *testing.T) {
	full := New(testPolicy(t), Options{CacheEntries: -1, ShapeEntries: -1})
	app := *appSession()
	for _, c := range []struct{ name, first, second string }{
		{"escape length", "DELETE FROM invoices WHERE note LIKE 'a%' ESCAPE '!'", "DELETE FROM invoices WHERE note LIKE 'a%' ESCAPE 'ab'"},
		{"digest keeps order by", "UPDATE invoices SET paid = 1 ORDER BY 1", "UPDATE invoices SET paid = 1 ORDER BY 2"},
		{"huge integer", "DELETE FROM invoices WHERE id = 5 LIMIT 1", "DELETE FROM invoices WHERE id = 5 LIMIT 18446744073709551616"},
		{"huge decimal", "DELETE FROM invoices WHERE amount = 1.5", "DELETE FROM invoices WHERE amount = 1" + strings.Repeat("0", 90) + ".5"},
		{"hex digits", "DELETE FROM invoices WHERE note = X'41'", "DELETE FROM invoices WHERE note = X'414'"},
		{"unparsed, a protected name in a string", "UPDATE staging SET sql_mode = 'x' WHERE", "UPDATE staging SET sql_mode = 'invoices' WHERE"},
		{"invalid name, a protected name in a string", "UPDATE staging SET `n\xff` = 'x', sql_mode = 1", "UPDATE staging SET `n\xff` = 'invoices', sql_mode = 1"},
		{"backslash splits", "UPDATE invoices SET note = 'a' WHERE id = 1; SELECT 'b'", "UPDATE invoices SET note = 'a\\' WHERE id = 1; SELECT 'b'"},
	} {
		e := New(testPolicy(t), Options{CacheEntries: -1, ShapeEntries: 64})
		var ds []Decision
		for _, q := range []string{c.first, c.second} {
			got := e.Query([]byte(q), maria, &app)
			want := full.Query([]byte(q), maria, &app)
			if diff := diffDecisions(got, want); diff != "" {
				t.Errorf("%s: %q:\n%s", c.name, q, diff)
			}
			ds = append(ds, want)
		}
		// The trap is real: the full path treats the two differently in
		// more than their literals.
		if !trapSprung(ds[0], ds[1]) {
			t.Errorf("%s: the full path decides alike on both statements; not a trap", c.name)
		}
	}
}

func trapSprung(a, b Decision) bool {
	if a.Action != b.Action || len(a.Stmts) != len(b.Stmts) || (a.Refusal == nil) != (b.Refusal == nil) {
		return true
	}
	if a.Refusal != nil && a.Refusal.Reason != b.Refusal.Reason {
		return true
	}
	for i := range a.Stmts {
		x, y := a.Stmts[i].Fence, b.Stmts[i].Fence
		if (x == nil) != (y == nil) || x != nil && x.Digest != y.Digest {
			return true
		}
	}
	return false
}

func TestShapeCacheConcurrent(t *testing.T) {
	e := New(testPolicy(t), Options{CacheEntries: 16, ShapeEntries: 16})
	full := New(testPolicy(t), Options{CacheEntries: -1, ShapeEntries: -1})
	forms := []string{
		"UPDATE invoices SET k = k + 1 WHERE id = %d",
		"UPDATE invoices SET c = '%d-%d' WHERE id = %d",
		"DELETE FROM invoices WHERE id = %d",
		"INSERT INTO invoices (id, k, c) VALUES (%d, %d, 'x%d')",
		"SELECT c FROM invoices WHERE id = %d",
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 400; i++ {
				f := forms[(g+i)%len(forms)]
				args := []any{g*100000 + i, i, g}[:strings.Count(f, "%d")]
				q := []byte(fmt.Sprintf(f, args...))
				s := appSession()
				if diff := diffDecisions(e.Query(q, maria, s), full.Query(q, maria, s)); diff != "" {
					t.Errorf("%q:\n%s", q, diff)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

func TestShapeCacheBounded(t *testing.T) {
	e := New(testPolicy(t), Options{CacheEntries: -1, ShapeEntries: 64})
	for i := 0; i < 5000; i++ {
		e.Query([]byte(fmt.Sprintf("UPDATE invoices SET c%d = 1 WHERE id = 5", i)), maria, appSession())
	}
	n := 0
	for i := range e.shapes.shards {
		sh := &e.shapes.shards[i]
		for _, l := range sh.cur {
			n += len(l)
		}
		for _, l := range sh.old {
			n += len(l)
		}
	}
	if n > 64 || n == 0 {
		t.Fatalf("shape cache holds %d entries, bound 64", n)
	}
}

func TestShapeCacheOptions(t *testing.T) {
	for _, c := range []struct {
		opts Options
		on   bool
	}{
		{Options{}, true},
		{Options{CacheEntries: -1}, false},
		{Options{CacheEntries: -1, ShapeEntries: 8}, true},
		{Options{ShapeEntries: -1}, false},
	} {
		if on := New(testPolicy(t), c.opts).shapes != nil; on != c.on {
			t.Errorf("%+v: shape cache on = %v", c.opts, on)
		}
	}
}

// raceDetector: built with -race (race_test.go).
var raceDetector bool

// A shape hit allocates the sent text and the statements, nothing else.
func TestShapeHitAllocs(t *testing.T) {
	if raceDetector {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	e := New(testPolicy(t), Options{})
	s := appSession()
	qs := make([][]byte, 64)
	for i := range qs {
		qs[i] = []byte(fmt.Sprintf("UPDATE invoices SET paid = 1 WHERE id = %d", 1000+i))
	}
	e.Query(qs[0], maria, s)
	i := 0
	n := testing.AllocsPerRun(200, func() {
		i++
		if d := e.Query(qs[i%len(qs)], maria, s); d.Action != Send {
			t.Fatal(d.Action)
		}
	})
	if n > 2 {
		t.Errorf("a shape hit allocates %v times", n)
	}
	// A read of a protected table: no allocation at all.
	sel := make([][]byte, 64)
	for k := range sel {
		sel[k] = []byte(fmt.Sprintf("SELECT c FROM invoices WHERE id = %d", k))
	}
	n = testing.AllocsPerRun(200, func() {
		i++
		if d := e.Query(sel[i%len(sel)], maria, s); d.Action != Forward {
			t.Fatal(d.Action)
		}
	})
	if n != 0 {
		t.Errorf("a shape hit on a read allocates %v times", n)
	}
}

// FuzzShapeCache: for any statement, after the shape cache has seen it,
// whenever the shape cache answers for the statement or for the statement
// with its literals replaced (by literals of the same forms made from the
// fuzzer's bytes, or by the fuzzer's raw bytes), the answer is exactly the
// full path's.
func FuzzShapeCache(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s, []byte("x'\\\"é"), uint8(0))
	}
	for _, s := range []string{
		"UPDATE invoices SET k = k + 1 WHERE id = 5012",
		"UPDATE invoices SET c = '0856-8862' WHERE id = 5012 AND pad = 'x' /* trace */",
		"INSERT INTO invoices (id, k, c, pad) VALUES (5012, 4, 'x', 'y'), (5013, 5, 'z', 'w')",
		"DELETE FROM invoices WHERE note LIKE 'a%' ESCAPE '!'",
		"UPDATE invoices SET paid = 1 ORDER BY 1",
		"SELECT c FROM invoices WHERE id IN (1, 2.5, 3e4, 0x41, X'42', b'1', 0b1, N'x', _latin1'y')",
	} {
		f.Add(s, []byte("*"), uint8(0))
		f.Add(s, []byte("index"), uint8(0x2a))
	}
	pol := testPolicy(f)
	full := New(pol, Options{CacheEntries: -1, ShapeEntries: -1})
	f.Fuzz(func(t *testing.T, sql string, vals []byte, flags uint8) {
		srv := fuzzServers[int(flags>>3)%len(fuzzServers)]
		tri := func(b uint8) Tri { return []Tri{Off, On, Unknown, Off}[b&3] }
		sess := Session{Schema: "app", ANSIQuotes: tri(flags), NoBackslashEscapes: tri(flags >> 2 & 1),
			UnsafeCharset: flags&0x80 != 0}
		prepare := flags&0x40 != 0
		e := New(pol, Options{CacheEntries: -1, ShapeEntries: 16})
		in := []byte(sql)
		decide(e, in, srv, sess, prepare)
		check := func(q []byte) {
			got, ok := shapeAnswer(e, q, srv, sess, prepare)
			if !ok {
				return
			}
			want := decide(full, q, srv, sess, prepare)
			if got.Action != want.Action {
				t.Fatalf("shape cache answered %v where the full path decides %v for %q", got.Action, want.Action, q)
			}
			if diff := diffDecisions(got, want); diff != "" {
				t.Fatalf("shape cache and full path differ for %q:\n%s", q, diff)
			}
		}
		check(in)
		if shapeKey(e, in, srv, sess) == nil {
			return
		}
		lits, forms := shapeLiterals(in, srv, sess)
		h := fnv.New64a()
		h.Write(vals)
		g := &literalGen{r: rand.New(rand.NewPCG(h.Sum64(), uint64(len(sql)))), raw: vals,
			noBackslash: sess.NoBackslashEscapes != Off, noDoubleQuote: sess.ANSIQuotes == Unknown}
		for k := 0; k < 4; k++ {
			check(substitute(in, lits, forms, func(_ int, form byte) string { return g.literal(form) }))
		}
		// The fuzzer's bytes, raw, in place of each literal.
		check(substitute(in, lits, forms, func(i int, _ byte) string {
			if len(vals) == 0 {
				return ""
			}
			a := (i * 7) % len(vals)
			b := a + (i*13+5)%(len(vals)-a+1)
			return string(vals[a:b])
		}))
	})
}

// The forms the shape cache takes, at their edges.
func TestLiteralForms(t *testing.T) {
	for _, c := range []struct {
		lit  string
		nbe  bool
		form byte
	}{
		{"0", false, formInt},
		{"007", false, formInt},
		{"9223372036854775807", false, formInt},
		{"9223372036854775808", false, formUint},
		{"18446744073709551615", false, formUint},
		{"18446744073709551616", false, 0},
		{"1.5", false, formDec},
		{"1" + strings.Repeat("0", 27) + ".5", false, formDec},
		{"1" + strings.Repeat("0", 28) + ".5", false, 0},
		{".5", false, 0},
		{"1.", false, 0},
		{"1e5", false, formFloat},
		{"1.5E-10", false, formFloat},
		{"1e400", false, 0},
		{"12345678901234567e1", false, formFloat},
		{"123456789012345678e1", false, 0},
		{"'x'", false, '\''},
		{`"x"`, false, '"'},
		{"''", false, '\''},
		{`'a\'b'`, false, '\''},
		{`'a\'`, true, 0},
		{"'\xff'", false, 0},
		{"'*'", false, 0},
		{"'In\\dex'", false, 0},
		{"'\u0130NDEX'", false, 0},
		{"'indexes'", false, '\''},
		{"N'x'", false, 'N'},
		{"X'41'", false, 'X'},
		{"x''", false, 'x'},
		{"X'414'", false, 0},
		{"0x414", false, formHex0x},
		{"b'101'", false, 'b'},
		{"0b101", false, formBit0b},
	} {
		src := []byte("SELECT " + c.lit + " FROM t")
		lx := newLexer(src, lexMode{noBackslash: c.nbe, server: maria}, nil)
		lx.Next()
		tk, _ := lx.Next()
		form, lit := literalForm(src, tk, c.nbe)
		if !lit || form != c.form || string(src[tk.Start:tk.End]) != c.lit {
			t.Errorf("%s: form %q (literal %v, token %q), want %q", c.lit, form, lit, src[tk.Start:tk.End], c.form)
		}
	}
}
