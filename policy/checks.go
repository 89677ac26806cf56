package policy

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// The rules in this file are about what the proxy protects and where it
// listens, beyond each key's own value: a file can be valid key by key and
// still leave protection off or fail at bind.

// GrantsHint is what the proxy's own account needs for the schema catalog,
// as the GRANT statement to run (the lease and audit tables' grants are
// per schema; see docs/configuration-checks.md).
func GrantsHint(user string) string {
	if user == "" {
		user = "fenceproxy"
	}
	return "GRANT SELECT, SHOW VIEW, TRIGGER, EVENT ON *.* TO '" + user + "'@'%'"
}

// validateProtection: protected tables need the schema catalog, or an
// explicit statement that the operator runs without it. Without the
// catalog, a write through a view, a trigger, a cascading foreign key or
// a routine reaches a protected table unfenced; the proxy cannot tell.
func (c *Config) validateProtection(d *decoder) {
	if len(c.Tables) == 0 || d.has("catalog.refresh") {
		return
	}
	if c.Backend.User == "" && !d.reported("backend") {
		d.fail("tables", "protected tables need the proxy's own account for the schema catalog, "+
			"or writes through views, triggers, cascading foreign keys and routines reach them unfenced: "+
			"set backend.user and backend.password_env (or password_file) to an account with "+
			GrantsHint("")+" (see docs/configuration-checks.md), "+
			"or set catalog.refresh: 0s to run without the catalog knowingly")
	}
}

// validateAddresses: two listeners on one address fail at bind (after the
// proxy has started its other parts), and a backend address that is the
// proxy's own listener makes it connect to itself.
func (c *Config) validateAddresses(d *decoder) {
	type addr struct{ key, value string }
	listeners := []addr{{"listen", c.Listen}}
	if c.Admin != "" {
		listeners = append(listeners, addr{"admin", c.Admin})
	}
	for i, a := range listeners {
		if d.reported(a.key) {
			continue
		}
		for _, b := range listeners[:i] {
			if !d.reported(b.key) && sameListener(a.value, b.value) {
				d.fail(a.key, fmt.Sprintf("%q and %s %q are the same address: each listener needs a port of its own", a.value, b.key, b.value))
			}
		}
		if !d.reported("backend.address") && sameListener(c.Backend.Address, a.value) && loopbackOrAny(c.Backend.Address) {
			d.fail("backend.address", fmt.Sprintf("%q is the proxy's own %s address: the proxy would connect to itself; give the database server's address", c.Backend.Address, a.key))
		}
	}
}

// sameListener reports whether binding both host:port addresses on this
// host conflicts: the same port (not 0, which picks a free one) and the
// same host, or either one the wildcard (all interfaces); localhost is
// 127.0.0.1 and ::1.
func sameListener(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil {
		return false
	}
	na, _ := strconv.Atoi(pa)
	nb, _ := strconv.Atoi(pb)
	if na == 0 || na != nb {
		return false
	}
	sa, sb := hostAddrs(ha), hostAddrs(hb)
	if sa == nil || sb == nil {
		return true // a wildcard
	}
	for _, x := range sa {
		for _, y := range sb {
			if strings.EqualFold(x, y) {
				return true
			}
		}
	}
	return false
}

// loopbackOrAny: the address is on this host for certain.
func loopbackOrAny(a string) bool {
	h, _, err := net.SplitHostPort(a)
	if err != nil {
		return false
	}
	addrs := hostAddrs(h)
	if addrs == nil {
		return true
	}
	ip := net.ParseIP(addrs[0])
	return ip != nil && ip.IsLoopback()
}

// hostAddrs: nil for a wildcard host ("", 0.0.0.0, ::), the loopback
// addresses for localhost, the normalised IP, or the name as written.
func hostAddrs(h string) []string {
	if h == "" {
		return nil
	}
	if strings.EqualFold(h, "localhost") {
		return []string{"127.0.0.1", "::1"}
	}
	ip := net.ParseIP(h)
	switch {
	case ip == nil:
		return []string{h}
	case ip.IsUnspecified():
		return nil
	}
	return []string{ip.String()}
}

func (dc *Doctor) validate(d *decoder) {
	for i, a := range dc.TrustedAccounts {
		if _, err := ParseAccount(a); err != nil {
			d.fail(fmt.Sprintf("doctor.trusted_accounts[%d]", i), err.Error())
		}
	}
}
