package rewrite

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/policy"
)

var rep = strings.Repeat

// Statements just within the default limits, the costliest of each shape
// found (docs/limits.md): tokens that open parser states (NOT, unary
// minus, CASE, assignments), left-deep operator chains, joins, lists,
// many statements, deep nesting of each kind, long literals and comments,
// and the three limits reached at once.
func withinLimits() map[string]string {
	const (
		tok  = policy.DefaultMaxParseTokens
		nest = policy.DefaultMaxParseNesting
		byt  = policy.DefaultMaxParseBytes
	)
	return map[string]string{
		"plus chain":         "UPDATE invoices SET n=1" + rep("+1", tok/2-10),
		"not chain":          "UPDATE invoices SET n=" + rep("NOT ", tok-10) + "1",
		"minus chain":        "UPDATE invoices SET n=" + rep("- ", tok-10) + "1",
		"assignments":        "UPDATE invoices SET n=" + rep("@a:=", tok/2-10) + "1",
		"case nesting":       "UPDATE invoices SET n=" + rep("CASE WHEN 1 THEN ", tok/6-10) + "1" + rep(" END", tok/6-10),
		"in list":            "DELETE FROM invoices WHERE id IN (1" + rep(",1", tok/2-10) + ")",
		"values rows":        "INSERT INTO invoices (a,b) VALUES (1,2)" + rep(",(1,2)", tok/6-10),
		"or chain":           "DELETE FROM invoices WHERE id=1" + rep(" OR id=1", tok/4-10),
		"joins":              "UPDATE invoices" + rep(" JOIN x ON 1", tok/4-10) + " SET n=1",
		"statements":         rep("UPDATE invoices SET n=1;", tok/6-10),
		"parentheses":        "UPDATE invoices SET n=" + rep("(", nest) + "1" + rep(")", nest) + rep("+1", (tok-2*nest)/2-10),
		"functions":          "UPDATE invoices SET n=" + rep("ABS(", nest) + "1" + rep(")", nest) + rep("+1", (tok-3*nest)/2-10),
		"subqueries":         "UPDATE invoices SET n=" + rep("(SELECT ", nest) + "1" + rep(")", nest) + rep("+1", (tok-3*nest)/2-10),
		"executable comment": "UPDATE invoices SET n=1 /*!" + rep(" +1", tok/2-10) + "*/",
		"execute immediate":  "EXECUTE IMMEDIATE 'UPDATE invoices SET n=1" + rep("+1", tok/2-10) + "'",
		"string literal":     "UPDATE invoices SET note='" + rep("x", byt-100) + "'",
		"comment":            "UPDATE invoices SET n=1 /*" + rep("x", byt-100) + "*/",
		"literal and tokens": "UPDATE invoices SET note='" + rep("x", byt-tok-200) + "', n=1" + rep("+1", tok/2-20),
		"comment and tokens": "UPDATE invoices SET n=1" + rep("+1", tok/2-20) + " /*" + rep("x", byt-tok-200) + "*/",
		"compound statement": "BEGIN NOT ATOMIC SELECT 1; " + rep("BEGIN ", tok/4) + "SELECT 1;" + rep("END;", tok/4-10) + " END",
		"statement in a compound": "BEGIN NOT ATOMIC SELECT 1; UPDATE invoices SET n=" + rep("(", nest) + "1" + rep(")", nest) +
			rep("+1", (tok-2*nest)/2-20) + "; END",
		"unknown sql_mode":    "SET sql_mode = @m; UPDATE invoices SET note = \"a\\\\b\", n=1" + rep("+1", tok/10),
		"nested sql_mode":     "SET sql_mode = @m; SET sql_mode = @m; UPDATE invoices SET note = \"a\\\\b\", n=1" + rep("+1", tok/40),
		"prepared big insert": "PREPARE s FROM 'INSERT INTO invoices (a,b) VALUES (1,2)" + rep(",(1,2)", tok/6-10) + "'",
	}
}

