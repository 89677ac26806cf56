package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// The PROXY protocol (haproxy's proxy-protocol.txt, versions 1 and 2): a
// load balancer in front of the proxy opens each connection with a header
// naming the client's own address. Only sources in
// proxy_protocol.trusted_cidrs may send one, and they must: a source that
// may send a header could otherwise claim any address by sending one, or
// hide its own by not. The header is read before anything else happens on
// the connection (no backend is dialled yet), with the handshake timeout
// and a bounded length; whatever does not parse closes the connection.

const (
	proxyV1MaxLen = 107 // "PROXY TCP6 " + two IPv6 addresses + two ports + CRLF
	proxyV2HdrLen = 16
)

var (
	proxyV1Sig = []byte("PROXY ")
	proxyV2Sig = []byte("\r\n\r\n\x00\r\nQUIT\n")
)

// proxyHeader is what a PROXY header says. local: the connection is the
// load balancer's own (a health check: v2 LOCAL, v1 UNKNOWN, v2 UNSPEC or
// AF_UNIX), and its own address stands.
type proxyHeader struct {
	version  int
	local    bool
	src, dst netip.AddrPort
}

var errProxyHeader = errors.New("PROXY protocol")

func proxyErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errProxyHeader, fmt.Sprintf(format, a...))
}

// readProxyHeader reads one PROXY header (v1 or v2) from r and nothing
// after it: a client speaks only after the server's greeting, so bytes
// past a v1 header in the same read are a protocol violation too.
func readProxyHeader(r io.Reader) (proxyHeader, error) {
	var buf [proxyV1MaxLen]byte
	// Six bytes tell the versions apart: "PROXY " or the start of v2's
	// signature. The shortest header, v1's "PROXY UNKNOWN\r\n", has 15.
	if _, err := io.ReadFull(r, buf[:6]); err != nil {
		return proxyHeader{}, readErr(err)
	}
	switch {
	case bytes.Equal(buf[:6], proxyV1Sig):
		n := 6
		for {
			if i := bytes.Index(buf[:n], []byte("\r\n")); i >= 0 {
				if i+2 != n {
					return proxyHeader{}, proxyErr("data after the v1 header before the server's greeting")
				}
				return parseProxyV1(string(buf[:i]))
			}
			if n == len(buf) {
				return proxyHeader{}, proxyErr("v1 header longer than %d bytes", proxyV1MaxLen)
			}
			m, err := r.Read(buf[n:])
			n += m
			if err != nil && m == 0 {
				return proxyHeader{}, readErr(err)
			}
		}
	case bytes.Equal(buf[:6], proxyV2Sig[:6]):
		if _, err := io.ReadFull(r, buf[6:proxyV2HdrLen]); err != nil {
			return proxyHeader{}, readErr(err)
		}
		if !bytes.Equal(buf[:12], proxyV2Sig) {
			return proxyHeader{}, proxyErr("bad v2 signature")
		}
		body := make([]byte, binary.BigEndian.Uint16(buf[14:16]))
		if _, err := io.ReadFull(r, body); err != nil {
			return proxyHeader{}, readErr(err)
		}
		return parseProxyV2(buf[12], buf[13], body)
	}
	return proxyHeader{}, proxyErr("no PROXY header (the connection starts with %q)", buf[:6])
}

func readErr(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return proxyErr("connection closed inside the header")
	}
	return fmt.Errorf("%w: %w", errProxyHeader, err)
}

// parseProxyV1 reads "PROXY TCP4 src dst sport dport" (CRLF removed).
func parseProxyV1(line string) (proxyHeader, error) {
	f := strings.Split(line, " ")
	if len(f) >= 2 && f[1] == "UNKNOWN" {
		return proxyHeader{version: 1, local: true}, nil // the rest is to be ignored
	}
	if len(f) != 6 || f[0] != "PROXY" {
		return proxyHeader{}, proxyErr("v1 header %q: want PROXY TCP4|TCP6 src dst srcport dstport", line)
	}
	src, err1 := netip.ParseAddr(f[2])
	dst, err2 := netip.ParseAddr(f[3])
	sport, err3 := parsePort(f[4])
	dport, err4 := parsePort(f[5])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return proxyHeader{}, proxyErr("v1 header %q: %v", line, err)
	}
	switch f[1] {
	case "TCP4":
		if !src.Is4() || !dst.Is4() {
			return proxyHeader{}, proxyErr("v1 header %q: TCP4 with an address that is not IPv4", line)
		}
	case "TCP6":
		if !src.Is6() || !dst.Is6() {
			return proxyHeader{}, proxyErr("v1 header %q: TCP6 with an address that is not IPv6", line)
		}
	default:
		return proxyHeader{}, proxyErr("v1 header %q: protocol %q is not TCP4, TCP6 or UNKNOWN", line, f[1])
	}
	return proxyHeader{version: 1, src: netip.AddrPortFrom(src, sport), dst: netip.AddrPortFrom(dst, dport)}, nil
}

func parsePort(s string) (uint16, error) {
	if s == "" || len(s) > 5 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("port %q", s)
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("port %q", s)
	}
	return uint16(n), nil
}

