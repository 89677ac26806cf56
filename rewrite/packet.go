package rewrite

import (
	"bytes"
	"sort"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
)

// A packet is decided statement by statement, in the order the server
// executes them: each statement is lexed with the session as the previous
// statements left it (USE, sql_mode), as the server does.

// edit replaces src[pos:end] with text; pos == end inserts.
type edit struct {
	pos, end int
	text     string
	// strip: the edit removes a statement's fence keys (stmtfence.go), not
	// part of a fence.
	strip bool
}

// pstate is the session as the statements of a packet see it.
type pstate struct {
	schema string
	mode   lexMode
	unsafe bool // client character set unsafe or unknown
	oracle Tri  // sql_mode ORACLE (compound statements read differently)
	utf8   bool // the client character set is utf8mb3 or utf8mb4 (Session.NamesUTF8)
}

// session is st as a Session, for Session.Apply.
func (st pstate) session() Session {
	return Session{Schema: st.schema, ANSIQuotes: triOf(st.mode.ansiQuotes),
		NoBackslashEscapes: triOf(st.mode.noBackslash), UnsafeCharset: st.unsafe, Oracle: st.oracle, NamesUTF8: st.utf8}
}

func triOf(b bool) Tri {
	if b {
		return On
	}
	return Off
}

// stmtIn is one statement of a packet.
type stmtIn struct {
	pc    *packetCtx
	toks  []sqlread.Token
	start int    // raw range [start, end) in src, without the ';'
	end   int    //
	final bool   // no statement follows
	st    pstate // session before the statement
	norm  []byte // normalized packet text (same offsets as src)
	// whole: toks run to the statement's end across ';' (a compound
	// statement or a definition, see stmtIn.whole).
	whole bool
	// inBlock: a simple statement inside a compound statement.
	inBlock bool
	// presented: the statement's own fence, from its fence comment
	// (stmtfence.go); nil = the session's fence variables.
	presented *lease.Presented
	// noTrap: the write answers with rows (RETURNING, ANALYZE), where an
	// error may follow rows already relayed: its per-row condition has
	// no trap (rowLeaseTrap).
	noTrap bool
}

// stmtRes is the verdict on one statement.
type stmtRes struct {
	stmt    Stmt
	matters bool
	edits   []edit
	refusal *Refusal
	call    *LeaseCall
	// endAt: for a statement whose extent the block structure decides (a
	// compound statement, a stored program definition), the offset of
	// the ';' that ends it or len(src); 0 = the first ';'.
	endAt int
	// valueBlind: the verdict depends on the statement's literals only
	// through their kinds, never on their values or bytes, so the shape
	// cache may reuse it for the same statement with other literals (set
	// only while tracing, and only where shape.go explains why it holds).
	valueBlind bool
}

type packetCtx struct {
	e       *Engine
	src     []byte
	prepare bool
	depth   int         // PREPARE/EXECUTE IMMEDIATE nesting
	trace   *shapeTrace // the shape cache's record of this decision; nil = none wanted
	tokens  int         // tokens read so far, every reading included (limits.go)
	forks   int         // readings of an unknown sql_mode in force (fork)
	// stmtFences: the packet mentions a fence key, so each statement is
	// read for a fence comment of its own (stmtfence.go).
	stmtFences bool
}

// restResult is the verdict on the statements from some position on.
type restResult struct {
	stmts    []Stmt
	matters  bool
	edits    []edit
	refusal  *Refusal
	call     *LeaseCall
	nonEmpty int // statements with live tokens
	// blind: every statement's verdict depended on its literals only
	// through their kinds (stmtRes.valueBlind); meaningful while tracing.
	blind bool
	// changesSchema: see Decision.ChangesSchema.
	changesSchema bool
}

// decidePacket decides on a whole packet under one definite reading.
func (e *Engine) decidePacket(sql []byte, srv Server, s Session, mode lexMode, prepare bool, tr *shapeTrace) Decision {
	return e.decideText(sql, s, mode, prepare, 0, tr)
}

