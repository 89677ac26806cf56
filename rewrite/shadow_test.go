package rewrite

import (
	"fmt"
	"strings"
	"testing"
)

// In shadow mode a statement the engine refuses runs unfenced: what
// reaches the server is the client's text without the fence keys in its
// comments (well-formed fence comments keep their other keys byte for
// byte, any other comment mentioning a fence key goes whole), or nothing
// when the text cannot be read with certainty.
func TestShadowTakesFenceKeysOut(t *testing.T) {
	e := New(testPolicy(t), Options{CacheEntries: 64})
	tp := "traceparent='00-5bd66ef5095369c7b0d1f8f4bd33716a-c532cb4098ac3dd2-01'"
	w := "UPDATE invoices SET paid = 1 WHERE id = 7"
	quoted := strings.ReplaceAll(fcBody, "'", "''")
	cases := []struct {
		name, in, want string
		sess           *Session // nil: appSession
		servers        []Server // nil: maria, mysql8, tidb
		single         bool     // one statement: COM_STMT_PREPARE too
		// decided: what the engine decides on the text (Refuse unless
		// said), so that the case exercises the path it names.
		decided Action
		// unreadable: Shadow refuses (nothing is sent).
		unreadable bool
	}{
		{name: "malformed comment at the end (missing quote)", in: w + " /*fence_lease='invoice%3Aacme',fence_owner='s3cret,fence_token='42'*/",
			want: w + " ", single: true},
		{name: "malformed comment at the start (bad escape)", in: "/*fence_lease='a',fence_owner='s3cret%zz',fence_token='1'*/ " + w,
			want: " " + w, single: true},
		{name: "partial comment, other comments stay", in: "/* a */ " + w + " /* b */ /*fence_owner='s3cret'*/",
			want: "/* a */ " + w + " /* b */ ", single: true},
		{name: "fence key in a comment in the middle", in: "UPDATE invoices /*" + fcBody + "*/ SET paid = 1 WHERE id = 7",
			want: "UPDATE invoices   SET paid = 1 WHERE id = 7", single: true},
		{name: "malformed comment in the middle, no spaces", in: "UPDATE invoices SET paid = 1/*fence_owner='s3cret*/WHERE id = 7",
			want: "UPDATE invoices SET paid = 1 WHERE id = 7", single: true},
		{name: "fence key in a -- comment", in: "UPDATE invoices SET paid = 1 -- fence_owner='s3cret'\nWHERE id = 7",
			want: "UPDATE invoices SET paid = 1 \nWHERE id = 7", single: true},
		{name: "fence key in a # comment at the end", in: w + " # fence_lease='a',fence_owner='s3cret'",
			want: w + " ", single: true},
		{name: "well-formed with traceparent, and a stray key in the middle", in: "/*" + tp + "," + fcBody + "*/ UPDATE invoices /*fence_owner='s3cret'*/ SET paid = 1 WHERE id = 7",
			want: "/*" + tp + "*/ UPDATE invoices   SET paid = 1 WHERE id = 7", single: true},
		{name: "two well-formed comments, traceparent last", in: "/*" + fcBody + " , " + tp + "*/ " + w + " /*" + fcBody + "*/",
			want: "/*" + tp + "*/ " + w + " ", single: true},
		{name: "after the packet's last ';'", in: w + "; /*" + tp + "," + fcBody + "*/",
			want: w + "; /*" + tp + "*/"},
		{name: "a second statement keeps its own comments", in: w + " /*fence_owner='s3cret*/; SELECT 1 /* x */",
			want: w + " ; SELECT 1 /* x */"},
		{name: "hint and executable comment stay", in: "UPDATE /*+ NO_RANGE_OPTIMIZATION(invoices) */ invoices SET paid = 1 /*!50000 + 0 */ WHERE id = 7 /*fence_owner='s3cret*/",
			want: "UPDATE /*+ NO_RANGE_OPTIMIZATION(invoices) */ invoices SET paid = 1 /*!50000 + 0 */ WHERE id = 7 ", single: true,
			servers: []Server{maria, mysql8}},
		{name: "compound statement: strings past its first ';' stay", in: "BEGIN NOT ATOMIC UPDATE invoices SET note = '-- a /* b */' WHERE id = 7; SELECT '#'; END /*fence_owner='s3cret'*/",
			want: "BEGIN NOT ATOMIC UPDATE invoices SET note = '-- a /* b */' WHERE id = 7; SELECT '#'; END ", servers: []Server{maria}},
		// Sent by the engine with a fence; shadow mode sends it unfenced.
		{name: "sent: well-formed comment with traceparent", in: w + " /*" + tp + "," + fcBody + "*/",
			want: w + " /*" + tp + "*/", single: true, decided: Send},
		{name: "a fence comment inside the text of PREPARE", in: "PREPARE s FROM '" + w + " /*" + quoted + "*/'",
			want: "PREPARE s FROM '" + w + " '", servers: []Server{maria, mysql8}},
		// The engine sends the literal re-quoted, which is no mere removal
		// of keys (Decision.Stripped is nil).
		{name: "sent: a read's fence comment inside the text of PREPARE", in: "PREPARE s FROM 'SELECT 1 /*" + quoted + "*/'",
			want: "PREPARE s FROM 'SELECT 1 '", decided: Send, servers: []Server{maria, mysql8}},
		// No fence key in a comment: byte for byte.
		{name: "no fence key, refused", in: "UPDATE invoices /* a */ SET paid = 1 WHERE id = 7 INTO OUTFILE '/tmp/x'",
			want: "UPDATE invoices /* a */ SET paid = 1 WHERE id = 7 INTO OUTFILE '/tmp/x'", single: true},
		{name: "no fence key, sent", in: w + " /* a */", want: w + " /* a */", single: true, decided: Send,
			servers: []Server{maria, mysql8}},
		{name: "fence key in a string (data) stays", in: "UPDATE invoices SET note = 'fence_owner=s3cret' WHERE id = 7",
			want: "UPDATE invoices SET note = 'fence_owner=s3cret' WHERE id = 7", single: true},
		{name: "fence key as a column name stays", in: "UPDATE invoices SET fence_token = 1 WHERE id = 7 /* x */",
			want: "UPDATE invoices SET fence_token = 1 WHERE id = 7 /* x */", single: true, decided: Send,
			servers: []Server{maria, mysql8}},
		// Cannot be read with certainty while a fence key is there.
		// With backslash escapes the comment is in the string; without, the
		// string ends at the backslash.
		{name: "unknown sql_mode, reads differently", in: "UPDATE invoices SET note = 'a\\' /*fence_owner=' WHERE id = 7 /*'*/",
			sess: &Session{Schema: "app", ANSIQuotes: Off, NoBackslashEscapes: Unknown}, single: true, unreadable: true},
		{name: "unsafe character set with a trail pair", in: "UPDATE invoices SET note = '\xbf\\' WHERE id = 7 /*fence_owner='s3cret*/",
			sess: &Session{Schema: "app", ANSIQuotes: Off, NoBackslashEscapes: Off, UnsafeCharset: true}, single: true, unreadable: true},
		{name: "PREPARE from an expression holding a fence comment", in: "PREPARE s FROM CONCAT('" + w + "', ' /*fence_owner=''s3cret''*/')",
			servers: []Server{maria, mysql8}, unreadable: true},
		{name: "EXECUTE IMMEDIATE with a converting introducer, holding a fence comment", in: "EXECUTE IMMEDIATE _ucs2'" + w + " /*fence_owner=''s3cret''*/'",
			servers: []Server{maria}, unreadable: true},
		{name: "PREPARE from a variable, no fence key: byte for byte", in: "PREPARE s FROM @q /* x */",
			want: "PREPARE s FROM @q /* x */", servers: []Server{maria, mysql8}},
		{name: "unsafe character set, no fence key: byte for byte", in: "UPDATE invoices SET note = '\xbf\\' WHERE id = 7 /* x */",
			want: "UPDATE invoices SET note = '\xbf\\' WHERE id = 7 /* x */",
			sess: &Session{Schema: "app", ANSIQuotes: Off, NoBackslashEscapes: Off, UnsafeCharset: true}, single: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			servers := c.servers
			if servers == nil {
				servers = []Server{maria, mysql8, tidb}
			}
			sess := c.sess
			if sess == nil {
				sess = appSession()
			}
			decided := c.decided
			if decided == Forward {
				decided = Refuse
			}
			for _, srv := range servers {
				for _, prep := range []bool{false, true} {
					if prep && !c.single {
						continue
					}
					what := fmt.Sprintf("%v prepare=%v", srv, prep)
					var d Decision
					if prep {
						d = e.Prepare([]byte(c.in), srv, sess)
					} else {
						d = e.Query([]byte(c.in), srv, sess)
					}
					if d.Action != decided {
						t.Fatalf("%s: the engine decided %v (%v), want %v", what, d.Action, d.Refusal, decided)
					}
					sd := e.Shadow(d, []byte(c.in), srv, sess, prep)
					if c.unreadable {
						if sd.Action != Refuse || !strings.Contains(sd.Refusal.Reason, "not sent") {
							t.Errorf("%s: %v %q %v, want a refusal", what, sd.Action, sd.SQL, sd.Refusal)
						}
						continue
					}
					if sd.Action != Forward {
						t.Fatalf("%s: %v %v", what, sd.Action, sd.Refusal)
					}
					sent := c.in
					if sd.SQL != nil {
						sent = string(sd.SQL)
					}
					if sent != c.want {
						t.Errorf("%s: sent %q, want %q", what, sent, c.want)
					}
					if c.want != c.in {
						noSecrets(t, what, []byte(sent))
					}
					if d.Action == Send && len(sd.Stmts) != len(d.Stmts) {
						t.Errorf("%s: %d statements, want %d", what, len(sd.Stmts), len(d.Stmts))
					}
				}
			}
		})
	}
}
