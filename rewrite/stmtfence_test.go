package rewrite

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
)

// fc is a well-formed fence comment body for lease invoice:acme, owner
// "s3cret owner'", token 42.
const fcBody = "fence_lease='invoice%3Aacme',fence_owner='s3cret%20owner%27',fence_token='42'"

const secretOwner = "s3cret owner'"

var wantPresented = lease.Presented{Lease: "invoice:acme", Owner: secretOwner, Token: 42}

func ownerSum() string {
	s := sha256.Sum256([]byte(secretOwner))
	return hex.EncodeToString(s[:])
}

func noSecrets(t *testing.T, what string, b []byte) {
	t.Helper()
	s := strings.ToLower(string(b))
	for _, k := range []string{"fence_lease=", "fence_owner=", "fence_token=", "s3cret", hex.EncodeToString([]byte(secretOwner))} {
		if strings.Contains(s, k) {
			t.Errorf("%s: the sent text holds %q: %s", what, k, b)
		}
	}
}

func TestStmtFenceAppliedAndStripped(t *testing.T) {
	e := New(testPolicy(t), Options{CacheEntries: 64})
	for _, srv := range []Server{maria, mysql8, tidb, {Flavor: MariaDB, Version: 101119, Galera: true}} {
		for _, q := range []string{
			"UPDATE invoices SET paid = 1 WHERE id = 7 /*" + fcBody + "*/",
			"/*" + fcBody + "*/ UPDATE invoices SET paid = 1 WHERE id = 7",
			"DELETE FROM invoices WHERE id = 7 /* " + fcBody + " */",
			"INSERT INTO invoices (id, paid) VALUES (7, 1) /*" + fcBody + "*/",
			"REPLACE INTO invoices (id, paid) VALUES (7, 1)/*" + fcBody + "*/",
			"UPDATE invoices SET paid = 1 WHERE id = 7 /*" + fcBody + "*/;",
		} {
			for _, prep := range []bool{false, true} {
				var d Decision
				if prep {
					d = e.Prepare([]byte(q), srv, appSession())
				} else {
					d = e.Query([]byte(q), srv, appSession())
				}
				if d.Action != Send || len(d.Stmts) != 1 || d.Stmts[0].Fence == nil {
					t.Fatalf("%v %q: %+v %v", srv, q, d, d.Refusal)
				}
				f := d.Stmts[0].Fence
				if f.Presented == nil || *f.Presented != wantPresented {
					t.Errorf("%v %q: presented %+v", srv, q, f.Presented)
				}
				noSecrets(t, q, d.SQL)
				if strings.Contains(f.Digest, "fence") || strings.Contains(f.Digest, "s3cret") {
					t.Errorf("%q: digest %q", q, f.Digest)
				}
				if !f.Guard {
					// The fence in the text: literals, not the variables.
					s := string(d.SQL)
					if strings.Contains(s, "@fence") || !strings.Contains(s, ownerSum()) ||
						!strings.Contains(s, "fence_l.fence_token = 42") {
						t.Errorf("%v %q: fence %s", srv, q, s)
					}
				}
			}
		}
	}
	// Each statement's own: the same text with another owner is another
	// fence (no cache reuses the first).
	q1 := "UPDATE invoices SET paid = 1 WHERE id = 7 /*fence_lease='a',fence_owner='o1',fence_token='1'*/"
	q2 := "UPDATE invoices SET paid = 1 WHERE id = 7 /*fence_lease='a',fence_owner='o2',fence_token='1'*/"
	d1 := e.Query([]byte(q1), maria, appSession())
	d2 := e.Query([]byte(q2), maria, appSession())
	if d1.Stmts[0].Fence.Presented.Owner != "o1" || d2.Stmts[0].Fence.Presented.Owner != "o2" || string(d1.SQL) == string(d2.SQL) {
		t.Fatalf("fences mixed: %s / %s", d1.SQL, d2.SQL)
	}
	// Without a comment: the session's variables, as before.
	d := e.Query([]byte("UPDATE invoices SET paid = 1 WHERE id = 7"), maria, appSession())
	if d.Stmts[0].Fence.Presented != nil || !strings.Contains(string(d.SQL), "@fence_owner") {
		t.Fatalf("no comment: %s", d.SQL)
	}
}

func TestStmtFenceKeepsOtherKeys(t *testing.T) {
	e := New(testPolicy(t), Options{})
	tp := "traceparent='00-5bd66ef5095369c7b0d1f8f4bd33716a-c532cb4098ac3dd2-01'"
	cases := []struct{ in, want string }{
		{"UPDATE invoices SET paid = 1 WHERE id = 7 /*" + tp + "," + fcBody + "*/",
			"/*" + tp + "*/"},
		{"UPDATE invoices SET paid = 1 WHERE id = 7 /* action='pay',  " + fcBody + ",route='%2Fx'   */",
			"/* action='pay',route='%2Fx'   */"},
		{"SELECT * FROM other /*" + fcBody + ",app='x\\'y'*/", "/*app='x\\'y'*/"},
	}
	for _, c := range cases {
		d := e.Query([]byte(c.in), maria, appSession())
		if d.Action != Send || !strings.HasSuffix(string(d.SQL), c.want) {
			t.Errorf("%q: %v %s (%v)", c.in, d.Action, d.SQL, d.Refusal)
		}
		noSecrets(t, c.in, d.SQL)
	}
}

