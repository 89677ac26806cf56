package rewrite

// Catalog freshness. The catalog is a snapshot, read every catalog.refresh
// (2 s by default): a view over a protected table, or a routine writing
// one, created directly on the server a moment ago is not in it, and a
// write through it would be relayed unfenced until the next read. So
// while the catalog is current, a statement that writes to, or calls, an
// object the snapshot never saw is refused with Refusal.CatalogUnknown:
// the proxy reads the catalog again (one read at a time; a read that
// began after the statement arrived settles it) and asks again. An object
// the new snapshot does not have either does not exist on the server (or
// is a session's temporary table): the proxy marks it absent (MarkAbsent),
// and it is decided as a table the catalog has no fence for. The marks
// last until the next catalog read completes (ClearAbsent).
//
// The fast path takes a statement only when every table a write names,
// and every name it calls that is not a built-in function, is an object
// the snapshot saw (by name, any schema: the slow path compares schema and
// name): statements on known objects keep the fast path, at one lookup
// per such name. Reads of unknown tables stay on it.

import (
	"sync"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
)

// absentSet is the engine's marks of objects found absent.
type absentSet struct {
	mu  sync.RWMutex
	m   map[string]bool
	gen uint64 // changes with every mark and clear: part of the cache key
}

// MarkAbsent records that a catalog read that began after a statement
// naming schema.name arrived did not have it.
func (e *Engine) MarkAbsent(schema, name string) {
	a := &e.absent
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string]bool{}
	}
	a.m[foldName(schema)+"."+foldName(name)] = true
	a.gen++
}

// ClearAbsent forgets every mark: a catalog read completed, and a name
// marked before may exist now.
func (e *Engine) ClearAbsent() {
	a := &e.absent
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.m) > 0 {
		a.m = nil
		a.gen++
	}
}

func (e *Engine) isAbsent(schema, name string) bool {
	a := &e.absent
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.m[foldName(schema)+"."+foldName(name)]
}

func (e *Engine) absentGen() uint64 {
	a := &e.absent
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.gen
}

// unknownObject refuses a statement that writes to or calls schema.name,
// which the current catalog never saw, unless it was found absent since.
func (in *stmtIn) unknownObject(schema, name, what string) (stmtRes, bool) {
	e := in.pc.e
	if !e.fresh || e.isAbsent(schema, name) {
		return stmtRes{}, false
	}
	full := name
	if schema != "" {
		full = schema + "." + name
	}
	res := in.refuse(full, "fenceproxy's schema catalog has not seen the "+what+" "+full+" (it may have been created "+
		"since its last read, and may write protected tables); fenceproxy reads the catalog again before it decides, "+
		"and this refusal means it could not")
	res.refusal.CatalogUnknown = true
	res.refusal.Unknown = [2]string{schema, name}
	return res, true
}

