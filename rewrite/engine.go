package rewrite

import (
	"bytes"

	"github.com/fenceproxy/fenceproxy/catalog"
	"github.com/fenceproxy/fenceproxy/policy"
)

// Options tune an Engine.
type Options struct {
	// CacheEntries bounds the number of remembered slow-path decisions
	// (default 4096; negative disables the cache).
	CacheEntries int
	// ShapeEntries bounds the number of remembered statement shapes (see
	// shape.go): 0 takes CacheEntries (and disables the shape cache with
	// it), negative disables it.
	ShapeEntries int

	// Catalog: the schema objects that reach protected tables (views,
	// trigger tables, cascading parents, routines); nil = none known.
	Catalog *catalog.Closure
	// CatalogStale: why the catalog could not be read lately ("" = it is
	// current). While set, writes to objects Catalog does not know, CALLs
	// of procedures it does not know, and calls of functions that are
	// neither built in nor known to it (see stalecall.go) are refused.
	CatalogStale string

	// MaxParseBytes, MaxParseTokens and MaxParseNesting bound what the
	// slow path reads of one packet (limits.go); 0 = the defaults.
	MaxParseBytes   int
	MaxParseTokens  int
	MaxParseNesting int
}

// Engine decides on statements for one policy snapshot. It is safe for
// concurrent use; build a new one when the policy changes.
type Engine struct {
	pol     *policy.Policy
	needles matcher // protected table names, lease function prefix, sql_mode ...
	// programNeedles: needles without the system schema's name.
	programNeedles matcher
	cache          *cache[*Decision]
	shapes         *cache[*shapePlan]
	// stmtCache: decisions of packets with a fence comment, kept under
	// their probe text, never with their fence values (stmtfencecache.go).
	stmtCache *cache[*Decision]
	fences    fenceTexts
	// leases: the lease tables of the protected schemas. Only the lease
	// functions write them; a client that could would forge its own lease.
	leases    map[string]*policy.Table
	leaseList []*policy.Table // the same, in policy order

	cat      *catalog.Closure // see Options.Catalog
	catStale string
	catNames []catName
	// catSet: the catalog's names for the fast path, matched against the
	// statement's identifiers rather than its raw text (see nameSet).
	catSet *nameSet

	maxBytes, maxTokens, maxNesting int // see limits.go

	// bare reads packets for shadow mode (shadow.go): nothing protected,
	// strict, no caches. strict: what cannot be read with certainty is
	// refused even though nothing is protected (mustRead).
	bare   *Engine
	strict bool

	// fresh: the catalog is current; objects: the names it saw; absent:
	// the objects found absent since (see fresh.go).
	fresh   bool
	objects map[string]struct{}
	absent  absentSet
}

// New returns an Engine for the policy snapshot p (nil: nothing protected).
func New(p *policy.Policy, opts Options) *Engine {
	e := newEngine(p, opts)
	e.bare = newEngine(nil, Options{CacheEntries: -1, ShapeEntries: -1, MaxParseBytes: e.maxBytes,
		MaxParseTokens: e.maxTokens, MaxParseNesting: e.maxNesting})
	e.bare.strict = true
	return e
}

func newEngine(p *policy.Policy, opts Options) *Engine {
	if p == nil {
		p = emptyPolicy()
	}
	e := &Engine{pol: p, maxBytes: opts.MaxParseBytes, maxTokens: opts.MaxParseTokens, maxNesting: opts.MaxParseNesting}
	if e.maxBytes <= 0 {
		e.maxBytes = policy.DefaultMaxParseBytes
	}
	if e.maxTokens <= 0 {
		e.maxTokens = policy.DefaultMaxParseTokens
	}
	if e.maxNesting <= 0 {
		e.maxNesting = policy.DefaultMaxParseNesting
	}
	words := []string{"fence_", "sql_mode", "character_set_client"}
	e.leases = map[string]*policy.Table{}
	for _, t := range p.Tables {
		words = append(words, t.Table)
		ls, lt := p.LeaseTableFor(t.Schema)
		k := lowerASCII(ls) + "." + lowerASCII(lt)
		if e.leases[k] == nil {
			lt := &policy.Table{Name: ls + "." + lt, Schema: ls, Table: lt}
			e.leases[k] = lt
			e.leaseList = append(e.leaseList, lt)
			words = append(words, lt.Table)
		}
	}
	e.cat, e.catStale, e.catNames = opts.Catalog, opts.CatalogStale, catalogNames(opts.Catalog)
	// A stored program's text is refused for the program words
	// (programText); the system schema's name only sends a statement to
	// the slow path, where systemSchemaRefusal reads it as a name: a
	// substring would refuse every SIGNAL ... SET MYSQL_ERRNO.
	e.programNeedles = newMatcher(words)
	if len(p.Tables) > 0 {
		words = append(words, systemSchema) // sysschema.go: its writes go to the slow path
	}
	e.needles = newMatcher(words)
	e.catSet = newNameSet(catalogWords(opts))
	if e.fresh = opts.Catalog != nil && opts.CatalogStale == ""; e.fresh {
		names := opts.Catalog.ObjectNames()
		e.objects = make(map[string]struct{}, len(names))
		for _, n := range names {
			e.objects[n] = struct{}{}
		}
	}
	n := opts.CacheEntries
	if n == 0 {
		n = 4096
	}
	if n > 0 {
		e.cache = newCache[*Decision](n)
		e.stmtCache = newCache[*Decision](n)
	}
	if m := opts.ShapeEntries; m > 0 {
		e.shapes = newCache[*shapePlan](m)
	} else if m == 0 && n > 0 {
		e.shapes = newCache[*shapePlan](n)
	}
	return e
}