// Statements past a limit, each refused after the counting pass.
func pastLimits() map[string]string {
	const (
		tok  = policy.DefaultMaxParseTokens
		nest = policy.DefaultMaxParseNesting
		byt  = policy.DefaultMaxParseBytes
	)
	return map[string]string{
		"1 M nested parentheses":        "UPDATE invoices SET n=" + rep("(", 1<<20) + "1" + rep(")", 1<<20),
		"nesting one too deep":          "UPDATE invoices SET n=" + rep("(", nest+1) + "1" + rep(")", nest+1),
		"unclosed parentheses":          "UPDATE invoices SET n=" + rep("(", nest+1),
		"nesting in exec comment":       "UPDATE invoices SET n=1 /*!" + rep("(", nest+1) + "1" + rep(")", nest+1) + " */",
		"tokens one too many":           "UPDATE invoices SET n=1" + rep("+1", tok/2),
		"1 M tokens":                    "UPDATE invoices SET n=1" + rep("+1", 1<<20),
		"long in list":                  "DELETE FROM invoices WHERE id IN (1" + rep(",1", 1<<20) + ")",
		"many statements":               rep("UPDATE invoices SET n=1;", tok/6+10),
		"many small statements":         rep("DO 1;", tok) + "UPDATE invoices SET n=1",
		"bytes one too many":            "UPDATE invoices SET note='" + rep("x", byt) + "'",
		"huge comment":                  "UPDATE invoices SET n=1 /*" + rep("x", 8<<20) + "*/",
		"deep compound":                 "BEGIN NOT ATOMIC " + rep("BEGIN ", 1<<20) + "SELECT 1;" + rep("END;", 1<<20),
		"deep blocks after a statement": "BEGIN NOT ATOMIC SELECT 1; " + rep("BEGIN ", 100_000) + "SELECT 1;" + rep("END;", 100_000) + " END",
		"nesting in a compound":         "BEGIN NOT ATOMIC SELECT 1; UPDATE invoices SET n=" + rep("(", nest+1) + "1" + rep(")", nest+1) + "; END",
		"tokens in a compound":          "BEGIN NOT ATOMIC SELECT 1; UPDATE invoices SET n=1" + rep("+1", tok/2) + "; END",
		"tokens in a definition":        "CREATE PROCEDURE p() BEGIN SELECT 1; UPDATE invoices SET n=1" + rep("+1", tok/2) + "; END",
		"nesting in a definition":       "CREATE PROCEDURE p() BEGIN SELECT 1; UPDATE invoices SET n=" + rep("(", nest+1) + "1" + rep(")", nest+1) + "; END",
		"execute immediate":             "EXECUTE IMMEDIATE 'UPDATE invoices SET n=" + rep("(", nest+1) + "1" + rep(")", nest+1) + "'",
		"prepare":                       "PREPARE s FROM 'UPDATE invoices SET n=1" + rep("+1", tok/2) + "'",
		"forked readings":               "SET sql_mode = @m; UPDATE invoices SET note = \"a\\\\b\", n=1" + rep("+1", tok/4),
		"sql_mode forks":                rep("SET sql_mode = @m; ", 40) + `SELECT "a\\b" FROM invoices`,
	}
}

// TestParseLimits: past a limit the query is refused, saying which limit
// and its key; within the limits the same shapes are decided as before.
func TestParseLimits(t *testing.T) {
	e := New(testPolicy(t), Options{CacheEntries: -1, ShapeEntries: -1})
	for name, sql := range pastLimits() {
		t.Run("past/"+name, func(t *testing.T) {
			d := e.Query([]byte(sql), maria, appSession())
			if d.Action != Refuse || !strings.Contains(d.Refusal.Reason, "limits.max_parse_") && !strings.Contains(d.Refusal.Reason, "sql_mode") {
				t.Fatalf("%v %v, want a refusal naming the limit", d.Action, d.Refusal)
			}
		})
	}
	for name, sql := range withinLimits() {
		t.Run("within/"+name, func(t *testing.T) {
			d := e.Query([]byte(sql), maria, appSession())
			if d.Action == Refuse && strings.Contains(d.Refusal.Reason, "limits.max_parse_") {
				t.Fatalf("refused: %s", d.Refusal.Reason)
			}
		})
	}
}

