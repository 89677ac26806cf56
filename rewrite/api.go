// Package rewrite decides, for each statement a client sends, whether the
// proxy relays it untouched, sends a fenced version, or refuses it. It is
// pure: no I/O, no clocks, no globals that change.
//
// The proxy calls Engine.Query for every COM_QUERY and Engine.Prepare for
// every COM_STMT_PREPARE. Statements that mention no protected table name
// (and none of the few keywords the session must track) take a lexical fast
// path that neither allocates nor parses.
package rewrite

import (
	"bytes"
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
)

// Flavor is the server family, learned from the handshake's version
// string: the tokenizer's, which reads each family's comments by its rules.
type Flavor = sqlread.Flavor

const (
	MySQL   = sqlread.MySQL
	MariaDB = sqlread.MariaDB
	TiDB    = sqlread.TiDB
)

// Server is what the rewriter must know of the backend: its family decides
// the fence shape, its version which executable comments are live.
type Server struct {
	Flavor  Flavor
	Version uint32 // major*10000 + minor*100 + patch: 101119 for 10.11.19, 80036 for 8.0.36
	// Galera: the server is a MariaDB Galera (or MySQL wsrep) node. A row
	// lock is local to a node there and not certified, so no fence inside
	// a statement's text holds against a takeover on another node: every
	// protected write is guarded (Fence.Guard), and the guard changes the
	// lease row (lease.GuardFor).
	Galera bool
}

// Tri is a session fact that may be unknown to the proxy.
type Tri uint8

const (
	Unknown Tri = iota
	Off
	On
)

// Session is the per-connection state that changes how a statement reads.
type Session struct {
	Schema string // current database; "" = none selected

	// ANSIQuotes: whether `"` quotes identifiers (sql_mode ANSI_QUOTES).
	// Unknown until the client sets sql_mode to a literal; when unknown, a
	// statement that needs rewriting and contains `"` is analysed both ways
	// and refused if the two readings differ.
	ANSIQuotes Tri
	// NoBackslashEscapes: sql_mode NO_BACKSLASH_ESCAPES. The proxy knows it
	// from every OK/EOF status flag; Unknown is handled as for ANSIQuotes.
	NoBackslashEscapes Tri
	// UnsafeCharset: the client character set may carry quote or backslash
	// bytes inside multibyte characters (big5, cp932, gbk, sjis, gb18030) or
	// is unknown. The ASCII bytes that can follow a multibyte character's
	// first byte there are digits, letters and @ [ \ ] ^ ` { | } ~; only the
	// latter can change the reading. So a packet in which a byte >= 0x80 is
	// directly followed by one of those is refused (while the policy
	// protects anything); every other packet reads exactly as in UTF-8.
	UnsafeCharset bool
	// NamesUTF8: the client character set is known to be utf8mb3 or
	// utf8mb4, so a name's bytes are the UTF-8 the server converts it to.
	// Prepared statement names with bytes >= 0x80 are refused otherwise
	// (while the policy protects a table): the server finds them by their
	// converted bytes (see StmtName).
	NamesUTF8 bool
	// ASCIIRemap: the client character set may read ASCII bytes as other
	// characters (swe7 reads [ ] ^ { } ~ as letters: the server reads
	// b^mp as one name, fenceproxy b, ^, mp), or is not known. While the
	// policy protects a table every statement is refused
	// (Refusal.CharsetUnknown: the proxy may learn the character set and
	// ask again).
	ASCIIRemap bool
	// Oracle: sql_mode ORACLE, under which compound statements read
	// differently (BEGIN starts a block, procedures are called without
	// CALL). Unknown: both readings must agree.
	Oracle Tri

	// TablesLocked: the session holds table locks (LOCK TABLES, FLUSH
	// TABLES t WITH READ LOCK). Every statement then takes the slow path,
	// so that the proxy sees each one that may release them (BEGIN, START
	// TRANSACTION, COMMIT AND CHAIN, ...). Decisions do not depend on it.
	TablesLocked bool
}

// Action is what the proxy does with a packet.
type Action uint8

const (
	// Forward: relay the client's bytes unchanged.
	Forward Action = iota
	// Send: send Decision.SQL instead of the client's text.
	Send
	// Refuse: send nothing of the packet to the server; answer the client
	// with Decision.Refusal as an ERR packet.
	Refuse
	// Answer: a SQL lease function (Decision.Call) the proxy answers itself.
	Answer
)

