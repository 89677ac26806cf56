package rewrite

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
)

// Golden files: rewrite/testdata/*.golden. Each case:
//
//	=== name
//	server mysql 80036        (optional; default: mariadb 101119)
//	session schema=app ansi=off nbe=off unsafe=no   (optional; these are the defaults)
//	prepare                   (optional: COM_STMT_PREPARE instead of COM_QUERY)
//	--- in                    (or "--- in quoted": one Go-quoted string per line, concatenated)
//	UPDATE invoices SET a = 1
//	--- out
//	send
//	UPDATE invoices SET a = 1 WHERE {F app}
//	stmt write app.invoices span=0:40
//
// In the output, each fence condition appears as {F schema} (session
// lease) or {F schema 'lease'} (fixed lease); fence_text.golden shows them
// written out. go test ./rewrite -run Golden -update rewrites the outputs.

var update = flag.Bool("update", false, "rewrite the golden files' outputs")

type goldenCase struct {
	name    string
	header  []string // server/session/prepare lines, as written
	in      string
	inLines []string // the input section as written
	quoted  bool
	out     string
	srv     Server
	sess    Session
	prepare bool
	abbrev  bool
}

func parseGolden(t *testing.T, path string) (preamble string, cases []*goldenCase) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	i := strings.Index(text, "=== ")
	if i < 0 {
		return text, nil
	}
	preamble = text[:i]
	for _, chunk := range strings.Split(text[i:], "\n=== ") {
		chunk = strings.TrimPrefix(chunk, "=== ")
		lines := strings.Split(strings.TrimRight(chunk, "\n"), "\n")
		c := &goldenCase{name: lines[0], srv: maria, abbrev: true,
			sess: Session{Schema: "app", ANSIQuotes: Off, NoBackslashEscapes: Off}}
		section := "header"
		var out []string
		for _, l := range lines[1:] {
			switch {
			case l == "--- in" || l == "--- in quoted":
				section = "in"
				c.quoted = l == "--- in quoted"
				continue
			case l == "--- out":
				section = "out"
				continue
			}
			switch section {
			case "header":
				if strings.TrimSpace(l) == "" {
					continue
				}
				c.header = append(c.header, l)
				c.applyHeader(t, l)
			case "in":
				c.inLines = append(c.inLines, l)
			case "out":
				out = append(out, l)
			}
		}
		if c.quoted {
			var b strings.Builder
			for _, l := range c.inLines {
				s, err := strconv.Unquote(l)
				if err != nil {
					t.Fatalf("%s: case %q: bad quoted input line %q: %v", path, c.name, l, err)
				}
				b.WriteString(s)
			}
			c.in = b.String()
		} else {
			c.in = strings.Join(c.inLines, "\n")
		}
		c.out = strings.Join(out, "\n")
		cases = append(cases, c)
	}
	return preamble, cases
}

func (c *goldenCase) applyHeader(t *testing.T, l string) {
	f := strings.Fields(l)
	switch f[0] {
	case "server":
		v, _ := strconv.Atoi(f[2])
		switch f[1] {
		case "mysql":
			c.srv = Server{Flavor: MySQL, Version: uint32(v)}
		case "mariadb":
			c.srv = Server{Flavor: MariaDB, Version: uint32(v)}
		case "tidb":
			c.srv = Server{Flavor: TiDB, Version: uint32(v)}
		case "galera":
			c.srv = Server{Flavor: MariaDB, Version: uint32(v), Galera: true}
		default:
			t.Fatalf("case %q: unknown server %q", c.name, f[1])
		}
	case "session":
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			tri := map[string]Tri{"on": On, "off": Off, "unknown": Unknown}[v]
			switch k {
			case "schema":
				c.sess.Schema = v
			case "ansi":
				c.sess.ANSIQuotes = tri
			case "nbe":
				c.sess.NoBackslashEscapes = tri
			case "unsafe":
				c.sess.UnsafeCharset = v == "yes"
			case "locked":
				c.sess.TablesLocked = v == "yes"
			case "oracle":
				c.sess.Oracle = tri
			case "utf8":
				c.sess.NamesUTF8 = v == "yes"
			case "remap":
				c.sess.ASCIIRemap = v == "yes"
			}
		}
	case "prepare":
		c.prepare = true
	case "full":
		c.abbrev = false
	default:
		t.Fatalf("case %q: unknown header line %q", c.name, l)
	}
}

