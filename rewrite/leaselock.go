package rewrite

import (
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
)

// Lease rows are locked only by fenced writes (a share lock, until commit)
// and by the lease functions. A client that locks them itself can stall
// the lease: measured on MariaDB 10.11 with two sessions, a lease row held
// FOR UPDATE (also SKIP LOCKED, NOWAIT, or inside a subquery) in an open
// transaction makes every fenced write of the holder wait into a lock-wait
// timeout; a share lock makes renewals and takeovers wait. InnoDB takes
// share locks on the rows it reads for every statement that is not a plain
// SELECT, at REPEATABLE READ and SERIALIZABLE: INSERT/REPLACE ... SELECT,
// CREATE TABLE ... SELECT, UPDATE and DELETE with a subquery or a join, SET
// @x = (SELECT ...), DO (SELECT ...); at READ COMMITTED still for
// multi-table UPDATE, SET and DO. So a client statement that reads a lease
// table is refused unless it is a plain read (SELECT without a locking
// clause, SHOW, DESCRIBE, EXPLAIN), and LOCK TABLES naming one is refused.
// A plain SELECT takes no lock, except in a SERIALIZABLE transaction (the
// server then reads with share locks; the proxy does not track the
// isolation level).

// leaseLockRefusal refuses a statement that would lock lease rows, or nil.
func (in *stmtIn) leaseLockRefusal() *stmtRes {
	e := in.pc.e
	var named *policy.Table
	raw := in.raw()
	for _, t := range e.leaseList {
		if containsFold(raw, lowerASCII(t.Table)) {
			named = t
			break
		}
	}
	if named == nil {
		return nil
	}
	read := in.readOnlyHead()
	if n, err := parseOne(in.normText(), in.st.mode); err == nil {
		// As the server reads it: which tables, which kind of statement.
		read = isPlainRead(n)
		named = in.leaseIn(n)
		if named == nil && !read {
			// Some statements do not show their tables to a visitor
			// (OPTIMIZE TABLE): a name token that is a lease table's counts.
			named = in.leaseIdent()
		}
		if named == nil {
			return nil
		}
	}
	const fix = "read it with a plain SELECT (no FOR UPDATE, FOR SHARE or LOCK IN SHARE MODE), in a statement " +
		"that writes nothing; fenceproxy adds the lease check to writes itself"
	if in.hasLockingClause() {
		r := in.refuse(qualified(named), "this statement locks rows of a lease table, which would make the lease "+
			"holder's fenced writes, renewals and takeovers wait for this session; "+fix)
		return &r
	}
	if !read {
		r := in.refuse(qualified(named), "this statement uses a lease table other than by a plain SELECT: the "+
			"server share-locks the lease rows such a statement reads (or locks the table), so renewals and "+
			"takeovers wait for this session; "+fix)
		return &r
	}
	return nil
}

// leaseIn returns the first lease table among the tables n names.
func (in *stmtIn) leaseIn(n ast.Node) *policy.Table {
	for _, tn := range sqlread.TableNames(n) {
		if p := in.protectedName(tn); in.pc.e.isLease(p) {
			return p
		}
	}
	return nil
}

// leaseIdent returns the lease table that a name token of the statement
// names (in any schema: over-matching only refuses more), or nil.
func (in *stmtIn) leaseIdent() *policy.Table {
	for i, t := range in.toks {
		if t.Kind != sqlread.Word && t.Kind != sqlread.QuotedIdent {
			continue
		}
		name, _ := in.identAt(i)
		for _, l := range in.pc.e.leaseList {
			if strings.EqualFold(name, l.Table) {
				return l
			}
		}
	}
	return nil
}

// isPlainRead: a statement the server runs as a plain SELECT (SQLCOM_SELECT,
// consistent read) or one that reads no rows.
func isPlainRead(n ast.StmtNode) bool {
	switch x := n.(type) {
	case *ast.SelectStmt, *ast.SetOprStmt, *ast.ShowStmt:
		return true
	case *ast.ExplainStmt:
		if s, ok := x.Stmt.(ast.StmtNode); ok {
			return isPlainRead(s)
		}
	}
	return false
}

// hasLockingClause: FOR UPDATE, FOR SHARE or LOCK IN SHARE MODE anywhere in
// the statement (subqueries, executable comments included).
func (in *stmtIn) hasLockingClause() bool {
	for i := range in.toks {
		if in.kw(i, "for") && (in.kw(i+1, "update") || in.kw(i+1, "share")) || in.kw(i, "lock") && in.kw(i+1, "in") {
			return true
		}
	}
	return false
}

