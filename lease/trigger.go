package lease

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Guard triggers (fencing.database_guard: triggers): BEFORE INSERT, UPDATE
// and DELETE triggers on a protected table that check, inside the database
// and for every row any statement writes, the same fence the proxy places
// in its statements (fence.go): the lease row's owner, token and expiry
// against the session's fence variables (or the table's fixed lease), by
// SYSDATE(3), reading the row with a lock. A write whose fence does not hold
// gets SIGNAL SQLSTATE '45000' with MYSQL_ERRNO GuardErrno and changes
// nothing: through the proxy or not.
//
// Measured on MariaDB 10.11 (integration/dbguard_test.go and the notes in
// docs/database-guard.md):
//
//   - A TEMPORARY table named like the lease table shadows it inside a
//     trigger body, schema-qualified or not; and reading the lease row
//     through a view over it crashed the server (SIGSEGV in opt_sum_query)
//     once a session shadowed the view's base table. A temporary table
//     cannot be partitioned (error 1562/1506), so the guard reads the lease
//     table through a partition clause, PARTITION (p0): against a temporary
//     table that is error 1747, and the write fails. init partitions the
//     lease table (one KEY partition, p0) for this.
//   - Comments are dropped from the stored body
//     (information_schema.TRIGGERS.ACTION_STATEMENT), whitespace kept: the
//     body is written without comments, so that the stored text is exactly
//     GuardTrigger.Body and CheckGuardTriggers can compare it. The version
//     is in the name.
//   - Inside a trigger USER() (= SESSION_USER()) is the login of the session
//     whose statement fired it, also inside a SQL SECURITY DEFINER procedure
//     it called; CURRENT_USER() is the trigger's definer; in an event USER()
//     is event_scheduler@localhost whoever defined the event. Exempt
//     accounts are matched on USER().
//   - The body runs with the definer's privileges: the app's account needs
//     no privilege on the lease table for the guard.

// GuardErrno is the MYSQL_ERRNO of a guard trigger's refusal, with SQLSTATE
// GuardSQLState. The proxy recognises it (and audits it as database_guard).
const (
	GuardErrno    = 9100
	GuardSQLState = "45000"
)

// GuardTriggerPrefix starts the name of every guard trigger (and of nothing
// else fenceproxy makes): init replaces and removes triggers by it, and
// the proxy refuses DROP TRIGGER of such names. It starts with "fence_",
// one of the rewriter's needles, so such a statement never takes its fast
// path.
const GuardTriggerPrefix = "fence_guard_"

// guardVersion is in every guard trigger's name: a newer fenceproxy writes
// a different body, and init replaces the older triggers.
const guardVersion = 2

// guardMessagePrefix starts the message of every guard refusal; ParseGuardError
// reads the rest.
const guardMessagePrefix = "fenceproxy database_guard: write to "

// GuardPartition is the lease table's one partition that guard triggers
// read (see above).
const GuardPartition = "p0"

// ErrNoTriggers is returned for an engine without triggers (TiDB).
var ErrNoTriggers = errors.New("lease: TiDB has no triggers: fencing.database_guard: triggers cannot be installed there (set it to off; the proxy still fences every write that passes through it)")

// Account is an account whose writes guard triggers let through without a
// fence (fencing.database_guard_exempt): User as the session logged in,
// Host a LIKE pattern on the host part of USER() ("" = any host).
type Account struct{ User, Host string }

func (a Account) String() string {
	if a.Host == "" {
		return a.User
	}
	return a.User + "@" + a.Host
}

// TriggerSpec is what one protected table's guard triggers check.
type TriggerSpec struct {
	Schema, Table string    // the protected table
	Fence         GuardSpec // the lease table and lease, as the proxy's fence reads them
	Exempt        []Account
	// Engine: InnoDB (a locking read of the lease row) or Galera (a write
	// to it, which certification orders against a takeover on any node,
	// as the proxy's own guard does there).
	Engine Engine
}