// render prints a decision the way the golden files hold it.
func render(e *Engine, c *goldenCase, d Decision) string {
	var b strings.Builder
	switch d.Action {
	case Forward:
		b.WriteString("forward")
	case Send:
		b.WriteString("send\n")
		b.WriteString(abbreviate(e, c, string(d.SQL)))
	case Refuse:
		b.WriteString("refuse")
		if d.Refusal.Table != "" {
			b.WriteString(" " + d.Refusal.Table)
		}
		b.WriteString(": " + d.Refusal.Reason)
	case Answer:
		fmt.Fprintf(&b, "answer %s column=%q", d.Call.Func, d.Call.Column)
		for _, a := range d.Call.Args {
			switch {
			case a.Placeholder:
				b.WriteString(" ?")
			case a.Null:
				b.WriteString(" NULL")
			case a.IsNumber:
				b.WriteString(" " + a.String)
			default:
				b.WriteString(" " + strconv.Quote(a.String))
			}
		}
	}
	for _, s := range d.Stmts {
		b.WriteString("\n" + renderStmt(&s, true))
	}
	return b.String()
}

var kindNames = map[StmtKind]string{Other: "other", Write: "write", Use: "use", SetSQLMode: "sql_mode",
	SetCharset: "charset", Prepare: "prepare", Execute: "execute", Deallocate: "deallocate", Call: "call"}

var lockNames = map[LockEffect]string{LocksTaken: "taken", LocksReleased: "released",
	LocksReleasedIfChained: "released_if_chained", LocksMaybeReleased: "maybe_released"}

func renderStmt(s *Stmt, span bool) string {
	var b strings.Builder
	b.WriteString("stmt " + kindNames[s.Kind])
	switch s.Kind {
	case Use:
		b.WriteString(" " + s.Schema)
	case SetSQLMode:
		fmt.Fprintf(&b, " ansi=%s nbe=%s", triName(s.ANSIQuotes), triName(s.NoBackslashEscapes))
		if s.SetsCharset {
			fmt.Fprintf(&b, " unsafe_charset=%v", s.UnsafeCharset)
		}
	case SetCharset:
		fmt.Fprintf(&b, " unsafe_charset=%v", s.UnsafeCharset)
	case Prepare, Execute, Deallocate:
		if n := strconv.Quote(s.Name); n[1:len(n)-1] != s.Name {
			b.WriteString(" " + n)
		} else {
			b.WriteString(" " + s.Name)
		}
	}
	if s.NamesUTF8 {
		b.WriteString(" utf8")
	}
	if s.Kind == SetSQLMode && s.Oracle != Off {
		b.WriteString(" oracle=" + triName(s.Oracle))
	}
	if s.Fence != nil {
		for _, t := range s.Fence.Targets {
			b.WriteString(" " + t.Schema + "." + t.Table)
			if t.Lease != "" {
				b.WriteString("('" + t.Lease + "')")
			}
			if t.RowLease != "" {
				b.WriteString("(row " + strconv.Quote(t.RowLease) + ")")
			}
			if t.RowParams != nil {
				b.WriteString("(row from bound values)")
			}
		}
		b.WriteString(" digest=" + strconv.Quote(s.Fence.Digest))
		if s.Fence.Guard {
			b.WriteString(" guard")
		}
		if s.Fence.Rows {
			b.WriteString(" rows")
		}
		if s.Fence.Trap != nil {
			b.WriteString(" trap")
			if s.Fence.Trap.Prepared {
				b.WriteString(" prepared params=" + strconv.Itoa(s.Fence.Trap.Params))
			}
		}
	}
	if s.Locks != LocksKept {
		b.WriteString(" locks=" + lockNames[s.Locks])
	}
	if s.Prepared != nil {
		b.WriteString(" prepared=(" + renderStmt(s.Prepared, false) + ")")
	}
	if span {
		fmt.Fprintf(&b, " span=%d:%d", s.Span[0], s.Span[1])
	}
	if s.Fence != nil && s.Fence.Trap != nil && s.Fence.Trap.Confirm != "" {
		b.WriteString("\n  confirm " + s.Fence.Trap.Confirm)
	}
	return b.String()
}