// parseProxyV2 reads v2's version and command byte, family and transport
// byte, and the body (addresses, then TLVs, which are skipped).
func parseProxyV2(verCmd, fam byte, body []byte) (proxyHeader, error) {
	if verCmd>>4 != 2 {
		return proxyHeader{}, proxyErr("v2 header with version %d", verCmd>>4)
	}
	switch verCmd & 0xf {
	case 0: // LOCAL: the load balancer's own connection; the body is ignored
		return proxyHeader{version: 2, local: true}, nil
	case 1: // PROXY
	default:
		return proxyHeader{}, proxyErr("v2 header with command %d", verCmd&0xf)
	}
	switch fam {
	case 0x00: // UNSPEC: the receiver ignores the addresses
		return proxyHeader{version: 2, local: true}, nil
	case 0x11: // TCP over IPv4
		if len(body) < 12 {
			return proxyHeader{}, proxyErr("v2 TCP4 addresses in %d bytes, want 12", len(body))
		}
		src := netip.AddrFrom4([4]byte(body[0:4]))
		dst := netip.AddrFrom4([4]byte(body[4:8]))
		return proxyHeader{version: 2, src: netip.AddrPortFrom(src, binary.BigEndian.Uint16(body[8:10])),
			dst: netip.AddrPortFrom(dst, binary.BigEndian.Uint16(body[10:12]))}, nil
	case 0x21: // TCP over IPv6
		if len(body) < 36 {
			return proxyHeader{}, proxyErr("v2 TCP6 addresses in %d bytes, want 36", len(body))
		}
		src := netip.AddrFrom16([16]byte(body[0:16]))
		dst := netip.AddrFrom16([16]byte(body[16:32]))
		return proxyHeader{version: 2, src: netip.AddrPortFrom(src, binary.BigEndian.Uint16(body[32:34])),
			dst: netip.AddrPortFrom(dst, binary.BigEndian.Uint16(body[34:36]))}, nil
	case 0x31: // a Unix stream socket: no address to carry; the connection's stands
		if len(body) < 216 {
			return proxyHeader{}, proxyErr("v2 UNIX addresses in %d bytes, want 216", len(body))
		}
		return proxyHeader{version: 2, local: true}, nil
	}
	return proxyHeader{}, proxyErr("v2 header for family and transport 0x%02x: only TCP (and UNSPEC, UNIX stream) is relayed", fam)
}

// trusts reports whether addr may (and must) send a PROXY header.
func trusts(trusted []netip.Prefix, addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	if !ok || len(trusted) == 0 {
		return false
	}
	ip := ta.AddrPort().Addr().Unmap()
	for _, p := range trusted {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// identifyPeer finds out where a connection comes from when its socket's
// address does not say: a Unix socket's peer process, or the client a
// trusted load balancer names in its PROXY header. false: the connection
// was refused and must be closed.
func (c *clientConn) identifyPeer(rt *runtime, nc net.Conn) bool {
	if p := unixPeer(nc); p != "" {
		c.setPeer(p, "")
		return true
	}
	return c.acceptProxyHeader(rt, nc)
}

// acceptProxyHeader reads the PROXY header of a connection from a trusted
// source and takes the client's address from it; false: the connection
// was refused (an ERR packet in place of the greeting says why) and must
// be closed. Connections from other sources pass untouched:
// refuseStrayProxyHeader catches their headers at the handshake.
func (c *clientConn) acceptProxyHeader(rt *runtime, nc net.Conn) bool {
	if !trusts(rt.trusted, nc.RemoteAddr()) {
		return true
	}
	timeout := rt.cfg.Timeouts.Handshake.D()
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	nc.SetReadDeadline(time.Now().Add(timeout))
	h, err := readProxyHeader(nc)
	nc.SetReadDeadline(time.Time{})
	if err != nil {
		c.p.metrics.connectionsRejected[rejectProxyProtocol].Inc()
		msg := "fenceproxy: malformed PROXY protocol header"
		if isTimeout(err) {
			msg = "fenceproxy: connections from " + c.remote() + " must start with a PROXY protocol header (proxy_protocol.trusted_cidrs)"
		}
		c.sendInitialError(msg)
		if c.p.logLimit.Allow(logKey(msgProxyRefused, "proxy_protocol", "")) {
			c.log().Warn(msgProxyRefused, "err", err)
		}
		return false
	}
	if !h.local {
		c.setPeer(h.src.String(), c.remote())
	}
	return true
}

const msgProxyRefused = "connection refused: PROXY protocol"

// refuseStrayProxyHeader refuses a connection that opened with a PROXY
// header although its source is not trusted to send one (it would be read
// as a handshake response of a few megabytes). Called before the
// handshake response is read; reading it afterwards is harmless.
func (c *clientConn) refuseStrayProxyHeader() error {
	b := c.client.PeekStart(4)
	if b == nil || !bytes.Equal(b, proxyV1Sig[:4]) && !bytes.Equal(b, proxyV2Sig[:4]) {
		return nil
	}
	c.p.metrics.connectionsRejected[rejectProxyProtocol].Inc()
	c.writeAuthError(2, erHandshake, "08S01", "fenceproxy: PROXY protocol header from "+c.remote()+
		", which proxy_protocol.trusted_cidrs does not include")
	if c.p.logLimit.Allow(logKey(msgProxyRefused, "untrusted", "")) {
		c.log().Warn(msgProxyRefused, "err", "a PROXY header from a source not in proxy_protocol.trusted_cidrs")
	}
	return c.client.Err(wire.Malformed("PROXY protocol header from an untrusted source"))
}
