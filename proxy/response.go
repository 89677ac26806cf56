package proxy

import (
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// One walker reads every backend response of OK, ERR and result-set form:
// the relay's (relayer: each packet goes to the client, streamed), and the
// proxy's own queries' (ownReader, execReader: nothing reaches the client).
// The walker decides where a response ends and records the session's
// status flags; its handler decides what becomes of each packet, and must
// consume the packet it is told of. It reads framing only: packet headers,
// first bytes and status flags.

// responseHandler is told what each packet of a response is.
type responseHandler interface {
	// ok: an OK packet (payload of n bytes, peeked) that ends a
	// statement's result; final: the response ends with it.
	ok(payload []byte, n int, ok wire.OKPacket, final bool) error
	// err: an ERR packet, which ends the response; inSet: it cut a result
	// set short.
	err(payload []byte, n int, inSet bool) error
	// localInfile: LOAD DATA LOCAL's request; the OK or ERR that follows
	// is the statement's result.
	localInfile() error
	// eof: a bare EOF packet answering the command (COM_DEBUG and a few
	// others).
	eof() error
	// setStart: a result set of cols columns; its column count packet is
	// next.
	setStart(cols uint64) error
	// meta: a column definition.
	meta() error
	// metaEnd: the EOF after the column definitions (n bytes, status
	// flags st), without CLIENT_DEPRECATE_EOF.
	metaEnd(n int, st uint16) error
	// row: one row, possibly split over several packets.
	row() error
	// setEnd: the terminator of a result set (n bytes, status flags st);
	// final: the response ends with it.
	setEnd(n int, st uint16, final bool) error
	// setDone: a result set ended (st: its terminator's status flags, 0
	// when an ERR cut it short).
	setDone(st uint16)
}

// walkResponse reads one response: results chained by
// SERVER_MORE_RESULTS_EXISTS.
func (c *clientConn) walkResponse(h responseHandler) error {
	for {
		payload, n, small, err := c.peekBackend()
		if err != nil {
			return err
		}
		if n == 0 {
			return c.backend.Err(wire.Malformed("empty response packet"))
		}
		if !small {
			// Only a result set's column count can start a response, and it
			// is never that long.
			return c.backend.Err(wire.Malformed("oversized response header"))
		}
		switch payload[0] {
		case mysql.OK_HEADER:
			ok, valid := wire.ParseOK(payload)
			if !valid {
				return c.backend.Err(wire.Malformed("OK packet"))
			}
			c.noteStatus(ok.Status)
			more := ok.Status&mysql.SERVER_MORE_RESULTS_EXISTS != 0
			if err := h.ok(payload, n, ok, !more); err != nil || !more {
				return err
			}
		case mysql.ERR_HEADER:
			c.statusStale = true
			return h.err(payload, n, false)
		case mysql.LocalInFile_HEADER:
			if err := h.localInfile(); err != nil {
				return err
			}
		case mysql.EOF_HEADER:
			st, _ := wire.EOFStatus(payload, false)
			c.noteStatus(st)
			return h.eof()
		default:
			// A column count is the whole packet: a shape the walker does
			// not model (a column count with a metadata flag after it, as
			// with MariaDB's cache-metadata capability) ends the
			// connection instead of a wait for packets that never come.
			cols, k, _ := wire.LenEnc(payload)
			if k == 0 || k != n {
				return c.backend.Err(wire.Malformed("column count packet of %d bytes", n))
			}
			st, err := c.walkResultSet(h, cols)
			if err != nil {
				return err
			}
			h.setDone(st)
			if st&mysql.SERVER_MORE_RESULTS_EXISTS == 0 {
				return nil
			}
		}
	}
}

// walkResultSet reads a result set whose column-count packet is next:
// column definitions, the metadata EOF (unless CLIENT_DEPRECATE_EOF), rows,
// and the terminator, whose status flags it returns. A statement that
// opened a cursor ends after the metadata; under CLIENT_DEPRECATE_EOF it is
// then followed directly by a terminator carrying SERVER_STATUS_CURSOR_EXISTS,
// which walkRows reads like an empty result.
func (c *clientConn) walkResultSet(h responseHandler, cols uint64) (uint16, error) {
	if err := h.setStart(cols); err != nil {
		return 0, err
	}
	for i := uint64(0); i < cols; i++ {
		if err := c.backend.CheckColumnDef(); err != nil {
			return 0, err
		}
		if err := h.meta(); err != nil {
			return 0, err
		}
	}
	if !c.deprecateEOF {
		payload, n, small, err := c.peekBackend()
		if err != nil {
			return 0, err
		}
		if !small || len(payload) == 0 || payload[0] != mysql.EOF_HEADER {
			return 0, c.backend.Err(wire.Malformed("expected EOF after column definitions"))
		}
		st, _ := wire.EOFStatus(payload, false)
		if err := h.metaEnd(n, st); err != nil {
			return 0, err
		}
		if st&mysql.SERVER_STATUS_CURSOR_EXISTS != 0 {
			c.noteStatus(st)
			return st, nil
		}
	}
	return c.walkRows(h)
}

// walkRows reads rows until the terminator (EOF, or OK with 0xFE) or an
// ERR, and returns the terminator's status flags (0 after an ERR).
func (c *clientConn) walkRows(h responseHandler) (uint16, error) {
	for {
		n, first, small, err := c.backend.PeekKind()
		if err != nil {
			return 0, err
		}
		if small {
			switch first {
			case mysql.EOF_HEADER:
				full, err := c.backend.Packet(n)
				if err != nil {
					return 0, err
				}
				st, valid := wire.EOFStatus(full[wire.HeaderLen:], c.deprecateEOF)
				if !valid {
					return 0, c.backend.Err(wire.Malformed("result set terminator"))
				}
				c.noteStatus(st)
				return st, h.setEnd(n, st, st&mysql.SERVER_MORE_RESULTS_EXISTS == 0)
			case mysql.ERR_HEADER:
				c.statusStale = true
				full, err := c.backend.Packet(n)
				if err != nil {
					return 0, err
				}
				return 0, h.err(full[wire.HeaderLen:], n, true)
			}
		}
		if err := h.row(); err != nil {
			return 0, err
		}
	}
}

// relayer relays a response to the client, for the command in flight; the
// fencing layer's hook (nil on the hot path) watches and amends results.
// It lives in the clientConn, so that handing it to the walker allocates
// nothing.
type relayer struct {
	c    *clientConn
	hook resultHook
}

// relayResults streams the response to COM_QUERY or COM_STMT_EXECUTE: one or
// more results chained by SERVER_MORE_RESULTS_EXISTS.
func (c *clientConn) relayResults(hook resultHook) error {
	c.relay = relayer{c: c, hook: hook}
	return c.walkResponse(&c.relay)
}

// relayRows streams rows until the terminator or an ERR (COM_STMT_FETCH,
// COM_FIELD_LIST), and returns the terminator's status flags.
func (c *clientConn) relayRows() (uint16, error) {
	c.relay = relayer{c: c}
	return c.walkRows(&c.relay)
}

func (r *relayer) ok(payload []byte, n int, ok wire.OKPacket, final bool) error {
	c := r.c
	if r.hook == nil {
		_, err := c.relayPacket()
		return err
	}
	replace, hold := r.hook.okPacket(payload, ok, final)
	switch {
	case (hold || c.x.holdEnd) && final:
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
	r.hook.result(result{ok: ok})
	return nil
}

func (r *relayer) err(payload []byte, n int, inSet bool) error {
	c := r.c
	c.x.lastErr = true
	if e := wire.ParseErr(payload); e.Code == lease.GuardErrno && e.State == lease.GuardSQLState {
		c.fence.auditGuardError(r.hook, e)
	}
	if !inSet {
		code := wire.ParseErr(payload).Code
		if r.hook != nil {
			r.hook.result(result{isErr: true, err: wire.ParseErr(payload)})
		}
		if c.fence.fenced != nil && c.fence.engineConflict(code) {
			if c.x.holdEnd {
				// The proxy's COMMIT is queued behind this write: its
				// response comes first, so the record (which may need a
				// query of the proxy's own) waits for guardedWrite.
				c.fence.deferred, c.fence.deferredCode = c.fence.fenced, code
				c.fence.fenced = nil
			} else {
				return c.relayConflict(n, code)
			}
		}
	}
	_, err := c.relayPacket()
	return err
}

func (r *relayer) localInfile() error { return r.c.relayLocalInfile() }

func (r *relayer) eof() error {
	_, err := r.c.relayPacket()
	return err
}

func (r *relayer) setStart(uint64) error {
	_, err := r.c.relayPacket()
	r.c.testPanic(panicResponse)
	return err
}

func (r *relayer) meta() error {
	_, err := r.c.relayPacket()
	return err
}

func (r *relayer) metaEnd(n int, _ uint16) error {
	c := r.c
	if !c.x.needsMarks() {
		_, err := c.relayPacket()
		return err
	}
	pkt, _ := c.backend.Packet(n)
	return c.relayMarked(pkt, n, true, false)
}

func (r *relayer) row() error {
	for {
		n, err := r.c.relayPacket()
		if err != nil || n < wire.MaxPayload {
			return err
		}
	}
}

func (r *relayer) setEnd(n int, st uint16, final bool) error {
	c := r.c
	switch {
	case c.x.holdEnd && final:
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

func (r *relayer) setDone(st uint16) {
	if r.hook != nil {
		r.hook.result(result{isSet: true, ok: wire.OKPacket{Status: st}})
	}
}

// ownReader reads the response to a statement of the proxy's own: the rows
// of its first result set (text protocol), the affected rows of its last
// OK, and the first ERR as a *backendError.
type ownReader struct {
	c        *clientConn
	rows     [][]value // of the first result set that had any
	cur      [][]value // of the result set being read
	cols     int       // columns of the result set being read
	affected uint64
	firstErr error
}

func (o *ownReader) ok(_ []byte, n int, ok wire.OKPacket, _ bool) error {
	o.c.takeBackendPacket(n)
	o.c.ownAffected = ok.AffectedRows
	return nil
}

func (o *ownReader) err(payload []byte, n int, inSet bool) error {
	if o.firstErr == nil {
		o.firstErr = &backendError{wire.ParseErr(payload)}
	}
	if inSet {
		// An ERR in the middle of rows leaves none of them.
		o.rows, o.cur = nil, nil
	}
	o.c.takeBackendPacket(n)
	return nil
}

func (o *ownReader) localInfile() error {
	return o.c.backend.Err(wire.Malformed("LOCAL INFILE request in the response to a query of the proxy's own"))
}

func (o *ownReader) eof() error { return o.skip() }

func (o *ownReader) setStart(cols uint64) error {
	o.cols = int(cols)
	return o.skip()
}

func (o *ownReader) meta() error { return o.skip() }

func (o *ownReader) metaEnd(int, uint16) error { return o.skip() }

func (o *ownReader) skip() error {
	_, _, err := o.c.backend.ReadPacket(nil, wire.MaxWholePacket)
	return err
}

func (o *ownReader) row() error {
	p, _, err := o.c.backend.ReadPacket(nil, wire.MaxWholePacket)
	if err != nil {
		return err
	}
	row := make([]value, 0, o.cols)
	for i := 0; i < o.cols; i++ {
		v, n, null := wire.LenEnc(p)
		if n == 0 || (!null && uint64(len(p)-n) < v) {
			return o.c.backend.Err(wire.Malformed("row"))
		}
		if null {
			row = append(row, value{null: true})
			p = p[n:]
			continue
		}
		row = append(row, value{s: string(p[n : n+int(v)])})
		p = p[n+int(v):]
	}
	o.cur = append(o.cur, row)
	return nil
}

func (o *ownReader) setEnd(n int, _ uint16, _ bool) error {
	o.c.takeBackendPacket(n)
	return nil
}

func (o *ownReader) setDone(uint16) {
	if o.rows == nil {
		o.rows = o.cur
	}
	o.cur = nil
}

// execReader reads the response to a statement of the proxy's own that
// returns no rows: one OK, or one ERR as a *backendError.
type execReader struct {
	ownReader
}

func (e *execReader) ok(_ []byte, n int, ok wire.OKPacket, final bool) error {
	if !final {
		return e.c.backend.Err(wire.Malformed("unexpected further results"))
	}
	e.c.takeBackendPacket(n)
	e.affected = ok.AffectedRows
	return nil
}

func (e *execReader) setStart(uint64) error {
	return e.c.backend.Err(wire.Malformed("statement returned rows"))
}
