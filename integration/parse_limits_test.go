package integration

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// TestParseLimitsStale: from a stale session through the proxy (catalog
// on), with small limits.max_parse_* so that the boundaries are cheap to
// reach: a statement at a limit is fenced (its stale write changes
// nothing), one past it is refused naming the limit, in every way a
// statement can reach the parser: plain, after other statements in the
// same query, in PREPARE / EXECUTE IMMEDIATE, through the binary protocol,
// under an unknown sql_mode, in a compound statement. Nothing changes, and
// the proxy keeps serving.
func TestParseLimitsStale(t *testing.T) {
	limits := "limits:\n  max_parse_bytes: 4096\n  max_parse_tokens: 200\n  max_parse_nesting: 20\n"
	r := strings.Repeat
	type attempt struct {
		name    string
		sql     string
		refused bool // naming a limit; else it runs (fenced, or rejected by the server)
		prepare bool // COM_STMT_PREPARE with one argument
		engines []string
	}
	maria := []string{engMariaDB}
	attempts := []attempt{
		{name: "tokens at the limit", sql: "UPDATE invoices SET amount = 0" + r("+0", 97)}, // 6 + 194 = 200
		{name: "tokens past the limit", sql: "UPDATE invoices SET amount = 0" + r("+0", 98), refused: true},
		{name: "nesting at the limit", sql: "UPDATE invoices SET amount = " + r("(", 20) + "0" + r(")", 20)},
		{name: "nesting past the limit", sql: "UPDATE invoices SET amount = " + r("(", 21) + "0" + r(")", 21), refused: true},
		{name: "bytes past the limit", sql: "UPDATE invoices SET customer = '" + r("x", 4096) + "'", refused: true},
		{name: "past the limit after a write", sql: "UPDATE invoices SET amount = 1; DELETE FROM invoices WHERE id IN (1" + r(",1", 100) + ")", refused: true},
		{name: "budget of the whole query", sql: r("UPDATE invoices SET amount = 2;", 33) + "DELETE FROM invoices", refused: true},
		{name: "unclosed parentheses", sql: "UPDATE invoices SET amount = " + r("(", 21), refused: true},
		{name: "nesting in an executable comment", sql: "UPDATE invoices SET amount = 0 /*!" + r("(", 21) + "0" + r(")", 21) + " */", refused: true},
		{name: "execute immediate", sql: "EXECUTE IMMEDIATE 'UPDATE invoices SET amount = " + r("(", 21) + "0" + r(")", 21) + "'", refused: true, engines: maria},
		{name: "prepare from", sql: "PREPARE s FROM 'DELETE FROM invoices WHERE id IN (1" + r(",1", 100) + ")'", refused: true},
		{name: "binary protocol", sql: "DELETE FROM invoices WHERE id IN (?" + r(",1", 100) + ")", refused: true, prepare: true},
		{name: "binary protocol, nesting", sql: "UPDATE invoices SET amount = " + r("(", 21) + "?" + r(")", 21), refused: true, prepare: true},
		// Four readings (a '"' and a '\\'), which agree: each counts.
		{name: "unknown sql_mode readings", sql: "SET sql_mode = @m; UPDATE invoices SET customer = 'a\\\\b' /* \" */, amount = 0" + r("+0", 30), refused: true},
		{name: "nested unknown sql_modes", sql: "SET sql_mode = @m; SET sql_mode = @m; SET sql_mode = @m; UPDATE invoices SET customer = \"a\\\\b\"", refused: true},
		{name: "compound statement", sql: "BEGIN NOT ATOMIC " + r("BEGIN ", 200) + "UPDATE invoices SET amount = 0;" + r("END;", 200), refused: true, engines: maria},
		{name: "deep blocks after a statement", sql: "BEGIN NOT ATOMIC SELECT 1; " + r("BEGIN ", 200) + "UPDATE invoices SET amount = 0;" + r("END;", 200) + " END", refused: true, engines: maria},
		{name: "nesting in a compound", sql: "BEGIN NOT ATOMIC SELECT 1; UPDATE invoices SET amount = " + r("(", 21) + "0" + r(")", 21) + "; END", refused: true, engines: maria},
		{name: "tokens in a compound", sql: "BEGIN NOT ATOMIC SELECT 1; UPDATE invoices SET amount = 0" + r("+0", 100) + "; END", refused: true, engines: maria},
		{name: "tokens in a procedure", sql: "CREATE PROCEDURE p_lim() BEGIN SELECT 1; UPDATE invoices SET amount = 0" + r("+0", 100) + "; END", refused: true, engines: maria},
	}
	for _, eng := range []string{engMariaDB, engTiDB} {
		t.Run(eng, func(t *testing.T) {
			e, _ := newShadowEnv(t, eng, limits)
			dump := func() string {
				return tableDump(t, e.root, "invoices") + "--\n" + tableDump(t, e.root, "reconciliation_runs")
			}
			want := dump()
			for _, a := range attempts {
				if a.engines != nil && !slices.Contains(a.engines, eng) {
					continue
				}
				t.Run(a.name, func(t *testing.T) {
					c := e.session(t, "multiStatements=true")
					mustExec(t, c, "SET @fence_lease = 'invoice:acme', @fence_owner = 'me', @fence_token = 1, @m = 'ANSI_QUOTES'")
					var err error
					if a.prepare {
						_, err = c.ExecContext(context.Background(), a.sql, 1)
					} else {
						_, err = c.ExecContext(context.Background(), a.sql)
					}
					limited := err != nil && strings.Contains(err.Error(), "limits.max_parse_") ||
						err != nil && strings.Contains(err.Error(), "sql_mode to values fenceproxy cannot read")
					if limited != a.refused {
						t.Errorf("%.60s: %v, want refused by a limit: %v", a.sql, err, a.refused)
					}
					if got := dump(); got != want {
						t.Fatalf("a stale write landed: %.60s (%v)\nwant %s\ngot  %s", a.sql, err, want, got)
					}
					mustExec(t, c, "SELECT 1")
				})
			}
		})
	}
}
