package catalog

import (
	"github.com/fenceproxy/fenceproxy/internal/sqlread"
	"github.com/pingcap/tidb/pkg/parser/ast"
)

// What a stored program body (trigger, routine, event) can do, read from
// its text. The TiDB parser does not read compound statements (CALL,
// PREPARE, RETURN, handlers and most control flow inside BEGIN ... END are
// beyond it), so bodies are split lexically into their simple statements
// and only those are parsed. Wherever a statement cannot be read, every
// name it mentions counts as written with every operation: a false
// positive costs a fence or a refusal, a false negative a stale write.

// Bodies and view definitions are read within bounds, so that a huge one
// created directly on the server cannot take the proxy's memory at every
// catalog refresh (the parser's memory grows with each token and open
// parenthesis; measured: 1 M nested parentheses took 960 MB). The loader
// reads at most MaxBodyBytes+1 bytes of each; a body longer than
// MaxBodyBytes or with more than maxBodyTokens tokens is unreadable: like
// one the account cannot see, it may write every protected table. A
// statement of a body with more than maxPieceTokens tokens or parentheses
// nested deeper than maxPieceNesting is not parsed: every name it
// mentions counts as written. The piece bounds are the defaults of
// limits.max_parse_tokens and max_parse_nesting.
const (
	MaxBodyBytes    = 1 << 20
	maxBodyTokens   = 100_000
	maxPieceTokens  = 40_000
	maxPieceNesting = 2_500
)

// parseable reports whether toks are within the piece bounds.
func parseable(toks []token) bool {
	if len(toks) > maxPieceTokens {
		return false
	}
	depth, open := 0, 0
	for _, t := range toks {
		switch {
		case t.op('('):
			open++
			depth = max(depth, open)
		case t.op(')'):
			open--
		}
	}
	return depth <= maxPieceNesting
}

// ref is a schema-qualified name, resolved against the object's schema.
type ref struct{ schema, name string }

func (r ref) key() string { return key(r.schema, r.name) }

type write struct {
	ref ref
	ops Op
}

// effects is what running a body may do.
type effects struct {
	writes  []write
	calls   []ref // CALL procedure
	funcs   []ref // name(...) anywhere: a stored function if one has that name
	dynamic bool  // PREPARE / EXECUTE [IMMEDIATE]: any statement at all
	hidden  bool  // the body is not visible to the catalog account, too long to read (oversize) or unclear
	// oversize: the body is past the bounds above (hidden is set too).
	oversize bool
	// unclear: the server may read the body in more than one way (the
	// tokenizer's reason; hidden is set too).
	unclear string
}

// parseStmt parses one simple statement; nil when it cannot be read.
func parseStmt(text string, m readMode) ast.StmtNode {
	n, err := sqlread.Parse(text, m.lex)
	if err != nil {
		return nil
	}
	return n
}

// startWords: after these, a new statement begins inside a compound
// statement.
var startWords = []string{"begin", "then", "else", "do", "repeat", "loop"}

// writeWords open a statement that writes a table.
var writeWords = []string{"insert", "replace", "update", "delete"}

// ddlWords open a statement that changes, renames or drops what it names,
// or loads into it: every name it mentions counts as written.
var ddlWords = []string{"alter", "drop", "rename", "create", "truncate", "load", "handler"}

func isAny(t token, words []string) bool {
	for _, w := range words {
		if t.is(w) {
			return true
		}
	}
	return false
}

// analyzeBody reads a body whose unqualified names resolve in schema.
func analyzeBody(body, schema string, m readMode) effects {
	var fx effects
	if body == "" {
		fx.hidden = true
		return fx
	}
	if len(body) > MaxBodyBytes {
		fx.hidden, fx.oversize = true, true
		return fx
	}
	toks, norm, issue, ok := lex(body, m.lex, maxBodyTokens)
	if !ok {
		fx.hidden, fx.oversize = true, true
		return fx
	}
	if issue != "" {
		fx.hidden, fx.unclear = true, issue
		return fx
	}
	fx.funcs = funcRefs(toks, schema)
	fx.calls = append(fx.calls, packageRefs(toks, schema, m.oracle)...)
	if m.oracle {
		// Measured: a body created under sql_mode=ORACLE calls a
		// procedure without CALL ("BEGIN touch; END", "BEGIN touch();
		// END"), also after labels and in exception handlers: every
		// name in it counts as a possible call.
		for i, t := range toks {
			if r, ok := qualifiedAt(toks, i, schema); ok && t.name() && !(i > 0 && toks[i-1].op('.')) {
				fx.calls = append(fx.calls, r)
			}
		}
	}
	for _, t := range toks {
		if t.is("prepare") || t.is("execute") {
			fx.dynamic = true
		}
	}
	for len(toks) > 0 {
		end := 0
		for end < len(toks) && !toks[end].op(';') {
			end++
		}
		piece := toks[:end]
		bodyEnd := len(body)
		if end < len(toks) {
			bodyEnd = toks[end].Start
			toks = toks[end+1:]
		} else {
			toks = nil
		}
		fx.piece(piece, norm, bodyEnd, schema, m)
	}
	return fx
}