// Decision is the rewriter's verdict on one COM_QUERY or COM_STMT_PREPARE.
//
// Decisions may be shared between callers through the cache: treat every
// field, slice and pointer as read-only.
type Decision struct {
	Action  Action
	SQL     []byte     // Action == Send: the text to send
	Refusal *Refusal   // Action == Refuse
	Call    *LeaseCall // Action == Answer

	// Stmts describes the packet's statements in order, one per statement
	// the server will execute (so Stmts[i] goes with the i-th result), but
	// only when at least one of them matters to the proxy (a protected
	// write, or a session effect: USE, sql_mode, character set, PREPARE,
	// EXECUTE, DEALLOCATE). Nil otherwise.
	//
	// A compound statement (BEGIN NOT ATOMIC ... END, Kind Call) or a stored
	// program definition (Kind Other) takes the rest of the packet: the
	// server may report more results after it than Stmts lists; those
	// statements cannot matter (fenceproxy checked that the text holds
	// nothing that would). For Prepare (COM_STMT_PREPARE), Stmts describes
	// what each execution of the prepared statement does.
	Stmts []Stmt

	// Stripped: the client's text with only the statements' fence keys
	// removed (stmtfence.go), nil when it has none. (Shadow mode, which
	// forwards statements unfenced, sends Engine.Shadow's text.)
	Stripped []byte

	// ChangesSchema: a statement of the packet starts with CREATE, ALTER,
	// DROP or RENAME, so it may change the schema objects the catalog
	// reads; the proxy reads the catalog again before the client's next
	// command. (The fast path takes no such statement.)
	ChangesSchema bool
}

// StmtKind classifies a statement for the proxy's bookkeeping.
type StmtKind uint8

const (
	Other      StmtKind = iota
	Write               // writes a protected table: see Stmt.Fence
	Use                 // USE schema: Stmt.Schema
	SetSQLMode          // changes session sql_mode: Stmt.ANSIQuotes, Stmt.NoBackslashEscapes (Unknown if not a literal)
	SetCharset          // changes character_set_client: Stmt.UnsafeCharset
	Prepare             // SQL-level PREPARE Stmt.Name FROM '...': Stmt.Fence is the inner statement's (nil if not a protected write)
	Execute             // SQL-level EXECUTE Stmt.Name: the proxy looks up what was prepared under that name
	Deallocate          // DEALLOCATE/DROP PREPARE Stmt.Name
	Call                // CALL: its response is any number of result sets, then one OK or ERR
	// XAStart: XA START / XA BEGIN. Once it succeeded the session is in an
	// XA branch until the server says no transaction is open, and the
	// proxy refuses protected writes there: XA PREPARE releases the lease
	// row's share lock, and XA COMMIT may come after a takeover.
	XAStart
)

// Stmt is one statement of a packet.
type Stmt struct {
	Kind StmtKind

	// Span is the statement's byte range [start, end) in the text the proxy
	// sends (Decision.SQL for Send, the client's text for Forward), without
	// the separating ';'. The proxy uses it to run the statements of a
	// multi-statement packet one at a time when on_stale is error.
	Span [2]int

	Fence *Fence // Kind Write (or Prepare of a protected write)

	Schema             string // Kind Use
	ANSIQuotes         Tri    // Kind SetSQLMode
	NoBackslashEscapes Tri    // Kind SetSQLMode
	UnsafeCharset      bool   // Kind SetCharset (and Kind SetSQLMode when SetsCharset)
	NamesUTF8          bool   // Kind SetCharset (and SetSQLMode when SetsCharset): the new set is utf8mb3/utf8mb4
	ASCIIRemap         bool   // Kind SetCharset (and SetSQLMode when SetsCharset): the new set is not known to read ASCII as ASCII
	Oracle             Tri    // Kind SetSQLMode: sql_mode ORACLE
	// Name: Kind Prepare, Execute, Deallocate: the statement name folded
	// as the server compares them (StmtName), so that two names are the
	// same statement exactly when their Names are equal.
	Name string

	// SetsCharset: a Kind SetSQLMode statement that also changes
	// character_set_client (SET NAMES gbk, sql_mode = ''): apply
	// UnsafeCharset as for Kind SetCharset.
	SetsCharset bool

	// Prepared: for Kind Prepare, what executing the prepared statement
	// does (its Kind Write with Fence, or SetSQLMode / SetCharset with their
	// effects); nil when it matters to nobody. EXECUTE of that name has
	// this effect.
	Prepared *Stmt

	// Locks: what the statement does to the session's table locks, for the
	// proxy's tracking of LOCK TABLES.
	Locks LockEffect
}

// LockEffect is what a statement does to the session's table locks.
type LockEffect uint8