// Trigger events, as information_schema.TRIGGERS.EVENT_MANIPULATION says them.
var guardEvents = []struct{ event, short string }{{"INSERT", "bi"}, {"UPDATE", "bu"}, {"DELETE", "bd"}}

// GuardTrigger is one guard trigger of a protected table.
type GuardTrigger struct {
	Schema, Table string // the protected table (the trigger's schema is its table's)
	Name          string
	Event         string // INSERT, UPDATE or DELETE
	Body          string // the BEGIN ... END block, as information_schema shows it
}

// GuardTriggers builds the three guard triggers of spec.
func GuardTriggers(spec TriggerSpec) ([]GuardTrigger, error) {
	if spec.Engine == TiDB {
		return nil, ErrNoTriggers
	}
	if err := ValidateTable(spec.Schema + "." + spec.Table); err != nil {
		return nil, err
	}
	if err := ValidateTable(spec.Fence.Schema + "." + spec.Fence.Table); err != nil {
		return nil, err
	}
	if spec.Fence.Lease != "" {
		if err := ValidateName(spec.Fence.Lease); err != nil {
			return nil, err
		}
	}
	for _, a := range spec.Exempt {
		if err := ValidateAccount(a); err != nil {
			return nil, err
		}
	}
	body := guardBody(spec)
	out := make([]GuardTrigger, len(guardEvents))
	for i, ev := range guardEvents {
		out[i] = GuardTrigger{Schema: spec.Schema, Table: spec.Table, Event: ev.event, Body: body,
			Name: guardName(spec.Table, ev.short, body, 0)}
	}
	return out, nil
}

// ValidateAccount checks an exempt account: a user name of 1 to 128
// characters without '@' or control characters, and a host pattern of at
// most 255 without them.
func ValidateAccount(a Account) error {
	bad := func(s string) bool {
		for _, r := range s {
			if r < 0x20 || r == 0x7f || r == '@' {
				return true
			}
		}
		return false
	}
	switch {
	case a.User == "" || len(a.User) > 128 || bad(a.User):
		return invalidf("exempt account %q: a user name of 1 to 128 bytes without '@' or control characters", a.String())
	case len(a.Host) > 255 || bad(a.Host):
		return invalidf("exempt account %q: a host pattern of at most 255 bytes without '@' or control characters", a.String())
	}
	return nil
}

// guardName is fence_guard_v<version>_<bi|bu|bd>_<8 hex of the content>_<table,
// cut to fit 64 characters>. salt > 0 gives another name for the same
// content (init's replacement of a trigger in place: the new one is
// created before the old one is dropped).
func guardName(table, short, body string, salt int) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d\x00%s\x00%s\x00%s\x00%d", guardVersion, table, short, body, salt)
	name := GuardTriggerPrefix + "v" + strconv.Itoa(guardVersion) + "_" + short + "_" + hex.EncodeToString(h.Sum(nil)[:4]) + "_" + table
	if len(name) > MaxIdentBytes {
		name = name[:MaxIdentBytes]
	}
	return name
}

// IsGuardName reports whether a trigger name is a guard trigger's.
func IsGuardName(name string) bool {
	return len(name) >= len(GuardTriggerPrefix) && strings.EqualFold(name[:len(GuardTriggerPrefix)], GuardTriggerPrefix)
}

// Statement fence variables: a write that carries its own fence (a fence
// comment, Presented) checks the lease row against the comment's values,
// and the proxy removes the comment from the text it sends. Guard triggers
// cannot read the statement's text, so right before such a write the proxy
// sets these session variables (StmtFenceSetSQL) and right after it clears
// them (StmtFenceClearSQL): while StmtVarToken is not NULL a guard checks
// them instead of the session's fence variables. The owner is there only as
// its SHA-256, as in the write's own fence, so that neither the server's
// general log nor PROCESSLIST ever holds the secret.
const (
	StmtVarLease    = "fenceproxy_stmt_lease"
	StmtVarOwnerSum = "fenceproxy_stmt_owner_sha256"
	StmtVarToken    = "fenceproxy_stmt_token"
)

