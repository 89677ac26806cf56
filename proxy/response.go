package proxy

import (
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy/fencing"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// The relay's handler of the response walker (wire.Walker): each packet
// goes to the client, streamed, with the command's sequence offset; the
// fencing layer's hook watches and amends results.

// walker reads the backend's responses for this session.
func (c *clientConn) walker() wire.Walker {
	return wire.Walker{Conn: c.backend, DeprecateEOF: c.deprecateEOF, Session: (*sessionStatus)(c)}
}

// sessionStatus is the clientConn as the walker's wire.Session: a
// conversion, so that handing it to the walker allocates nothing.
type sessionStatus clientConn

func (s *sessionStatus) Status(st uint16) { (*clientConn)(s).noteStatus(st) }
func (s *sessionStatus) ErrSeen()         { s.statusStale = true }

// relayer relays a response to the client, for the command in flight; the
// fencing layer's hook (nil on the hot path) watches and amends results.
// It lives in the clientConn, so that handing it to the walker allocates
// nothing.
type relayer struct {
	c    *clientConn
	hook fencing.Hook
	// holdEnd: the response's final OK or result set terminator goes to
	// the exchange's held packet instead of the client (relayHolding).
	holdEnd bool
}

// relayResults streams the response to COM_QUERY or COM_STMT_EXECUTE: one or
// more results chained by SERVER_MORE_RESULTS_EXISTS.
func (c *clientConn) relayResults(hook fencing.Hook) error {
	c.relay = relayer{c: c, hook: hook}
	return c.walker().Response(&c.relay)
}

// relayHolding relays a response as relayResults does, but keeps its final
// OK or result set terminator back in the exchange (x.held): a guarded
// write's, which goes out once its transaction committed or its lease was
// rechecked (writeHeld), or never.
func (c *clientConn) relayHolding(hook fencing.Hook) error {
	c.relay = relayer{c: c, hook: hook, holdEnd: true}
	return c.walker().Response(&c.relay)
}

// relayRows streams rows until the terminator or an ERR (COM_STMT_FETCH,
// COM_FIELD_LIST), and returns the terminator's status flags.
func (c *clientConn) relayRows() (uint16, error) {
	c.relay = relayer{c: c}
	return c.walker().Rows(&c.relay)
}

func (r *relayer) Ok(payload []byte, n int, ok wire.OKPacket, final bool) error {
	c := r.c
	if r.hook == nil {
		_, err := c.relayPacket()
		return err
	}
	replace, hold := r.hook.OKPacket(payload, ok, final)
	switch {
	case (hold || r.holdEnd) && final:
		c.holdBackendPacket(n)
	case replace != nil:
		_, seq, _ := c.backend.PeekHeader()
		c.x.started = true
		if _, err := c.client.WritePacket(seq+c.x.delta, replace); err != nil {
			return err
		}
		c.takeBackendPacket(n)
	default:
		if _, err := c.relayPacket(); err != nil {
			return err
		}
	}
	r.hook.Result(fencing.Result{OK: ok})
	return nil
}

func (r *relayer) Err(payload []byte, n int, inSet bool) error {
	c := r.c
	if !inSet && r.hook != nil {
		if e := wire.ParseErr(payload); r.hook.TrapErr(e) {
			// The write's row-lease trap: the fencing layer answers
			// (Tracker.Finish), the client never sees this ERR.
			c.takeBackendPacket(n)
			r.hook.Result(fencing.Result{IsErr: true, Err: e})
			return nil
		}
	}
	c.x.lastErr = true
	if e := wire.ParseErr(payload); e.Code == lease.GuardErrno && e.State == lease.GuardSQLState {
		c.fence.AuditGuardError(c.p.rt.Load().fenceRT(), r.hook, e)
	}
	if !inSet {
		code := wire.ParseErr(payload).Code
		if r.hook != nil {
			r.hook.Result(fencing.Result{IsErr: true, Err: wire.ParseErr(payload)})
		}
		if c.fence.EndsWatched(code) {
			if r.holdEnd {
				// The proxy's COMMIT is queued behind this write: its
				// response comes first, so the record (which may need a
				// query of the proxy's own) waits for the fencing layer's guardedWrite.
				c.x.conflict, c.x.conflictCode = c.fence.TakeWatched(), code
			} else {
				return c.relayConflict(n, code)
			}
		}
	}
	_, err := c.relayPacket()
	return err
}

func (r *relayer) LocalInfile() error { return r.c.relayLocalInfile() }

func (r *relayer) EOF() error {
	_, err := r.c.relayPacket()
	return err
}

func (r *relayer) SetStart(uint64) error {
	_, err := r.c.relayPacket()
	r.c.testPanic(panicResponse)
	return err
}

func (r *relayer) Meta() error {
	_, err := r.c.relayPacket()
	return err
}

func (r *relayer) MetaEnd(n int, _ uint16) error {
	c := r.c
	if !c.x.needsMarks() {
		_, err := c.relayPacket()
		return err
	}
	pkt, _ := c.backend.Packet(n)
	return c.relayMarked(pkt, n, true, false)
}

func (r *relayer) Row() error {
	for {
		n, err := r.c.relayPacket()
		if err != nil || n < wire.MaxPayload {
			return err
		}
	}
}

func (r *relayer) SetEnd(n int, st uint16, final bool) error {
	c := r.c
	switch {
	case r.holdEnd && final:
		c.holdBackendPacket(n)
		c.x.held.eof = !c.deprecateEOF
		return nil
	case c.x.needsMarks():
		pkt, _ := c.backend.Packet(n)
		return c.relayMarked(pkt, n, !c.deprecateEOF, final)
	}
	_, err := c.relayPacket()
	return err
}

func (r *relayer) SetDone(st uint16) {
	if r.hook != nil {
		r.hook.Result(fencing.Result{IsSet: true, OK: wire.OKPacket{Status: st}})
	}
}
