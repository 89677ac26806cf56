package policy

import (
	"fmt"
	"strings"

	"github.com/fenceproxy/fenceproxy/lease"
)

// fencing.database_guard and fencing.database_guard_exempt: guard triggers
// on the protected tables, installed by fenceproxy init, that check the
// fence inside the database for every write, through the proxy or not
// (lease/trigger.go).

// database_guard values.
const (
	GuardOff      = "off"
	GuardTriggers = "triggers"
)

var guardValues = []string{GuardOff, GuardTriggers}

// ParseAccount reads an exempt account: user, user@host, or the quoted
// forms 'user'@'host' and `user`@`host`. The host is a LIKE pattern on the
// host part of the session's USER() ("%" or none: any host).
func ParseAccount(s string) (lease.Account, error) {
	var a lease.Account
	user, host, hasHost := s, "", false
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		user, host, hasHost = s[:i], s[i+1:], true
	}
	a.User = unquote(user)
	if hasHost {
		a.Host = unquote(host)
		if a.Host == "" {
			return a, fmt.Errorf("%q: the host after '@' is empty (omit it for any host)", s)
		}
	}
	if err := lease.ValidateAccount(a); err != nil {
		return a, fmt.Errorf("%q: an account is user or user@host (the host a pattern such as 10.0.%% or %%): %v", s, err)
	}
	return a, nil
}

func isQuoted(s string) bool {
	return len(s) >= 2 && (s[0] == '\'' || s[0] == '`' || s[0] == '"') && s[len(s)-1] == s[0]
}

func unquote(s string) string {
	if isQuoted(s) {
		return s[1 : len(s)-1]
	}
	return s
}

// checkGuard applies the rules of the database_guard keys that need nothing
// else of the file.
func (f *Fencing) checkGuard() []problem {
	var ps []problem
	if r := oneOf(f.DatabaseGuard, guardValues); r != "" {
		ps = append(ps, problem{"fencing.database_guard", r})
	}
	seen := map[lease.Account]int{}
	for i, s := range f.DatabaseGuardExempt {
		field := fmt.Sprintf("fencing.database_guard_exempt[%d]", i)
		a, err := ParseAccount(s)
		if err != nil {
			ps = append(ps, problem{field, err.Error()})
			continue
		}
		if j, dup := seen[a]; dup {
			ps = append(ps, problem{field, fmt.Sprintf("%q is listed twice (also at [%d])", s, j)})
		}
		seen[a] = i
	}
	if len(f.DatabaseGuardExempt) > 0 && f.DatabaseGuard != GuardTriggers {
		ps = append(ps, problem{"fencing.database_guard_exempt", "has no effect without fencing.database_guard: triggers"})
	}
	return ps
}

// exemptAccounts parses a checked list.
func exemptAccounts(list []string) []lease.Account {
	var out []lease.Account
	for _, s := range list {
		if a, err := ParseAccount(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// validateGuard checks database_guard against the rest of the file: the
// guard triggers are checked by serve with the proxy's own account, and
// TiDB has none.
func (c *Config) validateGuard(d *decoder) {
	if c.Fencing.DatabaseGuard != GuardTriggers {
		return
	}
	if c.Backend.Engine == EngineTiDB {
		d.fail("fencing.database_guard", "TiDB has no triggers: set database_guard: off (the proxy still fences every write that passes through it)")
	}
	if c.Fencing.Mode == ModeShadow {
		d.fail("fencing.database_guard", "triggers refuse stale writes inside the database whatever the proxy's mode, so shadow mode would not be a trial run; use database_guard: off with mode: shadow")
	}
	if c.Backend.User == "" && len(c.Tables) > 0 {
		d.fail("fencing.database_guard", "triggers needs backend.user: serve checks with the proxy's own account that every protected table has its guard triggers")
	}
}

// GuardSpecs returns the guard trigger specs of every protected table of p
// on engine e (lease.InnoDB or lease.Galera).
func (p *Policy) GuardSpecs(e lease.Engine) []lease.TriggerSpec {
	out := make([]lease.TriggerSpec, 0, len(p.Tables))
	for _, t := range p.Tables {
		ls, lt := p.LeaseTableFor(t.Schema)
		out = append(out, lease.TriggerSpec{Schema: t.Schema, Table: t.Table, Exempt: p.GuardExempt, Engine: e,
			Fence: lease.GuardSpec{Schema: ls, Table: lt, Lease: t.Lease,
				Vars: lease.Vars{Lease: p.Vars.Lease, Owner: p.Vars.Owner, Token: p.Vars.Token}}})
	}
	return out
}