// On a statement that writes nothing protected the comment's keys still
// leave the text (the owner must not reach the server); a malformed one
// goes whole (TestStmtFenceMalformedOnOtherStatements).
func TestStmtFenceOnOtherStatements(t *testing.T) {
	e := New(testPolicy(t), Options{})
	d := e.Query([]byte("SELECT 1 /*"+fcBody+"*/"), maria, appSession())
	if d.Action != Send || string(d.SQL) != "SELECT 1 " {
		t.Fatalf("%+v %q", d, d.SQL)
	}
	d = e.Query([]byte("UPDATE invoices SET paid = 1; SELECT 1; /*"+fcBody+"*/"), maria, appSession())
	if d.Action != Send || strings.Contains(string(d.SQL), "fence_owner=") || d.Stmts[0].Fence.Presented != nil {
		t.Fatalf("%+v %q", d, d.SQL)
	}
	d = e.Query([]byte("UPDATE other SET a = 1 /*"+fcBody+"*/"), maria, appSession())
	if d.Action != Send || string(d.SQL) != "UPDATE other SET a = 1 " {
		t.Fatalf("%+v %q", d, d.SQL)
	}
	if d := e.Query([]byte("SELECT 'fence_owner=1'"), maria, appSession()); d.Action != Forward {
		t.Errorf("a string: %+v", d)
	}
	// Nothing protected at all: stripped too.
	e2 := New(nil, Options{})
	if d := e2.Query([]byte("SELECT 1 /*"+fcBody+"*/"), maria, nil); d.Action != Send || string(d.SQL) != "SELECT 1 " {
		t.Fatalf("no policy: %+v %q", d, d.SQL)
	}
}

