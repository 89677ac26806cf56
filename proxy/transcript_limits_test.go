package proxy

import (
	"bufio"
	"fmt"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// ownPrepares is how many COM_STMT_PREPARE of a lease function the limit
// case sends: 2,000,000 (6 s here); a tenth of that under the race
// detector, 3 times the limit with -short.
func ownPrepares() int {
	switch {
	case testing.Short():
		return 3 * maxOwnStmts
	case raceDetector:
		return 200_000
	}
	return 2_000_000
}

var limitCases = []transcriptCase{{
	name: "own_statement_limit",
	about: fmt.Sprintf(`Statements the proxy answers itself (a prepared lease function) count against a limit per
connection, as the server's max_prepared_stmt_count (default %d) counts its own: past it a
COM_STMT_PREPARE gets the server's error for that limit (1461 42000, measured on MariaDB 10.11),
and the proxy holds no more. The case pipelines many prepares and counts the answers; closing
statements makes room again.`, maxOwnStmts),
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		n := ownPrepares()
		prep := append([]byte{mysql.COM_STMT_PREPARE}, "SELECT fence_release()"...)
		done := make(chan error, 1)
		c.client.SetWriteDeadline(time.Now().Add(10 * time.Minute))
		go func() {
			w := bufio.NewWriterSize(c.client, 1<<16)
			for range n {
				if err := writePkt(w, 0, prep); err != nil {
					done <- err
					return
				}
			}
			done <- w.Flush()
		}()
		ok, refused := 0, 0
		var ids []uint32
		for i := range n {
			_, p, err := readPkt(c.client, c.cr)
			if err != nil {
				h.fail("prepare answer %d (%d answered, %d refused): %v", i, ok, refused, err)
			}
			switch {
			case len(p) == 12 && p[0] == mysql.OK_HEADER:
				ok++
				ids = append(ids, uint32(p[1])|uint32(p[2])<<8|uint32(p[3])<<16|uint32(p[4])<<24)
				if _, _, err := readPkt(c.client, c.cr); err != nil { // the column definition
					h.fail("column definition: %v", err)
				}
			case len(p) > 3 && p[0] == mysql.ERR_HEADER && wire.ParseErr(p).Code == erMaxPreparedStmtCount:
				refused++
			default:
				h.fail("unexpected answer %x", p)
			}
		}
		if err := <-done; err != nil {
			h.fail("writing the prepares: %v", err)
		}
		h.note("%d prepares answered by the proxy, every other one (of 2,000,000; 200,000 under -race; 3 times the limit with -short) refused with 1461", ok)
		if ok != maxOwnStmts || refused != n-maxOwnStmts {
			h.fail("%d prepares: %d answered, %d refused; want %d answered", n, ok, refused, maxOwnStmts)
		}
		h.note("one more is refused")
		c.send(0, prep)
		c.clientGets()
		h.note("closing one statement makes room for one")
		c.sendAs(0, stmtCmdPacket(mysql.COM_STMT_CLOSE, ids[0]), "COM_STMT_CLOSE of the first")
		c.send(0, prep)
		c.clientGetsAs("prepare OK")
		c.clientGetsAs("column definition")
		c.send(0, prep)
		c.clientGets()
		pingWorks(c)
	},
}}

func TestTranscriptLimits(t *testing.T) { runTranscripts(t, limitCases) }