const (
	LocksKept LockEffect = iota
	// LocksTaken: LOCK TABLES, FLUSH TABLES t WITH READ LOCK / FOR EXPORT.
	// After success the session holds table locks. After an error it may
	// or may not (the server releases the old locks before it opens the
	// new tables): the proxy then assumes none, except for errors raised
	// before anything ran (syntax, duplicate alias).
	LocksTaken
	// LocksReleased: UNLOCK TABLES, BEGIN, START TRANSACTION, COMMIT AND
	// CHAIN, ROLLBACK AND CHAIN: after success the session holds none.
	LocksReleased
	// LocksReleasedIfChained: COMMIT, ROLLBACK. They release table locks
	// only when they chain a new transaction (completion_type = CHAIN),
	// which the OK packet's in-transaction flag shows.
	LocksReleasedIfChained
	// LocksMaybeReleased: CALL and compound statements may start a
	// transaction inside; the proxy assumes the locks are gone.
	LocksMaybeReleased
)

// Fence describes a protected write: which tables, under which leases.
type Fence struct {
	Targets []Target
	// Digest is the statement with every literal replaced by '?', for audit
	// records: never the literals themselves.
	Digest string

	// Guard: the statement is sent exactly as the client wrote it (INSERT,
	// REPLACE; on Galera every write), and the proxy checks the lease first with a guard
	// statement on the same connection, in the same transaction, that
	// locks the lease row until the write commits. Otherwise the fence is
	// in the statement's own text.
	Guard bool

	// Rows: the write answers with a result set, not an OK (MariaDB's
	// RETURNING, ANALYZE).
	Rows bool

	// Presented: the statement carries its own fence (a sqlcommenter
	// fence comment, removed from the text sent): every lease check of
	// this write (the fence in its text, its guard, the verdict on a
	// rejection, the audit record) uses it, and never the session's fence
	// variables. Nil: the session's variables.
	Presented *lease.Presented

	// Trap (an UPDATE or DELETE of a table whose lease is a template,
	// whose WHERE pins no lease): the per-row condition in the sent text
	// makes the statement fail, changing nothing, when a row its WHERE
	// matches belongs to another lease (rowlease.go, rowLeaseTrap). Nil:
	// no trap.
	Trap *Trap
}

// Trap is the per-row condition of a write that fails on a row of another
// lease, as it stands in the sent text, and the same condition without
// the trap.
type Trap struct {
	Cond  string
	Plain string
	// Prepared: a statement to prepare (COM_STMT_PREPARE), sent with
	// Plain; the proxy prepares the trapped variant beside it (Trapped),
	// whose WHERE copy holds Params placeholders after the client's.
	Prepared bool
	Params   int
	// Confirm is a locking read of a row the trap would fire on now: the
	// proxy runs it after the trap fired, and sends the write again when
	// it finds none (the row that fired was being changed by another
	// transaction; see proxy/fencing's confirmTrap). It holds the WHERE
	// copy's Params placeholders: with any, the proxy prepares it and
	// binds the execution's values.
	Confirm string
}

// Trapped returns text, a statement to prepare sent with t's plain
// condition (Prepared), with the trapped one in its place: the one
// occurrence of Plain, spliced after the statement's last token as in
// Untrapped. Nil when text does not hold it exactly once: the client's
// text may repeat the plain condition byte for byte (in a trailing
// comment, a string literal), and the trap spliced into that copy would
// leave the statement the proxy executes in the client's place with the
// plain condition alone, which skips other leases' rows with no record
// (measured: TestRowLeaseTrapSpliceAttacks). Without a trapped variant the
// proxy refuses the statement's executions.
func (t *Trap) Trapped(text []byte) []byte {
	if bytes.Count(text, []byte(t.Plain)) != 1 {
		return nil
	}
	i := bytes.Index(text, []byte(t.Plain))
	if i < 0 {
		return nil
	}
	out := make([]byte, 0, len(text)-len(t.Plain)+len(t.Cond))
	out = append(out, text[:i]...)
	out = append(out, t.Cond...)
	return append(out, text[i+len(t.Plain):]...)
}

// Untrapped returns text, a statement sent with t, with the plain per-row
// condition in place of the trapped one: the same write, which changes the
// rows of the fence's lease and skips the others. The trapped condition is
// the last one spliced, after the statement's last token; only the
// client's trailing whitespace and comments follow it, so it is the last
// occurrence (a trailing comment that repeats it byte for byte makes the
// result trap again, and the proxy then answers as for on_stale: error).
func (t *Trap) Untrapped(text []byte) []byte {
	i := bytes.LastIndex(text, []byte(t.Cond))
	if i < 0 {
		return nil
	}
	out := make([]byte, 0, len(text)-len(t.Cond)+len(t.Plain))
	out = append(out, text[:i]...)
	out = append(out, t.Plain...)
	return append(out, text[i+len(t.Cond):]...)
}