// A statement that writes nothing protected runs with every plain comment
// that mentions a fence key and does not parse removed whole (nothing at
// the start or end, one space between tokens): the proxy cannot tell where
// a malformed owner value ends. The rest of the text is sent byte for
// byte; hints, executable comments and strings stay.
func TestStmtFenceMalformedOnOtherStatements(t *testing.T) {
	protected := New(testPolicy(t), Options{CacheEntries: 64})
	unprotected := New(nil, Options{CacheEntries: 64})
	tp := "traceparent='00-5bd66ef5095369c7b0d1f8f4bd33716a-c532cb4098ac3dd2-01'"
	cases := []struct {
		name, in, want string
		// servers: where the case holds (nil: maria, mysql8, tidb).
		servers []Server
		// single: one statement, so COM_STMT_PREPARE is tried too.
		single bool
		// refusedWhenProtected: with tables protected the statement is
		// refused for another reason (the lexer cannot be sure of it).
		refusedWhenProtected bool
	}{
		{name: "missing quote, at the start", in: "/*fence_lease='a',fence_owner='s3cret,fence_token='1'*/ SELECT 1",
			want: " SELECT 1", single: true},
		{name: "partial, at the end", in: "SELECT id FROM other WHERE id = 1 /*fence_lease='a',fence_owner='s3cret'*/",
			want: "SELECT id FROM other WHERE id = 1 ", single: true},
		{name: "between tokens", in: "SELECT /*fence_owner='s3cret',fence_token='x'*/ 1",
			want: "SELECT   1", single: true},
		{name: "between tokens, no spaces", in: "SELECT 1/*fence_owner='s3cret'*/+2",
			want: "SELECT 1 +2", single: true},
		{name: "bad URL escape", in: "SELECT 1 /*fence_lease='a',fence_owner='s3cret%2',fence_token='1'*/",
			want: "SELECT 1 ", single: true},
		{name: "bad token", in: "SELECT 1 /*fence_lease='a',fence_owner='s3cret',fence_token='1 OR 1'*/",
			want: "SELECT 1 ", single: true},
		{name: "token overflow", in: "SELECT 1 /*fence_lease='a',fence_owner='s3cret',fence_token='18446744073709551616'*/",
			want: "SELECT 1 ", single: true},
		{name: "duplicated key", in: "SELECT 1 /*fence_lease='a',fence_owner='s3cret',fence_owner='s3cret2',fence_token='1'*/",
			want: "SELECT 1 ", single: true},
		{name: "upper-case key", in: "SELECT 1 /*fence_lease='a',FENCE_OWNER='s3cret',fence_token='1'*/",
			want: "SELECT 1 ", single: true},
		{name: "backslash-escaped quote in the owner", in: "SELECT 1 /*fence_lease='a',fence_owner='s3cret\\'x',fence_token='1'*/",
			want: "SELECT 1 ", single: true},
		{name: "not sqlcommenter", in: "SELECT 1 /* owner fence_owner s3cret */",
			want: "SELECT 1 ", single: true},
		{name: "with a traceparent key, which goes with it", in: "SELECT 1 /*" + tp + ",fence_lease='a',fence_owner='s3cret'*/",
			want: "SELECT 1 ", single: true},
		{name: "well-formed at the start, malformed at the end", in: "/*" + tp + "," + fcBody + "*/ SELECT 1 /*fence_owner='s3cret%zz'*/",
			want: "/*" + tp + "*/ SELECT 1 ", single: true},
		{name: "malformed at the start, well-formed between tokens", in: "/*fence_owner='s3cret*/ SELECT /*" + fcBody + "*/ 1",
			want: " SELECT   1", single: true},
		{name: "other comments stay", in: "/* a */ SELECT /* b */ 1 /*fence_owner='s3cret'*/ /* c */",
			want: "/* a */ SELECT /* b */ 1  /* c */", single: true},
		{name: "unprotected UPDATE", in: "UPDATE other SET a = 1 /*fence_lease='a',fence_owner='s3cret',fence_token='-1'*/",
			want: "UPDATE other SET a = 1 ", single: true},
		{name: "unprotected INSERT, comment first", in: "/*fence_lease='a',fence_owner='s3cret'*/ INSERT INTO other (a) VALUES (1)",
			want: " INSERT INTO other (a) VALUES (1)", single: true},
		{name: "line comment at the end", in: "SELECT 1 -- fence_owner='s3cret'",
			want: "SELECT 1 ", single: true},
		{name: "hash comment between tokens", in: "SELECT 1 # fence_owner='s3cret'\n, 2",
			want: "SELECT 1 \n, 2", single: true},
		{name: "after an optimizer hint", in: "SELECT /*+ MAX_EXECUTION_TIME(1) */ /*fence_owner='s3cret'*/ 1",
			want: "SELECT /*+ MAX_EXECUTION_TIME(1) */   1", single: true},
		{name: "after a dead version comment", in: "SELECT 1 /*!99999 AND 0 */ /*fence_owner='s3cret'*/",
			want: "SELECT 1 /*!99999 AND 0 */ ", single: true, servers: []Server{maria, mysql8}},
		{name: "after a live executable comment", in: "SELECT 1 /*!50000 + 1 */ /*fence_owner='s3cret'*/ + 2",
			want: "SELECT 1 /*!50000 + 1 */   + 2", single: true, servers: []Server{maria, mysql8}},
		{name: "/*M! is a plain comment on MySQL", in: "SELECT 1 /*M!fence_owner='s3cret'*/",
			want: "SELECT 1 ", single: true, servers: []Server{mysql8}},
		{name: "in an empty statement between two ';'", in: "SELECT 1; /*fence_owner='s3cret'*/; SELECT 2",
			want: "SELECT 1; ; SELECT 2"},
		{name: "after the packet's last ';'", in: "SELECT 1; /*fence_lease='a',fence_owner='s3cret'*/",
			want: "SELECT 1; "},
		{name: "on the second statement of a packet", in: "SELECT 1; SELECT 2 /*fence_owner='s3cret'*/",
			want: "SELECT 1; SELECT 2 "},
		{name: "unterminated: the server's syntax error stays", in: "SELECT 1 /*fence_lease='a',fence_owner='s3cret'",
			want: "SELECT 1 /*", single: true, refusedWhenProtected: true},
		{name: "after a compound statement: its strings past the first ';' stay",
			in:   "BEGIN NOT ATOMIC SELECT 1; SELECT '-- a /* b */', '#'; END /*fence_owner='s3cret'*/",
			want: "BEGIN NOT ATOMIC SELECT 1; SELECT '-- a /* b */', '#'; END ", single: true, servers: []Server{maria},
			refusedWhenProtected: true},
		// Left as written.
		{name: "in a string (data)", in: "SELECT 'fence_owner=''s3cret''' /* x */",
			want: "SELECT 'fence_owner=''s3cret''' /* x */", single: true},
		{name: "in an optimizer hint", in: "SELECT /*+ fence_owner='s3cret' */ 1",
			want: "SELECT /*+ fence_owner='s3cret' */ 1", single: true},
		{name: "in a dead version comment", in: "SELECT 1 /*!99999 fence_owner='s3cret' */",
			want: "SELECT 1 /*!99999 fence_owner='s3cret' */", single: true, servers: []Server{maria, mysql8}},
		{name: "the session's fence variable", in: "SELECT @fence_owner /* @fence_owner */",
			want: "SELECT @fence_owner /* @fence_owner */", single: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			servers := c.servers
			if servers == nil {
				servers = []Server{maria, mysql8, tidb}
			}
			for _, srv := range servers {
				for _, e := range []*Engine{protected, unprotected} {
					for _, prep := range []bool{false, true} {
						if prep && !c.single {
							continue
						}
						// Twice: the second may come from a cache.
						for range 2 {
							var d Decision
							if prep {
								d = e.Prepare([]byte(c.in), srv, appSession())
							} else {
								d = e.Query([]byte(c.in), srv, appSession())
							}
							what := fmt.Sprintf("%v protected=%v prepare=%v", srv, e == protected, prep)
							if c.refusedWhenProtected && e == protected {
								if d.Action != Refuse {
									t.Errorf("%s: %v %q", what, d.Action, d.SQL)
								}
								continue
							}
							sent := c.in
							switch d.Action {
							case Send:
								sent = string(d.SQL)
								if !bytes.Equal(d.SQL, d.Stripped) || fencedStmt(d) != nil {
									t.Errorf("%s: more than the keys' removal: %q / %q", what, d.SQL, d.Stripped)
								}
							case Forward:
							default:
								t.Fatalf("%s: %v %v", what, d.Action, d.Refusal)
							}
							if sent != c.want {
								t.Errorf("%s: sent %q, want %q", what, sent, c.want)
							}
							if c.want != c.in {
								noSecrets(t, what, []byte(sent))
							}
						}
					}
				}
			}
		})
	}
}