// TestParseLimitsSay: each refusal says what limit, its key and value, and
// what to do.
func TestParseLimitsSay(t *testing.T) {
	e := New(testPolicy(t), Options{MaxParseBytes: 100, MaxParseTokens: 20, MaxParseNesting: 3})
	for sql, want := range map[string]string{
		"UPDATE invoices SET n=((((1))))": "a statement of this query nests parentheses 4 deep, deeper than limits.max_parse_nesting (3), " +
			"so fenceproxy cannot check it (MariaDB itself refuses expressions nested about 600 deep, error 1436, and subqueries 64 deep, 1473); " +
			"remove redundant parentheses, or raise limits.max_parse_nesting",
		"UPDATE invoices SET n=1+1+1+1+1+1+1+1+1": "this query has more than limits.max_parse_tokens (20) tokens (words, literals, operators) " +
			"in statements fenceproxy must parse, so it cannot check them; split it (fewer rows per INSERT, shorter IN lists, " +
			"fewer statements per query), or raise limits.max_parse_tokens (checking costs up to about 1 KiB of memory per token)",
		"UPDATE invoices SET note='" + rep("x", 100) + "'": "this query is 127 bytes long, longer than limits.max_parse_bytes (100) " +
			"for a query fenceproxy must parse, so it cannot check it; send large values as parameters of a prepared statement " +
			"(the binary protocol: fenceproxy does not parse them), split the query, or raise limits.max_parse_bytes " +
			"(checking costs up to about 15 bytes of memory per byte)",
	} {
		d := e.Query([]byte(sql), maria, appSession())
		if d.Action != Refuse || d.Refusal.Reason != want {
			t.Errorf("%.40s:\n got %v %v\nwant %s", sql, d.Action, d.Refusal, want)
		}
	}
	// The configured values are the limits: one less passes.
	for _, sql := range []string{"UPDATE invoices SET n=(((1)))", "UPDATE invoices SET n=1+1+1+1+1+1+1", "UPDATE invoices SET note='" + rep("x", 60) + "'"} {
		if d := e.Query([]byte(sql), maria, appSession()); d.Action == Refuse {
			t.Errorf("%s: %v", sql, d.Refusal)
		}
	}
}

// TestParseLimitsCountEverything: the token budget is the packet's, every
// statement and every reading of an unknown sql_mode counted; the text in
// a PREPARE literal has a budget of its own; the nesting is one
// statement's; executable comments count, comments do not.
func TestParseLimitsCountEverything(t *testing.T) {
	e := New(testPolicy(t), Options{MaxParseTokens: 100, MaxParseNesting: 5})
	refused := func(sql string) bool {
		return e.Query([]byte(sql), maria, appSession()).Action == Refuse
	}
	for _, c := range []struct {
		sql     string
		refused bool
	}{
		{"UPDATE invoices SET n=1" + rep("+1", 47), false},                           // 100 tokens
		{"UPDATE invoices SET n=1" + rep("+1", 48), true},                            // 102
		{rep("DO 1;", 48) + "UPDATE invoices SET n=1", true},                         // 96 + 6
		{rep("DO 1;", 47) + "UPDATE invoices SET n=1", false},                        // 94 + 6
		{"UPDATE invoices SET n=1 /* " + rep("+1", 200) + " */", false},              // a comment
		{"UPDATE invoices SET n=1 /*!99999 " + rep("+1", 200) + " */", false},        // dead
		{"UPDATE invoices SET n=1 /*!" + rep("+1", 48) + " */", true},                // live
		{"SET sql_mode=@m; UPDATE invoices SET n=\"\\\\\"" + rep("+1", 5), false},    // 4 + 4 readings of 17
		{"SET sql_mode=@m; UPDATE invoices SET n=\"\\\\\"" + rep("+1", 12), true},    // 4 + 4 readings of 31
		{"SET sql_mode=@m; UPDATE invoices SET n=1" + rep("+1", 45), false},          // 4 + 1 reading of 96
		{"PREPARE s FROM 'UPDATE invoices SET n=1" + rep("+1", 47) + "'", false},     // 4, and 100 inside
		{"PREPARE s FROM 'UPDATE invoices SET n=1" + rep("+1", 48) + "'", true},      // 102 inside
		{"UPDATE invoices SET n=(((((1)))))", false},                                 // 5 deep
		{"UPDATE invoices SET n=((((((1))))))", true},                                // 6 deep
		{"UPDATE invoices SET n=(((((1)))))+(((((1)))))+(((((1)))))", false},         // 5 deep, three times
		{"DO (((((1))))); UPDATE invoices SET n=(((((1)))))", false},                 // per statement
		{"UPDATE invoices SET n=1 /*!40000 +((((((1)))))) */", true},                 // live
		{"UPDATE invoices SET n=1 /* ((((((((( */", false},                           // a comment
		{"UPDATE invoices SET n=')))))(((((((((((('", false},                         // a string
		{"SET sql_mode=@m; SET sql_mode=@m; SELECT \"\\\\\" FROM invoices", false},   // two nested readings
		{"SET sql_mode=@m; SET sql_mode=@m; SET sql_mode=@m; SELECT \"\\\\\"", true}, // three
	} {
		if got := refused(c.sql); got != c.refused {
			t.Errorf("%.70s: refused %v, want %v", c.sql, got, c.refused)
		}
	}
}

