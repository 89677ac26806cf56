package proxy

import (
	"encoding/binary"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// lenEnc decodes a length-encoded integer at the start of b. null is set for
// 0xFB; n is the number of bytes used (0 when b is too short).
func lenEnc(b []byte) (v uint64, n int, null bool) {
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

func appendLenEncString(b []byte, s string) []byte {
	return append(mysql.AppendLengthEncodedInteger(b, uint64(len(s))), s...)
}

// okPacket is the part of an OK packet the proxy needs.
type okPacket struct {
	affectedRows uint64
	lastInsertID uint64
	status       uint16
	warnings     uint16
	infoOff      int // offset of the info field in the payload
}

// parseOK reads an OK packet payload (header 0x00, or 0xFE when it ends a
// result set under CLIENT_DEPRECATE_EOF).
func parseOK(p []byte) (okPacket, bool) {
	var ok okPacket
	if len(p) < 1 {
		return ok, false
	}
	i := 1
	v, n, _ := lenEnc(p[i:])
	if n == 0 {
		return ok, false
	}
	ok.affectedRows = v
	i += n
	if v, n, _ = lenEnc(p[i:]); n == 0 {
		return ok, false
	}
	ok.lastInsertID = v
	i += n
	if len(p) < i+4 {
		return ok, false
	}
	ok.status = binary.LittleEndian.Uint16(p[i:])
	ok.warnings = binary.LittleEndian.Uint16(p[i+2:])
	ok.infoOff = i + 4
	return ok, true
}

// eofStatus returns the status flags of an EOF packet payload, or of the OK
// packet that replaces it under CLIENT_DEPRECATE_EOF.
func eofStatus(p []byte, deprecateEOF bool) (uint16, bool) {
	if deprecateEOF && len(p) > 5 {
		ok, valid := parseOK(p)
		return ok.status, valid
	}
	if len(p) < 5 {
		return 0, false
	}
	return binary.LittleEndian.Uint16(p[3:]), true
}

// isTerminator tells whether a packet starting with 0xFE ends a result set
// (EOF, or OK under CLIENT_DEPRECATE_EOF) rather than being a row whose first
// value has an 8-byte length, which makes it at least maxPayload long.
func isTerminator(first byte, length int) bool {
	return first == mysql.EOF_HEADER && length < maxPayload
}

// Error codes and states the proxy itself answers with.
const (
	erConCount             = 1040 // ER_CON_COUNT_ERROR: too many connections
	erHandshake            = 1043 // ER_HANDSHAKE_ERROR
	erAccessDenied         = 1045 // ER_ACCESS_DENIED_ERROR
	erNotAllowed           = 1148 // ER_NOT_ALLOWED_COMMAND: statement refused
	erParse                = 1064 // ER_PARSE_ERROR: a statement no row of the statement kinds starts
	erNetPacketTooBig      = 1153 // ER_NET_PACKET_TOO_LARGE
	erNetPacketsOutOfOrder = 1156 // ER_NET_PACKETS_OUT_OF_ORDER
	erSecureTransport      = 3159 // ER_SECURE_TRANSPORT_REQUIRED
	erSignal               = 1644 // ER_SIGNAL_EXCEPTION, what SIGNAL SQLSTATE '45000' gives: a stale write in on_stale: error
	erUnknownComError      = 1047 // ER_UNKNOWN_COM_ERROR

	// erBackendLost answers the command in flight when the backend
	// connection broke before any of its response reached the client (in
	// the middle of a command, or after the client sat idle in a
	// transaction): the session, and any open transaction with it, is gone.
	// ER_SERVER_SHUTDOWN, SQLSTATE 08S01 (communication link failure), in
	// MariaDB's and MySQL's ranges alike. Never a 2xxx code (CR_SERVER_LOST
	// 2013 is the client library's own): libmariadb reports a server that
	// sends one as "2027 Received malformed packet" (measured with the
	// mariadb 10.11 client; it shows 1053, 1927, 1158, 1159, 4031 and 9001
	// with their text). go-sql-driver shows "Error 1053 (08S01): ..." and
	// discards the connection on its next use; Node's mysql2 names it
	// ER_SERVER_SHUTDOWN, then reports PROTOCOL_CONNECTION_LOST (fatal)
	// as the proxy closes the connection.
	erBackendLost    = 1053
	stateBackendLost = "08S01"

	// erBackendUnavailable answers a client, in place of the greeting,
	// when the proxy cannot reach the backend or the backend's greeting is
	// unusable. Not 2003 (CR_CONN_HOST_ERROR) or any 2xxx code: those are
	// the client library's own, and libmariadb reports a server that sends
	// one as "Received malformed packet" (2027). 9001 is what ProxySQL
	// sends in the same case.
	erBackendUnavailable = 9001
)

// clientRange reports whether code is in the client libraries' own range
// (CR_*, 2000-2999), which the proxy never sends: a test holds every code
// it answers with against it.
func clientRange(code uint16) bool { return code >= 2000 && code < 3000 }

// initialErrPayload builds an ERR packet sent instead of the greeting, in
// the form a server uses there: no protocol 4.1 SQLSTATE marker, since no
// capabilities were agreed yet (what a server at max_connections sends).
func initialErrPayload(code uint16, msg string) []byte {
	b := make([]byte, 0, 3+len(msg))
	b = append(b, mysql.ERR_HEADER, byte(code), byte(code>>8))
	return append(b, msg...)
}

// errPayload builds an ERR packet payload (protocol 4.1 form).
func errPayload(code uint16, state, msg string) []byte {
	b := make([]byte, 0, 9+len(msg))
	b = append(b, mysql.ERR_HEADER, byte(code), byte(code>>8), '#')
	b = append(b, state[:5]...)
	return append(b, msg...)
}

// errInfo is a decoded ERR packet.
type errInfo struct {
	code  uint16
	state string
	msg   string
}

func parseErr(p []byte) errInfo {
	var e errInfo
	if len(p) < 3 {
		return e
	}
	e.code = binary.LittleEndian.Uint16(p[1:])
	rest := p[3:]
	if len(rest) >= 6 && rest[0] == '#' {
		e.state = string(rest[1:6])
		rest = rest[6:]
	}
	e.msg = string(rest)
	return e
}