// fencedStmt returns the first statement of d that carries a fence.
func fencedStmt(d Decision) *Stmt {
	for i := range d.Stmts {
		if d.Stmts[i].Fence != nil {
			return &d.Stmts[i]
		}
	}
	return nil
}

func TestStmtFenceMultiStatement(t *testing.T) {
	e := New(testPolicy(t), Options{})
	other := "fence_lease='beta',fence_owner='o2',fence_token='9'"
	q := "UPDATE invoices SET paid = 1 WHERE id = 1 /*" + fcBody + "*/; UPDATE invoices SET paid = 2 WHERE id = 2; " +
		"/*" + other + "*/ DELETE FROM invoices WHERE id = 3"
	d := e.Query([]byte(q), maria, appSession())
	if d.Action != Send || len(d.Stmts) != 3 {
		t.Fatalf("%+v %v", d, d.Refusal)
	}
	if p := d.Stmts[0].Fence.Presented; p == nil || *p != wantPresented {
		t.Errorf("first: %+v", p)
	}
	if p := d.Stmts[1].Fence.Presented; p != nil {
		t.Errorf("second takes the session's: %+v", p)
	}
	if p := d.Stmts[2].Fence.Presented; p == nil || p.Lease != "beta" || p.Owner != "o2" || p.Token != 9 {
		t.Errorf("third: %+v", p)
	}
	noSecrets(t, q, d.SQL)
	if strings.Contains(string(d.SQL), "o2") {
		t.Errorf("second owner sent: %s", d.SQL)
	}
	for i, st := range d.Stmts {
		text := string(d.SQL[st.Span[0]:st.Span[1]])
		if !strings.Contains(text, []string{"id = 1", "id = 2", "id = 3"}[i]) || strings.Contains(text, ";") {
			t.Errorf("span %d: %q", i, text)
		}
	}
}