// piece analyses the tokens between two ';' of a body; norm is the body
// as lex blanked it (the parser reads that).
func (fx *effects) piece(toks []token, norm string, end int, schema string, m readMode) {
	handler := len(toks) > 0 && toks[0].is("declare")
	if handler {
		handler = false
		for _, t := range toks {
			if t.is("handler") {
				handler = true
			}
		}
	}
	for i, t := range toks {
		atStart := i == 0 || isAny(toks[i-1], startWords) || toks[i-1].op(':') || handler && i > 1
		if t.Kind != sqlread.Word {
			continue
		}
		switch {
		case t.is("call") && atStart:
			if r, ok := qualifiedAt(toks, i+1, schema); ok {
				fx.calls = append(fx.calls, r)
			} else {
				fx.everything(toks, schema)
			}
			return
		case isAny(t, writeWords):
			if i+1 < len(toks) && toks[i+1].op('(') && (t.is("insert") || t.is("replace")) {
				continue // the string functions INSERT() and REPLACE()
			}
			if i > 0 && (toks[i-1].is("for") || toks[i-1].is("key") || toks[i-1].is("on") || toks[i-1].op('.')) {
				continue // FOR UPDATE, ON DUPLICATE KEY UPDATE, ON DELETE/UPDATE rules
			}
			if !atStart {
				if handler {
					continue
				}
				fx.everything(toks, schema)
				return
			}
			var n ast.StmtNode
			if parseable(toks[i:]) {
				n = parseStmt(norm[t.Start:end], m)
			}
			if ws := dmlWrites(n, schema); ws != nil {
				fx.writes = append(fx.writes, ws...)
			} else {
				fx.everything(toks[i:], schema)
			}
			return
		case isAny(t, ddlWords) && atStart && !(handler && t.is("handler")):
			if t.is("truncate") && i+1 < len(toks) && toks[i+1].op('(') {
				continue // TRUNCATE(x, d)
			}
			fx.everything(toks[i:], schema)
			return
		}
	}
}

// everything: every name among toks counts as written with every operation.
func (fx *effects) everything(toks []token, schema string) {
	for i, t := range toks {
		if !t.name() {
			continue
		}
		fx.writes = append(fx.writes, write{ref{schema, t.text}, OpAll})
		if i+2 < len(toks) && toks[i+1].op('.') && toks[i+2].name() {
			fx.writes = append(fx.writes, write{ref{t.text, toks[i+2].text}, OpAll})
		}
	}
}

// qualifiedAt reads [schema.]name at toks[i].
func qualifiedAt(toks []token, i int, schema string) (ref, bool) {
	if i >= len(toks) || !toks[i].name() {
		return ref{}, false
	}
	if i+2 < len(toks) && toks[i+1].op('.') && toks[i+2].name() {
		return ref{toks[i].text, toks[i+2].text}, true
	}
	return ref{schema, toks[i].text}, true
}

// packageRefs lists the packages a body may call a routine of: in a body
// created under sql_mode=ORACLE a dotted name a.b( (CALL a.b, or a.b bare)
// calls the routine b of the package a of the body's schema, and in any
// body db.a.b( calls that of db's package a (a view created under ORACLE
// stores its package call so: select `db`.`pk`.`f`()). Measured on
// MariaDB 10.11: a view, a trigger, a procedure and a function whose
// bodies called pk.f() or pk.p ran the package's routine while the catalog
// read pk as a schema. The catalog counts a package as one procedure whose
// body is the package's, so each such name is also a call of that
// procedure.
func packageRefs(toks []token, schema string, oracle bool) []ref {
	var out []ref
	for i := 0; i+2 < len(toks); i++ {
		if !toks[i].name() || !toks[i+1].op('.') || !toks[i+2].name() || i > 0 && toks[i-1].op('.') {
			continue
		}
		end := i + 2
		for end+2 < len(toks) && toks[end+1].op('.') && toks[end+2].name() {
			end += 2
		}
		call := end+1 < len(toks) && toks[end+1].op('(') || i > 0 && toks[i-1].is("call") || oracle
		if !call {
			continue
		}
		switch {
		case end > i+2:
			out = append(out, ref{toks[i].text, toks[i+2].text})
		case oracle:
			out = append(out, ref{schema, toks[i].text})
		}
	}
	return out
}

