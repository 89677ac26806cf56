package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

func TestTermSafe(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "admin:reconciliation", "admin:reconciliation"},
		{"empty", "", ""},
		{"non-ASCII letters stay", "rechnung:Müller/東京", "rechnung:Müller/東京"},
		{"space stays", "a b", "a b"},
		{"newline", "a\nb", `a\nb`},
		{"carriage return", "a\rb", `a\rb`},
		{"tab (a table column)", "a\tb", `a\tb`},
		{"escape sequence", "x\x1b[2J\x1b[1;1H", `x\x1b[2J\x1b[1;1H`},
		{"bell and NUL", "\a\x00", `\x07\x00`},
		{"DEL", "a\x7fb", `a\x7fb`},
		{"C1 CSI", "a\u009b2Jb", `a\u009b2Jb`},
		{"bidi override", "evil\u202etxt.exe", `evil\u202etxt.exe`},
		{"isolate", "a\u2066b\u2069", `a\u2066b\u2069`},
		{"line separator", "a\u2028b", `a\u2028b`},
		{"no-break space", "a\u00a0b", `a\u00a0b`},
		{"zero width space", "a\u200bb", `a\u200bb`},
		{"backslash", `a\nb`, `a\\nb`},
		{"invalid UTF-8", "a\xffb\xc3", `a\xffb\xc3`},
		{"astral format char", "a\U000e0001b", `a\U000e0001b`},
		{"emoji stays", "ok 👍", "ok 👍"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := termSafe(tc.in); got != tc.want {
				t.Errorf("termSafe(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestTermSafeAllocatesNothingForPlainText(t *testing.T) {
	s := strings.Repeat("invoice:customer-42 ", 10)
	if n := testing.AllocsPerRun(100, func() { _ = termSafe(s) }); n != 0 {
		t.Errorf("%v allocations for plain text", n)
	}
}

// forged is a value that, printed raw, ends the row and prints a forged
// one, then hides itself.
const forged = "x\n2026-01-01 00:00:00.000  stale_token  error  enforce  app.invoices  forged\x1b[1A\x1b[2K\r"

func TestAuditTableEscapesValues(t *testing.T) {
	tok := uint64(3)
	r := audit.Record{
		Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Reason: audit.StaleToken, Mode: "enforce",
		Table: "app.invoices\t", Lease: forged, PresentedToken: &tok, User: "app\x1b]0;pwned\x07",
		ClientHost: "10.0.0.1\n", Program: forged, Instance: "i\r", Digest: "INSERT INTO t VALUES (?)\x1b[31m",
		Detail: "d\u202e",
	}
	var b bytes.Buffer
	printAuditTable(&b, []audit.Record{r})
	out := b.String()
	assertTerminalSafe(t, out, 2)
	for _, want := range []string{`x\n2026-01-01`, `\x1b[1A`, `app\x1b]0;pwned\x07`, `10.0.0.1\n`, `app.invoices\t`, `\x1b[31m`, `d\u202e`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestLeaseListEscapesValues(t *testing.T) {
	var out, errOut bytes.Buffer
	o := output{stdout: &out, stderr: &errOut, showOwner: true}
	o.list([]lease.Status{{Lease: lease.Lease{Name: forged, Token: 1, Owner: "own\x1b[2J"}}, {Lease: lease.Lease{Name: "plain", Token: 2}}})
	assertTerminalSafe(t, out.String(), 3)
	out.Reset()
	o.status(lease.Status{Lease: lease.Lease{Name: forged, Token: 1, Owner: "own\x1b[2J"}})
	assertTerminalSafe(t, out.String(), -1)
	out.Reset()
	o.lease("acquired", lease.Lease{Name: forged, Owner: "o\nw", Token: 1}, time.Minute, true)
	assertTerminalSafe(t, out.String(), -1)
}

// assertTerminalSafe fails when out holds a control character other than
// the newlines ending its lines, or (lines >= 0) not that many lines.
func assertTerminalSafe(t *testing.T, out string, lines int) {
	t.Helper()
	for i, r := range out {
		if r != '\n' && needsEscape(r, 1) && r != '\\' {
			t.Fatalf("raw %U at byte %d of output:\n%q", r, i, out)
		}
	}
	if n := strings.Count(out, "\n"); lines >= 0 && n != lines {
		t.Fatalf("%d lines, want %d:\n%s", n, lines, out)
	}
}

func TestTermSafeLinesKeepsLineBreaks(t *testing.T) {
	if got, want := termSafeLines("a.yaml:3: bad\na.yaml:4: \x1b[2Jworse"), "a.yaml:3: bad\na.yaml:4: \\x1b[2Jworse"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
