package lease

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// This file owns the SQL that checks a session's fence context against the
// lease table: the condition placed inside a fenced write (WriteFence), the
// query that says afterwards why a write matched nothing (VerdictSQL and
// ReadVerdict), and reading and setting the session's fence variables. The
// guards (guard.go) read the same columns the same way; every comparison of
// owner, token and expiry against the lease row is written here or there,
// nowhere else.

// FenceAlias is the alias of the lease table in every fence and guard.
// Under LOCK TABLES the lease table is locked under that name only, so a
// client's LOCK TABLES names it (and may not use it for a table of its own).
const FenceAlias = "fence_l"

// TableFor resolves the lease table behind a protected table in schema:
// fencing.lease_table as configured, "name" or "schema.name"; an
// unqualified name lives in the given schema.
func TableFor(configured, schema string) (string, string) {
	if i := strings.IndexByte(configured, '.'); i >= 0 {
		return configured[:i], configured[i+1:]
	}
	return schema, configured
}

// fenceRef is how one fence check names the lease and the session's fence
// context in SQL.
type fenceRef struct {
	lease   string // the lease name: a literal, or the lease variable
	missing string // true when the session lacks a fence variable the check needs
	owner   string // the owner variable; "" for a statement's own fence (ownerSum)
	token   string
	from    string // the lease table, aliased FenceAlias
	// ownerSum: a statement's own fence names its owner only by its
	// SHA-256 (64 hex digits), never the secret itself (see Presented).
	ownerSum  string
	ownerHash string // the owner's short hash, as an SQL expression
}

// ref builds the names of spec. lit writes a fixed lease name: the guards
// use nameLit, the in-statement fence and the verdict query a plain quoted
// literal (the policy restricts fixed names to printable ASCII without
// quotes or backslashes), as they always have: the two compare the same
// under the column's utf8mb4_bin collation.
func ref(spec GuardSpec, lit func(string) string) fenceRef {
	r := fenceRef{lease: userVar(spec.Vars.Lease), owner: userVar(spec.Vars.Owner), token: userVar(spec.Vars.Token),
		from: quoteIdent(spec.Schema) + "." + quoteIdent(spec.Table) + " AS " + FenceAlias}
	r.missing = r.owner + " IS NULL OR " + r.token + " IS NULL"
	r.ownerHash = ownerHashSQL(r.owner)
	if p := spec.Presented; p != nil {
		// The statement's own fence: literals, the session's variables
		// neither read nor changed.
		r.lease, r.owner, r.token, r.missing = nameLit(p.Lease), "", strconv.FormatUint(p.Token, 10), "0"
		sum := sha256.Sum256([]byte(p.Owner))
		r.ownerSum = hex.EncodeToString(sum[:])
		r.ownerHash = "'" + OwnerHash(p.Owner) + "'"
	}
	if spec.Lease != "" {
		r.lease = lit(spec.Lease)
	} else if spec.Presented == nil {
		r.missing += " OR " + r.lease + " IS NULL"
	}
	return r
}

// ownerIs compares the lease row's owner with the presented one: the
// owner variable, or for a statement's own fence the SHA-256 of the
// column against the presented owner's, both binary (the column is
// VARBINARY; UNHEX and X” are binary strings), so that the text the
// server receives, logs and shows in PROCESSLIST never holds the secret.
// The lookup stays a primary-key lookup on lease_name; the digest is
// computed for that one row.
func (r fenceRef) ownerIs() string {
	if r.ownerSum != "" {
		return "UNHEX(SHA2(fence_l.owner_token, 256)) = X'" + r.ownerSum + "'"
	}
	return "fence_l.owner_token = " + r.owner
}

func plainLit(name string) string { return "'" + name + "'" }

// quoteIdent backquotes a name, doubling backquotes.
func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// presented is what the session presents, for audit records: the lease, the
// owner as a short hash only, and the token.
func (r fenceRef) presented() string {
	return "CAST(" + r.lease + " AS CHAR), " + r.ownerHash + ", CAST(" + r.token + " AS CHAR)"
}

