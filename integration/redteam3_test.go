package integration

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/lease"
)

// Red team 3: attempts on row-bound leases and statement fences that need
// a real engine. Every attempt is kept, whether it landed or not.

// regRowsTable's lease "r:{region}:{customer_id}" has a CHAR column before
// the end of the template.
const regRowsTable = "CREATE TABLE reg_rows (id INT NOT NULL, region CHAR(4) COLLATE utf8mb4_bin NOT NULL, " +
	"customer_id VARCHAR(20) COLLATE utf8mb4_bin NOT NULL, amount INT NOT NULL, PRIMARY KEY (region, customer_id, id))"

// TestRedteam3RowLeaseEngine: a worker holding one lease tries to change
// rows of another lease (r:eu:acme) of reg_rows; none may change.
func TestRedteam3RowLeaseEngine(t *testing.T) {
	attempts := []struct {
		name   string
		lease  string   // the lease the attacker holds
		stmts  []string // the last one must be refused or change 0 rows
		skipOn []string
	}{
		// PAD_CHAR_TO_FULL_LENGTH makes a CHAR column read with its
		// padding: CONCAT('r:', region, ':', customer_id) is then
		// 'r:eu  :acme', the name of another lease the attacker can take.
		{"PAD_CHAR_TO_FULL_LENGTH update", "r:eu  :acme", []string{"SET SESSION sql_mode = CONCAT(@@sql_mode, ',PAD_CHAR_TO_FULL_LENGTH')",
			"UPDATE reg_rows SET amount = amount + 1 WHERE id = 1"}, nil},
		{"PAD_CHAR_TO_FULL_LENGTH delete", "r:eu  :acme", []string{"SET SESSION sql_mode = 'PAD_CHAR_TO_FULL_LENGTH'",
			"DELETE FROM reg_rows WHERE id = 1"}, nil},
		{"PAD_CHAR_TO_FULL_LENGTH through SET STATEMENT", "r:eu  :acme", []string{
			"SET STATEMENT sql_mode = 'PAD_CHAR_TO_FULL_LENGTH' FOR UPDATE reg_rows SET amount = amount + 1 WHERE id = 1"}, []string{engTiDB}},
		{"padded lease without the mode", "r:eu  :acme", []string{"UPDATE reg_rows SET amount = amount + 1 WHERE id = 1"}, nil},
		{"lease with the region's other case", "r:EU:acme", []string{"UPDATE reg_rows SET amount = amount + 1 WHERE region = 'eu'"}, nil},
		{"insert padded region into another lease's key", "r:eu  :acme", []string{
			"INSERT INTO reg_rows (id, region, customer_id, amount) VALUES (1, 'eu  ', 'acme', 0) ON DUPLICATE KEY UPDATE amount = amount + 1"}, nil},
		{"pinned padded region", "r:eu  :acme", []string{"SET SESSION sql_mode = 'PAD_CHAR_TO_FULL_LENGTH'",
			"UPDATE reg_rows SET amount = amount + 1 WHERE region = 'eu  ' AND customer_id = 'acme'"}, nil},
		{"statement fence of the padded lease under PAD_CHAR", "r:eu  :acme", []string{"SET SESSION sql_mode = 'PAD_CHAR_TO_FULL_LENGTH'",
			"UPDATE reg_rows SET amount = amount + 1 WHERE id = 1 /*FENCE*/"}, nil},
	}
	forEachEngine(t, func(t *testing.T, eng string) {
		if !withAccount(t) {
			t.Skip("the account deployment runs them")
		}
		e := newFencedEnv(t, envOptions{engine: eng, account: true, tables: []string{"reg_rows"},
			leases: map[string]string{"reg_rows": "r:{region}:{customer_id}"}})
		mustExec(t, e.root, regRowsTable)
		checkTemplates(t, e)
		for _, a := range attempts {
			t.Run(a.name, func(t *testing.T) {
				notOn(t, eng, "syntax", a.skipOn...)
				mustExec(t, e.root, "DELETE FROM reg_rows")
				mustExec(t, e.root, "INSERT INTO reg_rows (id, region, customer_id, amount) VALUES (1, 'eu', 'acme', 10), (2, 'eu', 'acme', 20)")
				e.sync(t)
				before := queryString(t, e.root, "SELECT GROUP_CONCAT(CONCAT(id, ':', amount) ORDER BY id) FROM reg_rows")
				l := e.acquire(t, a.lease, time.Minute)
				defer func() { _ = e.store.Release(context.Background(), l) }()
				c := e.session(t)
				setFence(t, c, l)
				for i, q := range a.stmts {
					if len(q) > 9 && q[len(q)-9:] == "/*FENCE*/" {
						q = q[:len(q)-9] + lease.FenceComment(l)
					}
					r, err := c.ExecContext(context.Background(), q)
					if i < len(a.stmts)-1 {
						if err != nil {
							t.Fatalf("%s: %v", q, err)
						}
						continue
					}
					var me *mysql.MySQLError
					switch {
					case errors.As(err, &me) && (me.Number == 1148 || me.Number == 1644):
					case err != nil:
						t.Fatalf("%s: %v", q, err)
					default:
						if n, _ := r.RowsAffected(); n != 0 {
							t.Errorf("%s: %d rows affected, want 0", q, n)
						}
					}
				}
				e.sync(t)
				if got := queryString(t, e.root, "SELECT GROUP_CONCAT(CONCAT(id, ':', amount) ORDER BY id) FROM reg_rows"); got != before {
					t.Fatalf("rows of r:eu:acme changed under lease %q: %s, were %s", a.lease, got, before)
				}
			})
		}
	})
}

