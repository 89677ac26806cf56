package proxy

import (
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// The relay reads only framing: packet headers, first bytes and status
// flags, to know where each response ends. Row data streams through.

// forwardCommand sends the command packet the client just sent (still
// unread in the client buffer) to the backend unchanged, streaming
// continuation packets.
func (c *clientConn) forwardCommand() error {
	total := 0
	for {
		if c.cmdLimit > 0 {
			n, _, err := c.client.PeekHeader()
			if err != nil {
				return err
			}
			if total+n-1 > c.cmdLimit {
				return c.refuseTooLarge()
			}
		}
		n, _, err := wire.CopyPacket(c.backend, c.client, 0)
		if err != nil {
			return err
		}
		total += n
		if n < wire.MaxPayload {
			return c.backend.Flush()
		}
	}
}

// relayPacket copies one backend packet to the client with the command's
// sequence offset.
func (c *clientConn) relayPacket() (int, error) {
	c.x.started = true
	n, _, err := wire.CopyPacket(c.client, c.backend, c.x.delta)
	return n, err
}

// peekBackend returns the next backend packet's payload in place when it is
// small (ok), else just its length; a large packet is streamed by
// relayPacket.
func (c *clientConn) peekBackend() (payload []byte, length int, ok bool, err error) {
	pkt, ok, err := c.backend.PeekPacket()
	if err != nil {
		return nil, 0, false, err
	}
	if !ok {
		n, _, err := c.backend.PeekHeader()
		return nil, n, false, err
	}
	return pkt[wire.HeaderLen:], len(pkt) - wire.HeaderLen, true, nil
}

// takeBackendPacket consumes the backend packet just peeked (payload of n
// bytes) after the caller has copied or replaced it.
func (c *clientConn) takeBackendPacket(n int) { c.backend.Discard(wire.HeaderLen + n) }

// result is one statement result seen in a response: an OK, an ERR, or a
// result set (ok then holds the terminator's status).
type result struct {
	isErr bool
	isSet bool
	ok    wire.OKPacket
	err   wire.ErrInfo
}

// resultHook lets the fencing layer watch and amend results; nil on the hot
// path.
type resultHook interface {
	// okPacket is called for every OK packet that ends a statement, before
	// it is written. It may return a replacement payload (same sequence
	// number), or hold=true for the final packet of the response, which is
	// then copied to c.x.held.p instead of being written.
	okPacket(payload []byte, ok wire.OKPacket, final bool) (replace []byte, hold bool)
	// result is called for every result, in order.
	result(r result)
}

// relayConflict relays the ERR (payload of n bytes, next from the backend)
// that ends a watched fenced transaction in a conflict, after its audit
// record is written: the record may need a query of the proxy's own, so
// the ERR is taken off the backend first.
func (c *clientConn) relayConflict(n int, code uint16) error {
	pkt, err := c.backend.Packet(n)
	if err != nil {
		return err
	}
	seq := pkt[3]
	p := append([]byte(nil), pkt[wire.HeaderLen:]...)
	c.takeBackendPacket(n)
	if err := c.fence.noteError(code); err != nil {
		return err
	}
	c.x.started = true
	_, err = c.client.WritePacket(seq+c.x.delta, p)
	return err
}

// relayLocalInfile handles LOAD DATA LOCAL: the server's request goes to the
// client, the file's packets come back until an empty one.
func (c *clientConn) relayLocalInfile() error {
	if _, err := c.relayPacket(); err != nil {
		return err
	}
	if err := c.client.Flush(); err != nil {
		return err
	}
	for {
		n, _, err := wire.CopyPacket(c.backend, c.client, -c.x.delta)
		if err != nil {
			return err
		}
		if n == 0 {
			return c.backend.Flush()
		}
	}
}

// relayPrepareResponse streams the response to COM_STMT_PREPARE and returns
// the statement id and parameter count (ok=false on ERR).
func (c *clientConn) relayPrepareResponse() (stmtID uint32, params uint16, ok bool, err error) {
	payload, _, small, err := c.peekBackend()
	if err != nil {
		return 0, 0, false, err
	}
	if !small || len(payload) < 1 {
		return 0, 0, false, c.backend.Err(wire.Malformed("prepare response"))
	}
	if payload[0] == mysql.ERR_HEADER {
		_, err := c.relayPacket()
		return 0, 0, false, err
	}
	if payload[0] != mysql.OK_HEADER || len(payload) < 12 {
		return 0, 0, false, c.backend.Err(wire.Malformed("prepare OK"))
	}
	stmtID = uint32(payload[1]) | uint32(payload[2])<<8 | uint32(payload[3])<<16 | uint32(payload[4])<<24
	cols := uint16(payload[5]) | uint16(payload[6])<<8
	params = uint16(payload[7]) | uint16(payload[8])<<8
	if _, err := c.relayPacket(); err != nil {
		return 0, 0, false, err
	}
	for _, k := range [2]uint16{params, cols} {
		if k == 0 {
			continue
		}
		for i := 0; i < int(k); i++ {
			if err := c.backend.CheckColumnDef(); err != nil {
				return 0, 0, false, err
			}
			if _, err := c.relayPacket(); err != nil {
				return 0, 0, false, err
			}
		}
		if !c.deprecateEOF {
			if _, err := c.relayPacket(); err != nil {
				return 0, 0, false, err
			}
		}
	}
	return stmtID, params, true, nil
}

// relayOne streams exactly one packet: COM_STATISTICS's string, or the lone
// OK or ERR that answers most commands.
func (c *clientConn) relayOne() (isOK bool, err error) {
	payload, _, small, err := c.peekBackend()
	if err != nil {
		return false, err
	}
	if small && len(payload) > 0 && payload[0] == mysql.OK_HEADER {
		if ok, valid := wire.ParseOK(payload); valid {
			c.noteStatus(ok.Status)
			isOK = true
		}
	}
	_, err = c.relayPacket()
	return isOK, err
}