// WriteFence writes the fence placed inside a fenced write's text:
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
// sees the new token); TiDB ignores share locks, so there the row is read
// FOR UPDATE. The text is ASCII, has no '?', no comment, and reads the same
// under every sql_mode. A fixed lease name must be safe to inline as a
// plain literal (the caller checks).
func WriteFence(b *strings.Builder, spec GuardSpec, e Engine) {
	r := ref(spec, plainLit)
	b.WriteString("EXISTS (SELECT 1 FROM ")
	b.WriteString(r.from)
	b.WriteString(" WHERE fence_l.lease_name = ")
	b.WriteString(r.lease)
	b.WriteString(" AND ")
	b.WriteString(r.ownerIs())
	b.WriteString(" AND fence_l.fence_token = ")
	b.WriteString(r.token)
	b.WriteString(" AND fence_l.leased_until > SYSDATE(3)")
	if e == TiDB {
		b.WriteString(" FOR UPDATE)")
	} else {
		b.WriteString(" LOCK IN SHARE MODE)")
	}
}

// VerdictSQL reads, on the writer's own session (its variables live there),
// the session's fence context and the lease row behind spec: one row of
// VerdictColumns whether or not the lease row exists. locking reads the
// latest committed row, as the fenced write did (not on TiDB, which ignores
// share locks).
func VerdictSQL(spec GuardSpec, e Engine, locking bool) string {
	r := ref(spec, plainLit)
	lock := ""
	if locking && e != TiDB {
		lock = " LOCK IN SHARE MODE"
	}
	return "SELECT " + r.missing + ", " + r.presented() + ", (SELECT CONCAT_WS(',', fence_l.fence_token, " +
		r.ownerIs() + ", fence_l.leased_until > SYSDATE(3)) FROM " + r.from + " WHERE fence_l.lease_name = " + r.lease + lock + ")"
}

// VerdictColumns are the columns of VerdictSQL's row: the fence variables'
// presence, what the session presented (as in GuardColumns), and the lease
// row's "token,owner matches,live", NULL when there is no row.
var VerdictColumns = []string{"vars_missing", "lease", "owner_hash", "presented_token", "row"}

// ReadVerdict turns VerdictSQL's rows into a verdict; false when they are
// not what VerdictSQL returns.
func ReadVerdict(rows [][]Field) (Verdict, bool) {
	if len(rows) != 1 || len(rows[0]) != len(VerdictColumns) {
		return Verdict{}, false
	}
	r := rows[0]
	v := presentedOf(r[1], r[2], r[3])
	switch {
	case r[0].S == "1":
		v.Reason = NoFence
	case r[4].Null:
		v.Reason = LeaseMissing
	default:
		parts := strings.Split(r[4].S, ",")
		if len(parts) != 3 {
			return Verdict{}, false
		}
		if cur, err := strconv.ParseUint(parts[0], 10, 64); err == nil {
			v.CurrentToken = &cur
		}
		switch {
		case v.PresentedToken == nil || v.CurrentToken == nil || *v.PresentedToken != *v.CurrentToken:
			v.Reason = StaleToken
		case parts[1] != "1":
			v.Reason = OwnerMismatch
		case parts[2] != "1":
			v.Reason = Expired
		}
	}
	return v, true
}

// SessionVarsSQL reads the session's fence context: one row of the lease
// name and owner in hex (away from character_set_results) and the token.
func SessionVarsSQL(v Vars) string {
	return "SELECT HEX(" + userVar(v.Lease) + "), HEX(" + userVar(v.Owner) + "), CAST(" + userVar(v.Token) + " AS CHAR)"
}

// ReadSessionVars reads SessionVarsSQL's row: the lease the session's
// variables name, and false when one of them is NULL or not what a lease
// function sets (the session then has no fence context to act on).
func ReadSessionVars(rows [][]Field) (Lease, bool, bool) {
	if len(rows) != 1 || len(rows[0]) != 3 {
		return Lease{}, false, false
	}
	r := rows[0]
	if r[0].Null || r[1].Null || r[2].Null {
		return Lease{}, false, true
	}
	name, err1 := hex.DecodeString(r[0].S)
	owner, err2 := hex.DecodeString(r[1].S)
	token, err3 := strconv.ParseUint(r[2].S, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return Lease{}, false, true
	}
	return Lease{Name: string(name), Owner: string(owner), Token: token}, true, true
}

// SetVarsSQL sets the session's fence variables to lease l: the name as a
// literal of the lease_name column's exact type, so that the fence's lookup
// stays a primary-key lookup.
func SetVarsSQL(v Vars, l Lease) string {
	return "SET " + userVar(v.Lease) + " = " + nameLit(l.Name) + ", " + userVar(v.Owner) + " = " + ownerLit(l.Owner) +
		", " + userVar(v.Token) + " = " + strconv.FormatUint(l.Token, 10)
}
