package policy

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// ProxyProtocol is the PROXY protocol (v1 or v2, haproxy's) on the MySQL
// listener: connections from TrustedCIDRs must start with a PROXY header,
// which gives the client's own address; connections from elsewhere must
// not. Empty: no PROXY protocol.
type ProxyProtocol struct {
	TrustedCIDRs []string `yaml:"trusted_cidrs"` // "10.0.0.0/8", "192.0.2.7" (one address), "2001:db8::/32"
}

// Enabled reports whether any source is trusted to send a PROXY header.
func (p ProxyProtocol) Enabled() bool { return len(p.TrustedCIDRs) > 0 }

// Prefixes are the trusted networks, parsed (the config is validated).
func (p ProxyProtocol) Prefixes() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(p.TrustedCIDRs))
	for _, s := range p.TrustedCIDRs {
		if pfx, err := parseTrusted(s); err == nil {
			out = append(out, pfx)
		}
	}
	return out
}

// parseTrusted reads a CIDR or a single address (as /32 or /128).
func parseTrusted(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if p.Masked() != p {
			return netip.Prefix{}, fmt.Errorf("%q has host bits set: write %s", s, p.Masked())
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

// DefaultListenSocketMode is the Unix socket's file mode: owner and group
// may connect.
const DefaultListenSocketMode = "0660"

// SocketMode is listen_socket_mode as a file mode.
func (c *Config) SocketMode() os.FileMode {
	m, err := strconv.ParseUint(c.ListenSocketMode, 8, 32)
	if err != nil {
		m = 0o660
	}
	return os.FileMode(m)
}

func (c *Config) fillListenerDefaults(d *decoder) {
	if !d.has("listen_socket_mode") && c.ListenSocket != "" {
		c.ListenSocketMode = DefaultListenSocketMode
	}
}

// validateListeners checks listen_socket, listen_socket_mode and
// proxy_protocol (listen itself is checked with the other addresses).
func (c *Config) validateListeners(d *decoder) {
	if c.ListenSocket == "" {
		if d.has("listen_socket_mode") {
			d.fail("listen_socket_mode", "needs listen_socket")
		}
	} else {
		if strings.ContainsRune(c.ListenSocket, 0) || len(c.ListenSocket) > 107 {
			d.fail("listen_socket", "must be a file path of at most 107 bytes (the limit of a Unix socket's address)")
		}
		if m, err := strconv.ParseUint(c.ListenSocketMode, 8, 32); err != nil || m > 0o777 || len(c.ListenSocketMode) < 3 {
			d.fail("listen_socket_mode", fmt.Sprintf("%q: must be an octal file mode in quotes, like \"0660\"", c.ListenSocketMode))
		}
	}
	for i, s := range c.ProxyProtocol.TrustedCIDRs {
		if _, err := parseTrusted(s); err != nil {
			d.fail(fmt.Sprintf("proxy_protocol.trusted_cidrs[%d]", i), fmt.Sprintf("%q: want a network (10.0.0.0/8, 2001:db8::/32) or one address: %v", s, err))
		}
	}
}