// TestRedteam3DeleteHistory: on a system-versioned protected table,
// MariaDB's DELETE HISTORY removes the table's history rows; the parser
// read it as a multi-table DELETE of a table named history, and the proxy
// forwarded it unfenced (landed before the fix: the stale session's
// DELETE HISTORY removed the history). It is refused now.
func TestRedteam3DeleteHistory(t *testing.T) {
	e := newFencedEnv(t, envOptions{tables: []string{"vers_rows"}})
	mustExec(t, e.root, "CREATE TABLE vers_rows (id INT PRIMARY KEY, amount INT NOT NULL) WITH SYSTEM VERSIONING")
	mustExec(t, e.root, "INSERT INTO vers_rows VALUES (1, 10)")
	mustExec(t, e.root, "UPDATE vers_rows SET amount = 11 WHERE id = 1")
	history := func() string {
		return queryString(t, e.root, "SELECT COUNT(*) FROM vers_rows FOR SYSTEM_TIME ALL")
	}
	before := history()
	c := e.session(t) // no fence: a stale session
	for _, q := range []string{"DELETE HISTORY FROM vers_rows", "DELETE HISTORY FROM vers_rows BEFORE SYSTEM_TIME NOW(6)",
		"delete /* x */ history from vers_rows"} {
		_, err := c.ExecContext(context.Background(), q)
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1148 {
			t.Errorf("%s: %v, want refused (ERR 1148)", q, err)
		}
	}
	if got := history(); got != before {
		t.Fatalf("history rows: %s, were %s", got, before)
	}
}

