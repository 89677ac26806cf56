package wire

import (
	"bytes"
	"encoding/binary"
)

// The readers of responses to statements of the proxy's own: nothing of
// them reaches the client.

// Value is one column value of a row the proxy reads for itself (text
// protocol) or writes (WriteResultSet).
type Value struct {
	S    string
	Null bool
}

// Result is what the response to a statement of the proxy's own said.
type Result struct {
	Rows     [][]Value // of its first result set that had any (nil: none)
	Affected uint64    // of its last OK
	OK       bool      // it had an OK: Affected is its count
	Err      *ErrInfo  // its first ERR (nil: none)
}

// Query reads the response to a statement of the proxy's own: the rows of
// its first result set that has rows, the affected rows of its last OK,
// and its first ERR. What was read before a failure is in the Result too.
func (w Walker) Query() (Result, error) {
	r := queryReader{conn: w.Conn}
	err := w.Response(&r)
	return r.res, err
}

// Exec reads the response to a statement of the proxy's own that returns
// no rows: one OK (its affected rows), or one ERR. Rows or further results
// are malformed.
func (w Walker) Exec() (Result, error) {
	r := execReader{queryReader{conn: w.Conn}}
	err := w.Response(&r)
	return r.res, err
}

// queryReader keeps what Query returns.
type queryReader struct {
	conn *Conn
	res  Result
	cur  [][]Value // rows of the result set being read
	cols int       // columns of the result set being read
}

func (o *queryReader) Ok(_ []byte, n int, ok OKPacket, _ bool) error {
	o.conn.DiscardPacket(n)
	o.res.Affected, o.res.OK = ok.AffectedRows, true
	return nil
}

func (o *queryReader) Err(payload []byte, n int, inSet bool) error {
	if o.res.Err == nil {
		e := ParseErr(payload)
		o.res.Err = &e
	}
	if inSet {
		// An ERR in the middle of rows leaves none of them.
		o.res.Rows, o.cur = nil, nil
	}
	o.conn.DiscardPacket(n)
	return nil
}

func (o *queryReader) LocalInfile() error {
	return o.conn.Err(Malformed("LOCAL INFILE request in the response to a query of the proxy's own"))
}

func (o *queryReader) EOF() error { return o.skip() }

func (o *queryReader) SetStart(cols uint64) error {
	o.cols = int(cols)
	return o.skip()
}

func (o *queryReader) Meta() error { return o.skip() }

func (o *queryReader) MetaEnd(int, uint16) error { return o.skip() }

func (o *queryReader) skip() error {
	_, _, err := o.conn.ReadPacket(nil, MaxWholePacket)
	return err
}

func (o *queryReader) Row() error {
	p, _, err := o.conn.ReadPacket(nil, MaxWholePacket)
	if err != nil {
		return err
	}
	row := make([]Value, 0, o.cols)
	for i := 0; i < o.cols; i++ {
		v, n, null := LenEnc(p)
		if n == 0 || (!null && uint64(len(p)-n) < v) {
			return o.conn.Err(Malformed("row"))
		}
		if null {
			row = append(row, Value{Null: true})
			p = p[n:]
			continue
		}
		row = append(row, Value{S: string(p[n : n+int(v)])})
		p = p[n+int(v):]
	}
	o.cur = append(o.cur, row)
	return nil
}

func (o *queryReader) SetEnd(n int, _ uint16, _ bool) error {
	o.conn.DiscardPacket(n)
	return nil
}

func (o *queryReader) SetDone(uint16) {
	if o.res.Rows == nil {
		o.res.Rows = o.cur
	}
	o.cur = nil
}

// Count reads the response to a statement of the proxy's own, in the
// text or the binary protocol, and counts the rows of its result sets
// without reading them; the Result has its first ERR.
func (w Walker) Count() (int, Result, error) {
	r := countReader{queryReader: queryReader{conn: w.Conn}}
	err := w.Response(&r)
	return r.n, r.res, err
}

// countReader is a queryReader that counts rows and skips them.
type countReader struct {
	queryReader
	n int
}

func (c *countReader) Row() error {
	if _, err := c.conn.SkipPacket(); err != nil {
		return err
	}
	c.n++
	return nil
}