// LOCK TABLES. Under LOCK TABLES a statement may use only the tables (and
// aliases) locked, so the fence's `lease AS fence_l` failed with ERROR 1100
// and apps that lock their tables could not write protected ones. When a
// LOCK TABLES names a protected table, fenceproxy appends each lease table
// it needs as `schema`.`lease` AS fence_l READ. Measured on MariaDB 10.11:
// the EXISTS ... LOCK IN SHARE MODE fence then works for UPDATE, DELETE and
// INSERT ... SELECT (valid: 1 row, stale: 0 rows), with autocommit on and
// with autocommit=0 as the manual recommends for InnoDB; the READ lock
// makes every write of the lease table from other sessions (takeovers and
// renewals of every lease in it) wait until UNLOCK TABLES, not until
// COMMIT, so the check cannot go stale while the tables are locked; two
// lease tables in different schemas may both be locked AS fence_l, two
// aliases fence_l in one schema are ERROR 1066.

// lockTablesStmt decides on LOCK TABLE[S] item [, item] [WAIT n | NOWAIT],
// item = name [[AS] alias] {READ [LOCAL] | [LOW_PRIORITY] WRITE [CONCURRENT]}.
func (in *stmtIn) lockTablesStmt() stmtRes {
	e := in.pc.e
	res := stmtRes{stmt: Stmt{Kind: Other, Locks: LocksTaken}, matters: true}
	if !in.kw(1, "tables") && !in.kw(1, "table") {
		// LOCK INSTANCE FOR BACKUP and the like: no table locks.
		if t := in.mentions(); t != "" && e.hasTables() {
			return in.refuse(t, "fenceproxy cannot read this LOCK statement, and it mentions a protected table")
		}
		return stmtRes{stmt: Stmt{Kind: Other}}
	}
	unreadable := func() stmtRes {
		if t := in.mentions(); t != "" && e.hasTables() {
			return in.refuse(t, "fenceproxy cannot read this LOCK TABLES statement, and it mentions a protected table; "+
				"write LOCK TABLES name [AS alias] READ|WRITE, ...")
		}
		return res
	}
	var leases []fenceKey
	var prot *policy.Table
	aliased := false // some item uses the alias fence_l
	last := -1       // the last token of the table list
	i := 2
	for {
		schema, name, next, ok := in.tableNameAt(i)
		if !ok {
			return unreadable()
		}
		i = next
		alias := ""
		if in.kw(i, "as") {
			a, ok := in.identAt(i + 1)
			if !ok {
				return unreadable()
			}
			alias, i = a, i+2
		} else if !in.lockWord(i) && (i < len(in.toks) && (in.toks[i].Kind == sqlread.Word || in.toks[i].Kind == sqlread.QuotedIdent)) {
			alias, _ = in.identAt(i)
			i++
		}
		switch {
		case in.kw(i, "read"):
			i++
			if in.kw(i, "local") {
				i++
			}
		case in.kw(i, "low_priority") && in.kw(i+1, "write"):
			i += 2
		case in.kw(i, "write"):
			i++
			if in.kw(i, "concurrent") {
				i++
			}
		default:
			return unreadable()
		}
		last = i - 1
		if schema == "" {
			schema = in.st.schema
		}
		if p := e.lookup(schema, name); p != nil {
			if e.isLease(p) {
				return in.refuse(qualified(p), "LOCK TABLES of a lease table would make every renewal and takeover "+
					"of its leases wait for this session; lock only your own tables: when they include a protected "+
					"table, fenceproxy adds the lease table itself (AS fence_l READ)")
			}
			if in.st.mode.server.Galera {
				// Table locks are local to a Galera node and not certified:
				// they order nothing against a takeover on another node, so
				// a guard and its write must share a transaction, which
				// START TRANSACTION would give only by unlocking the tables.
				return in.refuse(qualified(p), "LOCK TABLES cannot keep a fenced write atomic on Galera (table locks "+
					"are local to a node and not certified); use a transaction (BEGIN ... COMMIT) instead")
			}
			prot = p
			leases = append(leases, e.fenceKeys([]Target{target(p)})...)
		}
		if strings.EqualFold(alias, lease.FenceAlias) {
			aliased = true
		}
		if in.op(i, ",") {
			i++
			continue
		}
		break
	}
	switch {
	case in.kw(i, "nowait"):
		i++
	case in.kw(i, "wait") && i+1 < len(in.toks) && in.toks[i+1].Kind == sqlread.Number:
		i += 2
	}
	if i != len(in.toks) {
		return unreadable()
	}
	if prot == nil || in.st.mode.server.Flavor == TiDB {
		// TiDB: LOCK TABLES is a no-op (warning 1235) unless the
		// experimental enable-table-lock is set, its LOCK TABLES takes no
		// alias (the lease table AS fence_l READ is a syntax error), and
		// no fence relies on table locks there: every fenced write runs
		// after a guard that locks the lease row in a transaction, which
		// the proxy opens for autocommit writes whatever the session's
		// table locks (TiDB's START TRANSACTION releases none; with
		// enable-table-lock a table no session locked, such as the lease
		// table, stays readable). Measured in
		// integration/tidb_proxy_test.go (TestTiDBProxyLockTables).
		return res
	}
	if aliased {
		return in.refuse(qualified(prot), "the alias fence_l is fenceproxy's (it locks the lease table under that "+
			"name for the fence); use another alias")
	}
	var b strings.Builder
	seen := map[string]bool{}
	for _, k := range leases {
		key := lowerASCII(k.schema) + "." + lowerASCII(k.table)
		if seen[key] {
			continue
		}
		seen[key] = true
		b.WriteString(", ")
		b.WriteString(quoteIdent(k.schema))
		b.WriteByte('.')
		b.WriteString(quoteIdent(k.table))
		b.WriteString(" AS " + lease.FenceAlias + " READ")
	}
	res.edits = []edit{{pos: in.toks[last].End, end: in.toks[last].End, text: b.String()}}
	return res
}

