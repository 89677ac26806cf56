package rewrite

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/format"
	"github.com/pingcap/tidb/pkg/parser/opcode"
)

// Every fenced statement is checked before it is sent: the rewritten text
// is lexed and parsed again, and its AST must be the original's with
// exactly the fence added where it belongs: the fence conditions ANDed at
// the top of the WHERE (or HAVING) of every place that selects the rows to
// write, the original condition intact under them, every other part of the
// statement unchanged, the same tables written, the same number of '?'
// placeholders. Any difference means the splice went wrong: the statement
// is refused, never sent.

const verifyFailed = "fenceproxy could not verify the fenced statement (report this as a fenceproxy bug, with the statement); " +
	"it was not sent"

// fenceTexts caches the parsed-and-restored form of each fence condition.
type fenceTexts struct {
	mu sync.Mutex
	m  map[fenceCacheKey]string
	// presented: for a statement's own fence, the restored condition cut
	// where its three values go (lease, owner digest, token). Made once
	// per lease and lease table from placeholder values (presentedProbe);
	// no statement's values are kept.
	presented map[fenceCacheKey]presentedCanon
}

// presentedCanon is the restored text of a statement's own fence around
// its values: parts[0] lease parts[1] owner parts[2] token parts[3]; a
// fence under a table's fixed lease names no presented lease (parts[0] is
// then empty and no lease is written).
type presentedCanon struct {
	parts [4]string
	lease bool // the presented lease is in the text
	ok    bool // false: the cut could not be made; every call parses
}

type fenceCacheKey struct {
	key    fenceKey
	flavor Flavor
}

// canonical returns the restored text of the fence condition for k.
func (e *Engine) canonical(k fenceKey, mode lexMode) (string, bool) {
	if k.presented != (lease.Presented{}) {
		// A statement's own fence: its values are the statement's, not
		// kept; the text around them is.
		return e.canonicalPresented(k, mode)
	}
	ck := fenceCacheKey{k, mode.server.Flavor}
	e.fences.mu.Lock()
	s, ok := e.fences.m[ck]
	e.fences.mu.Unlock()
	if ok {
		return s, true
	}
	s, ok = e.canonicalText(k, mode)
	if !ok {
		return "", false
	}
	e.fences.mu.Lock()
	if e.fences.m == nil {
		e.fences.m = make(map[fenceCacheKey]string)
	}
	e.fences.m[ck] = s
	e.fences.mu.Unlock()
	return s, true
}

// presentedProbe stands for a statement's own fence when the restored text
// around its values is made: values whose restored forms (a hex literal,
// a hex literal, an integer) occur nowhere else in the condition.
var presentedProbe = lease.Presented{Lease: "fenceproxy:probe", Owner: "fenceproxy probe owner", Token: 9007199254740993}

// canonicalPresented is canonicalText for a statement's own fence without
// parsing it each time: the parser restores the lease as x'<hex>', the
// owner's digest as x'<hex>' and the token as its digits, whatever the
// values (TestCanonicalPresentedMatchesParse checks it over random ones),
// so the restored text is the probe's with the values put in its place.
// Were it ever wrong, verify would refuse the statement (the restored
// fenced statement would not match), never send it.
func (e *Engine) canonicalPresented(k fenceKey, mode lexMode) (string, bool) {
	pk := k
	pk.presented = lease.Presented{}
	ck := fenceCacheKey{pk, mode.server.Flavor}
	e.fences.mu.Lock()
	pc, ok := e.fences.presented[ck]
	e.fences.mu.Unlock()
	if !ok {
		pc = e.cutPresented(k, mode)
		e.fences.mu.Lock()
		if e.fences.presented == nil {
			e.fences.presented = make(map[fenceCacheKey]presentedCanon)
		}
		e.fences.presented[ck] = pc
		e.fences.mu.Unlock()
	}
	if !pc.ok {
		return e.canonicalText(k, mode)
	}
	p := k.presented
	sum := sha256.Sum256([]byte(p.Owner))
	var b strings.Builder
	b.Grow(len(pc.parts[0]) + len(pc.parts[1]) + len(pc.parts[2]) + len(pc.parts[3]) + 2*len(p.Lease) + 160)
	b.WriteString(pc.parts[0])
	if pc.lease {
		b.WriteString(hexLit(p.Lease))
	}
	b.WriteString(pc.parts[1])
	b.WriteString(hexLit(string(sum[:])))
	b.WriteString(pc.parts[2])
	b.WriteString(strconv.FormatUint(p.Token, 10))
	b.WriteString(pc.parts[3])
	return b.String(), true
}

