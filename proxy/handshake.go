package proxy

import (
	"bytes"
	"encoding/binary"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// serverHandshake is the backend's initial handshake (protocol v10), kept as
// raw bytes plus the offsets of the fields the proxy edits or reads.
type serverHandshake struct {
	raw         []byte
	version     string
	connID      uint32
	caps        uint32 // lower and upper capability words
	charset     byte
	status      uint16
	scramble    []byte // auth-plugin-data, parts 1 and 2, without the trailing NUL
	plugin      string
	capsLowOff  int
	capsHighOff int
	mariaExtOff int // offset of MariaDB's 4 extended capability bytes, -1 if absent
}

func parseServerHandshake(p []byte) (*serverHandshake, error) {
	h := &serverHandshake{raw: append([]byte(nil), p...), mariaExtOff: -1, capsHighOff: -1}
	p = h.raw
	if len(p) < 1 || p[0] != mysql.ClassicProtocolVersion {
		return nil, wire.Malformed("backend handshake: protocol version %d", first(p))
	}
	i := 1
	end := bytes.IndexByte(p[i:], 0)
	if end < 0 {
		return nil, wire.Malformed("backend handshake: server version")
	}
	h.version = string(p[i : i+end])
	i += end + 1
	if len(p) < i+4+8+1+2 {
		return nil, wire.Malformed("backend handshake: too short")
	}
	h.connID = binary.LittleEndian.Uint32(p[i:])
	i += 4
	h.scramble = append(h.scramble, p[i:i+8]...)
	i += 8 + 1
	h.capsLowOff = i
	h.caps = uint32(binary.LittleEndian.Uint16(p[i:]))
	i += 2
	if len(p) == i {
		return h, nil
	}
	if len(p) < i+1+2+2+1+10 {
		return nil, wire.Malformed("backend handshake: truncated")
	}
	h.charset = p[i]
	h.status = binary.LittleEndian.Uint16(p[i+1:])
	h.capsHighOff = i + 3
	h.caps |= uint32(binary.LittleEndian.Uint16(p[i+3:])) << 16
	authLen := int(p[i+5])
	i += 6
	if h.caps&mysql.CLIENT_LONG_PASSWORD == 0 {
		// MariaDB clears CLIENT_MYSQL (bit 0) and puts extended
		// capabilities in the last 4 reserved bytes.
		h.mariaExtOff = i + 6
	}
	i += 10
	if h.caps&mysql.CLIENT_SECURE_CONNECTION != 0 {
		n := max(13, authLen-8)
		if len(p) < i+n {
			return nil, wire.Malformed("backend handshake: auth data")
		}
		part2 := p[i : i+n]
		h.scramble = append(h.scramble, bytes.TrimRight(part2, "\x00")...)
		i += n
	}
	if h.caps&mysql.CLIENT_PLUGIN_AUTH != 0 && i < len(p) {
		name := p[i:]
		if j := bytes.IndexByte(name, 0); j >= 0 {
			name = name[:j]
		}
		h.plugin = string(name)
	}
	return h, nil
}

func first(p []byte) int {
	if len(p) == 0 {
		return -1
	}
	return int(p[0])
}

// forClient is the handshake the proxy shows the client: the backend's own,
// with its salt and plugin (so the client's answer is valid for the backend),
// offering only the capabilities the proxy relays (capabilities.go), none
// of MariaDB's extended ones, and TLS as the proxy offers it.
func (h *serverHandshake) forClient(offerTLS bool) []byte {
	out := append([]byte(nil), h.raw...)
	caps := h.offeredCaps(offerTLS)
	binary.LittleEndian.PutUint16(out[h.capsLowOff:], uint16(caps))
	if h.capsHighOff >= 0 {
		binary.LittleEndian.PutUint16(out[h.capsHighOff:], uint16(caps>>16))
	}
	if h.mariaExtOff >= 0 {
		clear(out[h.mariaExtOff : h.mariaExtOff+4])
	}
	return out
}

// offeredCaps are the capabilities the client may use.
func (h *serverHandshake) offeredCaps(offerTLS bool) uint32 { return offeredTo(h.caps, offerTLS) }

// clientHandshake is the client's HandshakeResponse41, raw plus what the
// proxy reads from it.
type clientHandshake struct {
	raw      []byte
	caps     uint32
	charset  byte
	user     string
	db       string
	plugin   string
	authResp []byte
	program  string // the program_name connection attribute, "" if not sent
}

// sslRequestLen is the length of an SSLRequest: the response's fixed part.
const sslRequestLen = 32

func parseClientHandshake(p []byte) (*clientHandshake, error) {
	if len(p) < sslRequestLen {
		return nil, wire.Malformed("handshake response too short")
	}
	c := &clientHandshake{raw: append([]byte(nil), p...)}
	p = c.raw
	c.caps = binary.LittleEndian.Uint32(p)
	if c.caps&mysql.CLIENT_PROTOCOL_41 == 0 {
		return nil, wire.Malformed("client does not speak protocol 4.1")
	}
	c.charset = p[8]
	if len(p) == sslRequestLen {
		return c, nil // an SSLRequest
	}
	i := sslRequestLen
	end := bytes.IndexByte(p[i:], 0)
	if end < 0 {
		return nil, wire.Malformed("handshake response: user")
	}
	c.user = string(p[i : i+end])
	i += end + 1
	switch {
	case c.caps&mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0:
		n, k, _ := wire.LenEnc(p[i:])
		if k == 0 || uint64(len(p)-i-k) < n {
			return nil, wire.Malformed("handshake response: auth data")
		}
		c.authResp = p[i+k : i+k+int(n)]
		i += k + int(n)
	case c.caps&mysql.CLIENT_SECURE_CONNECTION != 0:
		if i >= len(p) || len(p)-i-1 < int(p[i]) {
			return nil, wire.Malformed("handshake response: auth data")
		}
		c.authResp = p[i+1 : i+1+int(p[i])]
		i += 1 + int(p[i])
	default:
		end := bytes.IndexByte(p[i:], 0)
		if end < 0 {
			return nil, wire.Malformed("handshake response: auth data")
		}
		c.authResp = p[i : i+end]
		i += end + 1
	}
	if c.caps&mysql.CLIENT_CONNECT_WITH_DB != 0 && i < len(p) {
		end := bytes.IndexByte(p[i:], 0)
		if end < 0 {
			end = len(p) - i
		}
		c.db = string(p[i : i+end])
		i += end + 1
	}
	if c.caps&mysql.CLIENT_PLUGIN_AUTH != 0 && i < len(p) {
		end := bytes.IndexByte(p[i:], 0)
		if end < 0 {
			end = len(p) - i
		}
		c.plugin = string(p[i : i+end])
		i += end + 1
	}
	if c.caps&mysql.CLIENT_CONNECT_ATTRS != 0 && i < len(p) {
		c.program = connectAttr(p[i:], "program_name")
	}
	return c, nil
}

// maxProgramName bounds what an audit record keeps of program_name.
const maxProgramName = 255

// connectAttr returns the value of connection attribute key in attrs (a
// length-encoded block of length-encoded key and value strings), or "".
// Attributes are only read for the audit: a malformed block is ignored,
// never an error, and the response is relayed as the client sent it.
func connectAttr(attrs []byte, key string) string {
	total, k, _ := wire.LenEnc(attrs)
	if k == 0 || uint64(len(attrs)-k) < total {
		return ""
	}
	block := attrs[k : k+int(total)]
	str := func() (string, bool) {
		n, k, _ := wire.LenEnc(block)
		if k == 0 || uint64(len(block)-k) < n {
			return "", false
		}
		s := string(block[k : k+int(n)])
		block = block[k+int(n):]
		return s, true
	}
	for len(block) > 0 {
		name, ok := str()
		if !ok {
			return ""
		}
		value, ok := str()
		if !ok {
			return ""
		}
		if name == key {
			if len(value) > maxProgramName {
				value = value[:maxProgramName]
			}
			return strings.ToValidUTF8(value, "?")
		}
	}
	return ""
}

// forBackend is the first n bytes of the client's response as sent to the
// backend: the fixed part rebuilt (rebuildResponse) with the client's
// capabilities that the proxy offered and relays, TLS as this hop
// negotiates it, and no extended capability; the rest as the client sent
// it.
func (c *clientHandshake) forBackend(offered uint32, backendTLS bool, n int) []byte {
	caps := c.caps & offered & relayedCaps
	if backendTLS {
		caps |= mysql.CLIENT_SSL
	}
	return rebuildResponse(c.raw, n, caps)
}

// changeUser is what the proxy reads of a COM_CHANGE_USER packet.
type changeUser struct {
	user       string
	db         string
	charset    uint16
	hasCharset bool
	plugin     string
}

func parseChangeUser(p []byte, caps uint32) (changeUser, error) {
	var cu changeUser
	i := 1
	end := bytes.IndexByte(p[i:], 0)
	if end < 0 {
		return cu, wire.Malformed("COM_CHANGE_USER: user")
	}
	cu.user = string(p[i : i+end])
	i += end + 1
	if caps&mysql.CLIENT_SECURE_CONNECTION != 0 {
		if i >= len(p) || len(p)-i-1 < int(p[i]) {
			return cu, wire.Malformed("COM_CHANGE_USER: auth data")
		}
		i += 1 + int(p[i])
	} else {
		end := bytes.IndexByte(p[i:], 0)
		if end < 0 {
			return cu, wire.Malformed("COM_CHANGE_USER: auth data")
		}
		i += end + 1
	}
	if i < len(p) {
		end := bytes.IndexByte(p[i:], 0)
		if end < 0 {
			end = len(p) - i
		}
		cu.db = string(p[i : i+end])
		i += end + 1
	}
	if i+2 <= len(p) {
		cu.charset = binary.LittleEndian.Uint16(p[i:])
		cu.hasCharset = true
		i += 2
	}
	if caps&mysql.CLIENT_PLUGIN_AUTH != 0 && i < len(p) {
		end := bytes.IndexByte(p[i:], 0)
		if end < 0 {
			end = len(p) - i
		}
		cu.plugin = string(p[i : i+end])
	}
	return cu, nil
}