// lockWord: a lock type keyword of LOCK TABLES (not an alias).
func (in *stmtIn) lockWord(i int) bool {
	return in.kw(i, "read") || in.kw(i, "write") || in.kw(i, "low_priority")
}

// tableNameAt reads [schema.]name at token i.
func (in *stmtIn) tableNameAt(i int) (schema, name string, next int, ok bool) {
	first, ok := in.identAt(i)
	if !ok {
		return "", "", i, false
	}
	if in.op(i+1, ".") {
		second, ok := in.identAt(i + 2)
		if !ok {
			return "", "", i, false
		}
		return first, second, i + 3, true
	}
	return "", first, i + 1, true
}

// lockEffect says what a statement of the given kind does to the session's
// table locks. A refusal is returned for SET STATEMENT ... FOR LOCK TABLES
// or FLUSH, whose table list fenceproxy would have to amend.
func (in *stmtIn) lockEffect(kind StmtKind) (LockEffect, *stmtRes) {
	if kind == Call {
		return LocksMaybeReleased, nil
	}
	i := 0
	if in.kw(0, "set") && in.kw(1, "statement") {
		// SET STATEMENT var = value [, ...] FOR statement
		d := in.depths()
		for j := 2; j < len(in.toks); j++ {
			if d[j] == 0 && in.kw(j, "for") {
				i = j + 1
				break
			}
		}
		if i == 0 {
			return LocksKept, nil
		}
		if (in.kw(i, "lock") || in.kw(i, "flush")) && in.pc.e.hasTables() {
			r := in.refuse("", "send LOCK TABLES and FLUSH TABLES without SET STATEMENT, so that fenceproxy can "+
				"track the table locks and add the lease table when a protected table is locked")
			return LocksKept, &r
		}
	}
	switch {
	case in.kw(i, "unlock"), in.kw(i, "begin"), in.kw(i, "start") && in.kw(i+1, "transaction"):
		// Measured: BEGIN, BEGIN WORK, START TRANSACTION [READ ONLY | WITH
		// CONSISTENT SNAPSHOT] and SET STATEMENT ... FOR BEGIN all release
		// table locks.
		return LocksReleased, nil
	case in.kw(i, "commit"), in.kw(i, "rollback"):
		chain, noChain := false, false
		for j := i + 1; j < len(in.toks); j++ {
			switch {
			case in.kw(j, "to"):
				return LocksKept, nil // ROLLBACK TO SAVEPOINT
			case in.kw(j, "no") && in.kw(j+1, "chain"):
				noChain = true
			case in.kw(j, "chain"):
				chain = true
			}
		}
		switch {
		case noChain:
			return LocksKept, nil
		case chain:
			return LocksReleased, nil
		}
		return LocksReleasedIfChained, nil
	case in.kw(i, "flush"):
		// FLUSH [NO_WRITE_TO_BINLOG | LOCAL] TABLE[S] t [, t] WITH READ LOCK
		// | FOR EXPORT locks the tables named; without names it is the
		// global read lock, which START TRANSACTION does not release.
		j := i + 1
		if in.kw(j, "no_write_to_binlog") || in.kw(j, "local") {
			j++
		}
		if !in.kw(j, "tables") && !in.kw(j, "table") || in.kw(j+1, "with") || in.kw(j+1, "for") {
			return LocksKept, nil
		}
		for k := j + 1; k < len(in.toks); k++ {
			if in.kw(k, "with") && in.kw(k+1, "read") || in.kw(k, "for") && in.kw(k+1, "export") {
				return LocksTaken, nil
			}
		}
	}
	return LocksKept, nil
}