// TestRedteam3PreparedAcrossReload: statements prepared (COM_STMT_PREPARE)
// while invoice_rows took its lease from the session, executed after a
// reload made its lease a template: a worker holding invoice:acme must
// not change beta's rows through them.
func TestRedteam3PreparedAcrossReload(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		if !withAccount(t) {
			t.Skip("the account deployment runs them")
		}
		e := newFencedEnv(t, envOptions{engine: eng, account: true, tables: []string{"invoice_rows"}})
		mustExec(t, e.root, rowLeaseTable)
		mustExec(t, e.root, "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (1, 'acme', 10), (2, 'acme', 20), (3, 'beta', 30), (4, 'beta', 40)")
		ctx := context.Background()
		acme := e.acquire(t, "invoice:acme", time.Minute)
		c := e.session(t)
		setFence(t, c, acme)
		attempts := []struct {
			name, q string
			args    []any
		}{
			{"update by key, session fence", "UPDATE invoice_rows SET amount = amount + 1 WHERE id = ?", []any{3}},
			{"delete by key, session fence", "DELETE FROM invoice_rows WHERE id = ?", []any{4}},
			{"insert a beta row, session fence", "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (?, ?, 0)", []any{9, "beta"}},
			{"update by key, statement fence", withComment(t, "UPDATE invoice_rows SET amount = amount + 1 WHERE id = ?", acme), []any{3}},
			{"insert a beta row, statement fence", withComment(t, "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (?, ?, 0)", acme), []any{8, "beta"}},
		}
		stmts := make([]*sql.Stmt, len(attempts))
		for i, a := range attempts {
			s, err := c.PrepareContext(ctx, a.q)
			if err != nil {
				t.Fatalf("%s: prepare: %v", a.name, err)
			}
			defer s.Close()
			stmts[i] = s
		}
		// SQL-level PREPARE, fenced by the session's variables.
		if _, err := c.ExecContext(ctx, "PREPARE upd FROM 'UPDATE invoice_rows SET amount = amount + 1 WHERE id = 3'"); err != nil {
			t.Fatal(err)
		}
		beta := func() string {
			e.sync(t)
			return queryString(t, e.root, "SELECT GROUP_CONCAT(CONCAT(id, ':', amount) ORDER BY id) FROM invoice_rows WHERE customer_id = 'beta'")
		}
		audit := "audit:\n  file: " + e.audits + "\n"
		e.proxy.reload(t, audit+"tables:\n  - name: "+e.db+".reconciliation_runs\n    lease: admin:reconciliation\n  - name: "+e.db+
			".invoices\n  - name: "+e.db+".invoice_rows\n    lease: \"invoice:{customer_id}\"\n")
		checkTemplates(t, e)
		for i, a := range attempts {
			t.Run(a.name, func(t *testing.T) {
				before := beta()
				r, err := stmts[i].ExecContext(ctx, a.args...)
				if err == nil {
					if n, _ := r.RowsAffected(); n != 0 {
						t.Errorf("%d rows affected, want 0 or an error", n)
					}
				}
				if got := beta(); got != before {
					t.Fatalf("beta's rows changed by a statement prepared before the reload: %s, were %s", got, before)
				}
			})
		}
		t.Run("SQL PREPARE, EXECUTE", func(t *testing.T) {
			before := beta()
			r, err := c.ExecContext(ctx, "EXECUTE upd")
			if err == nil {
				if n, _ := r.RowsAffected(); n != 0 {
					t.Errorf("%d rows affected, want 0 or an error", n)
				}
			}
			if got := beta(); got != before {
				t.Fatalf("beta's rows changed by EXECUTE of a PREPARE before the reload: %s, were %s", got, before)
			}
		})
		// Prepared again, each is fenced per row: acme's own row changes.
		s, err := c.PrepareContext(ctx, "UPDATE invoice_rows SET amount = amount + 1 WHERE id = ?")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for _, id := range []int{3, 1} {
			r, err := s.ExecContext(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := r.RowsAffected(); n != map[int]int64{3: 0, 1: 1}[id] {
				t.Errorf("prepared again, id %d: %d rows", id, n)
			}
		}
	})
}