// funcRefs lists every name directly followed by '(' as a possible call.
func funcRefs(toks []token, schema string) []ref {
	var out []ref
	for i := 0; i+1 < len(toks); i++ {
		if !toks[i].name() || !toks[i+1].op('(') {
			continue
		}
		if i >= 2 && toks[i-1].op('.') && toks[i-2].name() {
			out = append(out, ref{toks[i-2].text, toks[i].text})
		} else {
			out = append(out, ref{schema, toks[i].text})
		}
	}
	return out
}

// dmlWrites returns the tables an INSERT, REPLACE, UPDATE or DELETE writes
// and how; nil if n is none of those.
func dmlWrites(n ast.StmtNode, schema string) []write {
	var ws []write
	add := func(tn *ast.TableName, ops Op) {
		s := tn.Schema.O
		if s == "" {
			s = schema
		}
		ws = append(ws, write{ref{s, tn.Name.O}, ops})
	}
	switch x := n.(type) {
	case *ast.InsertStmt:
		ops := OpInsert
		if x.IsReplace {
			ops |= OpDelete // REPLACE deletes the rows it replaces
		}
		if len(x.OnDuplicate) > 0 {
			ops |= OpUpdate
		}
		if x.Table == nil {
			return nil
		}
		for _, tn := range sqlread.TableNames(x.Table) {
			add(tn, ops)
		}
	case *ast.UpdateStmt:
		if x.TableRefs == nil {
			return nil
		}
		// A multi-table UPDATE may write any table it joins: all count.
		for _, tn := range sqlread.TableNames(x.TableRefs) {
			add(tn, OpUpdate)
		}
	case *ast.DeleteStmt:
		if x.TableRefs == nil {
			return nil
		}
		for _, tn := range sqlread.TableNames(x.TableRefs) {
			add(tn, OpDelete)
		}
		if x.Tables != nil {
			for _, tn := range x.Tables.Tables {
				add(tn, OpDelete)
			}
		}
	default:
		return nil
	}
	if ws == nil {
		return []write{}
	}
	return ws
}

// viewPackages returns the packages whose routines a view definition may
// call: its db.pkg.f( names (a view stores a package call qualified, see
// packageRefs). A definition past the bounds or unclear has none here:
// viewBases counts it over every protected table already.
func viewPackages(v View, m readMode) []ref {
	if len(v.Definition) > MaxBodyBytes {
		return nil
	}
	toks, _, issue, ok := lex(v.Definition, m.lex, maxBodyTokens)
	if !ok || issue != "" {
		return nil
	}
	return packageRefs(toks, v.Schema, false)
}

// viewBases returns the tables and views a view definition names (all of
// them: which one a write through a join view lands in depends on the
// statement), and the functions it may call; ok is false when the
// definition is past the bounds above or unclear: it may be over any table.
func viewBases(v View, m readMode) ([]ref, []ref, bool) {
	if len(v.Definition) > MaxBodyBytes {
		return nil, nil, false
	}
	toks, norm, issue, ok := lex(v.Definition, m.lex, maxBodyTokens)
	if !ok || issue != "" {
		return nil, nil, false
	}
	funcs := funcRefs(toks, v.Schema)
	var bases []ref
	if !parseable(toks) {
		// Not parsed: every name counts, below.
	} else if n := parseStmt(norm, m); n != nil {
		ctes := cteNamesOf(n)
		for _, tn := range sqlread.TableNames(n) {
			s := tn.Schema.O
			if s == "" {
				if ctes[lower(tn.Name.O)] {
					continue
				}
				s = v.Schema
			}
			bases = append(bases, ref{s, tn.Name.O})
		}
		return bases, funcs, true
	}
	var fx effects
	fx.everything(toks, v.Schema)
	for _, w := range fx.writes {
		bases = append(bases, w.ref)
	}
	return bases, funcs, true
}

// cteNamesOf lists the names of every WITH clause of a statement.
func cteNamesOf(n ast.Node) map[string]bool {
	var v cteVisitor
	n.Accept(&v)
	return v.names
}

type cteVisitor struct{ names map[string]bool }

func (v *cteVisitor) Enter(n ast.Node) (ast.Node, bool) {
	if w, ok := n.(*ast.WithClause); ok {
		for _, c := range w.CTEs {
			if v.names == nil {
				v.names = map[string]bool{}
			}
			v.names[c.Name.L] = true
		}
	}
	return n, false
}

func (v *cteVisitor) Leave(n ast.Node) (ast.Node, bool) { return n, true }