// The attacks: every one on a protected write is refused (or the fence is
// applied exactly); none sends the statement under the session's fence
// with the comment's secret in the text. Each case is one attempt.
func TestStmtFenceAttacks(t *testing.T) {
	e := New(testPolicy(t), Options{})
	w := "UPDATE invoices SET paid = 1 WHERE id = 7"
	refused := []struct{ name, q, why string }{
		{"comment in the middle", "UPDATE invoices /*" + fcBody + "*/ SET paid = 1 WHERE id = 7", "outside a fence comment"},
		{"two fence comments", "/*" + fcBody + "*/ " + w + " /*" + fcBody + "*/", "two fence comments"},
		{"two at the end", w + " /*" + fcBody + "*/ /*" + fcBody + "*/", "two fence comments"},
		{"in a string literal", "UPDATE invoices SET note = '/*" + strings.ReplaceAll(fcBody, "'", "''") + "*/' WHERE id = 7", "outside a fence comment"},
		{"comment-looking string at the end", w + " AND note = '/*" + strings.ReplaceAll(fcBody, "'", "\\'") + "*/'", "outside a fence comment"},
		{"version comment", w + " /*!100000 " + fcBody + " */", ""},
		{"dead version comment", w + " /*!999999 " + fcBody + " */", "outside a fence comment"},
		{"MariaDB version comment", w + " /*M!100000 AND 1 */ /*M!999999 " + fcBody + "*/", "outside a fence comment"},
		{"hint comment", "UPDATE /*+ " + fcBody + " */ invoices SET paid = 1 WHERE id = 7", "outside a fence comment"},
		{"nested comment", w + " /* /*" + fcBody + "*/ */", ""},
		{"unterminated comment", w + " /*" + fcBody, ""},
		{"line comment", w + " -- " + fcBody, "outside a fence comment"},
		{"hash comment", w + " # " + fcBody, "outside a fence comment"},
		{"partial: no token", w + " /*fence_lease='a',fence_owner='o'*/", "lacks fence_token"},
		{"partial: owner only", w + " /*fence_owner='o'*/", "lacks fence_lease"},
		{"empty owner", w + " /*fence_lease='a',fence_owner='',fence_token='1'*/", "fence_owner"},
		{"duplicate key", w + " /*fence_lease='a',fence_owner='o',fence_owner='p',fence_token='1'*/", "twice"},
		{"upper-case key", w + " /*fence_lease='a',FENCE_OWNER='o',fence_token='1'*/", "spelled differently"},
		{"encoded key", w + " /*fence_lease='a',fence%5Fowner='o',fence_token='1'*/", "spelled differently"},
		{"unquoted value", w + " /*fence_lease=a,fence_owner='o',fence_token='1'*/", "quoted"},
		{"raw quote escaped", w + " /*fence_lease='a',fence_owner='o\\'x',fence_token='1'*/", "URL-encoded"},
		{"bad percent", w + " /*fence_lease='a',fence_owner='o%2',fence_token='1'*/", "%XX"},
		{"percent then non-hex", w + " /*fence_lease='a',fence_owner='o%zz',fence_token='1'*/", "%XX"},
		{"NUL in lease", w + " /*fence_lease='a%00b',fence_owner='o',fence_token='1'*/", "control character"},
		{"overlong UTF-8 lease", w + " /*fence_lease='%C0%AFetc',fence_owner='o',fence_token='1'*/", "UTF-8"},
		{"lease with trailing space", w + " /*fence_lease='a%20',fence_owner='o',fence_token='1'*/", "space"},
		{"owner too long", w + " /*fence_lease='a',fence_owner='" + strings.Repeat("x", 65) + "',fence_token='1'*/", "1 to 64"},
		{"negative token", w + " /*fence_lease='a',fence_owner='o',fence_token='-1'*/", "decimal"},
		{"token with sign", w + " /*fence_lease='a',fence_owner='o',fence_token='%2B1'*/", "decimal"},
		{"token overflow", w + " /*fence_lease='a',fence_owner='o',fence_token='18446744073709551616'*/", "too large"},
		{"token expression", w + " /*fence_lease='a',fence_owner='o',fence_token='1 OR 1'*/", "URL-encoded"},
		{"trailing comma", w + " /*" + fcBody + ",*/", "comma"},
		{"garbage between pairs", w + " /*" + fcBody + " x*/", "sqlcommenter"},
		{"not sqlcommenter at all", w + " /* remember fence_owner */", "sqlcommenter"},
		{"PREPARE text", "PREPARE s FROM '" + w + " /*" + strings.ReplaceAll(fcBody, "'", "''") + "*/'", "outside a fence comment"},
		{"comment on PREPARE", "PREPARE s FROM '" + w + "' /*" + fcBody + "*/", "not to PREPARE"},
		{"EXECUTE IMMEDIATE text", "EXECUTE IMMEDIATE '" + w + " /*" + strings.ReplaceAll(fcBody, "'", "''") + "*/'", ""},
		{"comment on EXECUTE", "EXECUTE s /*" + fcBody + "*/", "not to PREPARE"},
		{"comment on CALL", "CALL p() /*" + fcBody + "*/", "not to PREPARE"},
		{"compound inner statement", "BEGIN NOT ATOMIC " + w + " /*" + fcBody + "*/; END", ""},
		{"compound with comment before", "/*" + fcBody + "*/ BEGIN NOT ATOMIC " + w + "; END", ""},
		{"comment-looking string in PREPARE", "PREPARE s FROM CONCAT('" + w + "', ' /*fence_owner=1*/')", ""},
		{"encoded =", "UPDATE invoices SET note = 'fence_owner%3D1' WHERE id = 7 /*" + fcBody + "*/", "outside a fence comment"},
		{"procedure body", "CREATE PROCEDURE p() " + w + " /*" + fcBody + "*/", ""},
		{"comment before a procedure", "/*" + fcBody + "*/ CREATE PROCEDURE p() " + w, ""},
		{"trigger body", "CREATE TRIGGER tr BEFORE INSERT ON other FOR EACH ROW " + w + " /*" + fcBody + "*/", ""},
		{"after the statement's ';' in a packet", w + "; /*" + fcBody + "*/", ""},
	}
	for _, c := range refused {
		d := e.Query([]byte(c.q), maria, appSession())
		if d.Action != Refuse {
			t.Errorf("%s: %q not refused: %v %s", c.name, c.q, d.Action, d.SQL)
			continue
		}
		msg := d.Refusal.Error()
		if c.why != "" && !strings.Contains(msg, c.why) {
			t.Errorf("%s: refusal %q lacks %q", c.name, msg, c.why)
		}
		for _, s := range []string{"s3cret", "o%2", "18446744073709551616"} {
			if strings.Contains(msg, s) {
				t.Errorf("%s: refusal names a value: %q", c.name, msg)
			}
		}
	}
	// Applied: these read as one fence comment at the start or end.
	applied := []struct{ name, q string }{
		{"other comments around", "/* a */ /*" + fcBody + "*/ /* b */ " + w + " -- c"},
		{"spaces inside", w + " /*   fence_lease = 'invoice%3Aacme' , fence_owner='s3cret%20owner%27',fence_token='42'  */"},
		{"upper-case hex escapes", w + " /*fence_lease='invoice%3aacme',fence_owner='s3cret%20owner%27',fence_token='042'*/"},
		{"fence key as a column name", "UPDATE invoices SET fence_token_note = 1 WHERE id = 7 /*" + fcBody + "*/"},
		{"fence variable read", w + " AND @fence_owner IS NULL /*" + fcBody + "*/"},
		{"string mentioning the key without =", "UPDATE invoices SET note = 'fence_owner' WHERE id = 7 /*" + fcBody + "*/"},
		{"SET STATEMENT", "SET STATEMENT max_statement_time=1 FOR " + w + " /*" + fcBody + "*/"},
		{"CTE", "WITH x AS (SELECT 1) " + w + " /*" + fcBody + "*/"},
		{"multi-table", "UPDATE invoices, other SET invoices.paid = 1 WHERE other.id = invoices.id /*" + fcBody + "*/"},
		{"INSERT ... SELECT", "INSERT INTO invoices (id) SELECT id FROM other /*" + fcBody + "*/"},
		{"DELETE ORDER BY LIMIT", "DELETE FROM invoices ORDER BY id LIMIT 1 /*" + fcBody + "*/"},
	}
	for _, c := range applied {
		d := e.Query([]byte(c.q), maria, appSession())
		if d.Action != Send || len(d.Stmts) != 1 || d.Stmts[0].Fence == nil || d.Stmts[0].Fence.Presented == nil ||
			*d.Stmts[0].Fence.Presented != wantPresented {
			t.Errorf("%s: %q: %v %v", c.name, c.q, d.Action, d.Refusal)
			continue
		}
		noSecrets(t, c.name, d.SQL)
	}
	t.Logf("%d attack cases refused, %d applied exactly", len(refused), len(applied))
}