// cutPresented restores the probe's fence for k's lease and lease table
// and cuts it at the probe's values.
func (e *Engine) cutPresented(k fenceKey, mode lexMode) presentedCanon {
	k.presented = presentedProbe
	s, ok := e.canonicalText(k, mode)
	if !ok {
		return presentedCanon{}
	}
	sum := sha256.Sum256([]byte(presentedProbe.Owner))
	vals := [3]string{hexLit(presentedProbe.Lease), hexLit(string(sum[:])),
		"=" + strconv.FormatUint(presentedProbe.Token, 10) + " "}
	pc := presentedCanon{lease: k.lease == ""}
	rest := s
	for i, v := range vals {
		n := strings.Count(s, v)
		if i == 0 && !pc.lease {
			if n != 0 {
				return presentedCanon{}
			}
			continue
		}
		if n != 1 {
			return presentedCanon{}
		}
		j := strings.Index(rest, v)
		if j < 0 {
			return presentedCanon{} // not in lease, owner, token order
		}
		if i == 2 {
			// The token is cut out without the '=' and ' ' around it.
			pc.parts[i] = rest[:j+1]
			rest = rest[j+len(v)-1:]
			continue
		}
		pc.parts[i] = rest[:j]
		rest = rest[j+len(v):]
	}
	pc.parts[3] = rest
	pc.ok = true
	return pc
}

// hexLit is a binary string as the parser restores a hex literal.
func hexLit(b string) string { return "x'" + hex.EncodeToString([]byte(b)) + "'" }

// canonicalText parses and restores the fence condition for k.
func (e *Engine) canonicalText(k fenceKey, mode lexMode) (string, bool) {
	return canonicalCond(e.fenceSQL([]fenceKey{k}, mode.server.Flavor), mode)
}

// canonicalCond is the restored text of a condition the rewriter adds.
func canonicalCond(cond string, mode lexMode) (string, bool) {
	return canonicalCondAs(cond, lexMode{server: mode.server})
}

// canonicalCondAs is canonicalCond read under mode whole.
func canonicalCondAs(cond string, mode lexMode) (string, bool) {
	n, err := parseOne("SELECT 1 FROM DUAL WHERE "+cond, mode)
	if err != nil {
		return "", false
	}
	sel, ok := n.(*ast.SelectStmt)
	if !ok || sel.Where == nil {
		return "", false
	}
	return restore(sel.Where)
}

func restore(n ast.Node) (string, bool) {
	var sb strings.Builder
	if err := n.Restore(format.NewRestoreCtx(format.DefaultRestoreFlags, &sb)); err != nil {
		return "", false
	}
	return sb.String(), true
}

