package rewrite

import (
	"strings"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
)

// The fence is one condition per lease and lease table, lease.WriteFence's.
// No TiDB write is fenced in its text: every one is guarded (see
// writeStmt), because measured on a real tidb-server a FOR UPDATE read
// inside the statement does not lock in an autocommit statement.

// fenceKey identifies one fence condition.
type fenceKey struct {
	lease  string // the table's fixed lease; "" = the session's lease variable
	schema string // the lease table
	table  string
	// presented: the statement's own fence (zero: the session's
	// variables).
	presented lease.Presented
}

// fenceKeys groups the targets by lease and lease table, in order of first
// appearance: targets that share both share one condition.
func (e *Engine) fenceKeys(targets []Target) []fenceKey {
	var keys []fenceKey
	for _, t := range targets {
		s, n := e.pol.LeaseTableFor(t.Schema)
		k := fenceKey{lease: t.Lease, schema: s, table: n}
		dup := false
		for _, x := range keys {
			if strings.EqualFold(x.schema, k.schema) && strings.EqualFold(x.table, k.table) && x.lease == k.lease {
				dup = true
				break
			}
		}
		if !dup {
			keys = append(keys, k)
		}
	}
	return keys
}

// fenceKeys is e.fenceKeys under the statement's own fence, if it has one.
func (in *stmtIn) fenceKeys(targets []Target) []fenceKey {
	keys := in.pc.e.fenceKeys(targets)
	if in.presented != nil {
		for i := range keys {
			keys[i].presented = *in.presented
		}
	}
	return keys
}

// fenceSQL is the condition for all keys, ANDed.
func (e *Engine) fenceSQL(keys []fenceKey, flavor Flavor) string {
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" AND ")
		}
		e.writeFence(&b, k, flavor)
	}
	return b.String()
}

func (e *Engine) writeFence(b *strings.Builder, k fenceKey, flavor Flavor) {
	v := e.pol.Vars
	eng := lease.InnoDB
	if flavor == TiDB {
		eng = lease.TiDB
	}
	spec := lease.GuardSpec{Schema: k.schema, Table: k.table, Lease: k.lease,
		Vars: lease.Vars{Lease: v.Lease, Owner: v.Owner, Token: v.Token}}
	if k.presented != (lease.Presented{}) {
		p := k.presented
		spec.Presented = &p
	}
	lease.WriteFence(b, spec, eng)
}

// quoteIdent backquotes a name, doubling backquotes.
func quoteIdent(s string) string {
	return "`" + strings.ReplaceAll(s, "`", "``") + "`"
}

// safeLease reports whether a fixed lease name can be inlined as a plain
// literal (the policy guarantees it; checked again because the text goes
// into SQL).
func safeLease(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '\'' || c == '"' || c == '\\' || c == '`' || c == '?' {
			return false
		}
	}
	return s != ""
}

// target builds the Target of a protected table.
func target(t *policy.Table) Target {
	if t.Template != nil {
		return Target{Schema: t.Schema, Table: t.Table, Template: t.Template}
	}
	return Target{Schema: t.Schema, Table: t.Table, Lease: t.Lease}
}

// addTarget appends t unless present.
func addTarget(ts []Target, t Target) []Target {
	for _, x := range ts {
		if strings.EqualFold(x.Schema, t.Schema) && strings.EqualFold(x.Table, t.Table) {
			return ts
		}
	}
	return append(ts, t)
}
