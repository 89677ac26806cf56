package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"go/format"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/rewrite"
	"github.com/go-sql-driver/mysql"
)

// The rewriter's list of built-in function names (rewrite/builtins_mariadb.go),
// against a real server. While the catalog cannot be read, a call of a name
// the list does not have is refused (it may be a stored function created
// since), so the list must never claim a name the server would resolve to a
// stored function: TestBuiltinList checks every entry, spelled each way,
// and that the spellings an entry leaves out do reach a stored function.
//
// FENCEPROXY_WRITE_BUILTINS=1 regenerates the file from the server:
// candidate names from information_schema.SQL_FUNCTIONS and KEYWORDS,
// mysql.help_topic, and every identifier-like string in the server binary
// (which finds the native functions the manual tables lack), each probed
// three ways.

const builtinsFile = "../rewrite/builtins_mariadb.go"

// probeResolves calls q (a call with no arguments) in a schema without
// routines and reports whether the server looked for a stored function:
// 1305 "FUNCTION x does not exist", or 1630, its variant for names that
// collide with a built-in one. Anything else (a result, a wrong argument
// count, a syntax error) means the server took the name for something it
// has built in.
func probeResolves(ctx context.Context, t *testing.T, c *sql.Conn, q string) bool {
	t.Helper()
	rows, err := c.QueryContext(ctx, q)
	if err == nil {
		for rows.Next() {
		}
		err = rows.Err()
		rows.Close()
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == 1305 || me.Number == 1630
	}
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return false
}

// spellings probes name the three ways the rewriter tells apart.
func spellings(ctx context.Context, t *testing.T, c *sql.Conn, name string) (adjacent, spaced, quoted bool) {
	t.Helper()
	adjacent = !probeResolves(ctx, t, c, "SELECT "+name+"()")
	spaced = !probeResolves(ctx, t, c, "SELECT "+name+" ()")
	quoted = !probeResolves(ctx, t, c, "SELECT `"+name+"`()")
	return
}

func probeConn(t *testing.T) (*sql.Conn, *dbserver.Server) {
	t.Helper()
	s := dbtest.Shared(t)
	if s.Flavor != dbserver.FlavorMariaDB {
		t.Skip("the built-in list is measured on MariaDB; this server is " + s.Flavor)
	}
	db := dbtest.NewDatabase(t, s) // no routines: every stored resolution fails
	c, err := dbtest.Open(t, s.RootDSN(db)).Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, s
}

func TestBuiltinList(t *testing.T) {
	ctx := context.Background()
	c, s := probeConn(t)
	if os.Getenv("FENCEPROXY_WRITE_BUILTINS") == "1" {
		writeBuiltins(ctx, t, c, s)
		return
	}
	flags := rewrite.BuiltinFlags()
	names := make([]string, 0, len(flags))
	for n := range flags {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		a, b, q := spellings(ctx, t, c, n)
		got := builtinBits(a, b, q)
		if got != flags[n] {
			t.Errorf("%s: the server's spellings %03b, the list's %03b (bits: quoted, spaced, adjacent)", n, got, flags[n])
		}
	}
	t.Logf("%d names checked on %s", len(names), s.Version)
	// A comment between the name and '(' is a space to the lexer (the
	// rewriter reads it so): the byte after the name decides.
	for _, p := range []struct {
		q        string
		resolves bool
	}{
		{"SELECT now/**/()", true}, {"SELECT now/*!*/()", true}, {"SELECT /*!now*/()", true},
		{"SELECT now\n()", true}, {"SELECT now(/**/)", false}, {"SELECT concat/**/('a')", false},
	} {
		if got := probeResolves(ctx, t, c, p.q); got != p.resolves {
			t.Errorf("%q: looks for a stored function %v, want %v", p.q, got, p.resolves)
		}
	}
	// Names that are no built-in: every spelling reaches a stored function.
	for _, n := range []string{"bump", "touch_jobs", "nvl2x", "concatx"} {
		if a, b, q := spellings(ctx, t, c, n); a || b || q {
			t.Errorf("%s: taken for a built-in (%v %v %v)", n, a, b, q)
		}
	}
}

func builtinBits(adjacent, spaced, quoted bool) uint8 {
	var f uint8
	if adjacent {
		f |= 1
	}
	if spaced {
		f |= 2
	}
	if quoted {
		f |= 4
	}
	return f
}

var identRE = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]{1,63}`)

func writeBuiltins(ctx context.Context, t *testing.T, c *sql.Conn, s *dbserver.Server) {
	t.Helper()
	cand := map[string]string{} // name -> where it was found first
	add := func(n, from string) {
		n = strings.ToLower(n)
		if _, ok := cand[n]; !ok && identRE.MatchString(n) && identRE.FindString(n) == n {
			cand[n] = from
		}
	}
	for _, src := range [][2]string{
		{"SELECT FUNCTION FROM information_schema.SQL_FUNCTIONS", "sql_functions"},
		{"SELECT WORD FROM information_schema.KEYWORDS", "keywords"},
		{"SELECT name FROM mysql.help_topic", "help_topic"},
	} {
		rows, err := c.QueryContext(ctx, src[0])
		if err != nil {
			t.Fatalf("%s: %v", src[0], err)
		}
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			add(strings.TrimSuffix(strings.TrimSpace(n), "()"), src[1])
		}
		rows.Close()
	}
	listed := len(cand)
	bin, err := dbserver.Find()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range identRE.FindAll(raw, -1) {
		w := string(m)
		if w == strings.ToUpper(w) || w == strings.ToLower(w) {
			add(w, "binary")
		}
	}
	t.Logf("%d candidates: %d from the server's tables, the rest from %s", len(cand), listed, bin)
	names := make([]string, 0, len(cand))
	for n := range cand {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "// Code generated by TestBuiltinList in integration/builtins_test.go\n")
	fmt.Fprintf(&b, "// (FENCEPROXY_WRITE_BUILTINS=1 go test ./integration/ -run TestBuiltinList); DO NOT EDIT.\n\n")
	fmt.Fprintf(&b, "package rewrite\n\n")
	fmt.Fprintf(&b, "// builtinFlags: measured on %s; see stalecall.go.\n", s.Version)
	fmt.Fprintf(&b, "var builtinFlags = map[string]uint8{\n")
	var fromBinary []string
	kept := 0
	for _, n := range names {
		if !probeResolves(ctx, t, c, "SELECT "+n+"()") {
			a, sp, q := spellings(ctx, t, c, n)
			if f := builtinBits(a, sp, q); f != 0 {
				fmt.Fprintf(&b, "\t%q: %d,\n", n, f)
				kept++
				if cand[n] == "binary" {
					fromBinary = append(fromBinary, n)
				}
			}
		}
	}
	b.WriteString("}\n")
	src, err := format.Source([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(builtinsFile, src, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d names written to %s; %d of them only the binary named: %s", kept, builtinsFile, len(fromBinary),
		strings.Join(fromBinary, " "))
}
