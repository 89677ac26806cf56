package lease

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// A guard is the statement the proxy runs on a writer's own connection, in
// the writer's transaction, right before a write it sends exactly as the
// client wrote it (INSERT and REPLACE: no fence placed inside their text
// leaves every server rule of the statement as it was). The guard decides
// whether the write may go out, and leaves the lease row locked until the
// transaction ends, so that check and write are one atomic step: a takeover
// waits for the writer's commit, or the guard sees the takeover's token.
//
// Its shape depends on the engine: a locking read where row locks order
// the takeover after the write (InnoDB), a write to the lease row where
// only a write is ordered (Galera certification). Guard says which, so the
// caller only runs GuardSQL and hands what came back to Read.

// Engine is the database engine family a guard is built for.
type Engine uint8

const (
	// InnoDB: MariaDB and MySQL; the guard reads the lease row
	// LOCK IN SHARE MODE (FOR SHARE is a syntax error on MariaDB, and
	// FOR UPDATE would make two open transactions of one owner block each
	// other).
	InnoDB Engine = iota
	// TiDB takes no lock on rows it only reads and ignores share locks: the
	// guard reads FOR UPDATE, as a top-level point read (inside a subquery
	// a user-variable lookup is folded at plan time and locks nothing).
	TiDB
	// Galera: a row lock is local to one node and not certified, so a
	// locking read orders nothing against a takeover on another node
	// (measured: 2-4% of racing writes committed after the takeover). The
	// guard changes the lease row instead, bumping WriteCounter under the
	// fence, so certification orders the write's transaction against the
	// takeover's: one of them fails with 1213 (GuardAffected).
	Galera
)

// GuardKind says how a guard's verdict is read.
type GuardKind uint8

const (
	// GuardRow: the guard is a SELECT returning one row of GuardColumns, or
	// none when the lease row does not exist (or the lease name is NULL).
	GuardRow GuardKind = iota
	// GuardAffected: the guard is an UPDATE; 1 affected row (with or
	// without CLIENT_FOUND_ROWS: the counter always changes) means the
	// fence holds. 0: rejected, and Classify, a GuardRow guard run after
	// it, says why.
	GuardAffected
)

// GuardColumns are the columns of a GuardRow guard's row, in order:
// the fence variables' presence, the three checks of the fence (1, 0 or
// NULL, as the database compares them, the same comparisons as the
// in-statement fence), the lease's current token, and what the session
// presented, for audit records (the owner as a short hash only).
//
// The last two are when the lease ends: until, its expiry as a Unix time
// (decimal seconds, independent of the session's time zone), which
// Recheck compares with the database's clock after the write; and
// remaining_us, the microseconds left by the database's clock when the
// guard ran.
var GuardColumns = []string{"vars_missing", "token_ok", "owner_ok", "live", "current_token",
	"lease", "owner_hash", "presented_token", "until", "remaining_us"}

// Vars are the names of the session's fence variables (without '@').
type Vars struct{ Lease, Owner, Token string }

// GuardSpec is what a guard checks: one lease table, and either a fixed
// lease name or the session's lease variable.
type GuardSpec struct {
	Schema, Table string // the lease table
	Lease         string // fixed lease name; "" = the session's lease variable
	Vars          Vars
	// Presented: the statement carries its own fence (a fence comment);
	// nil = the session's fence variables.
	Presented *Presented
	// Row: the lease of the rows a write inserts into a table whose lease
	// is a template over its columns; the guard finds the lease row only
	// when the presented lease is this one (RowMismatch says which it
	// was when it found none). Only with Lease "".
	Row string
}

// Presented is a fence a statement carries itself (a sqlcommenter comment
// with fence_lease, fence_owner and fence_token): the check compares the
// lease row with these values, as literals, and neither reads nor changes
// the session's fence variables. The owner reaches the server only as its
// SHA-256 (see fenceRef.ownerIs).
type Presented struct {
	Lease string
	Owner string
	Token uint64
}

// Guard is a guard statement and how to read its verdict.
type Guard struct {
	SQL  string
	Kind GuardKind
	// VarsSQL reads the session's fence context when the guard found no
	// lease row (one row: vars_missing, lease, owner_hash,
	// presented_token), for the audit record of the rejection.
	VarsSQL string
	// Classify (GuardAffected only) is a GuardRow guard's SQL: it reads
	// the current lease row with a lock (not the transaction's snapshot)
	// to say why the guard matched no row, and, after a guard that held,
	// the lease's expiry (Verdict.Until); read its rows with Read. It goes
	// out with the guard, in the same write.
	Classify string
}

