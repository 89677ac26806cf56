package proxy

import (
	"encoding/binary"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/fencing"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// exchange is the state of the command in flight, and its one owner: the
// framing of the response to the client (the sequence numbers of what goes
// out, how far the response got, how its end is marked) and the limit on
// the command's statement text. begin resets all of it at the start of
// each command, and statement what belongs to one statement of a packet
// the proxy runs one statement at a time: no field outlives its command
// for whoever set it to clear. The fencing layer writes to the client only
// through it (and the relayer): it asks for the end to say "more results
// follow" (more: the proxy runs the client's packet one statement at a
// time), has the relayer hold the end back (relayHolding: a guarded
// write's transaction must commit, or its lease be rechecked, first), and
// has it write the held packet, an ERR or a 0-row OK.
type exchange struct {
	cmdSeq  byte // sequence number of the client's last command packet
	delta   byte // added to backend sequence numbers on the way to the client
	started bool // some of the response already went to the client
	lastErr bool // the response so far ended with an ERR
	// limit: the longest statement text forwardCommand may relay (0: any).
	limit int
	// more: the end of this response says SERVER_MORE_RESULTS_EXISTS, for
	// the proxy sends the next statement of the client's packet itself
	// (see fencing's RunOneByOne). Set only by statement.
	more bool
	// held: the response's final OK or result set terminator, kept back
	// by relayHolding (see fencing's guardedWrite).
	held    heldPacket
	scratch []byte // relayMarked's copy of a packet, reused across commands
	// own: status bits of a transaction the proxy opened around a guarded
	// write in autocommit mode, removed from every status flags the
	// response shows: the client's session never was in a transaction.
	// Set only by ownTransaction.
	own uint16
	// conflict: a watched transaction that ended in a conflict (error
	// conflictCode) while the proxy's own statements were queued behind
	// the write; audited once their responses are read (fencing's auditDeferred, through TakeConflict).
	conflict     *fencing.Txn
	conflictCode uint16
}

// heldPacket is the final packet of a response, kept back from the client.
type heldPacket struct {
	p   []byte // payload; nil: nothing held
	seq byte   // its backend sequence number
	eof bool   // an EOF packet (a result set's end without CLIENT_DEPRECATE_EOF), not an OK
}

// begin starts the exchange of a command whose first packet has sequence
// number seq: everything of the command before is reset, as a whole (the
// scratch buffer alone is kept, for its capacity).
func (x *exchange) begin(seq byte) { *x = exchange{cmdSeq: seq, scratch: x.scratch[:0]} }

// statement starts the response of one statement of the client's packet
// that the proxy sends as a packet of its own (fencing's RunOneByOne): its packets
// from backendFirst on reach the client from clientFirst on, and its end
// says "more results follow" when more. Nothing of the statement before
// (a held packet, its own transaction's bits, a conflict) carries over;
// how far the client's response got (started, lastErr) does.
func (x *exchange) statement(backendFirst, clientFirst byte, more bool) {
	x.align(backendFirst, clientFirst)
	x.more, x.held, x.own, x.conflict = more, heldPacket{}, 0, nil
}

// ownTransaction marks the rest of the statement's response as that of a
// guarded write inside a transaction the proxy opened (own: the status
// bits that transaction adds): no status it shows says the client is in a
// transaction. It lasts until the next statement or command begins.
func (x *exchange) ownTransaction(own uint16) { x.own = own }

// align makes the backend's packet with sequence number backendFirst reach
// the client as clientFirst, and those after it in step: the proxy sent the
// backend other packets than the client sent it.
func (x *exchange) align(backendFirst, clientFirst byte) { x.delta = clientFirst - backendFirst }

// status is the status flags a packet of the response carries that ends
// a result set's metadata or a result: the server's, less the proxy's own
// transaction, with SERVER_MORE_RESULTS_EXISTS added when the proxy sends
// the next statement itself (the server sets it in every status of a
// multi-statement packet's results but the last one, measured on MariaDB
// 10.11: SELECT 1; SELECT 2 shows 0x0a in the first set's metadata EOF and
// terminator, 0x02 in the second's).
func (x *exchange) status(st uint16) uint16 {
	st &^= x.own
	if x.more {
		st |= mysql.SERVER_MORE_RESULTS_EXISTS
	}
	return st
}

// endStatus is the status flags the end of the response carries: status,
// with SERVER_MORE_RESULTS_EXISTS only as the exchange says.
func (x *exchange) endStatus(st uint16) uint16 {
	return x.status(st &^ mysql.SERVER_MORE_RESULTS_EXISTS)
}

// markEnd rewrites in place the status flags of p, the payload of the
// response's final OK (or EOF packet, when eof), to endStatus. It reports
// false when p is not such a packet.
func (x *exchange) markEnd(p []byte, eof bool) bool {
	off, ok := wire.StatusOffset(p, eof)
	if ok {
		binary.LittleEndian.PutUint16(p[off:], x.endStatus(binary.LittleEndian.Uint16(p[off:])))
	}
	return ok
}

// nextSeq is the sequence number of the next packet to the client: one past
// the client's command, or past what the proxy already sent of the response.
func (c *clientConn) nextSeq() byte {
	if c.x.started {
		return c.client.LastOut() + 1
	}
	return c.x.cmdSeq + 1
}

// sendError writes an ERR packet as the response to the current command.
func (c *clientConn) sendError(code uint16, state, msg string) error {
	seq := c.nextSeq()
	c.x.started = true
	c.x.lastErr = true
	_, err := c.client.WritePacket(seq, wire.ErrPayload(code, state, msg))
	return err
}

// sendNoRows writes an OK of 0 affected rows, no insert id and no
// warnings, with the session's status flags, as the end of the response:
// the answer to a write the proxy did not send.
func (c *clientConn) sendNoRows() error {
	seq := c.nextSeq()
	c.x.started = true
	_, err := c.client.WritePacket(seq, wire.OKPayload(0, c.x.endStatus(c.ownStatus())))
	return err
}

// holdBackendPacket copies the backend's next packet (payload of n bytes)
// into the held packet instead of relaying it.
func (c *clientConn) holdBackendPacket(n int) {
	pkt, _ := c.backend.Packet(n)
	c.x.held.eof = false
	c.x.held.seq = pkt[3]
	c.x.held.p = append(c.x.held.p[:0], pkt[wire.HeaderLen:]...)
	c.takeBackendPacket(n)
}

// writeHeld writes the held final packet of the response (the OK of a
// fenced write whose lease check passed, or a guarded write's OK or result
// set terminator after its COMMIT), marked as the end of the response.
func (c *clientConn) writeHeld() error {
	p := c.x.held.p
	c.x.held.p = nil
	if !c.x.markEnd(p, c.x.held.eof) {
		return c.backend.Err(wire.Malformed("held packet"))
	}
	c.x.started = true
	_, err := c.client.WritePacket(c.x.held.seq+c.x.delta, p)
	return err
}

// relayMarked relays the backend's next packet (payload of n bytes, peeked
// in pkt: an EOF packet, or an OK when !eof) with the status flags the
// exchange makes of its own (end: it ends the response). The hot path
// relays such packets unchanged: see needsMarks.
func (c *clientConn) relayMarked(pkt []byte, n int, eof, end bool) error {
	off, ok := wire.StatusOffset(pkt[wire.HeaderLen:], eof)
	if !ok {
		return c.backend.Err(wire.Malformed("status flags"))
	}
	out := append(c.x.scratch[:0], pkt[wire.HeaderLen:]...)
	c.x.scratch = out
	st := binary.LittleEndian.Uint16(out[off:])
	if end {
		st = c.x.endStatus(st)
	} else {
		st = c.x.status(st)
	}
	binary.LittleEndian.PutUint16(out[off:], st)
	seq := pkt[3] + c.x.delta
	c.takeBackendPacket(n)
	c.x.started = true
	_, err := c.client.WritePacket(seq, out)
	return err
}

// needsMarks reports whether status flags in the response differ from the
// server's: the proxy runs a packet one statement at a time, or wraps a
// guarded write in a transaction of its own.
func (x *exchange) needsMarks() bool { return x.more || x.own != 0 }