// StmtFenceSetSQL sets the statement fence variables to p (the owner as its
// SHA-256, a binary string).
func StmtFenceSetSQL(p Presented) string {
	sum := sha256.Sum256([]byte(p.Owner))
	return "SET @" + StmtVarLease + " = " + nameLit(p.Lease) + ", @" + StmtVarOwnerSum + " = X'" + hex.EncodeToString(sum[:]) +
		"', @" + StmtVarToken + " = " + strconv.FormatUint(p.Token, 10)
}

// StmtFenceClearSQL clears the statement fence variables. It names no
// table: the write's warnings and FOUND_ROWS() stay; ROW_COUNT() becomes 0
// (measured on MariaDB 10.11).
const StmtFenceClearSQL = "SET @" + StmtVarLease + " = NULL, @" + StmtVarOwnerSum + " = NULL, @" + StmtVarToken + " = NULL"

// guardCheck is what one branch of a guard body compares the lease row
// with.
type guardCheck struct {
	lease   string // the lease name: a literal or a variable
	ownerIs string // true when fence_l's owner is the presented one
	token   string
	missing string // true when the fence is absent
}

// guardBody writes the trigger body. The hot path is one primary-key
// lookup of the lease row, locked in share mode (InnoDB), or one change of
// it (Galera); the reason of a refusal is read only when there is one. It
// is ASCII, names every object schema-qualified, writes every name and
// owner as a hex literal, compares time with SYSDATE(3) only, and declares
// the character sets of its variables, so it reads and runs the same under
// any sql_mode and character set init creates it with. It checks the
// statement fence variables when they are set (a write that carries its
// own fence), else the session's fence variables.
func guardBody(spec TriggerSpec) string {
	r := ref(spec.Fence, guardLit)
	session := guardCheck{lease: r.lease, ownerIs: "fence_l.owner_token = " + r.owner, token: r.token, missing: r.missing}
	stmt := guardCheck{lease: "@" + StmtVarLease, ownerIs: "UNHEX(SHA2(fence_l.owner_token, 256)) = @" + StmtVarOwnerSum,
		token: "@" + StmtVarToken, missing: "@" + StmtVarOwnerSum + " IS NULL OR @" + StmtVarLease + " IS NULL"}
	if spec.Fence.Lease != "" {
		stmt.lease = r.lease
		stmt.missing = "@" + StmtVarOwnerSum + " IS NULL"
	}
	var b strings.Builder
	line := func(indent int, s string) {
		b.WriteString(strings.Repeat("  ", indent))
		b.WriteString(s)
		b.WriteByte('\n')
	}
	b.WriteString("BEGIN\n")
	in := 1
	if len(spec.Exempt) > 0 {
		line(1, "IF NOT ("+exemptSQL(spec.Exempt)+") THEN")
		in++
	}
	line(in, "IF @"+StmtVarToken+" IS NULL THEN")
	guardBranch(line, in+1, spec, session)
	line(in, "ELSE")
	guardBranch(line, in+1, spec, stmt)
	line(in, "END IF;")
	if len(spec.Exempt) > 0 {
		line(1, "END IF;")
	}
	b.WriteString("END")
	return b.String()
}

