package policy

import (
	"errors"
	"fmt"
	"strings"
)

// NewPolicy validates a fencing section and protected tables, fills in the
// defaults of empty fields, and returns the Policy the rewriter consults.
// Tables need only Name (and Lease); Schema and Table are derived from it.
// Errors name the offending value; Load and Parse report the same rules with
// file positions instead.
func NewPolicy(version uint64, f Fencing, tables []Table) (*Policy, error) {
	f.fillDefaults()
	var errs []error
	for _, r := range f.check() {
		errs = append(errs, errors.New(r.reason))
	}
	p := &Policy{
		Version:    version,
		LeaseTable: f.LeaseTable,
		Vars:       f.Variables,
		OnStale:    f.OnStale,
		Mode:       f.Mode,
		Tables:     make([]Table, len(tables)),
		byName:     make(map[string]*Table, len(tables)),

		DatabaseGuard: f.DatabaseGuard,
		GuardExempt:   exemptAccounts(f.DatabaseGuardExempt),
	}
	copy(p.Tables, tables)
	for i := range p.Tables {
		t := &p.Tables[i]
		if t.Lease != "" {
			tpl, reason := checkLeaseValue(t.Lease)
			if reason != "" {
				errs = append(errs, fmt.Errorf("table %q: lease %s", t.Name, reason))
			}
			if t.Template == nil || t.Template.Text != t.Lease {
				t.Template = tpl
			}
		}
		if reason := t.check(f.LeaseTable); reason != "" {
			errs = append(errs, fmt.Errorf("table %s", reason))
			continue
		}
		key := t.key()
		if first, dup := p.byName[key]; dup {
			errs = append(errs, fmt.Errorf("table %q is listed twice (also as %q)", t.Name, first.Name))
			continue
		}
		p.byName[key] = t
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// Policy returns the fencing policy of a config from Load or Parse, as
// version. The Policy is shared by all calls (only Version differs) and
// must not be modified; nor must the Config once it is in use.
func (c *Config) Policy(version uint64) *Policy {
	if c.policy == nil {
		// A Config assembled in code rather than parsed.
		p, err := NewPolicy(version, c.Fencing, c.Tables)
		if err != nil {
			panic("policy: Config.Policy of an invalid config: " + err.Error())
		}
		return p
	}
	p := *c.policy
	p.Version = version
	return &p
}

// key is the byName key of a checked table: ASCII case-insensitive, since
// lower_case_table_names may fold case on the server (fail closed).
func (t *Table) key() string {
	return strings.ToLower(t.Schema) + "." + strings.ToLower(t.Table)
}