// ANSI_QUOTES and NO_BACKSLASH_ESCAPES change nothing of the fence's
// literals; an unknown sql_mode with a quote in the comment reads both
// ways and agrees or is refused.
func TestStmtFenceUnderSQLModes(t *testing.T) {
	e := New(testPolicy(t), Options{})
	q := "UPDATE invoices SET paid = \"x\\\\\" WHERE id = 7 /*" + fcBody + "*/"
	for _, s := range []*Session{
		{Schema: "app", ANSIQuotes: Off, NoBackslashEscapes: On},
		{Schema: "app", ANSIQuotes: Off, NoBackslashEscapes: Off},
	} {
		d := e.Query([]byte(q), maria, s)
		if d.Action != Send || d.Stmts[0].Fence.Presented == nil {
			t.Fatalf("%+v: %v %v", s, d.Action, d.Refusal)
		}
		noSecrets(t, q, d.SQL)
	}
}

// With the guard triggers on, a statement fence applies to a write sent
// alone (the proxy sets the triggers' statement variables around it), and
// a query of several statements with one is refused: the variables would
// hold for all of them.
func TestStmtFenceUnderGuardTriggers(t *testing.T) {
	p, err := policy.NewPolicy(1, policy.Fencing{DatabaseGuard: policy.GuardTriggers}, []policy.Table{{Name: "app.invoices"}})
	if err != nil {
		t.Fatal(err)
	}
	e := New(p, Options{})
	cases := []struct {
		name, sql string
		refused   bool
	}{
		{"alone", "UPDATE invoices SET paid = 1 /*" + fcBody + "*/", false},
		{"alone, comment first", "/*" + fcBody + "*/ DELETE FROM invoices WHERE id = 1", false},
		{"with a read after it", "UPDATE invoices SET paid = 1 /*" + fcBody + "*/; SELECT 1", true},
		{"after a session-fenced write", "UPDATE invoices SET paid = 2; UPDATE invoices SET paid = 1 /*" + fcBody + "*/", true},
		{"two session-fenced writes", "UPDATE invoices SET paid = 2; UPDATE invoices SET paid = 1", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := e.Query([]byte(c.sql), maria, appSession())
			if refused := d.Action == Refuse; refused != c.refused {
				t.Fatalf("refused %v, want %v: %+v", refused, c.refused, d.Refusal)
			}
			if c.refused && !strings.Contains(d.Refusal.Reason, "the only statement of its query") {
				t.Fatalf("reason %q", d.Refusal.Reason)
			}
			if !c.refused && strings.Contains(c.sql, fcBody) {
				if d.Action != Send || len(d.Stmts) != 1 || d.Stmts[0].Fence == nil || d.Stmts[0].Fence.Presented == nil {
					t.Fatalf("%+v", d)
				}
				noSecrets(t, c.sql, d.SQL)
			}
		})
	}
}

