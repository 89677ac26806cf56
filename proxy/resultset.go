package proxy

import (
	"encoding/binary"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// column describes a result column the proxy produces itself (the SQL lease
// functions).
type column struct {
	name    string
	typ     byte
	charset uint16
	length  uint32
	flags   uint16
}

const (
	charsetBinary  = 63
	charsetUTF8MB4 = 45 // utf8mb4_general_ci
)

func (col column) definition() []byte {
	b := make([]byte, 0, 32+len(col.name))
	b = wire.AppendLenEncString(b, "def")
	b = wire.AppendLenEncString(b, "") // schema
	b = wire.AppendLenEncString(b, "") // table
	b = wire.AppendLenEncString(b, "") // org_table
	b = wire.AppendLenEncString(b, col.name)
	b = wire.AppendLenEncString(b, "") // org_name
	b = append(b, 0x0c)
	b = binary.LittleEndian.AppendUint16(b, col.charset)
	b = binary.LittleEndian.AppendUint32(b, col.length)
	b = append(b, col.typ)
	b = binary.LittleEndian.AppendUint16(b, col.flags)
	return append(b, 0, 0, 0) // decimals, filler
}

// ownStatus is the status flags of a packet the proxy writes itself: the
// session's, without SERVER_SESSION_STATE_CHANGED, which says session
// state follows in the packet (a client reads it there), and the proxy's
// packets carry none.
func (c *clientConn) ownStatus() uint16 { return c.status &^ mysql.SERVER_SESSION_STATE_CHANGED }

// terminator is the EOF packet (or, under CLIENT_DEPRECATE_EOF, the OK
// packet with an 0xFE header) that ends column definitions or rows.
func (c *clientConn) terminator(ok bool) []byte {
	st := c.ownStatus() &^ mysql.SERVER_MORE_RESULTS_EXISTS
	if ok {
		return binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint16([]byte{mysql.EOF_HEADER, 0, 0}, st), 0)
	}
	return binary.LittleEndian.AppendUint16([]byte{mysql.EOF_HEADER, 0, 0}, st)
}

// writeColumns writes column definitions and, unless CLIENT_DEPRECATE_EOF,
// the EOF after them.
func (c *clientConn) writeColumns(seq byte, cols []column) (byte, error) {
	var err error
	for _, col := range cols {
		if seq, err = c.client.WritePacket(seq, col.definition()); err != nil {
			return seq, err
		}
	}
	if !c.deprecateEOF && len(cols) > 0 {
		seq, err = c.client.WritePacket(seq, c.terminator(false))
	}
	return seq, err
}

// writeResultSet answers the current command with a complete result set in
// the text or the binary protocol.
func (c *clientConn) writeResultSet(cols []column, rows [][]value, binaryRows bool) error {
	c.x.started = true
	seq := c.x.cmdSeq + 1
	seq, err := c.client.WritePacket(seq, mysql.AppendLengthEncodedInteger(nil, uint64(len(cols))))
	if err != nil {
		return err
	}
	if seq, err = c.writeColumns(seq, cols); err != nil {
		return err
	}
	for _, row := range rows {
		var p []byte
		if binaryRows {
			p = binaryRow(cols, row)
		} else {
			for _, v := range row {
				if v.null {
					p = append(p, 0xfb)
				} else {
					p = wire.AppendLenEncString(p, v.s)
				}
			}
		}
		if seq, err = c.client.WritePacket(seq, p); err != nil {
			return err
		}
	}
	_, err = c.client.WritePacket(seq, c.terminator(c.deprecateEOF))
	return err
}

// binaryRow encodes a row of the binary protocol: integers as their fixed
// width, everything else as a length-encoded string.
func binaryRow(cols []column, row []value) []byte {
	bitmap := make([]byte, (len(cols)+7+2)/8)
	p := append([]byte{0}, bitmap...)
	for i, v := range row {
		if v.null {
			p[1+(i+2)/8] |= 1 << ((i + 2) % 8)
			continue
		}
		switch cols[i].typ {
		case mysql.MYSQL_TYPE_LONGLONG:
			n := parseUintOr0(v.s)
			p = binary.LittleEndian.AppendUint64(p, n)
		case mysql.MYSQL_TYPE_TINY:
			p = append(p, byte(parseUintOr0(v.s)))
		default:
			p = wire.AppendLenEncString(p, v.s)
		}
	}
	return p
}

func parseUintOr0(s string) uint64 {
	var n uint64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0
		}
		n = n*10 + uint64(s[i]-'0')
	}
	return n
}
