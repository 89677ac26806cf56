package proxy

import (
	"encoding/binary"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// tidbWarnCol is a column definition of TiDB's SHOW WARNINGS as
// tidb-server v8.4.0 sends it (captured).
func tidbWarnCol(name string, charset uint16, length uint32, typ byte, flags uint16) pkt {
	b := wire.AppendLenEncString(nil, "def")
	for _, s := range []string{"INFORMATION_SCHEMA", "WARNINGS", "", name, ""} {
		b = wire.AppendLenEncString(b, s)
	}
	b = append(b, 0x0c)
	b = binary.LittleEndian.AppendUint16(b, charset)
	b = binary.LittleEndian.AppendUint32(b, length)
	b = append(b, typ)
	b = binary.LittleEndian.AppendUint16(b, flags)
	return pkt{payload: append(b, 0, 0, 0), label: "column definition"}
}

// tidbWarnings is TiDB's response to SHOW WARNINGS with rows of level,
// code and message.
func (c *hconn) tidbWarnings(status uint16, rows ...[]string) []pkt {
	out := []pkt{
		{payload: []byte{3}},
		tidbWarnCol("Level", 83, 256, mysql.MYSQL_TYPE_VAR_STRING, 0),
		tidbWarnCol("Code", 63, 19, mysql.MYSQL_TYPE_LONG, mysql.UNSIGNED_FLAG),
		tidbWarnCol("Message", 83, 256, mysql.MYSQL_TYPE_VAR_STRING, 0),
	}
	if !c.deprecateEOF {
		out = append(out, eofPkt(status))
	}
	for _, r := range rows {
		var p []byte
		for _, v := range r {
			p = wire.AppendLenEncString(p, v)
		}
		out = append(out, pkt{payload: p, label: "row"})
	}
	return append(out, c.endRows(status))
}

// wrappedWrite runs a guarded autocommit write on TiDB whose lease holds:
// the backend reads START TRANSACTION + guard, then the write, SHOW
// WARNINGS and the recheck in one write, and answers them with result,
// the warnings and the recheck's row; then COMMIT (ROLLBACK after a write
// that failed).
func wrappedWrite(c *hconn, sql string, result pkt, warnings []pkt) {
	c.query(sql)
	guardRound(c, true, guardHolds)
	c.backendGets()
	c.backendGets()
	c.backendGets()
	c.respond(result)
	c.respond(warnings...)
	recheck(c, stInTrans, "1")
	c.backendGets()
	c.respond(okPkt(0, 0, stAuto, 0, ""))
	c.response()
}

var tidbWarnCases = []transcriptCase{{
	name: "tidb_show_warnings_after_autocommit_write",
	about: `On TiDB the COMMIT of the transaction the proxy wraps around an autocommit guarded write would
empty SHOW WARNINGS (and so would the recheck of the lease's expiry after the write): the proxy sends
SHOW WARNINGS right after the write, and when the
write's OK counts warnings (or the write fails) answers the client's next SHOW WARNINGS with
TiDB's packets, status flags without IN_TRANS, and SHOW COUNT(*) WARNINGS with the OK's count (or
the rows), as often as they are asked; any other command drops them, and SHOW WARNINGS goes to
the server again. Without warnings nothing is kept. The same with EOF packets (a client without
CLIENT_DEPRECATE_EOF).`,
	backend: "engine: tidb",
	run: func(h *harness) {
		for i, caps := range []uint32{0, goDriverCaps &^ mysql.CLIENT_DEPRECATE_EOF} {
			c := h.login([]string{"A", "B"}[i], loginOpts{db: "app", caps: caps})
			setFence(c, "1")
			warn := []string{"Warning", "1264", "Out of range value for column 'v' at row 1"}
			wrappedWrite(c, "INSERT INTO invoices (v) VALUES (1000)", okPkt(1, 5, stInTrans, 1, ""), c.tidbWarnings(stInTrans, warn))
			h.note("answered by the proxy, twice")
			c.query("SHOW WARNINGS")
			c.response()
			c.query("show  warnings;")
			c.response()
			c.query("SHOW COUNT(*) WARNINGS")
			c.response()
			h.note("another command drops them")
			pingWorks(c)
			c.relayed("SHOW WARNINGS", c.tidbWarnings(stAuto)...)
			h.note("a failed write: SHOW WARNINGS names its error")
			dup := []string{"Error", "1062", "Duplicate entry '5' for key 'invoices.PRIMARY'"}
			wrappedWrite(c, "INSERT INTO invoices (id, v) VALUES (5, 1)", errPkt(1062, "23000", dup[2]), c.tidbWarnings(stInTrans, dup))
			c.query("SHOW COUNT(*) WARNINGS")
			c.response()
			c.query("SHOW WARNINGS")
			c.response()
			h.note("a write without warnings keeps nothing")
			wrappedWrite(c, "INSERT INTO invoices (v) VALUES (2)", okPkt(1, 6, stInTrans, 0, ""), c.tidbWarnings(stInTrans))
			c.relayed("SHOW WARNINGS", c.tidbWarnings(stAuto)...)
		}
	},
}}

func TestTranscriptTiDBWarnings(t *testing.T) { runTranscripts(t, tidbWarnCases) }