func triName(t Tri) string {
	switch t {
	case On:
		return "on"
	case Off:
		return "off"
	}
	return "unknown"
}

// abbreviate replaces every fence condition of the case's policy by {F ...}.
func abbreviate(e *Engine, c *goldenCase, sql string) string {
	if !c.abbrev {
		return sql
	}
	type rep struct{ long, short string }
	var reps []rep
	schemas := map[string]bool{}
	for _, t := range e.pol.Tables {
		schemas[t.Schema] = true
	}
	for s := range schemas {
		ls, lt := e.pol.LeaseTableFor(s)
		reps = append(reps, rep{e.fenceSQL([]fenceKey{{schema: ls, table: lt}}, c.srv.Flavor), "{F " + s + "}"})
		for _, t := range e.pol.Tables {
			if t.Lease != "" && t.Schema == s {
				reps = append(reps, rep{e.fenceSQL([]fenceKey{{lease: t.Lease, schema: ls, table: lt}}, c.srv.Flavor),
					"{F " + s + " '" + t.Lease + "'}"})
			}
		}
	}
	sort.Slice(reps, func(i, j int) bool { return len(reps[i].long) > len(reps[j].long) })
	for _, r := range reps {
		sql = strings.ReplaceAll(sql, r.long, r.short)
	}
	return sql
}

func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.golden")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	e := New(testPolicy(t), Options{CacheEntries: -1, ShapeEntries: -1})
	for _, path := range files {
		preamble, cases := parseGolden(t, path)
		changed := false
		for _, c := range cases {
			d := decide(e, []byte(c.in), c.srv, c.sess, c.prepare)
			got := render(e, c, d)
			checkInvariants(t, e, c, d)
			if got != c.out {
				if *update {
					c.out = got
					changed = true
					continue
				}
				t.Errorf("%s: case %q:\n--- in\n%s\n--- got\n%s\n--- want\n%s", filepath.Base(path), c.name, c.in, got, c.out)
			}
		}
		if changed {
			writeGolden(t, path, preamble, cases)
		}
	}
	if *update {
		return
	}
	// The same with the shape cache on (one engine for all files): each
	// case twice, the second time from its shape's plan where it has one,
	// and from other cases' plans where they share a shape.
	shapes := New(testPolicy(t), Options{CacheEntries: -1, ShapeEntries: 4096})
	for _, path := range files {
		_, cases := parseGolden(t, path)
		for _, c := range cases {
			for run := 1; run <= 2; run++ {
				d := decide(shapes, []byte(c.in), c.srv, c.sess, c.prepare)
				if got := render(shapes, c, d); got != c.out {
					t.Errorf("%s: case %q, run %d with the shape cache:\n--- got\n%s\n--- want\n%s", filepath.Base(path), c.name, run, got, c.out)
				}
			}
		}
	}
}