// TestParseLimitsNothingProtected: with no protected table a query past
// the limits is relayed unread, and the fast path never counts.
func TestParseLimitsNothingProtected(t *testing.T) {
	none := New(nil, Options{MaxParseBytes: 100, MaxParseTokens: 10, MaxParseNesting: 2})
	for _, sql := range []string{"SET @x = ((((1))))", "SET @x = 1+1+1+1+1+1+1+1", "SET @x = '" + rep("x", 200) + "'"} {
		if d := none.Query([]byte(sql), maria, appSession()); d.Action != Forward {
			t.Errorf("%s: %v %v", sql, d.Action, d.Refusal)
		}
	}
	e := New(testPolicy(t), Options{MaxParseBytes: 100, MaxParseTokens: 10, MaxParseNesting: 2})
	big := []byte("SELECT ((((((1)))))) FROM notes WHERE x IN (1" + rep(",1", 1000) + ") AND y = '" + rep("x", 1000) + "'")
	if d := e.Query(big, maria, appSession()); d.Action != Forward || d.Stmts != nil {
		t.Fatalf("fast path: %v %v", d.Action, d.Refusal)
	}
	if n := testing.AllocsPerRun(10, func() { e.Query(big, maria, appSession()) }); n != 0 {
		t.Fatalf("fast path: %v allocations", n)
	}
}

// TestDecisionMemory measures what one decision costs for the costliest
// statements found, within the default limits and past them: the bytes it
// allocates (runtime.MemStats.TotalAlloc, garbage included: each of many
// statements in one packet leaves about 14 KiB of it, collected as the
// packet is read), and how much the heap it leaves in use grows
// (HeapSys-HeapReleased after FreeOSMemory before, the decision's peak
// as the GC left it). Each stays under 64 MiB; past a limit, a single
// statement's refusal allocates no more than about a copy of its text.
func TestDecisionMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates about a GB in all; skipped in -short mode")
	}
	e := New(testPolicy(t), Options{CacheEntries: -1, ShapeEntries: -1})
	const mib = 1 << 20
	measure := func(sql []byte) (alloc, heap uint64) {
		var a, b runtime.MemStats
		runtime.GC()
		debug.FreeOSMemory()
		runtime.ReadMemStats(&a)
		e.Query(sql, maria, appSession())
		runtime.ReadMemStats(&b)
		return b.TotalAlloc - a.TotalAlloc, (b.HeapSys - b.HeapReleased) - min(b.HeapSys-b.HeapReleased, a.HeapSys-a.HeapReleased)
	}
	check := func(kind, name, sql string) {
		b := []byte(sql)
		alloc, heap := measure(b)
		stmts := uint64(strings.Count(sql, ";"))
		maxAlloc := 64*mib + 16<<10*stmts
		if kind == "past" && stmts == 0 {
			maxAlloc = uint64(len(b)) + mib
		}
		t.Logf("%s/%s: %d bytes, %d statements: %.1f MiB allocated, heap +%.1f MiB", kind, name, len(b), stmts+1,
			float64(alloc)/mib, float64(heap)/mib)
		if alloc > maxAlloc {
			t.Errorf("%s/%s: %.1f MiB allocated, want at most %.1f", kind, name, float64(alloc)/mib, float64(maxAlloc)/mib)
		}
		if heap > 64*mib {
			t.Errorf("%s/%s: heap grew %.1f MiB, want under 64", kind, name, float64(heap)/mib)
		}
	}
	for name, sql := range withinLimits() {
		check("within", name, sql)
	}
	for name, sql := range pastLimits() {
		check("past", name, sql)
	}
}