// Recheck is the statement that, run right after the write in the
// write's transaction, says whether the lease was still live when the
// write had run: one row, 1 when it was. until is Verdict.Until of the
// guard (the lease row stays locked from the guard to the commit, so its
// expiry cannot have moved). The statement names no table: on MariaDB it
// leaves the write's warnings in SHOW WARNINGS. It compares as the guard
// does, the expiry against SYSDATE(3) in the session's time zone.
func Recheck(until string) (string, bool) {
	if !decimalLiteral(until) {
		return "", false
	}
	return "SELECT FROM_UNIXTIME(" + until + ") > SYSDATE(3)", true
}

// RecheckHolds reads Recheck's rows.
func RecheckHolds(rows [][]Field) bool {
	return len(rows) == 1 && len(rows[0]) == 1 && !rows[0][0].Null && rows[0][0].S == "1"
}

// EarlierUntil returns the earlier of two Verdict.Until values ("" for
// none): the write must have run before the first lease of several to
// expire.
func EarlierUntil(a, b string) string {
	if a == "" {
		return b
	}
	if b == "" {
		return a
	}
	fa, ea := strconv.ParseFloat(a, 64)
	fb, eb := strconv.ParseFloat(b, 64)
	if ea != nil || eb != nil {
		return ""
	}
	if fb < fa {
		return b
	}
	return a
}

// decimalLiteral: digits with at most one '.', as UNIX_TIMESTAMP prints.
func decimalLiteral(s string) bool {
	dot := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
		case c == '.' && !dot && i > 0 && i < len(s)-1:
			dot = true
		default:
			return false
		}
	}
	return s != ""
}

// GuardFor builds the guard for spec on engine e. The table and variable
// names must have passed ValidateTable / the policy's validation; a fixed
// lease name must pass ValidateName.
func GuardFor(e Engine, spec GuardSpec) (Guard, error) {
	if err := ValidateTable(spec.Schema + "." + spec.Table); err != nil {
		return Guard{}, err
	}
	if spec.Lease != "" {
		if err := ValidateName(spec.Lease); err != nil {
			return Guard{}, err
		}
	}
	if p := spec.Presented; p != nil {
		if err := ValidatePresented(*p); err != nil {
			return Guard{}, err
		}
	}
	r := ref(spec, nameLit)
	where := "fence_l.lease_name = " + r.lease
	if spec.Row != "" {
		if spec.Lease != "" {
			return Guard{}, errors.New("a row lease with a fixed lease")
		}
		if err := ValidateName(spec.Row); err != nil {
			return Guard{}, err
		}
		// The row's lease as a literal of lease_name's own type: the
		// lookup stays a primary-key lookup, and the two names compare
		// under utf8mb4_bin as the lease table does.
		where += " AND fence_l.lease_name = " + nameLit(spec.Row)
	}
	lock := " LOCK IN SHARE MODE"
	if e == TiDB {
		lock = " FOR UPDATE"
	}
	var b strings.Builder
	b.WriteString("SELECT ")
	b.WriteString(r.missing)
	b.WriteString(", fence_l.fence_token = " + r.token)
	b.WriteString(", " + r.ownerIs())
	b.WriteString(", fence_l.leased_until > SYSDATE(3), fence_l.fence_token, ")
	b.WriteString(r.presented())
	b.WriteString(", UNIX_TIMESTAMP(fence_l.leased_until), TIMESTAMPDIFF(MICROSECOND, SYSDATE(3), fence_l.leased_until)")
	b.WriteString(" FROM " + r.from + " WHERE " + where)
	b.WriteString(lock)
	g := Guard{
		SQL:     b.String(),
		Kind:    GuardRow,
		VarsSQL: "SELECT " + r.missing + ", " + r.presented(),
	}
	if e == Galera {
		g.Classify, g.Kind = g.SQL, GuardAffected
		g.SQL = "UPDATE " + r.from + " SET fence_l." + WriteCounter + " = fence_l." + WriteCounter +
			" + 1 WHERE " + where + " AND " + r.ownerIs() + " AND fence_l.fence_token = " + r.token +
			" AND fence_l.leased_until > SYSDATE(3)"
	}
	return g, nil
}