func (e *Engine) decideText(sql []byte, s Session, mode lexMode, prepare bool, depth int, tr *shapeTrace) Decision {
	if len(sql) > e.maxBytes {
		if e.mustRead() {
			return Decision{Action: Refuse, Refusal: e.bytesRefusal(len(sql))}
		}
		return Decision{Action: Forward} // nothing protected: relayed unread
	}
	pc := &packetCtx{e: e, src: sql, prepare: prepare, depth: depth, trace: tr, stmtFences: hasFenceKey(sql)}
	norm := make([]byte, len(sql))
	copy(norm, sql)
	oracle := s.Oracle
	if oracle == Unknown && s.ANSIQuotes == Off {
		oracle = Off // sql_mode ORACLE includes ANSI_QUOTES
	}
	r := pc.decideRest(0, pstate{schema: s.Schema, mode: mode, unsafe: s.UnsafeCharset, oracle: oracle,
		utf8: s.NamesUTF8}, norm)
	return pc.finish(r)
}

func (pc *packetCtx) finish(r restResult) Decision {
	if pc.trace != nil {
		// No shape plan for schema changes: a plan's decision does not say
		// so (and they are rare).
		pc.trace.blind = r.blind && r.refusal == nil && r.call == nil && !r.changesSchema
		pc.trace.edits = r.edits
	}
	if r.refusal != nil {
		return Decision{Action: Refuse, Refusal: r.refusal}
	}
	if r.call != nil {
		if r.nonEmpty != 1 {
			return refuse("", "call a lease function alone, one statement per query: SELECT "+r.call.Func.String()+"(...)")
		}
		return Decision{Action: Answer, Call: r.call}
	}
	if pc.prepare && r.nonEmpty > 1 && pc.e.hasTables() {
		return refuse("", "a prepared statement holds exactly one statement")
	}
	if pc.e.pol.DatabaseGuard == policy.GuardTriggers && r.nonEmpty > 1 && carriesStmtFence(r.stmts) {
		// The guard triggers read a statement's fence from variables the
		// proxy sets around that one write (lease.StmtFenceSetSQL).
		return refuse("", "with guard triggers (fencing.database_guard: triggers) a write that carries its own fence "+
			"must be the only statement of its query; send it alone")
	}
	var d Decision
	if len(r.edits) > 0 {
		d.Action = Send
		d.SQL = applyEdits(pc.src, r.edits)
		var strips []edit
		for _, ed := range r.edits {
			if ed.strip {
				strips = append(strips, ed)
			}
		}
		if len(strips) > 0 {
			d.Stripped = applyEdits(pc.src, strips)
		}
		mapSpans(r.stmts, r.edits)
	}
	if r.matters {
		d.Stmts = r.stmts
	}
	d.ChangesSchema = r.changesSchema
	return d
}

// changesSchema: a statement that starts with t may change schema objects.
func changesSchema(src []byte, t sqlread.Token) bool {
	if t.Kind != sqlread.Word {
		return false
	}
	w := src[t.Start:t.End]
	return eqFold(w, "create") || eqFold(w, "alter") || eqFold(w, "drop") || eqFold(w, "rename")
}

// mapSpans moves the statements' byte ranges of the client's text to the
// sent text: edits before a statement shift both its ends, its own edits
// (insertions at its end included) shift its end. The statements are in
// order and do not overlap, so one pass over the edits in order does it
// (a packet may hold tens of thousands of statements).
func mapSpans(stmts []Stmt, edits []edit) {
	es := make([]edit, len(edits))
	copy(es, edits)
	sort.SliceStable(es, func(i, j int) bool { return es[i].pos < es[j].pos })
	delta := func(e edit) int { return len(e.text) - (e.end - e.pos) }
	before, j := 0, 0
	for i := range stmts {
		sp := stmts[i].Span
		for j < len(es) && es[j].pos < sp[0] {
			before += delta(es[j])
			j++
		}
		within := before
		for k := j; k < len(es) && es[k].pos <= sp[1]; k++ {
			within += delta(es[k])
		}
		stmts[i].Span = [2]int{sp[0] + before, sp[1] + within}
	}
}

// queryEnd is the length of src once the server has stripped its trailing
// spaces and semicolons (my_isspace in ASCII-compatible character sets).
func queryEnd(src []byte) int {
	n := len(src)
	for n > 0 {
		switch src[n-1] {
		case ' ', '\t', '\n', '\r', '\v', '\f', ';':
			n--
			continue
		}
		break
	}
	return n
}

