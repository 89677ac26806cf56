package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"testing/iotest"
)

// v2 builds a v2 header: command, family byte, address block, TLVs.
func v2(cmd, fam byte, addrs []byte, tlvs ...[]byte) []byte {
	body := append([]byte{}, addrs...)
	for _, t := range tlvs {
		body = append(body, t...)
	}
	b := append([]byte{}, proxyV2Sig...)
	b = append(b, 0x20|cmd, fam)
	b = binary.BigEndian.AppendUint16(b, uint16(len(body)))
	return append(b, body...)
}

func tlv(typ byte, value string) []byte {
	b := []byte{typ}
	b = binary.BigEndian.AppendUint16(b, uint16(len(value)))
	return append(b, value...)
}

func addrs4(src, dst string, sport, dport uint16) []byte {
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	b := append(s[:], d[:]...)
	b = binary.BigEndian.AppendUint16(b, sport)
	return binary.BigEndian.AppendUint16(b, dport)
}

func addrs6(src, dst string, sport, dport uint16) []byte {
	s, d := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	b := append(s[:], d[:]...)
	b = binary.BigEndian.AppendUint16(b, sport)
	return binary.BigEndian.AppendUint16(b, dport)
}

func TestReadProxyHeader(t *testing.T) {
	for _, tt := range []struct {
		name  string
		in    []byte
		src   string // "" with local
		local bool
		err   string
	}{
		{name: "v1 TCP4", in: []byte("PROXY TCP4 192.0.2.10 198.51.100.1 51234 6033\r\n"), src: "192.0.2.10:51234"},
		{name: "v1 TCP6", in: []byte("PROXY TCP6 2001:db8::7 2001:db8::1 40000 6033\r\n"), src: "[2001:db8::7]:40000"},
		{name: "v1 TCP6 longest", in: []byte("PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n"),
			src: "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"},
		{name: "v1 UNKNOWN", in: []byte("PROXY UNKNOWN\r\n"), local: true},
		{name: "v1 UNKNOWN with addresses", in: []byte("PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n"), local: true},
		{name: "v2 PROXY TCP4", in: v2(1, 0x11, addrs4("192.0.2.10", "198.51.100.1", 51234, 6033)), src: "192.0.2.10:51234"},
		{name: "v2 PROXY TCP6", in: v2(1, 0x21, addrs6("2001:db8::7", "2001:db8::1", 40000, 6033)), src: "[2001:db8::7]:40000"},
		{name: "v2 TLVs skipped", in: v2(1, 0x11, addrs4("192.0.2.10", "198.51.100.1", 1, 2), tlv(0x05, "unique-id-42"), tlv(0x20, strings.Repeat("s", 300))),
			src: "192.0.2.10:1"},
		{name: "v2 LOCAL", in: v2(0, 0x00, nil), local: true},
		{name: "v2 LOCAL with a body", in: v2(0, 0x11, addrs4("10.0.0.1", "10.0.0.2", 1, 2)), local: true},
		{name: "v2 PROXY UNSPEC", in: v2(1, 0x00, nil), local: true},
		{name: "v2 PROXY UNIX", in: v2(1, 0x31, make([]byte, 216)), local: true},

		{name: "not a header", in: []byte("\x20\x00\x00\x01\x85\xa6\xff\x01"), err: "no PROXY header"},
		{name: "v1 without CRLF", in: []byte("PROXY TCP4 192.0.2.10 198.51.100.1 51234 6033\n"), err: "closed inside the header"},
		{name: "v1 too long", in: []byte("PROXY TCP4 " + strings.Repeat("1", 120) + "\r\n"), err: "longer than 107 bytes"},
		{name: "v1 data after the header", in: []byte("PROXY TCP4 192.0.2.10 198.51.100.1 1 2\r\nxyz"), err: "data after the v1 header"},
		{name: "v1 TCP4 with IPv6", in: []byte("PROXY TCP4 2001:db8::7 198.51.100.1 1 2\r\n"), err: "not IPv4"},
		{name: "v1 TCP6 with IPv4", in: []byte("PROXY TCP6 192.0.2.10 198.51.100.1 1 2\r\n"), err: "not IPv6"},
		{name: "v1 UDP4", in: []byte("PROXY UDP4 192.0.2.10 198.51.100.1 1 2\r\n"), err: `protocol "UDP4"`},
		{name: "v1 bad port", in: []byte("PROXY TCP4 192.0.2.10 198.51.100.1 65536 2\r\n"), err: `port "65536"`},
		{name: "v1 signed port", in: []byte("PROXY TCP4 192.0.2.10 198.51.100.1 +1 2\r\n"), err: `port "+1"`},
		{name: "v1 missing field", in: []byte("PROXY TCP4 192.0.2.10 198.51.100.1 1\r\n"), err: "want PROXY TCP4|TCP6"},
		{name: "v1 two spaces", in: []byte("PROXY TCP4  192.0.2.10 198.51.100.1 1 2\r\n"), err: "want PROXY TCP4|TCP6"},
		{name: "v1 bad address", in: []byte("PROXY TCP4 192.0.2.300 198.51.100.1 1 2\r\n"), err: "ParseAddr"},
		{name: "v2 bad signature", in: append([]byte("\r\n\r\n\x00\rXXXXXX"), 0x21, 0x11, 0, 0), err: "bad v2 signature"},
		{name: "v2 version 3", in: func() []byte { b := v2(1, 0x11, addrs4("1.2.3.4", "1.2.3.4", 1, 1)); b[12] = 0x31; return b }(), err: "version 3"},
		{name: "v2 command 2", in: func() []byte { b := v2(1, 0x11, addrs4("1.2.3.4", "1.2.3.4", 1, 1)); b[12] = 0x22; return b }(), err: "command 2"},
		{name: "v2 UDP", in: v2(1, 0x12, addrs4("1.2.3.4", "1.2.3.4", 1, 1)), err: "0x12"},
		{name: "v2 short TCP4 block", in: v2(1, 0x11, make([]byte, 8)), err: "in 8 bytes, want 12"},
		{name: "v2 short TCP6 block", in: v2(1, 0x21, make([]byte, 12)), err: "in 12 bytes, want 36"},
		{name: "v2 truncated body", in: v2(1, 0x11, addrs4("1.2.3.4", "1.2.3.4", 1, 1))[:20], err: "closed inside the header"},
		{name: "v2 truncated header", in: proxyV2Sig[:9], err: "closed inside the header"},
		{name: "empty", in: nil, err: "closed inside the header"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// One byte a read too: the header may arrive in pieces.
			for _, r := range []io.Reader{bytes.NewReader(tt.in), iotest.OneByteReader(bytes.NewReader(tt.in))} {
				h, err := readProxyHeader(r)
				if tt.err != "" {
					// A v1 header and data in one read is refused; a byte
					// at a time, the header ends at its CRLF and the rest
					// is the handshake's to judge.
					if _, one := r.(interface{ Size() int64 }); !one && tt.name == "v1 data after the header" {
						if err != nil || h.src.String() != "192.0.2.10:1" {
							t.Errorf("one byte a read: %+v %v", h, err)
						}
						continue
					}
					if err == nil || !errors.Is(err, errProxyHeader) || !strings.Contains(err.Error(), tt.err) {
						t.Errorf("%+v, %v; want an error with %q", h, err, tt.err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%v", err)
				}
				if h.local != tt.local || !tt.local && h.src.String() != tt.src {
					t.Errorf("%+v, want src %s local %v", h, tt.src, tt.local)
				}
			}
		})
	}
}

// TestReadProxyHeaderReadsNoMore: a v2 header's bytes are read exactly,
// so what follows stays for the handshake.
func TestReadProxyHeaderReadsNoMore(t *testing.T) {
	in := append(v2(1, 0x11, addrs4("192.0.2.10", "198.51.100.1", 1, 2), tlv(0x05, "id")), "rest"...)
	r := bytes.NewReader(in)
	if _, err := readProxyHeader(r); err != nil {
		t.Fatal(err)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "rest" {
		t.Errorf("left %q", rest)
	}
}

func TestTrusts(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	for _, tt := range []struct {
		addr net.Addr
		want bool
	}{
		{&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 1}, true},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:10.1.2.3"), Port: 1}, true}, // IPv4 on a dual-stack socket
		{&net.TCPAddr{IP: net.ParseIP("11.1.2.3"), Port: 1}, false},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8::5"), Port: 1}, true},
		{&net.TCPAddr{IP: net.ParseIP("2001:db9::5"), Port: 1}, false},
		{&net.UnixAddr{Name: "@", Net: "unix"}, false},
	} {
		if got := trusts(trusted, tt.addr); got != tt.want {
			t.Errorf("trusts(%v) = %v", tt.addr, got)
		}
	}
	if trusts(nil, &net.TCPAddr{IP: net.ParseIP("10.1.2.3")}) {
		t.Error("trusted with no CIDRs")
	}
}
