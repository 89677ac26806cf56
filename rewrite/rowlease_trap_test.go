package rewrite

import (
	"strings"
	"testing"
)

// TestIsTrapError: the trap's ERR as each server words it (measured), and
// errors that are not it.
func TestIsTrapError(t *testing.T) {
	cases := []struct {
		name string
		code uint16
		msg  string
		want bool
	}{
		{"mariadb", 1690, "DOUBLE value is out of range in 'exp(72101729 + coalesce(0 * char_length(`app`.`invoice_rows`.`customer_id`),0))'", true},
		{"mariadb ansi quotes", 1690, `DOUBLE value is out of range in 'exp(72101729 + coalesce(0 * char_length("app"."invoice_rows"."customer_id"),0))'`, true},
		{"tidb", 1690, "DOUBLE value is out of range in 'exp(cast(plus(72101729, coalesce(mul(0, char_length(app.invoice_rows.customer_id)), 0)), double BINARY))'", true},
		{"tidb column set to a constant", 1690, "DOUBLE value is out of range in 'exp(7.2101729e+07)'", true},
		{"the client's own exp", 1690, "DOUBLE value is out of range in 'exp(`amount`)'", false},
		{"another overflow", 1690, "BIGINT value is out of range in '`amount` * 2101729'", false},
		{"another code", 1644, "exp(72101729 + 1)", false},
	}
	for _, c := range cases {
		if got := IsTrapError(c.code, c.msg); got != c.want {
			t.Errorf("%s: IsTrapError = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestTrapUntrapped: the trapped condition is replaced by the plain one at
// its last occurrence, whatever the statement holds before it; a text
// without it has no untrapped form.
func TestTrapUntrapped(t *testing.T) {
	tr := &Trap{Cond: "((L) OR ((id = 4) AND EXP(72101729 + 0) < 0))", Plain: "(L)"}
	cases := []struct {
		name, in, want string
	}{
		{"plain", "UPDATE t SET a = 1 WHERE (id = 4) AND F AND ((L) OR ((id = 4) AND EXP(72101729 + 0) < 0))",
			"UPDATE t SET a = 1 WHERE (id = 4) AND F AND (L)"},
		{"a trailing comment", "DELETE FROM t WHERE (id = 4) AND ((L) OR ((id = 4) AND EXP(72101729 + 0) < 0)) -- x",
			"DELETE FROM t WHERE (id = 4) AND (L) -- x"},
		{"a string repeating it before", "UPDATE t SET a = '((L) OR ((id = 4) AND EXP(72101729 + 0) < 0))' WHERE (id = 4) AND ((L) OR ((id = 4) AND EXP(72101729 + 0) < 0))",
			"UPDATE t SET a = '((L) OR ((id = 4) AND EXP(72101729 + 0) < 0))' WHERE (id = 4) AND (L)"},
		{"none", "UPDATE t SET a = 1 WHERE (id = 4) AND (L)", ""},
	}
	for _, c := range cases {
		if got := string(tr.Untrapped([]byte(c.in))); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestTrapWhereSize: a WHERE up to 64 KiB is repeated next to the trap; a
// longer one (an IN list of many keys) is refused, saying so.
func TestTrapWhereSize(t *testing.T) {
	e := New(testPolicy(t), Options{CacheEntries: -1, ShapeEntries: -1})
	inList := func(n int) string {
		b := []byte("DELETE FROM invoice_rows WHERE id IN (1")
		for i := 1; i < n; i++ {
			b = append(b, ", 100000"...)
		}
		return string(append(b, ')'))
	}
	for _, c := range []struct {
		name string
		keys int
		trap bool
	}{{"small", 10, true}, {"just under", 8000, true}, {"over 64 KiB", 9000, false}} {
		d := decide(e, []byte(inList(c.keys)), maria, Session{Schema: "app", ANSIQuotes: Off, NoBackslashEscapes: Off}, false)
		if !c.trap {
			if d.Action != Refuse || !strings.Contains(d.Refusal.Reason, "longer than fenceproxy repeats (64 KiB)") {
				t.Errorf("%s (%d keys): %v, want a refusal naming the 64 KiB", c.name, c.keys, d)
			}
			continue
		}
		if d.Action != Send || len(d.Stmts) != 1 || d.Stmts[0].Fence == nil || d.Stmts[0].Fence.Trap == nil {
			t.Errorf("%s (%d keys): %+v, want a trap", c.name, c.keys, d)
		}
	}
}

// TestTrapOnlyWhenRerunLeavesNothing: under zero_rows a trapped write is
// sent again, so a statement whose SET or ORDER BY has an effect beyond
// its rows (a variable assigned, LAST_INSERT_ID(expr), NEXTVAL, a stored
// function, a subquery) cannot carry the trap, and is refused.
func TestTrapOnlyWhenRerunLeavesNothing(t *testing.T) {
	e := New(testPolicy(t), Options{CacheEntries: -1, ShapeEntries: -1})
	for _, c := range []struct {
		name, sql string
		trap      bool
	}{
		{"plain SET", "UPDATE invoice_rows SET amount = amount + 1 WHERE id = 4", true},
		{"SET from a built-in", "UPDATE invoice_rows SET note = CONCAT(note, 'x'), paid_at = NOW() WHERE id = 4", true},
		{"SET DEFAULT", "UPDATE invoice_rows SET note = DEFAULT WHERE id = 4", true},
		{"SET reads a variable", "UPDATE invoice_rows SET amount = @a WHERE id = 4", true},
		{"SET assigns a variable", "UPDATE invoice_rows SET amount = (@a := @a + 1) WHERE id = 4", false},
		{"SET LAST_INSERT_ID(expr)", "UPDATE invoice_rows SET amount = LAST_INSERT_ID(amount + 1) WHERE id = 4", false},
		{"SET NEXTVAL", "UPDATE invoice_rows SET amount = NEXTVAL(s) WHERE id = 4", false},
		{"SET a stored function", "UPDATE invoice_rows SET amount = app.f(amount) WHERE id = 4", false},
		{"SET a subquery", "UPDATE invoice_rows SET amount = (SELECT 1) WHERE id = 4", false},
		{"SET RAND()", "UPDATE invoice_rows SET amount = RAND() WHERE id = 4", false},
		{"DELETE ORDER BY a column", "DELETE FROM invoice_rows WHERE id > 4 ORDER BY id", true},
		{"DELETE ORDER BY a stored function", "DELETE FROM invoice_rows WHERE id > 4 ORDER BY app.f(id)", false},
	} {
		d := decide(e, []byte(c.sql), maria, Session{Schema: "app", ANSIQuotes: Off, NoBackslashEscapes: Off}, false)
		if !c.trap {
			if d.Action != Refuse || !strings.Contains(d.Refusal.Reason, "does not name the lease") {
				t.Errorf("%s: %v, want a refusal of an unpinned write without the trap", c.name, d)
			}
			continue
		}
		if d.Action != Send || len(d.Stmts) != 1 || d.Stmts[0].Fence == nil || d.Stmts[0].Fence.Trap == nil {
			t.Errorf("%s: %+v, want a trap", c.name, d)
		}
	}
}