// verify re-reads the statement with the edits applied; it returns "" if
// the result is exactly the original plus the fence.
func (in *stmtIn) verify(orig ast.StmtNode, explained bool, edits []edit, targets []Target, fenced bool, rowConds []string) string {
	e := in.pc.e
	// The rewritten statement alone, in its own coordinates.
	local := make([]edit, len(edits))
	for i, ed := range edits {
		if ed.pos < in.start || ed.end > in.end {
			return verifyFailed
		}
		local[i] = edit{pos: ed.pos - in.start, end: ed.end - in.start, text: ed.text}
	}
	text := applyEdits(in.raw(), local)
	norm := make([]byte, len(text))
	copy(norm, text)
	lx := newLexer(text, in.st.mode, norm)
	params := 0
	for {
		t, ok := lx.Next()
		if !ok {
			break
		}
		if t.Kind == sqlread.Param {
			params++
		}
		if t.Kind == sqlread.Op && text[t.Start] == ';' {
			return verifyFailed
		}
	}
	if lx.Issue() != "" || params != in.params() {
		return verifyFailed
	}
	n, err := parseOne(string(norm), in.st.mode)
	if err != nil {
		return verifyFailed
	}
	// The same statement kind, inside EXPLAIN or not.
	if y, ok := n.(*ast.ExplainStmt); ok != explained {
		return verifyFailed
	} else if ok {
		n = y.Stmt
	}
	var fences []string
	if fenced {
		for _, k := range in.fenceKeys(targets) {
			f, ok := e.canonical(k, in.st.mode)
			if !ok {
				return verifyFailed
			}
			fences = append(fences, f)
		}
	}
	for _, c := range rowConds {
		// Under the session's full reading: a trapped condition repeats
		// the client's WHERE (rowLeaseTrap), whose quotes read by its
		// sql_mode; the rest of it is the proxy's, which reads the same
		// in every mode.
		f, ok := canonicalCondAs(c, in.st.mode)
		if !ok {
			return verifyFailed
		}
		fences = append(fences, f)
	}
	sub := &stmtIn{pc: in.pc, st: in.st}
	switch o := orig.(type) {
	case *ast.UpdateStmt:
		x, ok := n.(*ast.UpdateStmt)
		if !ok || !peelFence(&x.Where, o.Where, fences) {
			return verifyFailed
		}
		ts, r := sub.updateTargets(x)
		if r != nil || !sameTargets(ts, targets) {
			return verifyFailed
		}
	case *ast.DeleteStmt:
		x, ok := n.(*ast.DeleteStmt)
		if !ok || !peelFence(&x.Where, o.Where, fences) {
			return verifyFailed
		}
		ts, r := sub.deleteTargets(x)
		if r != nil || !sameTargets(ts, targets) {
			return verifyFailed
		}
	default:
		return verifyFailed
	}
	// With the fence taken out, the statement restores exactly as the
	// original did.
	if !sameRestore(orig, n) {
		return verifyFailed
	}
	return ""
}

// params counts the statement's placeholders.
func (in *stmtIn) params() int {
	n := 0
	for _, t := range in.toks {
		if t.Kind == sqlread.Param {
			n++
		}
	}
	return n
}

func sameTargets(a, b []Target) bool {
	if len(a) != len(b) {
		return false
	}
	for _, t := range a {
		found := false
		for _, u := range b {
			if strings.EqualFold(t.Schema, u.Schema) && strings.EqualFold(t.Table, u.Table) && t.Lease == u.Lease {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// peelFence checks that *cond is orig (parenthesized, if present) ANDed
// with the fences in order, and puts orig back in its place.
func peelFence(cond *ast.ExprNode, orig ast.ExprNode, fences []string) bool {
	w := *cond
	if w == nil {
		return false
	}
	for k := len(fences) - 1; k >= 0; k-- {
		if k == 0 && orig == nil {
			if s, ok := restore(w); !ok || s != fences[0] {
				return false
			}
			w = nil
			break
		}
		b, ok := w.(*ast.BinaryOperationExpr)
		if !ok || b.Op != opcode.LogicAnd || b.L == nil || b.R == nil {
			return false
		}
		if s, ok := restore(b.R); !ok || s != fences[k] {
			return false
		}
		w = b.L
	}
	if orig != nil {
		p, ok := w.(*ast.ParenthesesExpr)
		if !ok || p.Expr == nil {
			return false
		}
		if !sameRestore(p.Expr, orig) {
			return false
		}
	}
	*cond = orig
	return true
}

// sameRestore reports whether a and b restore to the same text. b's text
// is compared as it is written, never kept: a statement's restored text is
// as long as the statement (a large string literal included).
func sameRestore(a, b ast.Node) bool {
	want, ok := restore(a)
	if !ok {
		return false
	}
	w := &restoreCompare{want: want}
	if err := b.Restore(format.NewRestoreCtx(format.DefaultRestoreFlags, w)); err != nil {
		return false
	}
	return !w.differ && w.pos == len(want)
}

// restoreCompare is a RestoreWriter that compares what is written with
// want.
type restoreCompare struct {
	want   string
	pos    int
	differ bool
}

func (w *restoreCompare) WriteString(p string) (int, error) {
	if !w.differ && (len(p) > len(w.want)-w.pos || p != w.want[w.pos:w.pos+len(p)]) {
		w.differ = true
	}
	w.pos += len(p)
	return len(p), nil
}

func (w *restoreCompare) Write(p []byte) (int, error) {
	if !w.differ && (len(p) > len(w.want)-w.pos || string(p) != w.want[w.pos:w.pos+len(p)]) {
		w.differ = true
	}
	w.pos += len(p)
	return len(p), nil
}