// Cached reports whether the Engine remembers decisions or statement shapes.
func (e *Engine) Cached() bool { return e.cache != nil || e.shapes != nil }

func emptyPolicy() *policy.Policy {
	p, err := policy.NewPolicy(0, policy.Fencing{}, nil)
	if err != nil {
		panic("rewrite: empty policy: " + err.Error())
	}
	return p
}

// isLease reports whether t is one of the lease tables (from lookup).
func (e *Engine) isLease(t *policy.Table) bool {
	return t != nil && e.leases[lowerASCII(t.Schema)+"."+lowerASCII(t.Table)] == t
}

// hasTables reports whether the policy protects anything at all.
func (e *Engine) hasTables() bool { return len(e.pol.Tables) > 0 }

// mustRead reports whether a packet that cannot be read with certainty (a
// limit passed, a construct the lexer is unsure of, a character set that
// may hide quotes) is refused rather than relayed unread: while anything
// is protected, and always for shadow mode's reading (shadow.go), which
// must know where every comment is.
func (e *Engine) mustRead() bool { return e.strict || e.hasTables() }

// Query decides on the text of a COM_QUERY packet (one or more statements).
// sql is only read during the call.
func (e *Engine) Query(sql []byte, srv Server, sess *Session) Decision {
	return e.entry(sql, srv, sess, false)
}

// Prepare decides on the text of a COM_STMT_PREPARE packet: one statement,
// which may hold '?' placeholders.
func (e *Engine) Prepare(sql []byte, srv Server, sess *Session) Decision {
	return e.entry(sql, srv, sess, true)
}

func (e *Engine) entry(sql []byte, srv Server, sess *Session, prepare bool) Decision {
	var s Session
	if sess != nil {
		s = *sess
	}
	if s.ASCIIRemap && e.mustRead() {
		return Decision{Action: Refuse, Refusal: remapRefusal}
	}
	if hasFenceKey(sql) {
		// A statement may carry its own fence (stmtfence.go): its values
		// are the statement's alone, so neither the text cache nor the
		// shape cache keeps or reuses the decision, and the fast path
		// does not take it (its fence keys must leave the text even when
		// it writes nothing protected). A protected write with a fence
		// comment is decided through the statement fence cache, which
		// keeps no fence values (stmtfencecache.go).
		if !prepare {
			if d, ok := e.stmtFenceCached(sql, srv, s); ok {
				return d
			}
		}
		return e.slow(sql, srv, s, prepare, nil)
	}
	if e.fastAll(sql, srv, s) {
		return Decision{Action: Forward}
	}
	ctx := ctxOf(srv, &s, prepare)
	ctx.absent = e.absentGen()
	if d, ok := e.cache.get(sql, &ctx); ok {
		return *d
	}
	return e.uncached(sql, srv, s, prepare, &ctx)
}

// uncached decides on a packet the text cache does not know: from the
// shape cache (the same statement with other literal values), or by the
// full path, whose decision then fills both caches.
func (e *Engine) uncached(sql []byte, srv Server, s Session, prepare bool, ctx *cacheCtx) Decision {
	sc := e.readShape(sql, srv, &s)
	if sc != nil {
		defer releaseShapeScan(sc)
		if d, ok := e.shapeDecision(sql, sc, ctx); ok {
			return d
		}
	}
	var tr *shapeTrace
	if sc != nil {
		tr = &shapeTrace{}
	}
	d := e.slow(sql, srv, s, prepare, tr)
	if e.cache != nil {
		kept := d // on the heap only when there is a cache to keep it
		e.cache.put(sql, ctx, &kept)
	}
	if tr != nil && tr.blind {
		if p := newShapePlan(sql, sc.lits, d, tr.edits); p != nil {
			e.shapes.put(sc.key, ctx, p)
		}
	}
	return d
}

// fastAll runs the fast path under every reading the session allows: when
// ANSI_QUOTES or NO_BACKSLASH_ESCAPES is unknown and the text has a byte
// whose meaning depends on it, both readings must pass.
func (e *Engine) fastAll(sql []byte, srv Server, s Session) bool {
	if s.TablesLocked {
		return false
	}
	ansi := readings(s.ANSIQuotes, sql, '"')
	nbe := readings(s.NoBackslashEscapes, sql, '\\')
	for _, a := range ansi {
		for _, b := range nbe {
			if !e.fastForward(sql, lexMode{ansiQuotes: a, noBackslash: b, server: srv}, s.UnsafeCharset) {
				return false
			}
		}
	}
	return true
}

