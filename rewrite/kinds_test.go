package rewrite

import (
	"strings"
	"testing"
)

// TestStatementKindsClosed: every statement kind the rewriter relays is a
// row of statementKinds, an unlisted kind is refused while the policy
// protects a table (and relayed when it protects none), a listed one still
// passes, and the fast path takes no refused kind.
func TestStatementKindsClosed(t *testing.T) {
	e := New(testPolicy(t), Options{})
	oracle := &Session{Schema: "app", ANSIQuotes: On, NoBackslashEscapes: Off, Oracle: On}
	for _, k := range statementKinds {
		k := k
		t.Run("listed/"+k.lead, func(t *testing.T) {
			if k.handles == kindRefuse {
				if k.example != "" {
					t.Fatalf("refused kind %q has an example", k.lead)
				}
				return
			}
			if k.example == "" || k.what == "" {
				t.Fatalf("kind %q has no example or description", k.lead)
			}
			if k.lead != ":" && !strings.HasPrefix(strings.ToLower(k.example), k.lead) {
				t.Fatalf("example %q does not start with %q", k.example, k.lead)
			}
			s := appSession()
			if k.lead == "declare" || k.lead == "<<" || k.lead == "raise" {
				s = oracle
			}
			if d := e.Query([]byte(k.example), maria, s); d.Action == Refuse {
				t.Fatalf("%q: refused: %s", k.example, d.Refusal.Reason)
			}
		})
	}
	unlisted := []string{
		"FROBNICATE invoices",
		"BATCH ON id LIMIT 10 DELETE FROM staging",
		"FLASHBACK TABLE staging",
		"RECOVER TABLE staging",
		"RESTORE DATABASE * FROM 'local:///tmp'",
		"ADMIN CHECK TABLE staging",
		"SPLIT TABLE staging BETWEEN (0) AND (9) REGIONS 2",
		"'UPDATE invoices SET paid = 1'",
		"@x := 1",
		"123",
		"`select` 1",
	}
	refused := []string{
		"START SLAVE", "START REPLICA", "START ALL SLAVES", "STOP SLAVE", "START GROUP_REPLICATION",
		"CHANGE MASTER TO MASTER_HOST = 'h'", "CHANGE REPLICATION SOURCE TO SOURCE_HOST = 'h'",
		"INSTALL SONAME 'ha_connect'", "INSTALL PLUGIN x SONAME 'x'", "UNINSTALL SONAME 'ha_connect'",
		"CREATE SERVER s FOREIGN DATA WRAPPER mysql OPTIONS (HOST 'h')", "ALTER SERVER s OPTIONS (HOST 'h')",
		"DROP SERVER s", "CLONE LOCAL DATA DIRECTORY = '/tmp/x'", "IMPORT TABLE FROM '/tmp/x.sdi'",
		"IMPORT INTO staging FROM '/tmp/x.csv'", "RESTART", "BINLOG 'AAAA'",
		"CREATE FUNCTION udf RETURNS STRING SONAME 'x.so'",
		"CREATE AGGREGATE FUNCTION udf RETURNS INTEGER SONAME 'x.so'",
	}
	for _, sql := range append(unlisted, refused...) {
		sql := sql
		t.Run("refused/"+sql, func(t *testing.T) {
			d := e.Query([]byte(sql), maria, appSession())
			if d.Action != Refuse {
				t.Fatalf("%q: %v, want refused", sql, d.Action)
			}
			if m := New(nil, Options{}).Query([]byte(sql), maria, appSession()); m.Action == Refuse {
				t.Fatalf("%q refused with nothing protected: %s", sql, m.Refusal.Reason)
			}
		})
	}
	// The fast path relays only modelled kinds.
	words := []string{"xa", "get", "kill", "help", "signal", "resignal", "optimize", "checksum", "check", "table",
		"values", "with", "show", "call", "desc", "describe", "explain", "analyze", "start", "begin", "select",
		"insert", "update", "delete", "replace", "commit", "rollback", "unlock", "release", "savepoint", "do"}
	for _, k := range statementKinds {
		words = append(words, k.lead)
		for _, s := range k.sub {
			words = append(words, s.lead)
		}
	}
	for _, w := range words {
		src := []byte(w + " x")
		if !fastLeading(src, token{start: 0, end: len(w), kind: tkWord}) {
			continue
		}
		k := kindIndex[w]
		if k == nil || k.handles == kindRefuse {
			t.Errorf("the fast path takes %q, which is not a modelled kind", w)
		}
		for _, s := range k.sub {
			src := []byte(w + " " + s.lead)
			if s.handles == kindRefuse && New(testPolicy(t), Options{}).Query(src, maria, appSession()).Action != Refuse {
				t.Errorf("%q passes", src)
			}
		}
	}
}
