package wire

import (
	"encoding/binary"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Column describes a result column the proxy produces itself (the SQL lease
// functions).
type Column struct {
	Name    string
	Type    byte
	Charset uint16
	Length  uint32
	Flags   uint16
}

// Character sets of columns the proxy produces.
const (
	CharsetBinary  = 63
	CharsetUTF8MB4 = 45 // utf8mb4_general_ci
)

// Definition is the column definition packet's payload (protocol 4.1).
func (col Column) Definition() []byte {
	b := make([]byte, 0, 32+len(col.Name))
	b = AppendLenEncString(b, "def")
	b = AppendLenEncString(b, "") // schema
	b = AppendLenEncString(b, "") // table
	b = AppendLenEncString(b, "") // org_table
	b = AppendLenEncString(b, col.Name)
	b = AppendLenEncString(b, "") // org_name
	b = append(b, 0x0c)
	b = binary.LittleEndian.AppendUint16(b, col.Charset)
	b = binary.LittleEndian.AppendUint32(b, col.Length)
	b = append(b, col.Type)
	b = binary.LittleEndian.AppendUint16(b, col.Flags)
	return append(b, 0, 0, 0) // decimals, filler
}

// terminator is the EOF packet (or, when ok, the OK packet with an 0xFE
// header that replaces it under CLIENT_DEPRECATE_EOF) with status flags st
// that ends column definitions or rows.
func terminator(st uint16, ok bool) []byte {
	if ok {
		return binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint16([]byte{mysql.EOF_HEADER, 0, 0}, st), 0)
	}
	return binary.LittleEndian.AppendUint16([]byte{mysql.EOF_HEADER, 0, 0}, st)
}

// OKPayload is an OK packet of affected rows, no insert id and no
// warnings, with status flags st.
func OKPayload(affected uint64, st uint16) []byte {
	b := mysql.AppendLengthEncodedInteger([]byte{mysql.OK_HEADER}, affected)
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint16(b, st)
	return append(b, 0, 0)
}

// WriteColumns writes column definitions from sequence number seq and,
// unless deprecateEOF, the EOF after them (status flags st), and returns
// the next sequence number.
func (p *Conn) WriteColumns(seq byte, cols []Column, deprecateEOF bool, st uint16) (byte, error) {
	var err error
	for _, col := range cols {
		if seq, err = p.WritePacket(seq, col.Definition()); err != nil {
			return seq, err
		}
	}
	if !deprecateEOF && len(cols) > 0 {
		seq, err = p.WritePacket(seq, terminator(st, false))
	}
	return seq, err
}

// WriteResultSet writes a complete result set from sequence number seq, in
// the text or the binary protocol, its EOF packets or terminator with
// status flags st.
func (p *Conn) WriteResultSet(seq byte, cols []Column, rows [][]Value, binaryRows, deprecateEOF bool, st uint16) error {
	seq, err := p.WritePacket(seq, mysql.AppendLengthEncodedInteger(nil, uint64(len(cols))))
	if err != nil {
		return err
	}
	if seq, err = p.WriteColumns(seq, cols, deprecateEOF, st); err != nil {
		return err
	}
	for _, row := range rows {
		var b []byte
		if binaryRows {
			b = BinaryRow(cols, row)
		} else {
			for _, v := range row {
				if v.Null {
					b = append(b, 0xfb)
				} else {
					b = AppendLenEncString(b, v.S)
				}
			}
		}
		if seq, err = p.WritePacket(seq, b); err != nil {
			return err
		}
	}
	_, err = p.WritePacket(seq, terminator(st, deprecateEOF))
	return err
}

// BinaryRow encodes a row of the binary protocol: integers as their fixed
// width, everything else as a length-encoded string.
func BinaryRow(cols []Column, row []Value) []byte {
	bitmap := make([]byte, (len(cols)+7+2)/8)
	p := append([]byte{0}, bitmap...)
	for i, v := range row {
		if v.Null {
			p[1+(i+2)/8] |= 1 << ((i + 2) % 8)
			continue
		}
		switch cols[i].Type {
		case mysql.MYSQL_TYPE_LONGLONG:
			n := parseUintOr0(v.S)
			p = binary.LittleEndian.AppendUint64(p, n)
		case mysql.MYSQL_TYPE_TINY:
			p = append(p, byte(parseUintOr0(v.S)))
		default:
			p = AppendLenEncString(p, v.S)
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