// ValidatePresented checks a statement's own fence: a lease name and an
// owner token as the lease functions accept them.
func ValidatePresented(p Presented) error {
	if err := ValidateName(p.Lease); err != nil {
		return err
	}
	return ValidateOwner(p.Owner)
}

// Holds reads a GuardAffected guard's affected-row count.
func (g Guard) Holds(affected uint64) bool { return affected == 1 }

// userVar writes @name, backquoted unless it is a plain name.
func userVar(name string) string {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return "@`" + strings.ReplaceAll(name, "`", "``") + "`"
		}
	}
	return "@" + name
}

// Field is one column value of a guard's row.
type Field struct {
	S    string
	Null bool
}

// Reason is why a guard rejected a write; the values are the audit
// record's reasons.
type Reason string

const (
	Holds         Reason = ""
	StaleToken    Reason = "stale_token"
	Expired       Reason = "expired"
	OwnerMismatch Reason = "owner_mismatch"
	NoFence       Reason = "no_fence"
	LeaseMissing  Reason = "lease_missing"
	// RowLeaseMismatch: the rows a write would change belong to another
	// lease than the session's (a table whose lease is a template).
	RowLeaseMismatch Reason = "row_lease_mismatch"
)

// RowMismatch reports whether a guard with spec.Row that found no lease
// row found none because the session presents another lease than the
// rows' (presented: Verdict.Lease). Names compare as utf8mb4_bin does:
// byte for byte, trailing spaces ignored.
func RowMismatch(spec GuardSpec, presented string) bool {
	return spec.Row != "" && strings.TrimRight(presented, " ") != strings.TrimRight(spec.Row, " ")
}

// Verdict is what a guard or the verdict query found.
type Verdict struct {
	Reason         Reason
	Lease          string // "" when the session's lease variable is NULL
	PresentedOwner string // short hash
	PresentedToken *uint64
	CurrentToken   *uint64
	// NeedVars: no lease row was found; run VarsSQL and ReadVars for the
	// rest of the verdict.
	NeedVars bool
	// Until: the lease's expiry as a Unix time (see Recheck), "" when the
	// row has none.
	Until string
	// Remaining: how long the lease had left when the guard ran, by the
	// database's clock (negative: expired); RemainingKnown says whether
	// the row said.
	Remaining      time.Duration
	RemainingKnown bool
}

// Read turns a GuardRow guard's rows into its verdict.
func (g Guard) Read(rows [][]Field) (Verdict, bool) {
	if len(rows) == 0 {
		return Verdict{Reason: LeaseMissing, NeedVars: true}, true
	}
	if len(rows) != 1 || len(rows[0]) != len(GuardColumns) {
		return Verdict{}, false
	}
	r := rows[0]
	v := presentedOf(r[5], r[6], r[7])
	if !r[8].Null {
		v.Until = r[8].S
	}
	if !r[9].Null {
		if us, err := strconv.ParseInt(r[9].S, 10, 64); err == nil {
			v.Remaining, v.RemainingKnown = time.Duration(us)*time.Microsecond, true
		}
	}
	if !r[4].Null {
		if t, err := strconv.ParseUint(r[4].S, 10, 64); err == nil {
			v.CurrentToken = &t
		}
	}
	switch {
	case r[0].S == "1":
		v.Reason = NoFence
	case r[1].S != "1":
		v.Reason = StaleToken
	case r[2].S != "1":
		v.Reason = OwnerMismatch
	case r[3].S != "1":
		v.Reason = Expired
	}
	return v, true
}

// ReadVars completes the verdict of a guard that found no lease row from
// the row of VarsSQL.
func (g Guard) ReadVars(rows [][]Field) (Verdict, bool) {
	if len(rows) != 1 || len(rows[0]) != 4 {
		return Verdict{}, false
	}
	r := rows[0]
	v := presentedOf(r[1], r[2], r[3])
	v.Reason = LeaseMissing
	if r[0].S == "1" {
		v.Reason = NoFence
	}
	return v, true
}

func presentedOf(lease, owner, token Field) Verdict {
	var v Verdict
	if !lease.Null {
		v.Lease = lease.S
	}
	v.PresentedOwner = owner.S
	if !token.Null {
		if t, err := strconv.ParseUint(token.S, 10, 64); err == nil {
			v.PresentedToken = &t
		}
	}
	return v
}