// objectKnown reports whether the identifier token t names an object
// the snapshot saw (by name alone). It does not allocate.
func (e *Engine) objectKnown(sql []byte, t sqlread.Token) bool {
	b := sql[t.Start:t.End]
	if t.Kind == sqlread.QuotedIdent {
		if len(b) < 2 {
			return false
		}
		b = b[1 : len(b)-1]
	}
	if len(b) == 0 || len(b) > 64 {
		return false
	}
	var buf [64]byte
	for i, c := range b {
		switch {
		case c >= 0x80, t.Kind == sqlread.QuotedIdent && c == sql[t.Start]:
			return false // non-ASCII (the server's folding), a doubled quote
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	_, ok := e.objects[string(buf[:len(b)])]
	return ok
}

// freshScan follows the fast path's tokens of one statement for the names
// in write-target and call positions. The zero value starts a statement.
type freshScan struct {
	state    uint8
	write    bool          // the statement writes (INSERT, REPLACE, UPDATE, DELETE) or calls (CALL)
	prev     sqlread.Token // the token before this one
	prevName bool          // prev is an identifier
}

const (
	fsNone  uint8 = iota
	fsTable       // the next name is a table (or a procedure after CALL)
	fsAfter       // a table name was just read: an alias or ',' may follow
)

// What a word does to the scan.
const (
	fwOther    = iota
	fwWrite    // INSERT, REPLACE, DELETE, CALL: a table (procedure) follows
	fwUpdate   // UPDATE: a table follows, unless it is ON DUPLICATE KEY / FOR UPDATE
	fwTables   // FROM, JOIN, STRAIGHT_JOIN, TABLE, INTO, USING: tables follow, in a write
	fwModifier // LOW_PRIORITY, DELAYED, HIGH_PRIORITY, IGNORE, QUICK: may stand before the table
)

// freshWord classifies a word by its length first: most words are none of
// these, and cost one switch.
func freshWord(w []byte) int {
	switch len(w) {
	case 4:
		switch {
		case eqFold(w, "call"):
			return fwWrite
		case eqFold(w, "from"), eqFold(w, "join"), eqFold(w, "into"):
			return fwTables
		}
	case 5:
		switch {
		case eqFold(w, "table"), eqFold(w, "using"):
			return fwTables
		case eqFold(w, "quick"):
			return fwModifier
		}
	case 6:
		switch {
		case eqFold(w, "insert"), eqFold(w, "delete"):
			return fwWrite
		case eqFold(w, "update"):
			return fwUpdate
		case eqFold(w, "ignore"):
			return fwModifier
		}
	case 7:
		switch {
		case eqFold(w, "replace"):
			return fwWrite
		case eqFold(w, "delayed"):
			return fwModifier
		}
	case 12:
		if eqFold(w, "low_priority") {
			return fwModifier
		}
	case 13:
		switch {
		case eqFold(w, "straight_join"):
			return fwTables
		case eqFold(w, "high_priority"):
			return fwModifier
		}
	}
	return fwOther
}

// ok reports whether token t (of sql) keeps the statement on the fast
// path as far as catalog freshness goes.
func (f *freshScan) ok(e *Engine, sql []byte, t sqlread.Token) bool {
	switch t.Kind {
	case sqlread.Word, sqlread.QuotedIdent:
		r := t.Kind == sqlread.QuotedIdent || f.word(e, sql, t)
		if t.Kind == sqlread.QuotedIdent {
			r = f.name(e, sql, t)
		}
		f.prev, f.prevName = t, true
		return r
	case sqlread.Op:
		// A call: name( that may be a stored function (db.f( always is).
		if sql[t.Start] == '(' && f.prevName {
			p := f.prev
			if (p.AfterDot || p.Kind == sqlread.QuotedIdent || !builtinCall(sql[p.Start:p.End], false, p.End == t.Start)) &&
				!e.objectKnown(sql, p) {
				return false
			}
		}
		switch {
		case f.state == fsAfter && t.End-t.Start == 1 && sql[t.Start] == ',':
			f.state = fsTable
		case f.state == fsTable && t.End-t.Start == 1 && sql[t.Start] == '.':
			// schema.name: the name follows
		default:
			f.state = fsNone // a derived table, a column list, ...
		}
	default:
		f.state = fsNone
	}
	f.prevName = false
	return true
}

// word handles an unquoted word.
func (f *freshScan) word(e *Engine, sql []byte, t sqlread.Token) bool {
	if !t.AfterDot {
		switch freshWord(sql[t.Start:t.End]) {
		case fwOther:
		case fwWrite:
			f.state, f.write = fsTable, true
			return true
		case fwUpdate:
			// Not ON DUPLICATE KEY UPDATE, FOR UPDATE.
			if !(f.prevName && (eqFold(sql[f.prev.Start:f.prev.End], "key") || eqFold(sql[f.prev.Start:f.prev.End], "for"))) {
				f.state, f.write = fsTable, true
			}
			return true
		case fwTables:
			// The tables of a write (a read of an object the catalog never
			// saw writes nothing; a function it calls is looked at in ok).
			if f.write {
				f.state = fsTable
			}
			return true
		case fwModifier:
			if f.state == fsTable {
				return true
			}
		}
	}
	return f.name(e, sql, t)
}

// name handles an identifier in the current state.
func (f *freshScan) name(e *Engine, sql []byte, t sqlread.Token) bool {
	switch f.state {
	case fsTable:
		// schema.name: the name is the part after the dot.
		if isDotNext(sql, t) {
			return true
		}
		if !e.objectKnown(sql, t) {
			return false
		}
		f.state = fsAfter
	case fsAfter:
		if t.Kind == sqlread.QuotedIdent || !isKeywordish(sql, t) {
			return true // AS, or an alias
		}
		f.state = fsNone
	}
	return true
}

// isDotNext: a '.' follows the sqlread.Token at once (schema.name).
func isDotNext(sql []byte, t sqlread.Token) bool { return t.End < len(sql) && sql[t.End] == '.' }

// isKeywordish: words that end a table list (SET, WHERE, VALUES, SELECT,
// ON, PARTITION, ...). An alias may be any other word; a wrong guess only
// sends the statement to the slow path, or misses a table the slow path
// would not have seen written either (a list ends at these words).
func isKeywordish(sql []byte, t sqlread.Token) bool {
	w := sql[t.Start:t.End]
	for _, k := range [...]string{"set", "where", "values", "value", "select", "on", "partition", "group", "order",
		"limit", "having", "window", "union", "for", "lock", "join", "inner", "left", "right", "cross", "natural",
		"straight_join", "using", "default", "returning", "with", "use", "force", "ignore", "into", "procedure"} {
		if eqFold(w, k) {
			return true
		}
	}
	return false
}