func writeGolden(t *testing.T, path, preamble string, cases []*goldenCase) {
	var b bytes.Buffer
	b.WriteString(preamble)
	for i, c := range cases {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString("=== " + c.name + "\n")
		for _, h := range c.header {
			b.WriteString(h + "\n")
		}
		if c.quoted {
			b.WriteString("--- in quoted\n")
		} else {
			b.WriteString("--- in\n")
		}
		b.WriteString(strings.Join(c.inLines, "\n") + "\n")
		b.WriteString("--- out\n" + c.out + "\n")
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkInvariants holds for every decision: a sent text lexes without
// issues, keeps the client's placeholders, and contains each statement's
// fence; spans cover the sent text.
func checkInvariants(t *testing.T, e *Engine, c *goldenCase, d Decision) {
	t.Helper()
	if d.Action == Forward {
		// Sent verbatim: only guarded writes may be among its statements.
		for _, s := range d.Stmts {
			if s.Kind == Write && !s.Fence.Guard {
				t.Errorf("case %q: an unguarded write is forwarded", c.name)
			}
		}
	}
	if d.Action != Send {
		return
	}
	mode := lexMode{ansiQuotes: c.sess.ANSIQuotes == On, noBackslash: c.sess.NoBackslashEscapes == On, server: c.srv}
	if countParams([]byte(c.in), mode) != countParams(d.SQL, mode) {
		t.Errorf("case %q: placeholder count changed", c.name)
	}
	for _, s := range d.Stmts {
		if s.Span[0] < 0 || s.Span[1] > len(d.SQL) || s.Span[0] > s.Span[1] {
			t.Errorf("case %q: span %v outside the sent text (%d bytes)", c.name, s.Span, len(d.SQL))
		}
		if s.Kind == Write && !s.Fence.Guard && !strings.Contains(string(d.SQL[s.Span[0]:s.Span[1]]), "fence_l.fence_token = @") {
			t.Errorf("case %q: a write's span %v lacks the fence", c.name, s.Span)
		}
		if s.Kind == Write && s.Fence.Trap != nil && s.Fence.Trap.Confirm != "" {
			// The confirming read is one SELECT the server's parser reads.
			if n, err := parseOne(s.Fence.Trap.Confirm, lexMode{}); err != nil {
				t.Errorf("case %q: the confirming read does not parse: %v", c.name, err)
			} else if sel, ok := n.(*ast.SelectStmt); !ok || sel.LockInfo == nil {
				t.Errorf("case %q: the confirming read is no locking SELECT: %s", c.name, s.Fence.Trap.Confirm)
			}
		}
		if s.Kind == Write && s.Fence.Trap != nil && s.Fence.Trap.Prepared {
			// The trapped variant the proxy prepares beside it: the trap
			// in the plain condition's place, Params placeholders more.
			text := d.SQL[s.Span[0]:s.Span[1]]
			tr := s.Fence.Trap.Trapped(text)
			if tr == nil || !bytes.Contains(tr, []byte("EXP("+trapConst)) || !bytes.Equal(s.Fence.Trap.Untrapped(tr), text) ||
				countParams(tr, lexMode{}) != countParams(text, lexMode{})+s.Fence.Trap.Params {
				t.Errorf("case %q: the trapped text is wrong: %s", c.name, tr)
			}
		} else if s.Kind == Write && s.Fence.Trap != nil {
			// The same write without the trap: the plain per-row
			// condition in its place, and nothing else changed.
			text := d.SQL[s.Span[0]:s.Span[1]]
			u := s.Fence.Trap.Untrapped(text)
			if u == nil || bytes.Contains(u, []byte("EXP("+trapConst)) || !bytes.Contains(u, []byte(s.Fence.Trap.Plain)) ||
				len(u) != len(text)-len(s.Fence.Trap.Cond)+len(s.Fence.Trap.Plain) {
				t.Errorf("case %q: the untrapped text is wrong: %s", c.name, u)
			}
		}
	}
}

func countParams(sql []byte, mode lexMode) int {
	lx := newLexer(sql, mode, nil)
	n := 0
	for {
		tk, ok := lx.Next()
		if !ok {
			return n
		}
		if tk.Kind == sqlread.Param {
			n++
		}
	}
}
