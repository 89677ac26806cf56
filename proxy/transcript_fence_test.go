package proxy

import (
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// guardCols are the columns of lease.GuardFor's row (InnoDB and TiDB).
var guardCols = []col{
	{"@fence_owner IS NULL OR @fence_token IS NULL OR @fence_lease IS NULL", mysql.MYSQL_TYPE_LONGLONG},
	{"fence_l.fence_token = @fence_token", mysql.MYSQL_TYPE_LONGLONG},
	{"fence_l.owner_token = @fence_owner", mysql.MYSQL_TYPE_LONGLONG},
	{"fence_l.leased_until > SYSDATE(3)", mysql.MYSQL_TYPE_LONGLONG},
	{"fence_token", mysql.MYSQL_TYPE_LONGLONG},
	{"CAST(@fence_lease AS CHAR)", mysql.MYSQL_TYPE_VAR_STRING},
	{"LEFT(SHA2(@fence_owner, 256), 16)", mysql.MYSQL_TYPE_VAR_STRING},
	{"CAST(@fence_token AS CHAR)", mysql.MYSQL_TYPE_VAR_STRING},
	{"UNIX_TIMESTAMP(fence_l.leased_until)", mysql.MYSQL_TYPE_NEWDECIMAL},
	{"TIMESTAMPDIFF(MICROSECOND, SYSDATE(3), fence_l.leased_until)", mysql.MYSQL_TYPE_LONGLONG},
}

// recheckCols is the column of lease.Recheck's row, after the guard read
// the expiry guardUntil.
var recheckCols = []col{{"FROM_UNIXTIME(" + guardUntil + ") > SYSDATE(3)", mysql.MYSQL_TYPE_LONGLONG}}

const guardUntil = "1796126183.460"

// recheck answers the recheck after a guarded write: the lease was live
// (live "1") or had expired ("0").
func recheck(c *hconn, st uint16, live string) {
	c.respond(c.resultSet(st, recheckCols, []string{live})...)
}

// classifyCols are the columns of the lease check after a 0-row write.
var classifyCols = strCols("@fence_owner IS NULL OR @fence_token IS NULL OR @fence_lease IS NULL", "CAST(@fence_lease AS CHAR)",
	"LEFT(SHA2(@fence_owner, 256), 16)", "CAST(@fence_token AS CHAR)", "(SELECT CONCAT_WS(',', fence_l.fence_token, ...))")

// ownerHash stands for LEFT(SHA2('owner-A', 256), 16), as the server
// computes it.
const ownerHash = "5e0d0c8b3a5b2f2c"

// Guard rows: the lease holds at token 1; token 1 presented after a
// takeover to 2.
var (
	guardHolds = []string{"0", "1", "1", "1", "1", "job", ownerHash, "1", guardUntil, "29999000"}
	guardStale = []string{"0", "0", "0", "1", "2", "job", ownerHash, "1", guardUntil, "29999000"}
	// guardEnding: the lease holds with no time left to spare: a write
	// after it is rechecked.
	guardEnding = []string{"0", "1", "1", "1", "1", "job", ownerHash, "1", guardUntil, "0"}
)

// setFence sends the client's own SET of its fence variables (relayed as
// it is).
func setFence(c *hconn, token string) {
	c.h.secret("owner-A")
	c.relayed("SET @fence_lease = 'job', @fence_owner = 'owner-A', @fence_token = "+token, okPkt(0, 0, stAuto, 0, ""))
}

// guardRound reads START TRANSACTION and the guard (one write) and answers
// both; wrap false: inside the client's transaction, the proxy's
// SAVEPOINT and the guard.
func guardRound(c *hconn, wrap bool, row []string) {
	c.backendGets()
	c.backendGets()
	c.respond(okPkt(0, 0, stInTrans, 0, ""))
	c.respond(c.resultSet(stInTrans, guardCols, row)...)
}

// galeraGuardRound reads START TRANSACTION, Galera's guard (an UPDATE of
// the write counter) and the locking read that goes with it (one write)
// and answers them: affected "1", the lease holds (row: the read's row);
// "0", it does not (no row: the session has no fence variables).
func galeraGuardRound(c *hconn, affected string, row ...[]string) {
	c.backendGets()
	c.backendGets()
	c.backendGets()
	c.respond(okPkt(0, 0, stInTrans, 0, ""))
	n := uint64(0)
	if affected == "1" {
		n = 1
	}
	c.respond(okPkt(n, 0, stInTrans, 0, rowsMatched(affected)))
	c.respond(c.resultSet(stInTrans, guardCols, row...)...)
}

// rowsMatched is MariaDB's info of an UPDATE.
func rowsMatched(n string) string { return "Rows matched: " + n + "  Changed: " + n + "  Warnings: 0" }

var fenceCases = []transcriptCase{{
	name: "held_ok_autocommit_insert",
	about: `A guarded INSERT in autocommit mode: the proxy sends START TRANSACTION and the guard in one write,
then the INSERT and the recheck of the lease's expiry in one write, then COMMIT; the INSERT's OK is
held until the COMMIT succeeded and reaches the client with the INSERT's affected rows and insert id,
and without IN_TRANS.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app", password: "secret"})
		setFence(c, "1")
		h.note("the guarded INSERT")
		c.query("INSERT INTO invoices (v) VALUES (7)")
		guardRound(c, true, guardHolds)
		c.backendGets()
		c.backendGets()
		c.respond(okPkt(1, 5, stInTrans, 0, ""))
		recheck(c, stInTrans, "1")
		c.clientGetsNothingYet("the INSERT's OK is held: the lease was live after it; the COMMIT is not sent yet")
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
	},
}, {
	name: "held_ok_commit_fails",
	about: `The proxy's own COMMIT after a guarded autocommit INSERT fails (a deadlock victim, 1213): the
held OK is dropped and the client gets the COMMIT's error in its place: nothing was committed.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		c.query("INSERT INTO invoices (v) VALUES (7)")
		guardRound(c, true, guardHolds)
		c.backendGets()
		c.backendGets()
		c.respond(okPkt(1, 5, stInTrans, 0, ""))
		recheck(c, stInTrans, "1")
		c.backendGets()
		c.respond(errPkt(1213, "40001", "Deadlock found when trying to get lock; try restarting transaction"))
		c.response()
		h.note("the next guarded write first learns the transaction state (an ERR carries no status flags)")
		c.query("INSERT INTO invoices (v) VALUES (8)")
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		guardRound(c, true, guardHolds)
		c.backendGets()
		c.backendGets()
		c.respond(okPkt(1, 6, stInTrans, 0, ""))
		recheck(c, stInTrans, "1")
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
	},
}, {
	name: "guarded_insert_in_transaction",
	about: `A guarded INSERT inside the client's transaction: the guard runs first in that transaction, after
a savepoint of the proxy's (in the same write), then the INSERT; the INSERT's OK (IN_TRANS kept) goes out at once, as it
came far within the time the lease had left, and the client's COMMIT ends all. When the lease had
no time to spare, the proxy asks after the INSERT whether the lease was still live; here it had
expired (the INSERT waited for a row lock, say): the proxy rolls back to its savepoint and answers
0 rows, audited as expired.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		c.relayed("BEGIN", okPkt(0, 0, stInTrans, 0, ""))
		c.query("INSERT INTO invoices (v) VALUES (7)")
		guardRound(c, false, guardHolds)
		c.backendGets()
		c.respond(okPkt(1, 5, stInTrans, 0, ""))
		c.response()
		h.note("the next INSERT: the lease has no time to spare, and it outlives it")
		c.query("INSERT INTO invoices (v) VALUES (8)")
		guardRound(c, false, guardEnding)
		c.backendGets()
		c.respond(okPkt(1, 6, stInTrans, 0, ""))
		c.clientGetsNothingYet("the INSERT's OK is held: the proxy asks whether the lease was live after it")
		c.backendGets()
		recheck(c, stInTrans, "0")
		c.backendGets()
		c.respond(okPkt(0, 0, stInTrans, 0, ""))
		c.response()
		h.audit()
		c.relayed("COMMIT", okPkt(0, 0, stAuto, 0, ""))
	},
}, {
	name: "guarded_insert_stale",
	about: `A guarded INSERT whose guard finds the lease taken over (token 2, the session presents 1): the
proxy rolls its transaction back, never sends the INSERT, audits stale_token, and answers with an OK
of 0 rows (on_stale: zero_rows).`,
	backend: "engine: mariadb",
	run:     staleGuardedInsert,
}, {
	name:    "guarded_insert_stale_error",
	about:   `As guarded_insert_stale under on_stale: error: the client gets ERR 1644 (SQLSTATE 45000) saying why.`,
	backend: "engine: mariadb",
	config:  "fencing:\n  on_stale: error\n",
	run:     staleGuardedInsert,
}, {
	name: "guard_missing_lease_table",
	about: `The guard fails because the lease table does not exist: the proxy rolls back, never sends the
INSERT, and passes the server's error on with what to do about it.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		c.query("INSERT INTO invoices (v) VALUES (7)")
		c.backendGets()
		c.backendGets()
		c.respond(okPkt(0, 0, stInTrans, 0, ""))
		c.respond(errPkt(1146, "42S02", "Table 'app.fenced_job_leases' doesn't exist"))
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
	},
}, {
	name: "zero_row_update_classified",
	about: `A fenced UPDATE that changes 0 rows: the proxy sends the UPDATE with its fence, relays the 0-row
OK only after it read the lease (classification): the lease was taken over, so one audit record
(stale_token, zero_rows) is written before the client hears of it; DO 0 then restores ROW_COUNT().
A second 0-row UPDATE under a lease that holds matched nothing: no audit record.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		c.query("UPDATE invoices SET v = 8 WHERE id = 99")
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, rowsMatched("0")))
		c.backendGets()
		c.respond(c.resultSet(stAuto, classifyCols, []string{"0", "job", ownerHash, "1", "2,0,1"})...)
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
		h.audit()
		h.note("a 0-row UPDATE under a lease that holds: it matched nothing")
		c.query("UPDATE invoices SET v = 8 WHERE id = 98")
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, rowsMatched("0")))
		c.backendGets()
		c.respond(c.resultSet(stAuto, classifyCols, []string{"0", "job", ownerHash, "1", "1,1,1"})...)
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
		h.note("an UPDATE that changed a row needs no look at the lease")
		c.relayed("UPDATE invoices SET v = 8 WHERE id = 1", okPkt(1, 0, stAuto, 0, rowsMatched("1")))
	},
}, {
	name: "zero_row_update_error",
	about: `A 0-row fenced UPDATE under on_stale: error: its OK is held while the proxy reads the lease;
no session variables (no_fence): the client gets ERR 1644 instead of the OK, and the audit record.`,
	backend: "engine: mariadb",
	config:  "fencing:\n  on_stale: error\n",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		c.query("DELETE FROM invoices WHERE id = 3")
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.backendGets()
		c.respond(c.resultSet(stAuto, classifyCols, []string{"1", null, null, null, null})...)
		c.response()
		h.audit()
	},
}, {
	name: "one_by_one_multi_statement",
	about: `A multi-statement packet holding a guarded INSERT runs one statement at a time: the INSERT with
its guard and COMMIT (its OK held, then sent with MORE_RESULTS), the SELECT's result set (its
terminator marked MORE_RESULTS by the proxy), then the fenced UPDATE, whose OK ends the response.
The sequence numbers continue across the statements as one response.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		c.query("INSERT INTO invoices (v) VALUES (1); SELECT 1; UPDATE invoices SET v = 2 WHERE id = 1")
		guardRound(c, true, guardHolds)
		c.backendGets()
		c.backendGets()
		c.respond(okPkt(1, 7, stInTrans, 0, ""))
		recheck(c, stInTrans, "1")
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.backendGets()
		c.respond(c.resultSet(stAuto, []col{{"1", mysql.MYSQL_TYPE_LONGLONG}}, []string{"1"})...)
		c.backendGets()
		c.respond(okPkt(1, 0, stAuto, 0, rowsMatched("1")))
		c.response()
	},
}, {
	name: "one_by_one_stops_at_error",
	about: `Under on_stale: error a multi-statement packet with a protected write runs one statement at a
time; the stale write's ERR ends the response where the server would have stopped, and the
statement after it is never sent.`,
	backend: "engine: mariadb",
	config:  "fencing:\n  on_stale: error\n",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		c.query("UPDATE invoices SET v = 1 WHERE id = 1; UPDATE invoices SET v = 2 WHERE id = 2; SELECT 3")
		c.backendGets()
		c.respond(okPkt(1, 0, stAuto, 0, rowsMatched("1")))
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, rowsMatched("0")))
		c.backendGets()
		c.respond(c.resultSet(stAuto, classifyCols, []string{"0", "job", ownerHash, "1", "2,0,1"})...)
		c.response()
		h.audit()
		h.note("the next command: the SELECT 3 never reached the backend")
		c.send(0, []byte{mysql.COM_PING})
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
	},
}, {
	name: "galera_conflict_at_commit",
	about: `On Galera the guard bumps the lease row's write counter (1 row: the lease holds), and the locking
read of the lease row that goes with it gives the expiry and the fence context. The proxy's COMMIT
loses certification (1213): the client gets the 1213, and one audit record says conflict, with the
lease name from @fence_lease.`,
	backend: "engine: galera",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		c.query("UPDATE invoices SET v = 2 WHERE id = 1")
		galeraGuardRound(c, "1", guardHolds)
		c.backendGets()
		c.backendGets()
		c.respond(okPkt(1, 0, stInTrans, 0, rowsMatched("1")))
		recheck(c, stInTrans, "1")
		c.backendGets()
		c.respond(errPkt(1213, "40001", "Deadlock found when trying to get lock; try restarting transaction"))
		c.response()
		h.audit()
	},
}, {
	name: "galera_conflict_at_write_in_own_transaction",
	about: `On Galera, an autocommit write the proxy wrapped in its own transaction meets 1213 itself, with
the proxy's recheck already sent behind it: its answer is read first, then the proxy rolls back; the
client gets the write's 1213, and one audit record says conflict, with the lease name.`,
	backend: "engine: galera",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		c.query("UPDATE invoices SET v = 2 WHERE id = 1")
		galeraGuardRound(c, "1", guardHolds)
		c.backendGets()
		c.backendGets()
		c.respond(errPkt(1213, "40001", "Deadlock found when trying to get lock; try restarting transaction"))
		recheck(c, stAuto, "1")
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
		h.audit()
	},
}, {
	name: "zero_row_check_deadlock",
	about: `The locking lease check after a 0-row fenced UPDATE in the client's transaction is chosen as a
deadlock victim (1213): the transaction is gone, so the client gets the 1213 in place of the held
0-row OK, and the record says conflict.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		c.relayed("BEGIN", okPkt(0, 0, stInTrans, 0, ""))
		c.query("UPDATE invoices SET v = 8 WHERE id = 99")
		c.backendGets()
		c.respond(okPkt(0, 0, stInTrans, 0, rowsMatched("0")))
		c.backendGets()
		c.respond(errPkt(1213, "40001", "Deadlock found when trying to get lock; try restarting transaction"))
		for range 4 { // whatever the proxy reads for the record
			_, p := c.backendGets()
			if len(p) > 0 && p[0] == mysql.COM_QUERY && strings.HasPrefix(string(p[1:]), "SELECT") {
				c.respond(c.resultSet(stAuto, strCols("missing", "lease", "owner", "token"), []string{"0", "job", ownerHash, "1"})...)
				break
			}
			c.respond(okPkt(0, 0, stAuto, 0, ""))
		}
		c.response()
		h.audit()
	},
}, {
	name: "zero_row_check_lock_wait",
	about: `The locking lease check after a 0-row autocommit UPDATE waits for a lock a takeover took on the
lease row after the write, and times out (1205; only the check is rolled back): whether the fence held
is unknown. The proxy reads the session's fence variables for the record, the client gets the
write's own 0-row OK, and one audit record says conflict, with the lease name from @fence_lease.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		c.query("UPDATE invoices SET v = 8 WHERE id = 99")
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, rowsMatched("0")))
		c.backendGets()
		c.respond(errPkt(1205, "HY000", "Lock wait timeout exceeded; try restarting transaction"))
		c.backendGets()
		c.respond(c.resultSet(stAuto, strCols("missing", "lease", "owner", "token"), []string{"0", "job", ownerHash, "1"})...)
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
		h.audit()
	},
}, {
	name: "zero_row_check_lock_wait_on_stale_error",
	about: `As zero_row_check_lock_wait, under on_stale: error: a write whose fence may have failed must not
be answered as if it held, so the client gets the check's 1205 in place of the held 0-row OK (the
write changed nothing), and the record says conflict with outcome error.`,
	backend: "engine: mariadb",
	config:  "fencing:\n  on_stale: error\n",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		c.query("UPDATE invoices SET v = 8 WHERE id = 99")
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, rowsMatched("0")))
		c.backendGets()
		c.respond(errPkt(1205, "HY000", "Lock wait timeout exceeded; try restarting transaction"))
		c.backendGets()
		c.respond(c.resultSet(stAuto, strCols("missing", "lease", "owner", "token"), []string{"0", "job", ownerHash, "1"})...)
		c.response()
		h.audit()
	},
}, {
	name: "galera_guard_rejects",
	about: `On Galera a guard that changes no row is followed, in the same write, by the locking read that
says why (here: the session has no fence variables), then ROLLBACK; the write is never sent.`,
	backend: "engine: galera",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		c.query("INSERT INTO invoices (v) VALUES (1)")
		galeraGuardRound(c, "0")
		c.backendGets()
		c.respond(c.resultSet(stInTrans, strCols("missing", "lease", "owner", "token"), []string{"1", null, null, null})...)
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
		h.audit()
	},
}, {
	name: "tidb_conflict_in_client_transaction",
	about: `On TiDB the guard reads the lease row FOR UPDATE inside the client's transaction; the client's
own COMMIT fails with 9007 (write conflict): relayed as it is, and audited as conflict once.`,
	backend: "engine: tidb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		c.relayed("BEGIN", okPkt(0, 0, stInTrans, 0, ""))
		c.query("INSERT INTO invoices (v) VALUES (7)")
		guardRound(c, false, guardHolds)
		c.backendGets()
		c.respond(okPkt(1, 5, stInTrans, 0, ""))
		c.response()
		c.relayed("COMMIT", errPkt(9007, "HY000", "Write conflict, txnStartTS=1, conflictStartTS=2, conflictCommitTS=3, key=..., primary=..., reason=optimistic [try again later]"))
		h.audit()
	},
}, {
	name: "refused_statement",
	about: `A statement on a protected table that cannot be fenced is refused (ERR 1148) and audited; the
backend never sees it. A read of the protected table is relayed byte for byte.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		c.query("TRUNCATE TABLE invoices")
		c.response()
		h.audit()
		c.relayed("SELECT id, v FROM invoices WHERE id = 1", c.resultSet(stAuto, []col{{"id", mysql.MYSQL_TYPE_LONG}, {"v", mysql.MYSQL_TYPE_LONG}}, []string{"1", "7"})...)
	},
}, {
	name: "prepared_update_zero_rows",
	about: `COM_STMT_PREPARE of an UPDATE of a protected table: the server prepares the fenced text; each
COM_STMT_EXECUTE is relayed unchanged, and a 0-row execution is classified and audited.
COM_STMT_CLOSE is relayed and answered by nothing.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		c.send(0, append([]byte{mysql.COM_STMT_PREPARE}, "UPDATE invoices SET v = ? WHERE id = 1"...))
		c.backendGets()
		prepOK := []byte{0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}
		c.respond(pkt{payload: prepOK, label: "prepare OK"}, colDef(col{"?", mysql.MYSQL_TYPE_VAR_STRING}))
		c.clientGetsAs("prepare OK")
		c.clientGetsAs("column definition")
		exec := []byte{mysql.COM_STMT_EXECUTE, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, mysql.MYSQL_TYPE_LONGLONG, 0, 9, 0, 0, 0, 0, 0, 0, 0}
		c.sendAs(0, exec, "COM_STMT_EXECUTE stmt=1 v=9")
		c.backendGetsAs("COM_STMT_EXECUTE stmt=1 v=9")
		c.respond(okPkt(0, 0, stAuto, 0, rowsMatched("0")))
		c.backendGets()
		c.respond(c.resultSet(stAuto, classifyCols, []string{"0", "job", ownerHash, "1", "2,0,1"})...)
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
		h.audit()
		c.sendAs(0, []byte{mysql.COM_STMT_CLOSE, 1, 0, 0, 0}, "COM_STMT_CLOSE stmt=1")
		c.backendGetsAs("COM_STMT_CLOSE stmt=1")
	},
}, {
	name: "shadow_mode",
	about: `In shadow mode a protected write goes out unchanged; the lease is checked before it (no share
lock), and a write a fence would reject is audited with outcome shadow.`,
	backend: "engine: mariadb",
	config:  "fencing:\n  mode: shadow\n",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		c.query("UPDATE invoices SET v = 2 WHERE id = 1")
		c.backendGets()
		c.respond(c.resultSet(stAuto, classifyCols, []string{"0", "job", ownerHash, "1", "2,0,1"})...)
		c.backendGets()
		c.respond(okPkt(1, 0, stAuto, 0, rowsMatched("1")))
		c.response()
		h.audit()
	},
}}

