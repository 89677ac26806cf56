package proxy

import (
	"bytes"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// execPkt is a COM_STMT_EXECUTE of statement id with no parameters.
func execPkt(id byte) []byte { return []byte{mysql.COM_STMT_EXECUTE, id, 0, 0, 0, 0, 1, 0, 0, 0} }

var moreCases = []transcriptCase{{
	name: "prepared_guarded_insert",
	about: `A prepared INSERT is prepared as the client wrote it; each COM_STMT_EXECUTE in autocommit is
guarded like the text form (START TRANSACTION + guard, EXECUTE + recheck, COMMIT, the OK held). A stale
guard: the proxy rolls back and drops the client's EXECUTE unsent, and answers 0 rows.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		c.send(0, append([]byte{mysql.COM_STMT_PREPARE}, "INSERT INTO invoices (v) VALUES (1)"...))
		c.backendGets()
		c.respond(pkt{payload: []byte{0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, label: "prepare OK"})
		c.clientGetsAs("prepare OK")
		c.sendAs(0, execPkt(4), "COM_STMT_EXECUTE stmt=4")
		guardRound(c, true, guardHolds)
		c.backendGetsAs("COM_STMT_EXECUTE stmt=4")
		c.backendGets()
		c.respond(okPkt(1, 11, stInTrans, 0, ""))
		recheck(c, stInTrans, "1")
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
		h.note("the lease was taken over meanwhile")
		c.sendAs(0, execPkt(4), "COM_STMT_EXECUTE stmt=4")
		guardRound(c, true, guardStale)
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
		h.audit()
		pingWorks(c)
	},
}, {
	name: "tidb_conflicts",
	about: `On TiDB a guarded autocommit write is wrapped even so; its COMMIT fails with 9007 (write
conflict on the lease row): the held OK and the write's SHOW WARNINGS, read right after it,
are dropped, the client gets the 9007, and the record says conflict. A 9007 at the guard itself
(it locks the lease row FOR UPDATE) is audited as a conflict too, and the write is never sent.`,
	backend: "engine: tidb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		c.query("INSERT INTO invoices (v) VALUES (7)")
		guardRound(c, true, guardHolds)
		c.backendGets()
		c.backendGets()
		c.backendGets()
		c.respond(okPkt(1, 5, stInTrans, 0, ""))
		c.respond(c.tidbWarnings(stInTrans)...)
		recheck(c, stInTrans, "1")
		c.backendGets()
		c.respond(errPkt(9007, "HY000", "Write conflict, txnStartTS=1, conflictStartTS=2, conflictCommitTS=3, key=..., reason=optimistic [try again later]"))
		c.response()
		h.audit()
		h.note("a conflict at the guard")
		c.query("INSERT INTO invoices (v) VALUES (8)")
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.backendGets()
		c.backendGets()
		c.respond(okPkt(0, 0, stInTrans, 0, ""))
		c.respond(errPkt(9007, "HY000", "Write conflict, txnStartTS=4, conflictStartTS=5, conflictCommitTS=6, key=..., reason=optimistic [try again later]"))
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		h.note("the record needs the session's fence context: the guard returned none")
		c.backendGets()
		c.respond(c.resultSet(stAuto, strCols("missing", "lease", "owner", "token"), []string{"0", "job", ownerHash, "1"})...)
		c.response()
		h.audit()
	},
}, {
	name: "lease_call_backend_error",
	about: `A lease function whose statement fails on the server (here the lease table is missing): the
client gets ERR 1210 naming the function and the server's error; nothing is set.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		c.query("SELECT fence_acquire('job', 30)")
		_, upd := c.backendGets()
		if m := ownerLiteral.FindSubmatch(upd); m != nil {
			h.rename(string(m[1]), "<hex of the owner token>")
		}
		c.respond(errPkt(1146, "42S02", "Table 'app.fenced_job_leases' doesn't exist"))
		c.response()
		h.note("the failed statement's ERR carried no status flags: the next lease function asks first")
		c.query("SELECT fence_renew(30)")
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.backendGets()
		c.respond(c.resultSet(stAuto, strCols("HEX(@fence_lease)", "HEX(@fence_owner)", "CAST(@fence_token AS CHAR)"),
			[]string{null, null, null})...)
		c.response()
	},
}, {
	name: "packets_over_16mib",
	about: `Packets longer than 16 MiB - 1 are split into several on the wire: a COM_STMT_SEND_LONG_DATA
of 17 MiB (not inspected, no response) streams through as its two packets; a row of 17 MiB
from the backend reaches the client as its two packets, with the sequence numbers of the
response.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		long := append([]byte{mysql.COM_STMT_SEND_LONG_DATA, 1, 0, 0, 0, 0, 0}, bytes.Repeat([]byte("d"), 17<<20)...)
		c.send(0, long)
		c.backendGets()
		c.backendGetsAs("COM_STMT_SEND_LONG_DATA (continued)")
		pingWorks(c)
		c.query("SELECT doc FROM docs WHERE id = 1")
		c.backendGets()
		row := wire.AppendLenEncString(nil, string(bytes.Repeat([]byte("r"), 17<<20)))
		c.respond(
			pkt{payload: []byte{1}},
			colDef(col{"doc", mysql.MYSQL_TYPE_LONG_BLOB}),
			pkt{payload: row, label: "row of 17 MiB"},
			c.endRows(stAuto),
		)
		c.clientGets()
		c.clientGetsAs("column definition")
		c.clientGetsAs("row of 17 MiB")
		c.clientGetsAs("row of 17 MiB (continued)")
		c.clientGets()
	},
}}

func TestTranscriptMore(t *testing.T) { runTranscripts(t, moreCases) }
