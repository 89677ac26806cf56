// Command testsummary reads `go test -json` on stdin and prints what a
// plain `go test` prints (each package's ok/FAIL line, the output of failed
// tests and of failed builds), each package's line with its counts, and at
// the end what was skipped: the tests that need a database server, per
// package, and every other skip with its reason. make unit uses it.
//
// Usage: go test -json ./... | go run ./internal/testsummary
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output, build-fail
	Test       string
	Output     string
}

// serverSkip marks the reasons dbtest and dbserver give when a test needs a
// server it may not have here.
var serverSkip = []string{"integration-tier test", "no database server"}

type counts struct{ passed, failed, skipped int }

type summary struct {
	out     io.Writer
	pkgs    map[string]*counts
	output  map[string][]string // package + "\x00" + test: its output so far
	server  map[string]int      // package: tests skipped for want of a server
	other   []string            // "package Test: reason"
	total   counts
	failed  bool
	builtOK bool
}

func newSummary(out io.Writer) *summary {
	return &summary{out: out, pkgs: map[string]*counts{}, output: map[string][]string{}, server: map[string]int{}}
}

func (s *summary) add(e event) {
	key := e.Package + "\x00" + e.Test
	switch e.Action {
	case "build-output":
		fmt.Fprint(s.out, e.Output)
	case "build-fail":
		s.failed = true
	case "output":
		if e.Test == "" {
			// The package's own lines: ok/FAIL are printed with their counts
			// at the package's end; PASS adds nothing.
			if o := strings.TrimSpace(e.Output); o != "PASS" && !strings.HasPrefix(o, "ok ") && !strings.HasPrefix(o, "FAIL") && !strings.HasPrefix(o, "?") && o != "testing: warning: no tests to run" {
				fmt.Fprint(s.out, e.Output)
			}
			return
		}
		s.output[key] = append(s.output[key], e.Output)
	case "pass", "fail", "skip":
		if e.Test == "" {
			s.endPackage(e)
			return
		}
		c := s.pkg(e.Package)
		switch e.Action {
		case "pass":
			c.passed++
			s.total.passed++
		case "fail":
			c.failed++
			s.total.failed++
			s.failed = true
			fmt.Fprint(s.out, strings.Join(s.output[key], ""))
		case "skip":
			c.skipped++
			s.total.skipped++
			s.noteSkip(e.Package, e.Test, s.output[key])
		}
		delete(s.output, key)
	}
}

func (s *summary) pkg(name string) *counts {
	c := s.pkgs[name]
	if c == nil {
		c = &counts{}
		s.pkgs[name] = c
	}
	return c
}

// noteSkip files a skipped test under its reason: the skip message is the
// output line before "--- SKIP".
func (s *summary) noteSkip(pkg, test string, lines []string) {
	reason := ""
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		reason = l
	}
	for _, m := range serverSkip {
		if strings.Contains(reason, m) {
			s.server[pkg]++
			return
		}
	}
	if i := strings.Index(reason, ": "); i >= 0 && strings.Contains(reason[:i], ".go:") {
		reason = reason[i+2:] // drop "file_test.go:12: "
	}
	s.other = append(s.other, fmt.Sprintf("%s %s: %s", short(pkg), test, reason))
}

func (s *summary) endPackage(e event) {
	c := s.pkg(e.Package)
	word := map[string]string{"pass": "ok  ", "fail": "FAIL", "skip": "?   "}[e.Action]
	if e.Action == "fail" {
		s.failed = true
	}
	if c.passed+c.failed+c.skipped == 0 {
		if e.Action == "skip" {
			return // no test files
		}
		fmt.Fprintf(s.out, "%s %s\n", word, e.Package)
		return
	}
	fmt.Fprintf(s.out, "%s %s (%d passed, %d skipped", word, e.Package, c.passed, c.skipped)
	if c.failed > 0 {
		fmt.Fprintf(s.out, ", %d FAILED", c.failed)
	}
	fmt.Fprintln(s.out, ")")
}

func (s *summary) finish() {
	fmt.Fprintf(s.out, "\n%d tests passed, %d failed, %d skipped\n", s.total.passed, s.total.failed, s.total.skipped)
	if len(s.server) > 0 {
		n := 0
		var pkgs []string
		for p, k := range s.server {
			pkgs = append(pkgs, p)
			n += k
		}
		sort.Strings(pkgs)
		fmt.Fprintf(s.out, "skipped: %d tests that need a database server (integration tier: make test runs them):\n", n)
		for _, p := range pkgs {
			fmt.Fprintf(s.out, "  %5d  %s\n", s.server[p], short(p))
		}
	}
	if len(s.other) > 0 {
		sort.Strings(s.other)
		fmt.Fprintf(s.out, "skipped for other reasons: %d\n", len(s.other))
		for _, o := range s.other {
			fmt.Fprintf(s.out, "  %s\n", o)
		}
	}
}

func short(pkg string) string { return strings.TrimPrefix(pkg, "github.com/fenceproxy/fenceproxy/") }

func main() {
	s := newSummary(os.Stdout)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Println(sc.Text()) // not an event: go test's own message
			continue
		}
		s.add(e)
	}
	s.finish()
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if s.failed {
		os.Exit(1)
	}
}
