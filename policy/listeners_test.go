package policy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestListenerKeys(t *testing.T) {
	for _, tt := range []struct {
		name, yaml, err string
	}{
		{"socket and TCP", "listen_socket: /run/fp/mysql.sock\n", ""},
		{"socket only", "listen: \"\"\nlisten_socket: /run/fp/mysql.sock\n", ""},
		{"no listener", "listen: \"\"\n", `listen: "" is not host:port`},
		{"mode", "listen_socket: /s\nlisten_socket_mode: \"0600\"\n", ""},
		{"mode not octal", "listen_socket: /s\nlisten_socket_mode: \"0999\"\n", `listen_socket_mode: "0999": must be an octal file mode`},
		{"mode too wide", "listen_socket: /s\nlisten_socket_mode: \"7777\"\n", `listen_socket_mode: "7777": must be an octal file mode`},
		{"mode without socket", "listen_socket_mode: \"0600\"\n", "listen_socket_mode: needs listen_socket"},
		{"socket path too long", "listen_socket: /" + strings.Repeat("x", 120) + "\n", "listen_socket: must be a file path of at most 107 bytes"},
		{"cidrs", "proxy_protocol:\n  trusted_cidrs: [10.0.0.0/8, 192.0.2.7, \"2001:db8::/32\", \"::1\"]\n", ""},
		{"bad cidr", "proxy_protocol:\n  trusted_cidrs: [10.0.0.0/8, 10.1.2.3/33]\n", `proxy_protocol.trusted_cidrs[1]: "10.1.2.3/33": want a network`},
		{"host bits", "proxy_protocol:\n  trusted_cidrs: [10.1.2.3/8]\n", `has host bits set: write 10.0.0.0/8`},
		{"a name", "proxy_protocol:\n  trusted_cidrs: [lb.example.com]\n", `proxy_protocol.trusted_cidrs[0]: "lb.example.com": want a network`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("/etc/fp/f.yaml", []byte(tt.yaml))
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("error %v, want %q", err, tt.err)
			}
			if err == nil && c.ListenSocket != "" && c.SocketMode() == 0 {
				t.Errorf("socket mode 0")
			}
		})
	}
	c, err := Parse("/etc/fp/f.yaml", []byte("listen_socket: run/mysql.sock\nproxy_protocol: {trusted_cidrs: [192.0.2.7, \"::ffff:192.0.2.8\", 10.0.0.0/8]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.ListenSocket != "/etc/fp/run/mysql.sock" || c.SocketMode() != 0o660 {
		t.Errorf("socket %q mode %o", c.ListenSocket, c.SocketMode())
	}
	want := []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32"), netip.MustParsePrefix("192.0.2.8/32"), netip.MustParsePrefix("10.0.0.0/8")}
	if got := c.ProxyProtocol.Prefixes(); len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("prefixes %v, want %v", got, want)
	}
}
