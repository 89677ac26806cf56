package proxy

import (
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
		if c.x.limit > 0 {
			n, _, err := c.client.PeekHeader()
			if err != nil {
				return err
			}
			if total+n-1 > c.x.limit {
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

// takeBackendPacket consumes the backend packet just peeked (payload of n
// bytes) after the caller has copied or replaced it.
func (c *clientConn) takeBackendPacket(n int) { c.backend.DiscardPacket(n) }

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
	if err := c.fence.NoteError(code); err != nil {
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
	p, ok, err := c.walker().Prepare((*packetRelay)(c))
	return p.StmtID, p.Params, ok, err
}

// relayOne streams exactly one packet: COM_STATISTICS's string, or the lone
// OK or ERR that answers most commands.
func (c *clientConn) relayOne() (isOK bool, err error) {
	return c.walker().One((*packetRelay)(c))
}

// packetRelay is the clientConn as the walker's handler of responses the
// relay passes on packet by packet, unchanged but for the sequence offset:
// a conversion, so that handing it to the walker allocates nothing.
type packetRelay clientConn

func (r *packetRelay) Packet() error {
	_, err := (*clientConn)(r).relayPacket()
	return err
}

func (r *packetRelay) Prepared(wire.Prepared, int) error { return r.Packet() }
func (r *packetRelay) Err([]byte, int, bool) error       { return r.Packet() }
func (r *packetRelay) Def() error                        { return r.Packet() }