func TestTranscriptFencing(t *testing.T) { runTranscripts(t, fenceCases) }

// eofCaps are a client's capabilities without CLIENT_DEPRECATE_EOF
// (libmariadb's): result sets carry EOF packets.
const eofCaps = goDriverCaps &^ mysql.CLIENT_DEPRECATE_EOF

var eofCases = []transcriptCase{{
	name: "held_eof_insert_returning",
	about: `A client without CLIENT_DEPRECATE_EOF: column definitions end with an EOF. A guarded INSERT ...
RETURNING in autocommit answers with a result set; the proxy relays its rows and holds the final
EOF until its COMMIT succeeded, then sends it without IN_TRANS. The metadata EOF goes without
IN_TRANS too, as MariaDB 10.11 sends it in autocommit (measured: fe 00 00 02 00).`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app", caps: eofCaps})
		setFence(c, "1")
		c.query("INSERT INTO invoices (v) VALUES (7) RETURNING id")
		guardRound(c, true, guardHolds)
		c.backendGets()
		c.backendGets()
		c.respond(c.resultSet(stInTrans, []col{{"id", mysql.MYSQL_TYPE_LONG}}, []string{"5"})...)
		recheck(c, stInTrans, "1")
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
		h.note("a lease function's result set in the same protocol")
		c.query("SELECT fence_status()")
		c.backendGets()
		c.respond(c.resultSet(stAuto, strCols("HEX(@fence_lease)", "HEX(@fence_owner)", "CAST(@fence_token AS CHAR)"),
			[]string{null, null, null})...)
		c.response()
	},
}, {
	name: "one_by_one_eof_protocol",
	about: `One-by-one execution for a client without CLIENT_DEPRECATE_EOF: the proxy marks the SELECT's
metadata EOF and final EOF with MORE_RESULTS (MariaDB 10.11 sends 0x0a in both for SELECT 1;
SELECT 2, measured), and a stale guarded INSERT in the middle answers OK 0 rows with
MORE_RESULTS (on_stale: zero_rows), then the packet goes on.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app", caps: eofCaps})
		setFence(c, "1")
		c.query("SELECT 1; INSERT INTO invoices (v) VALUES (1); SELECT 2")
		c.backendGets()
		c.respond(c.resultSet(stAuto, []col{{"1", mysql.MYSQL_TYPE_LONGLONG}}, []string{"1"})...)
		guardRound(c, true, guardStale)
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.backendGets()
		c.respond(c.resultSet(stAuto, []col{{"2", mysql.MYSQL_TYPE_LONGLONG}}, []string{"2"})...)
		c.response()
		h.audit()
	},
}}

func TestTranscriptEOFProtocol(t *testing.T) { runTranscripts(t, eofCases) }

// staleGuardedInsert is a guarded autocommit INSERT whose guard finds the
// lease taken over: the proxy rolls back and never sends the INSERT; what
// the client gets depends on the case's on_stale.
func staleGuardedInsert(h *harness) {
	c := h.login("A", loginOpts{db: "app"})
	setFence(c, "1")
	c.query("INSERT INTO invoices (v) VALUES (7)")
	guardRound(c, true, guardStale)
	c.backendGets()
	c.respond(okPkt(0, 0, stAuto, 0, ""))
	c.response()
	h.audit()
}