// TestRedteam3StatementFenceInterplay: a statement fence comment against
// the session's fence and the proxy's caches. Lease job:a is taken over
// (the worker's fence is stale), job:b is valid. Every attempt runs on a
// fresh session against invoice 1; want is the affected rows of the last
// statement (0: rejected, 1: accepted).
func TestRedteam3StatementFenceInterplay(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng})
		ctx := context.Background()
		mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-01', 1)")
		stale := e.acquire(t, "job:a", time.Hour)
		e.takeover(t, stale)
		valid := e.acquire(t, "job:b", time.Hour)
		mixed := valid
		mixed.Name = stale.Name // job:a's name, job:b's owner and token
		w := "UPDATE invoices SET amount = amount + 1 WHERE id = 1"
		none := lease.Lease{}
		attempts := []struct {
			name    string
			session lease.Lease // the session's fence (none: no fence variables)
			stmts   []string    // {S} = the valid comment, {X} = the stale one, {M} = the mixed one
			want    int64
		}{
			{"stale comment over a valid session fence", valid, []string{w + " {X}"}, 0},
			{"valid comment over a stale session fence (control)", stale, []string{w + " {S}"}, 1},
			{"same text without the comment after an accepted commented one", stale, []string{w + " {S}", w}, 0},
			{"same text with the stale comment after the valid one", none, []string{w + " {S}", w + " {X}"}, 0},
			{"stale comment at the start after the valid one at the end", none, []string{w + " {S}", "{X} " + w}, 0},
			{"mixed fence: another lease's owner and token", valid, []string{w + " {M}"}, 0},
			{"valid comment on a SET, then the write uncommented", stale, []string{"SET @x = 1 {S}", w}, 0},
			{"valid comment on a read in the same packet before the write", stale, []string{"SELECT 1 {S}; " + w}, -1},
		}
		for _, a := range attempts {
			t.Run(a.name, func(t *testing.T) {
				c := e.session(t, "multiStatements=true")
				if a.session != none {
					setFence(t, c, a.session)
				}
				var n int64 = -1
				for _, q := range a.stmts {
					q = strings.NewReplacer("{S}", lease.FenceComment(valid), "{X}", lease.FenceComment(stale),
						"{M}", lease.FenceComment(mixed)).Replace(q)
					before := queryString(t, e.root, "SELECT amount FROM invoices WHERE id = 1")
					r, err := c.ExecContext(ctx, q)
					var me *mysql.MySQLError
					switch {
					case errors.As(err, &me) && (me.Number == 1644 || me.Number == 1148):
						n = 0
					case err != nil:
						t.Fatalf("%s: %v", q, err)
					default:
						n = rowsAffected(r)
					}
					e.sync(t)
					after := queryString(t, e.root, "SELECT amount FROM invoices WHERE id = 1")
					if (after != before) != (n == 1) && !strings.Contains(q, ";") {
						t.Fatalf("%s: %d rows affected, amount %s -> %s", q, n, before, after)
					}
					if strings.Contains(q, ";") && after != before {
						t.Fatalf("%s: the stale session's write in a packet with a valid comment on a read took effect", q)
					}
				}
				if a.want >= 0 && n != a.want {
					t.Fatalf("last statement: %d rows affected, want %d", n, a.want)
				}
			})
		}
	})
}

// TestRedteam3RowLeaseNullUnderOracle: a row whose template column is NULL
// is in no lease (docs/row-leases.md); under MariaDB's sql_mode ORACLE,
// CONCAT reads NULL as an empty string, so the row would read as lease "n:".
func TestRedteam3RowLeaseNullUnderOracle(t *testing.T) {
	e := newFencedEnv(t, envOptions{account: true, tables: []string{"null_rows"}, leases: map[string]string{"null_rows": "n:{customer_id}"}})
	mustExec(t, e.root, "CREATE TABLE null_rows (id INT PRIMARY KEY, customer_id VARCHAR(20) COLLATE utf8mb4_bin NULL, amount INT NOT NULL)")
	checkTemplates(t, e)
	mustExec(t, e.root, "INSERT INTO null_rows VALUES (1, NULL, 10)")
	l := e.acquire(t, "n:", time.Minute)
	ctx := context.Background()
	for _, mode := range []string{"ORACLE", "EMPTY_STRING_IS_NULL", ""} {
		c := e.session(t)
		setFence(t, c, l)
		if _, err := c.ExecContext(ctx, "SET SESSION sql_mode = '"+mode+"'"); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{"UPDATE null_rows SET amount = amount + 1 WHERE id = 1", "DELETE FROM null_rows WHERE id = 1"} {
			if _, err := c.ExecContext(ctx, q); err != nil {
				var me *mysql.MySQLError
				if !errors.As(err, &me) || me.Number != 1148 && me.Number != 1644 {
					t.Fatalf("%s under %q: %v", q, mode, err)
				}
			}
			if got := queryString(t, e.root, "SELECT CONCAT(COUNT(*), ':', COALESCE(MAX(amount), '')) FROM null_rows"); got != "1:10" {
				t.Fatalf("%s under sql_mode %q changed the NULL row, a row of no lease: %s", q, mode, got)
			}
		}
	}
}