func TestStmtFenceLeaseSQL(t *testing.T) {
	p := &lease.Presented{Lease: "x'y", Owner: secretOwner, Token: 5}
	var b strings.Builder
	lease.WriteFence(&b, lease.GuardSpec{Schema: "app", Table: "fenced_job_leases", Presented: p,
		Vars: lease.Vars{Lease: "fence_lease", Owner: "fence_owner", Token: "fence_token"}}, lease.InnoDB)
	g, err := lease.GuardFor(lease.Galera, lease.GuardSpec{Schema: "app", Table: "fenced_job_leases", Presented: p,
		Vars: lease.Vars{Lease: "fence_lease", Owner: "fence_owner", Token: "fence_token"}})
	if err != nil {
		t.Fatal(err)
	}
	v := lease.VerdictSQL(lease.GuardSpec{Schema: "app", Table: "fenced_job_leases", Presented: p,
		Vars: lease.Vars{Lease: "fence_lease", Owner: "fence_owner", Token: "fence_token"}}, lease.InnoDB, true)
	for _, s := range []string{b.String(), g.SQL, g.Classify, g.VarsSQL, v} {
		if strings.Contains(s, "@") || strings.Contains(s, "s3cret") || strings.Contains(s, hex.EncodeToString([]byte(secretOwner))) ||
			strings.Contains(s, "x'y") {
			t.Errorf("leaks or reads the session: %s", s)
		}
	}
	if !strings.Contains(b.String(), ownerSum()) || !strings.Contains(g.SQL, ownerSum()) {
		t.Errorf("owner digest missing: %s", b.String())
	}
}

// The session fence's variables keep the fast path and the caches: only a
// fence key that is not a user variable sends a packet the long way.
func TestHasFenceKey(t *testing.T) {
	for q, want := range map[string]bool{
		"SET @fence_lease = 'a', @fence_owner = X'01', @fence_token = 3":   false,
		"SET @`fence_owner` = 1, @'fence_token' = 2, @\"FENCE_LEASE\" = 3": false,
		"SELECT @FENCE_OWNER":                       false,
		"UPDATE t SET a = 1":                        false,
		"UPDATE t SET a = 1 /*fence_owner='x'*/":    true,
		"UPDATE t SET a = 1 /*,FENCE_TOKEN='1'*/":   true,
		"SELECT fence_token FROM fenced_job_leases": true,
		"SELECT 'fence_lease=1'":                    true,
	} {
		if got := hasFenceKey([]byte(q)); got != want {
			t.Errorf("%q: %v", q, got)
		}
	}
}

// Audit digests (of fenced writes and of refusals) never hold a fence
// comment's values.
func TestStmtFenceDigestsHoldNoValues(t *testing.T) {
	for _, q := range []string{
		"UPDATE invoices SET paid = 1 WHERE id = 7 /*" + fcBody + "*/",
		"UPDATE invoices /*" + fcBody + "*/ SET paid = 1",
		"UPDATE invoices SET note = '/*" + strings.ReplaceAll(fcBody, "'", "''") + "*/' WHERE id = 7",
		"PREPARE s FROM 'UPDATE invoices SET a = 1 /*" + strings.ReplaceAll(fcBody, "'", "''") + "*/'",
		"UPDATE invoices SET a = 1 /*!100000 " + fcBody + " */",
		"UPDATE invoices SET a = 1 -- " + fcBody,
	} {
		d := Digest(q)
		if strings.Contains(strings.ToLower(d), "s3cret") || strings.Contains(d, "fence_owner=") || strings.Contains(d, "%20owner") {
			t.Errorf("%q: digest %q", q, d)
		}
	}
}