// guardBranch writes one branch of a guard body: the check of c, and the
// refusal when it fails.
func guardBranch(line func(int, string), in int, spec TriggerSpec, c guardCheck) {
	from := quoteIdent(spec.Fence.Schema) + "." + quoteIdent(spec.Fence.Table) + " PARTITION (" + GuardPartition + ") AS " + FenceAlias
	fence := "fence_l.lease_name = " + c.lease + " AND " + c.ownerIs + " AND fence_l.fence_token = " +
		c.token + " AND fence_l.leased_until > SYSDATE(3)"
	if spec.Engine == Galera {
		line(in, "UPDATE "+from+" SET fence_l."+WriteCounter+" = fence_l."+WriteCounter+" + 1 WHERE "+fence+";")
		line(in, "IF ROW_COUNT() = 0 THEN")
	} else {
		line(in, "IF NOT EXISTS (SELECT 1 FROM "+from+" WHERE "+fence+" LOCK IN SHARE MODE) THEN")
	}
	// The refusal's variables live in a block of their own: a write whose
	// fence holds declares nothing.
	line(in+1, "BEGIN")
	line(in+2, "DECLARE fence_row VARCHAR(64) CHARACTER SET ascii;")
	line(in+2, "DECLARE fence_msg VARCHAR(128) CHARACTER SET utf8mb4;")
	line(in+2, "SET fence_row = (SELECT CONCAT_WS(',', fence_l.fence_token = "+c.token+", "+c.ownerIs+
		", fence_l.leased_until > SYSDATE(3)) FROM "+from+" WHERE fence_l.lease_name = "+c.lease+" LOCK IN SHARE MODE);")
	line(in+2, "SET fence_msg = LEFT(CONCAT('"+guardMessagePrefix+spec.Schema+"."+spec.Table+" refused (', CASE WHEN "+c.missing+
		" THEN 'no_fence' WHEN fence_row IS NULL THEN 'lease_missing' WHEN fence_row LIKE '0,%' THEN 'stale_token'"+
		" WHEN fence_row LIKE '1,0,%' THEN 'owner_mismatch' ELSE 'expired' END, ') under lease ''', "+leaseDisplay(c.lease)+", ''''), 128);")
	line(in+2, "SIGNAL SQLSTATE '"+GuardSQLState+"' SET MYSQL_ERRNO = "+strconv.Itoa(GuardErrno)+", MESSAGE_TEXT = fence_msg;")
	line(in+1, "END;")
	line(in, "END IF;")
}

// guardLit writes a string as a utf8mb4_bin value for a trigger body. Not
// nameLit's introducer form: information_schema shows a stored body with
// its introducers removed (measured on MariaDB 10.11: "_utf8mb4 X'6a'"
// reads " X'6a'"), and the stored text must be what GuardTrigger.Body is.
// A constant either way: the lookup by it stays a primary-key lookup.
func guardLit(s string) string {
	return "CONVERT(X'" + hex.EncodeToString([]byte(s)) + "' USING utf8mb4) COLLATE utf8mb4_bin"
}

// leaseDisplay is the lease name for the refusal's message: printable ASCII
// as it is, anything else (which could fail the message's conversion to
// utf8mb4) as 0x and its hex; the empty string when NULL.
func leaseDisplay(expr string) string {
	return "COALESCE(IF(HEX(" + expr + ") REGEXP '^([2-6][0-9A-F]|7[0-9A-E])*$', CONVERT(" + expr + " USING ascii), CONCAT('0x', HEX(" +
		expr + "))), '')"
}

