package wire

import (
	"bytes"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// AuthKind is what a packet of the server's side of the authentication
// exchange is.
type AuthKind uint8

// The packets a server sends while it authenticates a client.
const (
	AuthOK       AuthKind = iota + 1 // logged in
	AuthErr                          // refused
	AuthSwitch                       // AuthSwitchRequest: another plugin, a new challenge
	AuthMoreData                     // the plugin's own data (caching_sha2_password's steps, a public key)
)

// AuthPacket is a decoded packet of the server's side of authentication.
type AuthPacket struct {
	Kind AuthKind
	// AuthOK: the OK, and whether it parsed (a login's OK carries the
	// session's first status flags).
	OK      OKPacket
	OKValid bool
	Err     ErrInfo // AuthErr
	// AuthSwitch: the plugin named, and its challenge without trailing
	// NULs (in place in the payload).
	Plugin    string
	Challenge []byte
	More      []byte // AuthMoreData: the data after the header (in place)
}

// ParseAuth decodes p, the payload of a packet of the server's side of
// authentication; an empty or unknown packet is malformed.
func ParseAuth(p []byte) (AuthPacket, error) {
	var a AuthPacket
	if len(p) == 0 {
		return a, Malformed("empty authentication packet")
	}
	switch p[0] {
	case mysql.OK_HEADER:
		a.Kind = AuthOK
		a.OK, a.OKValid = ParseOK(p)
	case mysql.ERR_HEADER:
		a.Kind = AuthErr
		a.Err = ParseErr(p)
	case mysql.EOF_HEADER: // plugin name, then its challenge
		a.Kind = AuthSwitch
		name, data, _ := bytes.Cut(p[1:], []byte{0})
		a.Plugin = string(name)
		a.Challenge = bytes.TrimRight(data, "\x00")
	case mysql.MORE_DATE_HEADER:
		a.Kind = AuthMoreData
		a.More = p[1:]
	default:
		return a, Malformed("authentication packet 0x%02x", p[0])
	}
	return a, nil
}

// SHA2FastAuth: caching_sha2_password's fast authentication succeeded; the
// server's OK follows unasked.
func (a AuthPacket) SHA2FastAuth() bool {
	return a.Kind == AuthMoreData && len(a.More) == 1 && a.More[0] == mysql.CACHE_SHA2_FAST_AUTH
}

// SHA2FullAuth: caching_sha2_password asks for the full authentication
// (the password, in clear under TLS, else RSA-encrypted).
func (a AuthPacket) SHA2FullAuth() bool {
	return a.Kind == AuthMoreData && len(a.More) == 1 && a.More[0] == mysql.CACHE_SHA2_FULL_AUTH
}

// MoreDataPayload is an AuthMoreData packet carrying data.
func MoreDataPayload(data []byte) []byte {
	return append([]byte{mysql.MORE_DATE_HEADER}, data...)
}
