package integration

import (
	"context"
	"errors"
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