// exemptSQL is true when USER() is one of the exempt accounts. The user
// part is everything before USER()'s last '@' (the host part has none).
func exemptSQL(accounts []Account) string {
	const host = "SUBSTRING_INDEX(USER(), '@', -1)"
	const user = "LEFT(USER(), CHAR_LENGTH(USER()) - CHAR_LENGTH(" + host + ") - 1)"
	var parts []string
	for _, a := range accounts {
		p := user + " = " + guardLit(a.User)
		if a.Host != "" && a.Host != "%" {
			p = "(" + p + " AND " + host + " LIKE CONVERT(X'" + hex.EncodeToString([]byte(a.Host)) + "' USING utf8mb4) COLLATE utf8mb4_general_ci)"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " OR ")
}

// CreateSQL is the CREATE TRIGGER statement of g, ordered before the
// trigger precedes ("" = none: it is the first BEFORE trigger of its
// event). The definer is the account that runs it.
func (g GuardTrigger) CreateSQL(precedes string) string {
	s := "CREATE DEFINER = CURRENT_USER TRIGGER " + quoteIdent(g.Schema) + "." + quoteIdent(g.Name) + " BEFORE " + g.Event +
		" ON " + quoteIdent(g.Schema) + "." + quoteIdent(g.Table) + " FOR EACH ROW "
	if precedes != "" {
		s += "PRECEDES " + quoteIdent(precedes) + " "
	}
	return s + g.Body
}

// InstalledTrigger is one trigger of a table, as information_schema.TRIGGERS
// says it.
type InstalledTrigger struct {
	Name    string
	Event   string // INSERT, UPDATE, DELETE
	Timing  string // BEFORE, AFTER
	Order   int    // ACTION_ORDER among the triggers of its event and timing
	Body    string // ACTION_STATEMENT; "" when the account cannot see it
	SQLMode string
}

// GuardSQLMode is the sql_mode init creates guard triggers with (a trigger
// keeps it for its body). The body reads the same under any mode; an empty
// one makes sure no mode turns a warning inside it into an error that
// would replace the guard's own.
const GuardSQLMode = ""

// GuardState says whether one event of a protected table has its current
// guard trigger.
type GuardState struct {
	Event    string
	Current  string   // the current guard trigger's name; "" = none
	Outdated []string // guard triggers of this event that are not current
	First    bool     // Current is the first BEFORE trigger of the event
}

// CheckGuardTriggers compares a table's triggers with the guard triggers
// want (GuardTriggers of its spec): one GuardState per event.
func CheckGuardTriggers(want []GuardTrigger, have []InstalledTrigger) []GuardState {
	out := make([]GuardState, 0, len(want))
	for _, g := range want {
		st := GuardState{Event: g.Event}
		first := ""
		firstOrder := 0
		for _, t := range have {
			if !strings.EqualFold(t.Event, g.Event) || !strings.EqualFold(t.Timing, "BEFORE") {
				if IsGuardName(t.Name) && strings.EqualFold(t.Event, g.Event) {
					st.Outdated = append(st.Outdated, t.Name)
				}
				continue
			}
			if first == "" || t.Order < firstOrder {
				first, firstOrder = t.Name, t.Order
			}
			if !IsGuardName(t.Name) {
				continue
			}
			if st.Current == "" && t.Body == g.Body && t.SQLMode == GuardSQLMode {
				st.Current = t.Name
			} else {
				st.Outdated = append(st.Outdated, t.Name)
			}
		}
		st.First = st.Current != "" && first == st.Current
		out = append(out, st)
	}
	return out
}

// Missing lists what CheckGuardTriggers found wanting, one phrase per
// event without its current guard ("" when every event has one).
func Missing(states []GuardState) string {
	var parts []string
	for _, st := range states {
		switch {
		case st.Current != "":
		case len(st.Outdated) > 0:
			parts = append(parts, st.Event+": outdated ("+strings.Join(st.Outdated, ", ")+")")
		default:
			parts = append(parts, st.Event+": missing")
		}
	}
	return strings.Join(parts, "; ")
}

// GuardRefusal is what a guard trigger's message says.
type GuardRefusal struct {
	Table  string // schema.table
	Reason Reason
	Lease  string // as the message shows it (cut when the message was)
}

// ParseGuardError reads the message of a GuardErrno error. A client can
// SIGNAL the same number and text itself: callers trust nothing in it that
// they do not check (the table against their policy).
func ParseGuardError(msg string) (GuardRefusal, bool) {
	rest, ok := strings.CutPrefix(msg, guardMessagePrefix)
	if !ok {
		return GuardRefusal{}, false
	}
	table, rest, ok := strings.Cut(rest, " refused (")
	if !ok {
		return GuardRefusal{}, false
	}
	reason, rest, ok := strings.Cut(rest, ") under lease '")
	if !ok {
		return GuardRefusal{}, false
	}
	switch Reason(reason) {
	case NoFence, LeaseMissing, StaleToken, OwnerMismatch, Expired:
	default:
		return GuardRefusal{}, false
	}
	return GuardRefusal{Table: table, Reason: Reason(reason), Lease: strings.TrimSuffix(rest, "'")}, true
}
