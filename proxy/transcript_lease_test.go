package proxy

import (
	"encoding/binary"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// statusCols are the columns of the lease package's status queries.
var statusCols = strCols("HEX(lease_name)", "HEX(owner_token)", "fence_token", "UNIX_TIMESTAMP(leased_until)",
	"TIMESTAMPDIFF(MICROSECOND, SYSDATE(3), leased_until)")

var ownerLiteral = regexp.MustCompile(`owner_token = X'([0-9a-f]+)'`)

// acquired is the random owner token fence_acquire made.
type acquired struct{ owner, ownerHex string }

// acquire answers fence_acquire('job', 30) as a server where the lease is
// free: the UPDATE of an expired row matches none, the INSERT IGNORE adds
// it, the read-back finds it, and the proxy sets the fence variables.
func acquire(c *hconn) acquired {
	c.h.t.Helper()
	c.query("SELECT fence_acquire('job', 30)")
	return answerAcquire(c)
}

// answerAcquire answers the lease statements of a fence_acquire('job', 30)
// already sent, as acquire does.
func answerAcquire(c *hconn) acquired {
	c.h.t.Helper()
	_, upd := c.backendGets()
	m := ownerLiteral.FindSubmatch(upd)
	if m == nil {
		c.h.fail("no owner token in the acquire UPDATE")
	}
	raw, _ := hex.DecodeString(string(m[1]))
	a := acquired{owner: string(raw), ownerHex: strings.ToUpper(string(m[1]))}
	c.h.rename(string(m[1]), "<hex of the owner token>")
	c.h.rename(a.ownerHex, "<HEX OF THE OWNER TOKEN>")
	c.h.rename(a.owner, "<owner token>")
	c.h.rename(lease.OwnerHash(a.owner), "<owner hash>")
	c.h.secret(a.owner)
	c.respond(okPkt(0, 0, stAuto, 0, rowsMatched("0")))
	c.backendGets()
	c.respond(okPkt(1, 0, stAuto, 0, ""))
	c.backendGets()
	c.respond(c.resultSet(stAuto, statusCols, []string{"6A6F62", a.ownerHex, "1", "1796126183.460", "29999000"})...)
	c.backendGets()
	c.respond(okPkt(0, 0, stAuto, 0, ""))
	c.response()
	return a
}

// sessionVars answers the proxy's read of the fence variables.
func sessionVars(c *hconn, a acquired) {
	c.backendGets()
	c.respond(c.resultSet(stAuto, strCols("HEX(@fence_lease)", "HEX(@fence_owner)", "CAST(@fence_token AS CHAR)"),
		[]string{"6A6F62", a.ownerHex, "1"})...)
}

var leaseCases = []transcriptCase{{
	name: "lease_calls",
	about: `The SQL lease functions, answered by the proxy in the client's session (no backend.user):
fence_acquire runs the lease package's UPDATE, INSERT IGNORE and read-back, then sets the session's
fence variables; fence_status, fence_renew and fence_release read those variables first. The owner
token is random: the transcript names it.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		a := acquire(c)
		h.note("fence_status: the variables, then the lease row")
		c.query("SELECT fence_status()")
		sessionVars(c, a)
		c.backendGets()
		c.respond(c.resultSet(stAuto, statusCols, []string{"6A6F62", a.ownerHex, "1", "1796126183.460", "29986000"})...)
		c.response()
		h.note("fence_renew(60)")
		c.query("SELECT fence_renew(60)")
		sessionVars(c, a)
		c.backendGets()
		c.respond(okPkt(1, 0, stAuto, 0, rowsMatched("1")))
		c.backendGets()
		c.respond(c.resultSet(stAuto, statusCols, []string{"6A6F62", a.ownerHex, "1", "1796126213.460", "59999000"})...)
		c.response()
		h.note("fence_release()")
		c.query("SELECT fence_release()")
		sessionVars(c, a)
		c.backendGets()
		c.respond(okPkt(1, 0, stAuto, 0, rowsMatched("1")))
		c.response()
	},
}, {
	name: "lease_acquire_held",
	about: `fence_acquire of a lease another owner holds: neither the UPDATE (the row is not expired) nor the
INSERT IGNORE (the row exists) changes a row: the result is NULL and no variable is set.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		c.query("SELECT fence_acquire('job', 30)")
		_, upd := c.backendGets()
		if m := ownerLiteral.FindSubmatch(upd); m != nil {
			h.rename(string(m[1]), "<hex of the owner token>")
		}
		c.respond(okPkt(0, 0, stAuto, 0, rowsMatched("0")))
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 1, ""))
		c.response()
	},
}, {
	name: "lease_call_refusals",
	about: `Lease functions the proxy refuses itself, without a lease statement: a lease change inside a
transaction, a placeholder in COM_QUERY, a bad TTL, and no current schema for the unqualified lease
table (after COM_INIT_DB of "" the session has none).`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		c.relayed("BEGIN", okPkt(0, 0, stInTrans, 0, ""))
		h.note("inside a transaction the proxy asks the server first: it may have ended since its last answer")
		c.query("SELECT fence_acquire('job', 30)")
		c.backendGets()
		c.respond(okPkt(0, 0, stInTrans, 0, ""))
		c.response()
		c.relayed("ROLLBACK", okPkt(0, 0, stAuto, 0, ""))
		c.query("SELECT fence_acquire('job', ?)")
		c.response()
		h.audit()
		c.query("SELECT fence_acquire('job', -5)")
		c.response()
		c.send(0, []byte{mysql.COM_INIT_DB})
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
		c.query("SELECT fence_acquire('job', 30)")
		c.response()
	},
}, {
	name: "lease_call_after_deadlock",
	about: `A deadlock (1213) rolled the client's transaction back, and an ERR carries no status flags: the
last status the proxy saw says "in a transaction". fence_acquire asks the server first (COM_PING, which
leaves warnings, ROW_COUNT() and FOUND_ROWS() as they were), finds no transaction, and acquires.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		c.relayed("BEGIN", okPkt(0, 0, stInTrans, 0, ""))
		c.query("UPDATE notes SET n = 1 WHERE id = 1")
		c.backendGets()
		c.respond(errPkt(1213, "40001", "Deadlock found when trying to get lock; try restarting transaction"))
		c.response()
		c.query("SELECT fence_acquire('job', 30)")
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		answerAcquire(c)
	},
}, {
	name: "lease_call_prepared",
	about: `A lease function prepared with COM_STMT_PREPARE is the proxy's own statement (id 0xFFFFFFFF,
counting down, never sent to the server); COM_STMT_EXECUTE binds its parameters and gets a binary
result set; COM_STMT_RESET is answered with OK and COM_STMT_CLOSE with nothing, by the proxy.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		c.send(0, append([]byte{mysql.COM_STMT_PREPARE}, "SELECT fence_acquire(?, ?) AS token"...))
		c.clientGetsAs("prepare OK")
		c.clientGetsAs("column definition")
		c.clientGetsAs("column definition")
		c.clientGetsAs("column definition")
		exec := []byte{mysql.COM_STMT_EXECUTE, 0xff, 0xff, 0xff, 0xff, 0, 1, 0, 0, 0, 0, 1}
		exec = binary.LittleEndian.AppendUint16(exec, uint16(mysql.MYSQL_TYPE_VAR_STRING))
		exec = binary.LittleEndian.AppendUint16(exec, uint16(mysql.MYSQL_TYPE_LONGLONG))
		exec = wire.AppendLenEncString(exec, "job")
		exec = binary.LittleEndian.AppendUint64(exec, 30)
		c.sendAs(0, exec, "COM_STMT_EXECUTE stmt=0xffffffff ('job', 30)")
		_, upd := c.backendGets()
		m := ownerLiteral.FindSubmatch(upd)
		if m == nil {
			h.fail("no owner token in the acquire UPDATE")
		}
		raw, _ := hex.DecodeString(string(m[1]))
		h.rename(string(m[1]), "<hex of the owner token>")
		h.rename(strings.ToUpper(string(m[1])), "<HEX OF THE OWNER TOKEN>")
		h.secret(string(raw))
		c.respond(okPkt(1, 0, stAuto, 0, rowsMatched("1")))
		c.backendGets()
		c.respond(c.resultSet(stAuto, statusCols, []string{"6A6F62", strings.ToUpper(string(m[1])), "8", "1796126183.460", "29999000"})...)
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.clientGets()
		c.clientGetsAs("column definition")
		c.clientGetsAs("binary row")
		c.clientGets()
		c.sendAs(0, []byte{mysql.COM_STMT_RESET, 0xff, 0xff, 0xff, 0xff}, "COM_STMT_RESET stmt=0xffffffff")
		c.clientGets()
		c.sendAs(0, []byte{mysql.COM_STMT_CLOSE, 0xff, 0xff, 0xff, 0xff}, "COM_STMT_CLOSE stmt=0xffffffff")
		h.note("a ping shows the close was answered by nothing and never reached the backend")
		c.send(0, []byte{mysql.COM_PING})
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
	},
}}

func TestTranscriptLeaseCalls(t *testing.T) { runTranscripts(t, leaseCases) }