// execReader is a queryReader that refuses rows and further results.
type execReader struct {
	queryReader
}

func (e *execReader) Ok(_ []byte, n int, ok OKPacket, final bool) error {
	if !final {
		return e.conn.Err(Malformed("unexpected further results"))
	}
	e.conn.DiscardPacket(n)
	e.res.Affected, e.res.OK = ok.AffectedRows, true
	return nil
}

func (e *execReader) SetStart(uint64) error {
	return e.conn.Err(Malformed("statement returned rows"))
}

// Recorded is a response read whole, to be answered again later (TiDB's
// SHOW WARNINGS, kept across the proxy's COMMIT): its packets, its rows,
// and which packets carry status flags.
type Recorded struct {
	Packets [][]byte
	Rows    int
	marks   []statusMark
}

// statusMark is a recorded packet with status flags: an EOF packet, or an
// OK (with 0xFE) ending a result set under CLIENT_DEPRECATE_EOF.
type statusMark struct {
	i   int
	eof bool
}

// Record reads a response that must be a result set and keeps every
// packet of it; nil when the response was an OK, an ERR or an EOF (the
// statement failed, or returned no rows).
func (w Walker) Record() (*Recorded, error) {
	r := recorder{conn: w.Conn, deprecateEOF: w.DeprecateEOF}
	if err := w.Response(&r); err != nil {
		return nil, err
	}
	if r.failed {
		return nil, nil
	}
	return &r.rec, nil
}

// Replay writes the recorded response to dst from sequence number seq,
// with the status flags st of its EOF packets and terminators replaced by
// status(st).
func (r *Recorded) Replay(dst *Conn, seq byte, status func(uint16) uint16) error {
	marks := r.marks
	for i, p := range r.Packets {
		out := p
		if len(marks) > 0 && marks[0].i == i {
			out = bytes.Clone(p)
			off, ok := StatusOffset(out, marks[0].eof)
			if !ok {
				return Malformed("recorded result set terminator")
			}
			binary.LittleEndian.PutUint16(out[off:], status(binary.LittleEndian.Uint16(out[off:])))
			marks = marks[1:]
		}
		var err error
		if seq, err = dst.WritePacket(seq, out); err != nil {
			return err
		}
	}
	return nil
}

// recorder keeps every packet of a response.
type recorder struct {
	conn         *Conn
	deprecateEOF bool
	rec          Recorded
	failed       bool
}

func (w *recorder) peeked(n int, eof bool) error {
	pkt, err := w.conn.Packet(n)
	if err != nil {
		return err
	}
	w.rec.marks = append(w.rec.marks, statusMark{i: len(w.rec.Packets), eof: eof})
	w.rec.Packets = append(w.rec.Packets, bytes.Clone(pkt[HeaderLen:]))
	w.conn.DiscardPacket(n)
	return nil
}

func (w *recorder) read() error {
	p, _, err := w.conn.ReadPacket(nil, MaxWholePacket)
	if err != nil {
		return err
	}
	w.rec.Packets = append(w.rec.Packets, p)
	return nil
}

func (w *recorder) Ok(_ []byte, n int, _ OKPacket, _ bool) error {
	w.failed = true // a result set was expected
	w.conn.DiscardPacket(n)
	return nil
}

func (w *recorder) Err(_ []byte, n int, _ bool) error {
	w.failed = true
	w.conn.DiscardPacket(n)
	return nil
}

func (w *recorder) LocalInfile() error {
	return w.conn.Err(Malformed("LOCAL INFILE request in the response to a query of the proxy's own"))
}

func (w *recorder) EOF() error {
	w.failed = true
	return w.read()
}

func (w *recorder) SetStart(uint64) error         { return w.read() }
func (w *recorder) Meta() error                   { return w.read() }
func (w *recorder) MetaEnd(n int, _ uint16) error { return w.peeked(n, true) }
func (w *recorder) Row() error {
	w.rec.Rows++
	return w.read()
}
func (w *recorder) SetEnd(n int, _ uint16, _ bool) error { return w.peeked(n, !w.deprecateEOF) }
func (w *recorder) SetDone(uint16)                       {}