// decideRest decides on the statements from pos on.
func (pc *packetCtx) decideRest(pos int, st pstate, norm []byte) restResult {
	out := restResult{blind: true}
	for pos <= len(pc.src) {
		end, count, depth := sqlread.ScanStatement(pc.src, pos, st.mode.lex())
		if r := pc.overLimit(count, depth); r != nil {
			if pc.e.mustRead() {
				out.refusal = r
				return out
			}
			// Nothing is protected: relayed unread.
			out.nonEmpty++
			out.blind = false
			out.stmts = append(out.stmts, Stmt{Kind: Other, Span: [2]int{pos, end}})
			if pos = end + 1; pos > len(pc.src) {
				break
			}
			continue
		}
		toks, end, issue, issuePos := sqlread.LexStatement(pc.src, pos, st.mode.lex(), norm, count)
		next := end + 1
		final := next > len(pc.src)
		if issue != "" && pc.e.mustRead() {
			out.refusal = &Refusal{Reason: "fenceproxy cannot be sure how the server reads this statement (" + issue +
				" at byte " + itoa(issuePos) + "); write it without that construct"}
			return out
		}
		if len(toks) == 0 {
			if final || end >= queryEnd(pc.src) {
				// The server strips trailing spaces and ';' from the
				// whole text before it reads any statement (alloc_query
				// in sql_parse.cc): `UPDATE t SET v = 1;;` is one
				// statement, with or without multi-statements.
				if pc.stmtFences {
					if r := pc.trailingFence(pos, st.mode.server.Flavor, &out); r != nil {
						out.refusal = r
						return out
					}
				}
				break
			}
			// An empty statement between two ';': the server reports a
			// syntax error there and stops, but its general log holds
			// the whole packet, comments included.
			if pc.stmtFences && pc.depth == 0 {
				out.edits = stripKeyComments(pc.src, pos, end, false, st.mode.server.Flavor, out.edits)
			}
			out.stmts = append(out.stmts, Stmt{Kind: Other, Span: [2]int{pos, end}})
			pos = next
			continue
		}
		out.nonEmpty++
		out.changesSchema = out.changesSchema || changesSchema(pc.src, toks[0])
		in := &stmtIn{pc: pc, toks: toks, start: pos, end: end, final: final, st: st, norm: norm}
		var fc *fenceComment
		if pc.stmtFences {
			if fc = in.findFenceComment(); fc != nil && fc.malformed == "" {
				in.presented = &fc.presented
			}
		}
		res := in.decide()
		if pc.stmtFences {
			stmtEnd := end
			if res.endAt > 0 {
				stmtEnd = res.endAt
			}
			in.applyStmtFence(&res, fc, stmtEnd)
		}
		if res.refusal != nil {
			out.refusal = res.refusal
			return out
		}
		if res.call != nil {
			out.call = res.call
		}
		if res.endAt > 0 {
			// The server reads the statement up to its own end.
			end = res.endAt
			next = end + 1
			final = next > len(pc.src)
			res.valueBlind = false
		}
		res.stmt.Span = [2]int{pos, end}
		out.stmts = append(out.stmts, res.stmt)
		out.blind = out.blind && res.valueBlind
		out.matters = out.matters || res.matters
		out.edits = append(out.edits, res.edits...)
		if final {
			break
		}
		// The session as the next statement sees it.
		sess := st.session()
		eff := sess.Apply(&res.stmt, InPacket)
		st.schema, st.unsafe, st.oracle, st.utf8 = sess.Schema, sess.UnsafeCharset, sess.Oracle, sess.NamesUTF8
		if eff.Charset && sess.ASCIIRemap && pc.e.mustRead() {
			out.refusal = &Refusal{CharsetUnknown: true, Reason: "after this statement switches to a character set " +
				"fenceproxy does not know to read ASCII as ASCII, it cannot read the rest of the query; send the " +
				"statements that follow in a query of their own"}
			return out
		}
		if eff.Charset && sess.UnsafeCharset && pc.e.mustRead() && hasTrailPair(pc.src[next:]) {
			out.refusal = &Refusal{Reason: "after this statement switches to a character set that may hide quotes or " +
				"backslashes inside multibyte characters, a later statement of the query has a non-ASCII byte " +
				"followed by one of @ [ \\ ] ^ ` { | } ~; send it in a query of its own"}
			return out
		}
		if eff.ModeUnknown {
			// The character set it may also have set counts: the rest is
			// read under it.
			out.merge(pc.fork(next, st, sess.ANSIQuotes, sess.NoBackslashEscapes, norm))
			return out
		}
		st.mode.ansiQuotes = sess.ANSIQuotes == On
		st.mode.noBackslash = sess.NoBackslashEscapes == On
		pos = next
	}
	return out
}