// TestDigestBounded: the digest of a long statement reads its first
// maxDigestBytes only, marks the cut, and never copies a literal the cut
// leaves open.
func TestDigestBounded(t *testing.T) {
	secret := "s3cr3t-" + rep("x", 100)
	long := "UPDATE invoices SET n = 1" + rep(" + 1", maxDigestBytes/4) + ", note = '" + secret + "'"
	cut := long[:maxDigestBytes]
	d := Digest(long)
	if !strings.HasSuffix(d, " …") || strings.TrimSuffix(d, " …") != Digest(cut) || len(d) > 2*maxDigestBytes {
		t.Fatalf("digest of %d bytes: %d bytes, %q...", len(long), len(d), d[:min(len(d), 60)])
	}
	// The cut inside the literal.
	open := "UPDATE invoices SET note = '" + rep("s3cr3t", maxDigestBytes)
	if d := Digest(open); strings.Contains(d, "s3cr3t") {
		t.Fatalf("a literal cut open is in the digest: %.80q", d)
	}
	if got := DigestInput([]byte(long)); len(got) > maxDigestBytes+4 || Digest(got) != d {
		t.Fatalf("DigestInput: %d bytes", len(got))
	}
	short := "UPDATE invoices SET note = 'x' WHERE id = 1"
	if Digest(short) != "update `invoices` set `note` = ? where `id` = ?" {
		t.Fatalf("short: %q", Digest(short))
	}
}

// TestMapSpans: the one-pass mapping of statement ranges (a query may hold
// tens of thousands of statements) moves each range as the edits before
// it and inside it say, like the direct count per statement.
func TestMapSpans(t *testing.T) {
	direct := func(sp [2]int, edits []edit) [2]int {
		out := sp
		for _, e := range edits {
			delta := len(e.text) - (e.end - e.pos)
			if e.pos < sp[0] {
				out[0] += delta
			}
			if e.pos <= sp[1] {
				out[1] += delta
			}
		}
		return out
	}
	seed := uint32(1)
	rnd := func(n int) int {
		seed = seed*1664525 + 1013904223
		return int(seed>>8) % n
	}
	for round := 0; round < 200; round++ {
		var stmts []Stmt
		var edits []edit
		pos := 0
		for i := 0; i < 1+rnd(20); i++ {
			start := pos
			end := start + 1 + rnd(30)
			stmts = append(stmts, Stmt{Span: [2]int{start, end}})
			for k := 0; k < rnd(3); k++ {
				p := start + rnd(end-start+1)
				e := edit{pos: p, end: p, text: rep("f", rnd(5))}
				if rnd(2) == 0 && p < end {
					e.end = p + 1 // a replacement
				}
				edits = append(edits, e)
			}
			pos = end + 1 + rnd(3)
		}
		want := make([][2]int, len(stmts))
		for i := range stmts {
			want[i] = direct(stmts[i].Span, edits)
		}
		mapSpans(stmts, edits)
		for i := range stmts {
			if stmts[i].Span != want[i] {
				t.Fatalf("round %d statement %d: %v, want %v", round, i, stmts[i].Span, want[i])
			}
		}
	}
}
