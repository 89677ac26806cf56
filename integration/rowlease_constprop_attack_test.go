package integration

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/lease"
)

// Attacks on the per-row condition itself through the optimizer's
// constant propagation: from WHERE col = 'c' a server may put 'c' in
// place of col in CONCAT(..., col, ...), and 'c' is equal to the row's
// value under the column's collation without being the same text: a
// _ci collation ('acme' for 'ACME'), or PAD SPACE ('eu' for 'eu '). The
// per-row condition then reads the row's lease as the fence's, and the
// write changes a row of another lease.

const ciRowsTable = "CREATE TABLE ci_rows (id INT NOT NULL, customer_id VARCHAR(20) COLLATE utf8mb4_general_ci NOT NULL, " +
	"amount INT NOT NULL, PRIMARY KEY (id))"

type constPropAttack struct {
	name, table, held, q string
	args                 []any // bound through a server-side prepared statement
}

var constPropAttacks = []constPropAttack{
	{"_ci column, update by the fence's spelling", "ci_rows", "ci:acme",
		"UPDATE ci_rows SET amount = amount + 1 WHERE customer_id = 'acme'", nil},
	{"_ci column, update the other spelling's row by key", "ci_rows", "ci:acme",
		"UPDATE ci_rows SET amount = amount + 1 WHERE customer_id = 'acme' AND id = 2", nil},
	{"_ci column, delete the other spelling's row by key", "ci_rows", "ci:acme",
		"DELETE FROM ci_rows WHERE customer_id = 'acme' AND id = 2", nil},
	{"_ci column, IN list", "ci_rows", "ci:acme",
		"UPDATE ci_rows SET amount = amount + 1 WHERE customer_id IN ('acme') AND id = 2", nil},
	{"PAD SPACE middle column, update the trailing-space row by key", "region_rows", "r:eu:acme",
		"UPDATE region_rows SET amount = amount + 1 WHERE region = 'eu' AND customer_id = 'acme' AND id = 2", nil},
	{"PAD SPACE middle column, delete the trailing-space row by key", "region_rows", "r:eu:acme",
		"DELETE FROM region_rows WHERE region = 'eu' AND customer_id = 'acme' AND id = 2", nil},
	{"PAD SPACE middle column, update all", "region_rows", "r:eu:acme",
		"UPDATE region_rows SET amount = amount + 1 WHERE region = 'eu' AND customer_id = 'acme'", nil},
	{"PAD SPACE middle column, the other way", "region_rows", "r:eu :acme",
		"UPDATE region_rows SET amount = amount + 1 WHERE region = 'eu ' AND customer_id = 'acme' AND id = 1", nil},
	{"_ci column by placeholder, the other spelling's row", "ci_rows", "ci:acme",
		"UPDATE ci_rows SET amount = amount + 1 WHERE customer_id = ? AND id = ?", []any{"acme", 2}},
	{"PAD SPACE middle column by placeholders, the trailing-space row", "region_rows", "r:eu:acme",
		"UPDATE region_rows SET amount = amount + 1 WHERE region = ? AND customer_id = ? AND id = ?", []any{"eu", "acme", 2}},
	{"PAD SPACE middle column by placeholders, delete", "region_rows", "r:eu:acme",
		"DELETE FROM region_rows WHERE region = ? AND customer_id = ? AND id = ?", []any{"eu", "acme", 2}},
	{"PAD SPACE middle column by placeholders, the other way", "region_rows", "r:eu :acme",
		"UPDATE region_rows SET amount = amount + 1 WHERE region = ? AND customer_id = ? AND id = ?", []any{"eu ", "acme", 1}},
}

// TestRowLeaseConstantPropagationAttacks: no row of another lease may
// change.
func TestRowLeaseConstantPropagationAttacks(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng, account: true, onStale: "zero_rows",
			tables: []string{"ci_rows", "region_rows"},
			leases: map[string]string{"ci_rows": "ci:{customer_id}", "region_rows": "r:{region}:{customer_id}"}})
		mustExec(t, e.root, ciRowsTable)
		mustExec(t, e.root, regionRowsTable)
		checkTemplates(t, e)
		held := map[string]lease.Lease{}
		for _, name := range []string{"ci:acme", "r:eu:acme", "r:eu :acme"} {
			held[name] = e.acquire(t, name, time.Minute)
		}
		exprs := map[string]string{"ci_rows": "CONCAT('ci:', customer_id)", "region_rows": "CONCAT('r:', region, ':', customer_id)"}
		for _, a := range constPropAttacks {
			t.Run(a.name, func(t *testing.T) {
				mustExec(t, e.root, "DELETE FROM ci_rows")
				mustExec(t, e.root, "INSERT INTO ci_rows (id, customer_id, amount) VALUES (1, 'acme', 10), (2, 'ACME', 20)")
				mustExec(t, e.root, "DELETE FROM region_rows")
				mustExec(t, e.root, "INSERT INTO region_rows (id, region, customer_id, amount) VALUES (1, 'eu', 'acme', 10), (2, 'eu ', 'acme', 20)")
				others := func() string {
					e.sync(t)
					return queryString(t, e.root, "SELECT COALESCE(GROUP_CONCAT(CONCAT(id, ':', amount) ORDER BY id), '') FROM "+a.table+
						" WHERE HEX("+exprs[a.table]+") <> '"+strings.ToUpper(hex.EncodeToString([]byte(a.held)))+"'")
				}
				before := others()
				c := e.session(t)
				setFence(t, c, held[a.held])
				n, err := execAffected(c, a.q, a.args...)
				if got := others(); got != before {
					t.Fatalf("%s (%d rows, %v): ROWS OF ANOTHER LEASE CHANGED: %q, were %q", a.q, n, err, got, before)
				}
				t.Logf("%s: %d rows, %v", a.q, n, err)
			})
		}
	})
}