// fork decides on the rest of the packet under every reading an unknown
// sql_mode allows; all readings must agree.
func (pc *packetCtx) fork(pos int, st pstate, ansi, nbe Tri, norm []byte) restResult {
	rest := pc.src[pos:]
	as := readings(ansi, rest, '"')
	bs := readings(nbe, rest, '\\')
	if len(as)*len(bs) == 1 {
		// One reading: the rest is read once, in place.
		s := st
		s.mode.ansiQuotes, s.mode.noBackslash = as[0], bs[0]
		return pc.decideRest(pos, s, norm)
	}
	// Each reading reads the rest of the packet, with a copy of the
	// normalized text of its own: nested, they multiply (the token budget
	// counts every reading, limits.go), and the copies add up.
	if pc.forks >= maxForks {
		return restResult{refusal: &Refusal{Reason: "more than " + itoa(maxForks) + " statements of this query set sql_mode " +
			"to values fenceproxy cannot read, and the rest reads differently depending on them; " +
			"send the statements that follow each of them in a separate query"}}
	}
	pc.forks++
	defer func() { pc.forks-- }()
	var first restResult
	n := 0
	for _, a := range as {
		for _, b := range bs {
			s := st
			s.mode.ansiQuotes, s.mode.noBackslash = a, b
			nn := make([]byte, len(norm))
			copy(nn, norm)
			r := pc.decideRest(pos, s, nn)
			if pc.tokens > pc.e.maxTokens {
				// The budget ran out in this reading: that is the reason.
				return restResult{refusal: pc.e.tokensRefusal()}
			}
			if n == 0 {
				first = r
			} else if !sameRest(first, r) {
				return restResult{refusal: &Refusal{Reason: "an earlier statement of this query sets sql_mode to a value " +
					"fenceproxy cannot read, and the rest of the query reads differently depending on it; " +
					"send the statements that follow in a separate query"}}
			}
			n++
		}
	}
	return first
}

func sameRest(a, b restResult) bool {
	if (a.refusal == nil) != (b.refusal == nil) || (a.call == nil) != (b.call == nil) ||
		len(a.stmts) != len(b.stmts) || len(a.edits) != len(b.edits) || a.nonEmpty != b.nonEmpty {
		return false
	}
	for i := range a.edits {
		if a.edits[i] != b.edits[i] {
			return false
		}
	}
	for i := range a.stmts {
		if !sameStmt(&a.stmts[i], &b.stmts[i]) {
			return false
		}
	}
	return true
}

func (r *restResult) merge(s restResult) {
	// The rest was read under several possible sql_modes: not a shape.
	r.blind = false
	if s.refusal != nil {
		r.refusal = s.refusal
		return
	}
	if s.call != nil {
		r.call = s.call
	}
	r.stmts = append(r.stmts, s.stmts...)
	r.matters = r.matters || s.matters
	r.edits = append(r.edits, s.edits...)
	r.nonEmpty += s.nonEmpty
}

// applyEdits returns src with the edits applied. Edits never overlap;
// insertions at the same position keep their order.
func applyEdits(src []byte, edits []edit) []byte {
	es := make([]edit, len(edits))
	copy(es, edits)
	sort.SliceStable(es, func(i, j int) bool { return es[i].pos < es[j].pos })
	var b bytes.Buffer
	n := len(src)
	for _, e := range es {
		n += len(e.text) - (e.end - e.pos)
	}
	b.Grow(n)
	last := 0
	for _, e := range es {
		b.Write(src[last:e.pos])
		b.WriteString(e.text)
		last = e.end
	}
	b.Write(src[last:])
	return b.Bytes()
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// carriesStmtFence: one of stmts is a write that carries its own fence.
func carriesStmtFence(stmts []Stmt) bool {
	for i := range stmts {
		if f := stmts[i].Fence; f != nil && f.Presented != nil {
			return true
		}
	}
	return false
}
