package wire

import (
	"encoding/binary"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// LenEnc decodes a length-encoded integer at the start of b. null is set for
// 0xFB; n is the number of bytes used (0 when b is too short).
func LenEnc(b []byte) (v uint64, n int, null bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	switch b[0] {
	case 0xfb:
		return 0, 1, true
	case 0xfc:
		if len(b) < 3 {
			return 0, 0, false
		}
		return uint64(binary.LittleEndian.Uint16(b[1:])), 3, false
	case 0xfd:
		if len(b) < 4 {
			return 0, 0, false
		}
		return uint64(b[1]) | uint64(b[2])<<8 | uint64(b[3])<<16, 4, false
	case 0xfe:
		if len(b) < 9 {
			return 0, 0, false
		}
		return binary.LittleEndian.Uint64(b[1:]), 9, false
	case 0xff:
		return 0, 0, false
	}
	return uint64(b[0]), 1, false
}

func AppendLenEncString(b []byte, s string) []byte {
	return append(mysql.AppendLengthEncodedInteger(b, uint64(len(s))), s...)
}

// OKPacket is the part of an OK packet the proxy needs.
type OKPacket struct {
	AffectedRows uint64
	LastInsertID uint64
	Status       uint16
	Warnings     uint16
	InfoOff      int // offset of the info field in the payload
}

// ParseOK reads an OK packet payload (header 0x00, or 0xFE when it ends a
// result set under CLIENT_DEPRECATE_EOF).
func ParseOK(p []byte) (OKPacket, bool) {
	var ok OKPacket
	if len(p) < 1 {
		return ok, false
	}
	i := 1
	v, n, _ := LenEnc(p[i:])
	if n == 0 {
		return ok, false
	}
	ok.AffectedRows = v
	i += n
	if v, n, _ = LenEnc(p[i:]); n == 0 {
		return ok, false
	}
	ok.LastInsertID = v
	i += n
	if len(p) < i+4 {
		return ok, false
	}
	ok.Status = binary.LittleEndian.Uint16(p[i:])
	ok.Warnings = binary.LittleEndian.Uint16(p[i+2:])
	ok.InfoOff = i + 4
	return ok, true
}

// EOFStatus returns the status flags of an EOF packet payload, or of the OK
// packet that replaces it under CLIENT_DEPRECATE_EOF.
func EOFStatus(p []byte, deprecateEOF bool) (uint16, bool) {
	if deprecateEOF && len(p) > 5 {
		ok, valid := ParseOK(p)
		return ok.Status, valid
	}
	if len(p) < 5 {
		return 0, false
	}
	return binary.LittleEndian.Uint16(p[3:]), true
}

// IsTerminator tells whether a packet starting with 0xFE ends a result set
// (EOF, or OK under CLIENT_DEPRECATE_EOF) rather than being a row whose first
// value has an 8-byte length, which makes it at least MaxPayload long.
func IsTerminator(first byte, length int) bool {
	return first == mysql.EOF_HEADER && length < MaxPayload
}

// InitialErrPayload builds an ERR packet sent instead of the greeting, in
// the form a server uses there: no protocol 4.1 SQLSTATE marker, since no
// capabilities were agreed yet (what a server at max_connections sends).
func InitialErrPayload(code uint16, msg string) []byte {
	b := make([]byte, 0, 3+len(msg))
	b = append(b, mysql.ERR_HEADER, byte(code), byte(code>>8))
	return append(b, msg...)
}

// ErrPayload builds an ERR packet payload (protocol 4.1 form).
func ErrPayload(code uint16, state, msg string) []byte {
	b := make([]byte, 0, 9+len(msg))
	b = append(b, mysql.ERR_HEADER, byte(code), byte(code>>8), '#')
	b = append(b, state[:5]...)
	return append(b, msg...)
}

// ErrInfo is a decoded ERR packet.
type ErrInfo struct {
	Code  uint16
	State string
	Msg   string
}

// ServerError is an ERR the backend returned to a statement of the proxy's
// own, as an error.
type ServerError struct{ ErrInfo }

func (e *ServerError) Error() string {
	return fmt.Sprintf("backend error %d (%s): %s", e.Code, e.State, e.Msg)
}

// ErrorNumber is the server's error number: lease.IsConflict reads it to
// retry the SQL lease functions' statements on Galera's 1213.
func (e *ServerError) ErrorNumber() uint16 { return e.Code }

func ParseErr(p []byte) ErrInfo {
	var e ErrInfo
	if len(p) < 3 {
		return e
	}
	e.Code = binary.LittleEndian.Uint16(p[1:])
	rest := p[3:]
	if len(rest) >= 6 && rest[0] == '#' {
		e.State = string(rest[1:6])
		rest = rest[6:]
	}
	e.Msg = string(rest)
	return e
}

// StatusOffset is where the status flags of p, the payload of an OK (or an
// EOF packet, when eof), start; ok is false when p is not such a packet.
func StatusOffset(p []byte, eof bool) (int, bool) {
	off := 3 // EOF: header, warnings, status
	if !eof {
		ok, valid := ParseOK(p)
		if !valid {
			return 0, false
		}
		off = ok.InfoOff - 4
	}
	return off, len(p) >= off+2
}

// Warnings is the warning count of p, the payload of an OK packet (or an
// EOF packet, when eof); 0 when p is not one.
func Warnings(p []byte, eof bool) uint16 {
	if eof {
		if len(p) < 3 {
			return 0
		}
		return binary.LittleEndian.Uint16(p[1:])
	}
	ok, valid := ParseOK(p)
	if !valid {
		return 0
	}
	return ok.Warnings
}

// IsErr reports whether p, a packet's payload, is an ERR packet.
func IsErr(p []byte) bool { return len(p) > 0 && p[0] == mysql.ERR_HEADER }
