package catalog

import (
	"flag"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Golden files: catalog/testdata/*.golden, what the catalog reads of one
// body or view definition (the effects before the closure). Each case:
//
//	=== name
//	server 10.11.19-MariaDB   (optional: the snapshot's VERSION(); default 10.11.19-MariaDB, "none" = unknown)
//	sql_mode ANSI_QUOTES      (optional: the body's sql_mode)
//	view                      (optional: a view definition, not a body)
//	--- in                    (or "--- in quoted": one Go-quoted string per line, concatenated)
//	BEGIN CALL p(); END
//	--- out
//	call app.p
//
// Unqualified names resolve in schema app. go test ./catalog -run Golden
// -update rewrites the outputs.

var update = flag.Bool("update", false, "rewrite the golden files' outputs")

type goldenCase struct {
	name    string
	header  []string
	inHead  string // "--- in" or "--- in quoted"
	inLines []string
	in      string
	out     string
	snap    Snapshot
	sqlMode string
	view    bool
}

func parseGolden(t *testing.T, path string) (string, []*goldenCase) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	i := strings.Index(text, "=== ")
	if i < 0 {
		t.Fatalf("%s: no cases", path)
	}
	preamble := text[:i]
	var cases []*goldenCase
	for _, chunk := range strings.Split(text[i:], "\n=== ") {
		lines := strings.Split(strings.TrimRight(strings.TrimPrefix(chunk, "=== "), "\n"), "\n")
		c := &goldenCase{name: lines[0], snap: Snapshot{Server: "10.11.19-MariaDB"}}
		section := "header"
		var out []string
		for _, l := range lines[1:] {
			switch {
			case l == "--- in" || l == "--- in quoted":
				section, c.inHead = "in", l
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
				k, v, _ := strings.Cut(l, " ")
				switch k {
				case "server":
					c.snap.Server = v
					if v == "none" {
						c.snap.Server = ""
					}
				case "sql_mode":
					c.sqlMode = v
				case "view":
					c.view = true
				default:
					t.Fatalf("%s: case %q: unknown header line %q", path, c.name, l)
				}
			case "in":
				c.inLines = append(c.inLines, l)
			case "out":
				out = append(out, l)
			}
		}
		if c.inHead == "--- in quoted" {
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

func writeGolden(t *testing.T, path, preamble string, cases []*goldenCase) {
	t.Helper()
	var b strings.Builder
	b.WriteString(preamble)
	for i, c := range cases {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString("=== " + c.name + "\n")
		for _, h := range c.header {
			b.WriteString(h + "\n")
		}
		b.WriteString(c.inHead + "\n")
		for _, l := range c.inLines {
			b.WriteString(l + "\n")
		}
		b.WriteString("--- out\n" + c.out + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// renderRead is what the catalog reads of a case's text.
func renderRead(c *goldenCase) string {
	var lines []string
	seen := map[string]bool{}
	add := func(l string) {
		if !seen[l] {
			seen[l] = true
			lines = append(lines, l)
		}
	}
	m := c.snap.readMode(c.sqlMode)
	if c.view {
		bases, funcs, ok := viewBases(View{Schema: "app", Name: "v", Definition: c.in}, m)
		if !ok {
			return "unreadable: over every table"
		}
		for _, r := range bases {
			add("base " + r.schema + "." + r.name)
		}
		for _, r := range funcs {
			add("func " + r.schema + "." + r.name)
		}
		return strings.Join(lines, "\n")
	}
	fx := analyzeBody(c.in, "app", m)
	switch {
	case fx.oversize:
		add("oversize")
	case fx.unclear != "":
		add("unclear: " + fx.unclear)
	case fx.hidden:
		add("hidden")
	}
	if fx.dynamic {
		add("dynamic")
	}
	for _, w := range fx.writes {
		add("write " + w.ref.schema + "." + w.ref.name + " " + w.ops.String())
	}
	for _, r := range fx.calls {
		add("call " + r.schema + "." + r.name)
	}
	for _, r := range fx.funcs {
		add("func " + r.schema + "." + r.name)
	}
	if len(lines) == 0 {
		return "nothing"
	}
	return strings.Join(lines, "\n")
}

// TestReadGolden: testdata/*.golden. The cases whose names say "was:"
// are texts the catalog's former lexer read otherwise than the server.
func TestReadGolden(t *testing.T) {
	files, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), ".golden") {
			continue
		}
		path := "testdata/" + f.Name()
		preamble, cases := parseGolden(t, path)
		changed := false
		for _, c := range cases {
			n++
			if got := renderRead(c); got != c.out {
				if *update {
					c.out, changed = got, true
					continue
				}
				t.Errorf("%s: case %q:\n--- in\n%s\n--- got\n%s\n--- want\n%s", f.Name(), c.name, c.in, got, c.out)
			}
		}
		if changed {
			writeGolden(t, path, preamble, cases)
		}
	}
	if n == 0 {
		t.Fatal("no golden cases")
	}
}