// Random texts built from fence-comment pieces around a protected write:
// whatever the proxy does not refuse sends no fence key with a value, and
// a write it sends with a fence key in its input carries the comment's
// fence.
func TestStmtFenceRandomPieces(t *testing.T) {
	e := New(testPolicy(t), Options{})
	pieces := []string{
		"/*", "*/", "/*!", "/*M!", "/*+ ", "-- ", "#", "\n", " ", "'", "''", "\\'", "\"", "`", ",", "=", ";",
		"fence_lease", "fence_owner", "fence_token", "FENCE_OWNER", "fence%5Fowner", "%", "%27", "%00", "%C0%AF",
		"'a'", "'o'", "'1'", "'-1'", "traceparent='x'", "@", "BEGIN NOT ATOMIC ", "END", "PREPARE s FROM ",
		"UPDATE invoices SET paid = 1 WHERE id = 7", "INSERT INTO invoices (id) VALUES (1)", "SELECT 1",
		"/*" + fcBody + "*/", fcBody,
	}
	r := rand.New(rand.NewSource(7))
	refused, sent := 0, 0
	for i := 0; i < 40000; i++ {
		var b strings.Builder
		for j, n := 0, r.Intn(4); j < n; j++ {
			b.WriteString(pieces[r.Intn(len(pieces))])
		}
		if i%2 == 0 {
			b.WriteString([]string{" UPDATE invoices SET paid = 1 WHERE id = 7 ", " INSERT INTO invoices (id) VALUES (1) "}[r.Intn(2)])
		}
		for j, n := 0, r.Intn(5); j < n; j++ {
			b.WriteString(pieces[r.Intn(len(pieces))])
		}
		q := b.String()
		if !hasFenceKey([]byte(q)) {
			continue
		}
		d := e.Query([]byte(q), maria, appSession())
		if d.Action == Refuse {
			refused++
			continue
		}
		sent++
		text := q
		if d.Action == Send {
			text = string(d.SQL)
		}
		writes := false
		for _, st := range d.Stmts {
			if st.Kind == Write {
				writes = true
				if st.Fence != nil && st.Fence.Presented == nil && !strings.Contains(q, ";") && strings.Contains(strings.ToLower(q), "fence_owner=") {
					// A fence key with a value in a protected write's
					// text: its comment's fence applies, or it is refused.
					t.Errorf("%q: a write with a fence key in its text went out under the session's fence: %s", q, text)
				}
			}
		}
		if writes && (strings.Contains(text, "s3cret") || strings.Contains(strings.ToLower(text), "fence_owner='")) {
			t.Errorf("%q: sent %s", q, text)
		}
	}
	t.Logf("%d refused, %d sent", refused, sent)
}

// canonicalPresented puts a statement's fence values into text restored
// once from placeholder values; it must be exactly what parsing and
// restoring the fence with those values gives, for any lease name (every
// byte), owner and token, under every lease kind, lease table and server.
func TestCanonicalPresentedMatchesParse(t *testing.T) {
	e := New(testPolicy(t), Options{})
	r := rand.New(rand.NewSource(7))
	randBytes := func(max int) string {
		b := make([]byte, 1+r.Intn(max))
		r.Read(b)
		return string(b)
	}
	keys := []fenceKey{
		{schema: "app", table: "fence_leases"},
		{schema: "app", table: "fence_leases", lease: "admin:reconciliation"},
		{schema: "ops", table: "le`ases"},
	}
	for _, srv := range []Server{maria, mysql8, tidb} {
		mode := lexMode{server: srv}
		for _, k := range keys {
			for i := 0; i < 200; i++ {
				p := lease.Presented{Lease: randBytes(191), Owner: randBytes(64), Token: r.Uint64() >> uint(r.Intn(64))}
				switch i {
				case 0:
					p.Token = 0
				case 1:
					p.Token = ^uint64(0)
				case 2:
					p.Lease, p.Owner = "'", "\\"
				}
				k.presented = p
				got, ok := e.canonical(k, mode)
				want, wok := e.canonicalText(k, mode)
				if !ok || !wok || got != want {
					t.Fatalf("%v %+v:\n got %v %s\nwant %v %s", srv, k, ok, got, wok, want)
				}
			}
			pk := k
			pk.presented = lease.Presented{}
			if pc := e.fences.presented[fenceCacheKey{pk, srv.Flavor}]; !pc.ok || pc.lease != (k.lease == "") {
				t.Errorf("%v %+v: no cut (%+v): every statement fence is parsed", srv, k, pc)
			}
		}
	}
}

// TestDigestWithFenceKey: an audit digest never holds a fence comment's
// owner: under a character set that may hide quotes, or wherever the
// digester kept a fence key, it is a hash of the text.
func TestDigestWithFenceKey(t *testing.T) {
	const owner = "owner-secret-4711"
	malformed := "/*fence_lease='a',fence_owner='" + owner + "*/"
	cases := []struct {
		name   string
		sql    string
		sess   Session
		hashed bool
	}{
		{"no fence key", "UPDATE invoices SET customer = 'x' WHERE id = 1", Session{}, false},
		{"well-formed comment", "UPDATE invoices SET paid = 1 /*" + fcBody + "*/", Session{}, false},
		{"malformed comment", "UPDATE invoices SET paid = 1 " + malformed, Session{}, false},
		{"gbk, a quote hidden", "UPDATE invoices SET customer = '\xbf\\' WHERE id = 1 " + malformed, Session{UnsafeCharset: true}, true},
		{"gbk, nothing hidden", "UPDATE invoices SET paid = 1 " + malformed, Session{UnsafeCharset: true}, true},
		{"a column named fence_token", "UPDATE jobs SET fence_token = 1 WHERE id = 2", Session{}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := DigestFor(c.sql, maria, &c.sess)
			if strings.Contains(d, "secret") || strings.Contains(d, "4711") {
				t.Fatalf("digest holds the owner: %q", d)
			}
			if got := strings.Contains(d, "a statement with a fence key"); got != c.hashed {
				t.Fatalf("hashed %v, want %v: %q", got, c.hashed, d)
			}
		})
	}
}