var (
	readOff  = []bool{false}
	readOn   = []bool{true}
	readBoth = []bool{false, true}
)

// readings lists the values a lexing flag may have for this text.
func readings(t Tri, text []byte, c byte) []bool {
	switch t {
	case On:
		return readOn
	case Off:
		return readOff
	}
	if bytes.IndexByte(text, c) < 0 {
		return readOff
	}
	return readBoth
}

// slow is the full decision. When a lexing flag is unknown and matters, the
// packet is decided under each reading; the readings must agree, or the
// packet is refused. tr, if not nil, records for the shape cache what the
// decision depended on; it is filled only when there is a single reading.
func (e *Engine) slow(sql []byte, srv Server, s Session, prepare bool, tr *shapeTrace) Decision {
	if s.UnsafeCharset && hasTrailPair(sql) && e.mustRead() {
		return refuse("", "the client character set may hide quotes or backslashes inside multibyte characters, "+
			"and this statement has a non-ASCII byte followed by one of @ [ \\ ] ^ ` { | } ~; "+
			"use utf8mb4 (SET NAMES utf8mb4) or keep such text out of statements on protected tables")
	}
	ansi := readings(s.ANSIQuotes, sql, '"')
	nbe := readings(s.NoBackslashEscapes, sql, '\\')
	if len(ansi)*len(nbe) != 1 {
		tr = nil
	}
	var first Decision
	n := 0
	for _, a := range ansi {
		for _, b := range nbe {
			d := e.decidePacket(sql, srv, s, lexMode{ansiQuotes: a, noBackslash: b, server: srv}, prepare, tr)
			if n == 0 {
				first = d
			} else if !sameDecision(first, d) {
				r := refuse("", "the session's sql_mode (ANSI_QUOTES or NO_BACKSLASH_ESCAPES) is unknown to fenceproxy "+
					"and this statement reads differently under it; set sql_mode explicitly in the session "+
					"(SET SESSION sql_mode = '...') before writing to protected tables")
				r.Refusal.SQLModeUnknown = true
				return r
			} else if d.ChangesSchema {
				// A schema change under either reading: the catalog is
				// read again.
				first.ChangesSchema = true
			}
			n++
		}
	}
	return first
}

// sameDecision compares two readings' decisions (digests aside: they may
// differ in what counts as a literal).
func sameDecision(a, b Decision) bool {
	if a.Action != b.Action || !bytes.Equal(a.SQL, b.SQL) || len(a.Stmts) != len(b.Stmts) {
		return false
	}
	if (a.Refusal == nil) != (b.Refusal == nil) || (a.Call == nil) != (b.Call == nil) {
		return false
	}
	if a.Call != nil && !sameCall(a.Call, b.Call) {
		return false
	}
	for i := range a.Stmts {
		if !sameStmt(&a.Stmts[i], &b.Stmts[i]) {
			return false
		}
	}
	return true
}

func sameStmt(x, y *Stmt) bool {
	if x.Kind != y.Kind || x.Span != y.Span || x.Schema != y.Schema || x.ANSIQuotes != y.ANSIQuotes ||
		x.NoBackslashEscapes != y.NoBackslashEscapes || x.UnsafeCharset != y.UnsafeCharset ||
		x.SetsCharset != y.SetsCharset || x.Name != y.Name || x.Locks != y.Locks {
		return false
	}
	if (x.Fence == nil) != (y.Fence == nil) || (x.Prepared == nil) != (y.Prepared == nil) {
		return false
	}
	if x.Fence != nil {
		if len(x.Fence.Targets) != len(y.Fence.Targets) || x.Fence.Guard != y.Fence.Guard || x.Fence.Rows != y.Fence.Rows {
			return false
		}
		if (x.Fence.Presented == nil) != (y.Fence.Presented == nil) ||
			x.Fence.Presented != nil && *x.Fence.Presented != *y.Fence.Presented {
			return false
		}
		for i := range x.Fence.Targets {
			if x.Fence.Targets[i] != y.Fence.Targets[i] {
				return false
			}
		}
	}
	if x.Prepared != nil && !sameStmt(x.Prepared, y.Prepared) {
		return false
	}
	return true
}

func sameCall(a, b *LeaseCall) bool {
	if a.Func != b.Func || a.Column != b.Column || len(a.Args) != len(b.Args) {
		return false
	}
	for i := range a.Args {
		if a.Args[i] != b.Args[i] {
			return false
		}
	}
	return true
}

// remapRefusal: see Session.ASCIIRemap.
var remapRefusal = &Refusal{CharsetUnknown: true, Reason: "the client character set is not known to read ASCII as " +
	"ASCII (swe7, or one fenceproxy does not know), so fenceproxy cannot read statements as the server does; " +
	"use utf8mb4 (SET NAMES utf8mb4)"}

func refuse(table, reason string) Decision {
	return Decision{Action: Refuse, Refusal: &Refusal{Table: table, Reason: reason}}
}
