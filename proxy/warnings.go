package proxy

import (
	"bytes"
	"encoding/binary"
	"strconv"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// TiDB empties SHOW WARNINGS at every statement but SHOW WARNINGS itself,
// COMMIT included, so the COMMIT of the transaction the proxy wraps around
// an autocommit guarded write would leave the client's next SHOW WARNINGS
// empty where a direct session lists the write's warnings. guardedWrite
// reads SHOW WARNINGS before that COMMIT and keeps TiDB's packets (c.warn)
// when the write's OK counted warnings or the write failed; the client's
// next command, if it is exactly SHOW WARNINGS or SHOW COUNT(*) WARNINGS
// (neither empties them on TiDB), gets them, and anything else drops them
// (what it does on the server empties the warnings there too). Measured on
// tidb-server v8.4.0: the response inside the transaction is byte for byte
// the direct session's but for SERVER_STATUS_IN_TRANS in its EOF packets.
// @@warning_count goes to the server as before (its column is named as
// the client wrote it).

// keptWarnings is TiDB's SHOW WARNINGS response (pkts) and the count SHOW
// COUNT(*) WARNINGS gives: the OK's warning count, which may exceed the
// rows (max_error_count), or the rows after an ERR.
type keptWarnings struct {
	pkts  warnPackets
	count uint64
}

// warnPackets are the packets of a SHOW WARNINGS response.
type warnPackets [][]byte

// rows counts the rows: column definitions start with "def", SHOW
// WARNINGS' rows with a level, terminators with 0xFE.
func (w warnPackets) rows() int {
	n := 0
	if len(w) == 0 {
		return 0
	}
	for _, p := range w[1:] {
		if len(p) > 0 && p[0] != mysql.EOF_HEADER && !bytes.HasPrefix(p, []byte("\x03def")) {
			n++
		}
	}
	return n
}

// readWarnings reads the response to the proxy's SHOW WARNINGS: its
// packets, or nil when it failed.
func (c *clientConn) readWarnings() (warnPackets, error) {
	r := warnReader{c: c}
	if err := c.walkResponse(&r); err != nil {
		return nil, err
	}
	if r.failed {
		return nil, nil
	}
	return r.pkts, nil
}

// warnReader keeps every packet of a response.
type warnReader struct {
	c      *clientConn
	pkts   warnPackets
	failed bool
}

func (w *warnReader) peeked(n int) error {
	pkt, err := w.c.backend.Packet(n)
	if err != nil {
		return err
	}
	w.pkts = append(w.pkts, bytes.Clone(pkt[wire.HeaderLen:]))
	w.c.takeBackendPacket(n)
	return nil
}

func (w *warnReader) read() error {
	p, _, err := w.c.backend.ReadPacket(nil, wire.MaxWholePacket)
	if err != nil {
		return err
	}
	w.pkts = append(w.pkts, p)
	return nil
}

func (w *warnReader) ok(_ []byte, n int, _ wire.OKPacket, _ bool) error {
	w.failed = true // SHOW WARNINGS answers with rows
	w.c.takeBackendPacket(n)
	return nil
}

func (w *warnReader) err(_ []byte, n int, _ bool) error {
	w.failed = true
	w.c.takeBackendPacket(n)
	return nil
}

func (w *warnReader) localInfile() error {
	return w.c.backend.Err(wire.Malformed("LOCAL INFILE request in the response to SHOW WARNINGS"))
}

func (w *warnReader) eof() error {
	w.failed = true
	return w.read()
}

func (w *warnReader) setStart(uint64) error                { return w.read() }
func (w *warnReader) meta() error                          { return w.read() }
func (w *warnReader) metaEnd(n int, _ uint16) error        { return w.peeked(n) }
func (w *warnReader) row() error                           { return w.read() }
func (w *warnReader) setEnd(n int, _ uint16, _ bool) error { return w.peeked(n) }
func (w *warnReader) setDone(uint16)                       {}

// heldWarnings is the warning count of a held final packet.
func heldWarnings(h heldPacket) uint16 {
	if h.eof {
		if len(h.p) < 3 {
			return 0
		}
		return binary.LittleEndian.Uint16(h.p[1:])
	}
	ok, valid := wire.ParseOK(h.p)
	if !valid {
		return 0
	}
	return ok.Warnings
}

// isShow reports whether sql is exactly SHOW followed by words (any case
// and spacing, an optional semicolon); other forms (LIMIT, comments) go to
// the server.
func isShow(sql []byte, words ...string) bool {
	sql = bytes.TrimRight(bytes.TrimSpace(sql), "; \t\r\n")
	f := bytes.Fields(sql)
	if len(f) != len(words)+1 || !bytes.EqualFold(f[0], []byte("SHOW")) {
		return false
	}
	for i, w := range words {
		if !bytes.EqualFold(f[i+1], []byte(w)) {
			return false
		}
	}
	return true
}

// answerWarnings answers SHOW WARNINGS with the kept packets, the status
// flags of their EOF packets those after the proxy's COMMIT, and keeps them
// for another SHOW WARNINGS (which does not empty them on the server).
func (c *clientConn) answerWarnings() error {
	c.warn = c.prevWarn
	c.x.started = true
	seq := c.x.cmdSeq + 1
	pkts := c.warn.pkts
	for i, p := range pkts {
		out := p
		if i > 0 && len(p) > 0 && p[0] == mysql.EOF_HEADER && len(p) < 0xffffff {
			// Column definitions start with "def", SHOW WARNINGS' rows
			// with a level: only terminators start with 0xFE.
			out = bytes.Clone(p)
			off, ok := wire.StatusOffset(out, !c.deprecateEOF || i < len(pkts)-1)
			if !ok {
				return c.backend.Err(wire.Malformed("SHOW WARNINGS terminator"))
			}
			st := binary.LittleEndian.Uint16(out[off:]) &^ (mysql.SERVER_STATUS_IN_TRANS | mysql.SERVER_STATUS_IN_TRANS_READONLY)
			binary.LittleEndian.PutUint16(out[off:], c.x.endStatus(st))
		}
		var err error
		if seq, err = c.client.WritePacket(seq, out); err != nil {
			return err
		}
	}
	return nil
}

// warnCountCol is TiDB's column of SHOW COUNT(*) WARNINGS (captured).
var warnCountCol = column{name: "Count", typ: mysql.MYSQL_TYPE_LONG, charset: charsetBinary, length: 11}

// answerWarningCount answers SHOW COUNT(*) WARNINGS from the kept
// warnings, and keeps them.
func (c *clientConn) answerWarningCount() error {
	c.warn = c.prevWarn
	return c.writeResultSet([]column{warnCountCol}, [][]value{{{s: strconv.FormatUint(c.warn.count, 10)}}}, false)
}
