package rewrite

import (
	"strings"

	"github.com/fenceproxy/fenceproxy/policy"
)

// The fence is one condition per lease and lease table:
//
//	EXISTS (SELECT 1 FROM `schema`.`lease_table` AS fence_l
//	        WHERE fence_l.lease_name = @fence_lease
//	          AND fence_l.owner_token = @fence_owner
//	          AND fence_l.fence_token = @fence_token
//	          AND fence_l.leased_until > SYSDATE(3)
//	        LOCK IN SHARE MODE)
//
// LOCK IN SHARE MODE makes the check and the write one atomic step at every
// isolation level (a takeover waits for the writer's commit, or the writer
// sees the new token); SYSDATE(3) is the one clock no session setting moves.
// TiDB ignores share locks, so there the lease row would be read FOR
// UPDATE; but no TiDB write is fenced in its text: every one is guarded
// (see writeStmt), because measured on a real tidb-server a FOR UPDATE read
// inside the statement does not lock in an autocommit statement.
// The text is ASCII, has no '?', no comment, and reads the same under every
// sql_mode: backquoted names, a plain single-quoted fixed lease name (the
// policy restricts those to printable ASCII without quotes or backslashes).

// fenceKey identifies one fence condition.
type fenceKey struct {
	lease  string // the table's fixed lease; "" = the session's lease variable
	schema string // the lease table
	table  string
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
	b.WriteString("EXISTS (SELECT 1 FROM ")
	b.WriteString(quoteIdent(k.schema))
	b.WriteByte('.')
	b.WriteString(quoteIdent(k.table))
	b.WriteString(" AS fence_l WHERE fence_l.lease_name = ")
	if k.lease != "" {
		b.WriteByte('\'')
		b.WriteString(k.lease)
		b.WriteByte('\'')
	} else {
		b.WriteString(userVar(v.Lease))
	}
	b.WriteString(" AND fence_l.owner_token = ")
	b.WriteString(userVar(v.Owner))
	b.WriteString(" AND fence_l.fence_token = ")
	b.WriteString(userVar(v.Token))
	b.WriteString(" AND fence_l.leased_until > SYSDATE(3)")
	if flavor == TiDB {
		b.WriteString(" FOR UPDATE)")
	} else {
		b.WriteString(" LOCK IN SHARE MODE)")
	}
}

// quoteIdent backquotes a name, doubling backquotes.
func quoteIdent(s string) string {
	return "`" + strings.ReplaceAll(s, "`", "``") + "`"
}

// userVar writes @name, backquoted unless it is a plain name.
func userVar(name string) string {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return "@" + quoteIdent(name)
		}
	}
	return "@" + name
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
