package wire

import (
	"encoding/binary"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// One walker reads every backend response: the relay's (each packet goes
// to the client, streamed) and the proxy's own queries' (nothing reaches
// the client). It decides where a response ends and tells the session the
// status flags it carries; its handler decides what becomes of each
// packet, and must consume the packet it is told of. It reads framing
// only: packet headers, first bytes and status flags.
//
// Which entry point reads which command's response (the proxy's command
// table picks one for every command it relays):
//
//	Response  COM_QUERY, COM_STMT_EXECUTE, COM_PROCESS_INFO: OK, ERR,
//	          result sets, LOCAL INFILE requests, chained by
//	          SERVER_MORE_RESULTS_EXISTS
//	Rows      COM_STMT_FETCH, COM_FIELD_LIST: rows (or definitions) to a
//	          terminator or an ERR
//	Prepare   COM_STMT_PREPARE: the prepare OK, parameter and column
//	          definitions; or ERR
//	One       every command answered by one packet: OK, ERR, EOF, or
//	          COM_STATISTICS's string
//	SetOption COM_SET_OPTION: EOF (OK under CLIENT_DEPRECATE_EOF) or ERR
//	DumpStart COM_BINLOG_DUMP(_GTID): ERR, or the start of the stream

// Session learns the session state a response shows.
type Session interface {
	// Status: the server's status flags, from an OK, an EOF or a result
	// set's terminator.
	Status(st uint16)
	// ErrSeen: an ERR answered a statement; it carries no status flags,
	// and may have ended or started a transaction.
	ErrSeen()
}

// Walker reads the responses of one backend connection.
type Walker struct {
	Conn         *Conn
	DeprecateEOF bool // CLIENT_DEPRECATE_EOF is in use on the connection
	Session      Session
}

// Handler is told what each packet of a response is.
type Handler interface {
	// Ok: an OK packet (payload of n bytes, peeked) that ends a
	// statement's result; final: the response ends with it.
	Ok(payload []byte, n int, ok OKPacket, final bool) error
	// Err: an ERR packet, which ends the response; inSet: it cut a result
	// set short.
	Err(payload []byte, n int, inSet bool) error
	// LocalInfile: LOAD DATA LOCAL's request; the OK or ERR that follows
	// is the statement's result.
	LocalInfile() error
	// EOF: a bare EOF packet answering the command (COM_DEBUG and a few
	// others).
	EOF() error
	// SetStart: a result set of cols columns; its column count packet is
	// next.
	SetStart(cols uint64) error
	// Meta: a column definition.
	Meta() error
	// MetaEnd: the EOF after the column definitions (n bytes, status
	// flags st), without CLIENT_DEPRECATE_EOF.
	MetaEnd(n int, st uint16) error
	// Row: one row, possibly split over several packets.
	Row() error
	// SetEnd: the terminator of a result set (n bytes, status flags st);
	// final: the response ends with it.
	SetEnd(n int, st uint16, final bool) error
	// SetDone: a result set ended (st: its terminator's status flags, 0
	// when an ERR cut it short).
	SetDone(st uint16)
}

// Response reads one response: results chained by
// SERVER_MORE_RESULTS_EXISTS.
func (w Walker) Response(h Handler) error {
	for {
		payload, n, small, err := w.Conn.peekPayload()
		if err != nil {
			return err
		}
		if n == 0 {
			return w.Conn.Err(Malformed("empty response packet"))
		}
		if !small {
			// Only a result set's column count can start a response, and it
			// is never that long.
			return w.Conn.Err(Malformed("oversized response header"))
		}
		switch payload[0] {
		case mysql.OK_HEADER:
			ok, valid := ParseOK(payload)
			if !valid {
				return w.Conn.Err(Malformed("OK packet"))
			}
			w.Session.Status(ok.Status)
			more := ok.Status&mysql.SERVER_MORE_RESULTS_EXISTS != 0
			if err := h.Ok(payload, n, ok, !more); err != nil || !more {
				return err
			}
		case mysql.ERR_HEADER:
			w.Session.ErrSeen()
			return h.Err(payload, n, false)
		case mysql.LocalInFile_HEADER:
			if err := h.LocalInfile(); err != nil {
				return err
			}
		case mysql.EOF_HEADER:
			st, _ := EOFStatus(payload, false)
			w.Session.Status(st)
			return h.EOF()
		default:
			// A column count is the whole packet: a shape the walker does
			// not model (a column count with a metadata flag after it, as
			// with MariaDB's cache-metadata capability) ends the
			// connection instead of a wait for packets that never come.
			cols, k, _ := LenEnc(payload)
			if k == 0 || k != n {
				return w.Conn.Err(Malformed("column count packet of %d bytes", n))
			}
			st, err := w.resultSet(h, cols)
			if err != nil {
				return err
			}
			h.SetDone(st)
			if st&mysql.SERVER_MORE_RESULTS_EXISTS == 0 {
				return nil
			}
		}
	}
}

// resultSet reads a result set whose column-count packet is next: column
// definitions, the metadata EOF (unless CLIENT_DEPRECATE_EOF), rows, and
// the terminator, whose status flags it returns. A statement that opened a
// cursor ends after the metadata; under CLIENT_DEPRECATE_EOF it is then
// followed directly by a terminator carrying SERVER_STATUS_CURSOR_EXISTS,
// which Rows reads like an empty result.
func (w *Walker) resultSet(h Handler, cols uint64) (uint16, error) {
	if err := h.SetStart(cols); err != nil {
		return 0, err
	}
	for i := uint64(0); i < cols; i++ {
		if err := w.Conn.checkColumnDef(); err != nil {
			return 0, err
		}
		if err := h.Meta(); err != nil {
			return 0, err
		}
	}
	if !w.DeprecateEOF {
		payload, n, small, err := w.Conn.peekPayload()
		if err != nil {
			return 0, err
		}
		if !small || len(payload) == 0 || payload[0] != mysql.EOF_HEADER {
			return 0, w.Conn.Err(Malformed("expected EOF after column definitions"))
		}
		st, _ := EOFStatus(payload, false)
		if err := h.MetaEnd(n, st); err != nil {
			return 0, err
		}
		if st&mysql.SERVER_STATUS_CURSOR_EXISTS != 0 {
			w.Session.Status(st)
			return st, nil
		}
	}
	return w.rows(h)
}

// Rows reads rows until the terminator (EOF, or OK with 0xFE) or an ERR,
// and returns the terminator's status flags (0 after an ERR).
func (w Walker) Rows(h Handler) (uint16, error) { return w.rows(h) }

func (w *Walker) rows(h Handler) (uint16, error) {
	c := w.Conn
	for {
		// A row is streamed as it arrives: only its first byte is waited
		// for, and only a short packet can end the rows.
		n, _, err := c.PeekHeader()
		if err != nil {
			return 0, err
		}
		if n > 0 && n < MaxPayload && HeaderLen+n <= c.r.Size() {
			pkt, err := c.r.Peek(HeaderLen + 1)
			if err != nil {
				return 0, c.Err(err)
			}
			switch pkt[HeaderLen] {
			case mysql.EOF_HEADER:
				full, err := c.Packet(n)
				if err != nil {
					return 0, err
				}
				st, valid := EOFStatus(full[HeaderLen:], w.DeprecateEOF)
				if !valid {
					return 0, c.Err(Malformed("result set terminator"))
				}
				w.Session.Status(st)
				return st, h.SetEnd(n, st, st&mysql.SERVER_MORE_RESULTS_EXISTS == 0)
			case mysql.ERR_HEADER:
				w.Session.ErrSeen()
				full, err := c.Packet(n)
				if err != nil {
					return 0, err
				}
				return 0, h.Err(full[HeaderLen:], n, true)
			}
		}
		if err := h.Row(); err != nil {
			return 0, err
		}
	}
}

// Prepared is what a COM_STMT_PREPARE OK says.
type Prepared struct {
	StmtID  uint32
	Columns uint16
	Params  uint16
}

// PrepareHandler is told what each packet of a COM_STMT_PREPARE response
// is, and must consume it.
type PrepareHandler interface {
	// Prepared: the prepare OK (payload of n bytes, peeked).
	Prepared(p Prepared, n int) error
	// Err: the ERR that answers the command (inSet is false).
	Err(payload []byte, n int, inSet bool) error
	// Def: a parameter or column definition, or the EOF after either
	// list (without CLIENT_DEPRECATE_EOF).
	Def() error
}

// Prepare reads the response to COM_STMT_PREPARE: an ERR (ok false), or
// the prepare OK, then the parameter definitions and the column
// definitions, each list followed by an EOF unless CLIENT_DEPRECATE_EOF.
// The prepare OK carries no status flags, and an ERR to it ran no
// statement: the session learns nothing from either.
func (w Walker) Prepare(h PrepareHandler) (p Prepared, ok bool, err error) {
	payload, n, small, err := w.Conn.peekPayload()
	if err != nil {
		return p, false, err
	}
	if !small || len(payload) < 1 {
		return p, false, w.Conn.Err(Malformed("prepare response"))
	}
	if payload[0] == mysql.ERR_HEADER {
		return p, false, h.Err(payload, n, false)
	}
	if payload[0] != mysql.OK_HEADER || len(payload) < 12 {
		return p, false, w.Conn.Err(Malformed("prepare OK"))
	}
	p.StmtID = uint32(payload[1]) | uint32(payload[2])<<8 | uint32(payload[3])<<16 | uint32(payload[4])<<24
	p.Columns = uint16(payload[5]) | uint16(payload[6])<<8
	p.Params = uint16(payload[7]) | uint16(payload[8])<<8
	if err := h.Prepared(p, n); err != nil {
		return p, false, err
	}
	for _, k := range [2]uint16{p.Params, p.Columns} {
		if k == 0 {
			continue
		}
		for i := 0; i < int(k); i++ {
			if err := w.Conn.checkColumnDef(); err != nil {
				return p, false, err
			}
			if err := h.Def(); err != nil {
				return p, false, err
			}
		}
		if !w.DeprecateEOF {
			if err := h.Def(); err != nil {
				return p, false, err
			}
		}
	}
	return p, true, nil
}

// PacketHandler consumes the one packet a response is.
type PacketHandler interface {
	Packet() error
}

// One reads a response of one packet: the lone OK, ERR or EOF that
// answers most commands, or COM_STATISTICS's string. isOK: it is a valid
// OK, whose status flags the session learns. An ERR or EOF here answers a
// command that ran no statement: the session's state stays as it was.
func (w Walker) One(h PacketHandler) (isOK bool, err error) {
	payload, _, small, err := w.Conn.peekPayload()
	if err != nil {
		return false, err
	}
	if small && len(payload) > 0 && payload[0] == mysql.OK_HEADER {
		if ok, valid := ParseOK(payload); valid {
			w.Session.Status(ok.Status)
			isOK = true
		}
	}
	return isOK, h.Packet()
}

// SetOption reads the response to COM_SET_OPTION: done is true for its
// EOF (an OK with 0xFE, or 0x00, under CLIENT_DEPRECATE_EOF), whose status
// flags the session learns, false for an ERR.
func (w Walker) SetOption(h PacketHandler) (done bool, err error) {
	payload, _, small, err := w.Conn.peekPayload()
	if err != nil {
		return false, err
	}
	if small && len(payload) > 0 && (payload[0] == mysql.EOF_HEADER || payload[0] == mysql.OK_HEADER) {
		done = true
		if st, valid := EOFStatus(payload, w.DeprecateEOF); valid {
			w.Session.Status(st)
		}
	}
	return done, h.Packet()
}

// DumpStart reads the start of the response to COM_BINLOG_DUMP: an ERR
// (refused: the session reads commands again) goes to h and started is
// false; anything else is the binary log stream, left unread.
func (w Walker) DumpStart(h PacketHandler) (started bool, err error) {
	payload, _, small, err := w.Conn.peekPayload()
	if err != nil {
		return false, err
	}
	if small && len(payload) > 0 && payload[0] == mysql.ERR_HEADER {
		return false, h.Packet()
	}
	return true, nil
}

// Payload is the COM_STMT_PREPARE OK the proxy answers a statement it
// prepares itself with.
func (p Prepared) Payload() []byte {
	b := []byte{mysql.OK_HEADER}
	b = binary.LittleEndian.AppendUint32(b, p.StmtID)
	b = binary.LittleEndian.AppendUint16(b, p.Columns)
	b = binary.LittleEndian.AppendUint16(b, p.Params)
	return append(b, 0, 0, 0) // filler, warnings
}
