package rewrite

import (
	"strings"
	"testing"
)

// TestRedteam3Attempts keeps red team 3's attempts at the rewriter: a
// statement fence or a row lease that would let a write take effect under
// another fence than the one it names, a row of a lease the session does
// not hold, or a fence secret reach the server. Each case is one attempt,
// kept whether it landed or not; want says what must happen:
//
//	refuse   the packet is refused
//	own      the statement is fenced under the comment's own fence (wantPresented), no secret sent
//	session  fenced under the session's variables, no comment's fence, no secret sent
//	row=L    an INSERT/REPLACE guarded with row lease L
//	cond     an UPDATE/DELETE carrying the per-row condition
func TestRedteam3Attempts(t *testing.T) {
	e := New(testPolicy(t), Options{CacheEntries: 64})
	w := "UPDATE invoices SET paid = 1 WHERE id = 7"
	q := func(s string) string { return strings.ReplaceAll(s, "'", "''") }
	attempts := []struct{ name, sql, want string }{
		// Statement fences: where the comment is.
		{"comment inside an identifier (no protected table: SQL, not a fence)", "UPDATE `invoices/*" + fcBody + "*/` SET paid = 1", "forward"},
		{"comment inside a double-quoted string", w + " AND note = \"/*" + fcBody + "*/\"", "refuse"},
		{"comment in an executable comment at the start", "/*!" + fcBody + "*/ " + w, "refuse"},
		{"comment in /*M! at the end", w + " /*M!" + fcBody + "*/", "refuse"},
		{"comment in /*!00000 at the end", w + " /*!00000 /*" + fcBody + "*/", "refuse"},
		{"fence comment after -- at the end on the same line", w + " -- /*" + fcBody + "*/", "refuse"},
		{"fence comment after # then newline then the real comment", w + " # x\n/*" + fcBody + "*/", "own"},
		{"comment in a subquery", "UPDATE invoices SET paid = (SELECT 1 /*" + fcBody + "*/) WHERE id = 7", "refuse"},
		{"comment before a CTE body", "WITH x AS (SELECT 1 /*" + fcBody + "*/) " + w, "refuse"},
		{"comment in a VALUES list", "INSERT INTO invoices (id, paid) VALUES (7 /*" + fcBody + "*/, 1)", "refuse"},
		// The format.
		{"keys in upper case", w + " /*FENCE_LEASE='a',FENCE_OWNER='o',FENCE_TOKEN='1'*/", "refuse"},
		{"mixed-case key", w + " /*fence_lease='a',Fence_Owner='o',fence_token='1'*/", "refuse"},
		{"key with a trailing encoded space", w + " /*fence_lease='a',fence_owner%20='o',fence_token='1'*/", "refuse"},
		{"key with tab before =", w + " /*fence_lease\t='invoice%3Aacme',fence_owner='s3cret%20owner%27',fence_token='42'*/", "own"},
		{"newline between pairs", w + " /*fence_lease='invoice%3Aacme',\nfence_owner='s3cret%20owner%27',fence_token='42'*/", "own"},
		{"double-quoted values", w + ` /*fence_lease="a",fence_owner="o",fence_token="1"*/`, "refuse"},
		{"%27 closes nothing", w + " /*fence_lease='a%27,fence_owner=%27o',fence_token='1'*/", "refuse"},
		{"%2C splits nothing", w + " /*fence_lease='a%2Cfence_owner%3Do',fence_token='1'*/", "refuse"},
		{"%00 in owner", w + " /*fence_lease='invoice%3Aacme',fence_owner='a%00b',fence_token='1'*/", "own-nul"},
		{"invalid UTF-8 lease", w + " /*fence_lease='%FF%FE',fence_owner='o',fence_token='1'*/", "refuse"},
		{"raw non-ASCII in owner", w + " /*fence_lease='a',fence_owner='\xc3\xa9',fence_token='1'*/", "refuse"},
		{"raw gbk lead byte before a backslash in owner", w + " /*fence_lease='a',fence_owner='\x81\\',fence_token='1'*/", "refuse"},
		{"sjis bytes with 0x27 in a kept key", w + " /*app='\x83\x27',fence_lease='invoice%3Aacme',fence_owner='s3cret%20owner%27',fence_token='42'*/", "refuse"},
		{"token with spaces", w + " /*fence_lease='a',fence_owner='o',fence_token=' 1'*/", "refuse"},
		{"token hex", w + " /*fence_lease='a',fence_owner='o',fence_token='0x1'*/", "refuse"},
		{"token 2^64-1", w + " /*fence_lease='invoice%3Aacme',fence_owner='s3cret%20owner%27',fence_token='18446744073709551615'*/", "own-max"},
		{"token 21 digits of leading zeros", w + " /*fence_lease='a',fence_owner='o',fence_token='000000000000000000042'*/", "refuse"},
		{"duplicate lease key with the same value", w + " /*fence_lease='a',fence_lease='a',fence_owner='o',fence_token='1'*/", "refuse"},
		{"two comments, one fence each half", "/*fence_lease='invoice%3Aacme'*/ " + w + " /*fence_owner='o',fence_token='1'*/", "refuse"},
		{"fence comment then a hint-like comment", w + " /*" + fcBody + "*/ /*+ x */", "refuse"},
		{"owner of 64 bytes", w + " /*fence_lease='invoice%3Aacme',fence_owner='" + strings.Repeat("a", 64) + "',fence_token='42'*/", "own-64"},
		// Statements around.
		{"commented write then uncommented write", w + " /*" + fcBody + "*/; " + w, "own+session"},
		{"uncommented write then commented write", w + "; " + w + " /*" + fcBody + "*/", "session+own"},
		{"commented read then uncommented write", "SELECT 1 /*" + fcBody + "*/; " + w, "read+session"},
		{"EXECUTE IMMEDIATE of a read with a fence comment", "EXECUTE IMMEDIATE 'SELECT 1' /*" + fcBody + "*/", "stripped"},
		{"EXECUTE IMMEDIATE of a write with a fence comment", "EXECUTE IMMEDIATE '" + w + "' /*" + fcBody + "*/", "refuse"},
		{"PREPARE FROM a user variable with a fence comment", "PREPARE s FROM @q /*" + fcBody + "*/", "refuse"},
		{"fence comment on START TRANSACTION", "START TRANSACTION /*" + fcBody + "*/; " + w, "session-stripped"},
		{"fence comment on SET of the fence variables", "SET @fence_owner = 'x' /*" + fcBody + "*/", "stripped"},
		{"fence comment on SELECT ... FOR UPDATE", "SELECT * FROM invoices WHERE id = 7 FOR UPDATE /*" + fcBody + "*/", "stripped"},
		{"fence comment on a lease function", "SELECT fence_release() /*" + fcBody + "*/", "refuse-or-answer"},
		// The owner never reaches the server from a statement a fence
		// comment does not apply to (landed before the fix: forwarded as written).
		{"two well-formed fence comments on a read", "SELECT 1 /*" + fcBody + "*/ /*" + fcBody + "*/", "stripped"},
		{"fence comment between a read's tokens", "SELECT /*" + fcBody + "*/ 1", "stripped"},
		{"fence comment glued between a read's tokens", "SELECT/*" + fcBody + "*/1", "stripped-glued"},
		{"fence comment inside an unprotected write", "UPDATE other /*" + fcBody + "*/ SET a = 1", "stripped"},
		{"fence comment in a read's subquery", "SELECT (SELECT 1 /*" + fcBody + "*/) FROM DUAL", "stripped"},
		{"malformed fence comment on a read (removed whole)", "SELECT 1 /*fence_lease='a',fence_owner='o'*/", "stripped"},
		// Row leases.
		{"insert '\\%' keeps its backslash", "INSERT INTO invoice_rows (id, customer_id) VALUES (1, 'a\\%')", `row=invoice:a\%`},
		{"insert '\\q' loses its backslash", "INSERT INTO invoice_rows (id, customer_id) VALUES (1, 'a\\qb')", "row=invoice:aqb"},
		{"insert _utf16 introducer", "INSERT INTO invoice_rows (id, customer_id) VALUES (1, _utf16'ab')", "refuse"},
		{"insert _ucs2 introducer", "INSERT INTO invoice_rows (id, customer_id) VALUES (1, _ucs2'ab')", "refuse"},
		{"insert _utf32 introducer", "INSERT INTO invoice_rows (id, customer_id) VALUES (1, _utf32'abcd')", "refuse"},
		{"insert a hex literal", "INSERT INTO invoice_rows (id, customer_id) VALUES (1, 0x62657461)", "refuse"},
		{"insert with COLLATE", "INSERT INTO invoice_rows (id, customer_id) VALUES (1, 'beta' COLLATE utf8mb4_bin)", "refuse"},
		{"insert two rows, second with a trailing space", "INSERT INTO invoice_rows (id, customer_id) VALUES (1, 'acme'), (2, 'acme ')", "row=invoice:acme"},
		{"insert the column twice in other case", "INSERT INTO invoice_rows (id, customer_id, CUSTOMER_ID) VALUES (1, 'acme', 'beta')", "refuse"},
		{"insert ROW() constructor", "INSERT INTO invoice_rows (id, customer_id) VALUES ROW(1, 'beta')", "refuse"},
		{"insert integer 1e3 into the integer column", "INSERT INTO order_rows (id, region, cust_no) VALUES (1, 'eu', 1e3)", "refuse"},
		{"insert '007' into the integer column", "INSERT INTO order_rows (id, region, cust_no) VALUES (1, 'eu', '007')", "refuse"},
		{"insert 65536 into SMALLINT UNSIGNED", "INSERT INTO order_rows (id, region, cust_no) VALUES (1, 'eu', 65536)", "refuse"},
		{"insert -1 into an unsigned column", "INSERT INTO order_rows (id, region, cust_no) VALUES (1, 'eu', -1)", "refuse"},
		{"insert CHAR with trailing spaces", "INSERT INTO order_rows (id, region, cust_no) VALUES (1, 'eu  ', 7)", "row=order:eu/7"},
		{"insert a CTE's values", "WITH c AS (SELECT 'beta' AS x) INSERT INTO invoice_rows (id, customer_id) SELECT 1, x FROM c", "refuse"},
		{"odku assigning the template column qualified", "INSERT INTO invoice_rows (id, customer_id) VALUES (1, 'acme') ON DUPLICATE KEY UPDATE invoice_rows.customer_id = 'b'", "refuse"},
		{"update assigning the template column in another case", "UPDATE invoice_rows SET amount = 1, `CUSTOMER_ID` = 'x' WHERE id = 1", "refuse"},
		{"update assigning it to itself", "UPDATE invoice_rows SET customer_id = customer_id WHERE id = 1", "refuse"},
		{"delete through the multi-table form on one table", "DELETE i FROM invoice_rows AS i WHERE id = 1", "refuse"},
		{"delete with a partition clause", "DELETE FROM invoice_rows PARTITION (p0) WHERE id = 1", "cond"},
		{"DELETE HISTORY of a template table", "DELETE HISTORY FROM invoice_rows", "refuse"},
		{"DELETE HISTORY of a protected table", "DELETE HISTORY FROM invoices", "refuse"},
		{"DELETE HISTORY BEFORE SYSTEM_TIME", "DELETE HISTORY FROM invoices BEFORE SYSTEM_TIME NOW()", "refuse"},
		{"row-lease update under a statement fence", "UPDATE invoice_rows SET amount = 1 WHERE id = 1 /*" + fcBody + "*/", "cond-own"},
		{"PREPARE text of a row-lease write", "PREPARE s FROM '" + q("INSERT INTO invoice_rows (id, customer_id) VALUES (1, ?)") + "'", "refuse"},
	}
	for _, a := range attempts {
		t.Run(a.name, func(t *testing.T) {
			for _, srv := range []Server{maria, tidb} {
				d := e.Query([]byte(a.sql), srv, appSession())
				noSecrets(t, a.name, d.SQL)
				if d.Refusal != nil {
					for _, v := range []string{"s3cret", "%27o", "%00", "0x1", "\x81"} {
						if strings.Contains(d.Refusal.Error(), v) {
							t.Errorf("the refusal names a value: %v", d.Refusal)
						}
					}
				}
				fence := func(i int) *Fence {
					if i >= len(d.Stmts) {
						return nil
					}
					return d.Stmts[i].Fence
				}
				bad := func() { t.Fatalf("%v %q: want %s, got %v %s %v", srv, a.sql, a.want, d.Action, d.SQL, d.Refusal) }
				switch want := a.want; {
				case want == "refuse":
					if d.Action != Refuse {
						bad()
					}
				case want == "forward":
					if d.Action != Forward {
						bad()
					}
				case want == "refuse-or-answer":
					if d.Action != Refuse && d.Action != Answer {
						bad()
					}
				case strings.HasPrefix(want, "own"):
					f := fence(0)
					if d.Action == Refuse || f == nil || f.Presented == nil {
						bad()
					}
					p := *f.Presented
					switch want {
					case "own-nul":
						if p.Owner != "a\x00b" {
							bad()
						}
					case "own-max":
						if p.Token != 18446744073709551615 {
							bad()
						}
					case "own-64":
						if p.Owner != strings.Repeat("a", 64) {
							bad()
						}
					default:
						if p != wantPresented {
							bad()
						}
					}
					if want == "own+session" && (fence(1) == nil || fence(1).Presented != nil) {
						bad()
					}
				case want == "session+own":
					if d.Action == Refuse || fence(0) == nil || fence(0).Presented != nil || fence(1) == nil ||
						fence(1).Presented == nil || *fence(1).Presented != wantPresented {
						bad()
					}
				case want == "read+session":
					if d.Action != Send || fence(1) == nil || fence(1).Presented != nil {
						bad()
					}
				case want == "session-stripped":
					if d.Action != Send || fence(1) == nil || fence(1).Presented != nil || strings.Contains(string(d.SQL), "fence_owner=") {
						bad()
					}
				case want == "stripped-glued":
					if d.Action != Send || string(d.SQL) != "SELECT 1" {
						bad()
					}
				case want == "stripped":
					if d.Action != Send || strings.Contains(string(d.SQL), "fence_owner=") {
						bad()
					}
				case strings.HasPrefix(want, "row="):
					f := fence(0)
					if d.Action == Refuse || f == nil || len(f.Targets) != 1 || f.Targets[0].RowLease != want[4:] {
						bad()
					}
				case strings.HasPrefix(want, "cond"):
					f := fence(0)
					if d.Action != Send || f == nil || !strings.Contains(string(d.SQL), "CONVERT(CONCAT(") {
						bad()
					}
					if want == "cond-own" && (f.Presented == nil || *f.Presented != wantPresented ||
						strings.Contains(string(d.SQL), "= @fence_lease")) {
						bad()
					}
				default:
					t.Fatalf("bad want %q", want)
				}
			}
		})
	}
	t.Logf("%d attempts", len(attempts))
}