// IsTrapError reports whether an error the server answered to a write is
// the trap of its per-row condition: ER_DATA_OUT_OF_RANGE naming the
// trap's EXP() with its constant, as each server writes the expression
// (measured: MariaDB 'exp(72101729 + coalesce(...))'; TiDB
// 'exp(cast(plus(72101729, coalesce(...)), double BINARY))', and
// 'exp(7.2101729e+07)' when the WHERE sets the column to a constant,
// which TiDB then puts in the expression).
func IsTrapError(code uint16, msg string) bool {
	if code != trapErrno {
		return false
	}
	m := strings.ToLower(msg)
	i := strings.Index(m, "exp(")
	return i >= 0 && strings.Contains(m[i:], trapDigits)
}

// Target is one protected table a statement writes.
type Target struct {
	Schema string
	Table  string
	Lease  string // the table's fixed lease; "" = the session's lease variable

	// Template: the table's lease is a template over its columns
	// (rowlease.go); Lease is then "" (the session names the lease).
	Template *policy.Template
	// RowLease (INSERT, REPLACE into a Template table): the lease of the
	// rows written, which the session's lease must be.
	RowLease string
	// RowParams (INSERT, REPLACE prepared with COM_STMT_PREPARE whose
	// template columns are placeholders): RowLease is "" and follows from
	// the values each execution binds (RowParams.Lease); a guard without
	// it must not run.
	RowParams *RowParams
}

// Refusal says why a statement was not sent and what to do instead.
type Refusal struct {
	Table  string // schema.table concerned, "" if none in particular
	Reason string // one sentence: why, and what to do

	// SQLModeUnknown: refused only because the statement reads differently
	// under the sql_mode settings the session's state leaves open. The proxy
	// may learn them (SELECT @@SESSION.sql_mode) and ask again.
	SQLModeUnknown bool
	// CharsetUnknown: refused only because the proxy does not know that
	// the client character set is UTF-8 (a prepared statement name with
	// bytes >= 0x80). The proxy may learn it (SELECT
	// @@SESSION.character_set_client) and ask again.
	CharsetUnknown bool

	// UnknownKind: refused because no statement of the server's grammar
	// starts this way (statementKinds has no row for its first word), on
	// MariaDB and MySQL. The server would answer a syntax error, so the client gets ER_PARSE_ERROR
	// (1064, 42000) with this refusal's text: drivers and ORMs that tell a
	// syntax error by its code still do.
	UnknownKind bool

	// CatalogUnknown: refused only because the statement writes to or
	// calls Unknown (schema, name), which the current catalog never saw
	// (see fresh.go). The proxy may read the catalog again, or mark the
	// object absent (Engine.MarkAbsent), and ask again.
	CatalogUnknown bool
	Unknown        [2]string
}

func (r *Refusal) Error() string {
	if r.Table != "" {
		return "fenceproxy refused a statement on protected table " + r.Table + ": " + r.Reason
	}
	return "fenceproxy refused a statement: " + r.Reason
}

// LeaseFunc is one of the SQL lease functions the proxy answers.
type LeaseFunc uint8

const (
	FenceAcquire LeaseFunc = iota + 1 // fence_acquire('name', ttl_seconds)
	FenceRenew                        // fence_renew(ttl_seconds)
	FenceRelease                      // fence_release()
	FenceStatus                       // fence_status()
)

func (f LeaseFunc) String() string {
	switch f {
	case FenceAcquire:
		return "fence_acquire"
	case FenceRenew:
		return "fence_renew"
	case FenceRelease:
		return "fence_release"
	case FenceStatus:
		return "fence_status"
	}
	return "?"
}

// LeaseCall is a `SELECT fence_xxx(args)` statement, the only shape in which
// the lease functions may be called.
type LeaseCall struct {
	Func   LeaseFunc
	Args   []Arg  // in order
	Column string // the result column's name as the server would report it: the call's text as written, e.g. "fence_acquire('job', 30)", or the alias if `AS alias` was given
}

// Arg is one argument of a lease call: a literal, or a '?' placeholder
// (prepared statements) whose value arrives with COM_STMT_EXECUTE.
type Arg struct {
	Placeholder bool
	Null        bool
	String      string // literal value, unescaped (numbers as written)
	IsNumber    bool
}
