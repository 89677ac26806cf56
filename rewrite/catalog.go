package rewrite

import (
	"sort"

	"github.com/fenceproxy/fenceproxy/catalog"
	"github.com/fenceproxy/fenceproxy/internal/sqlread"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/pingcap/tidb/pkg/parser/ast"
)

// Schema-aware fencing: the objects of the catalog closure (see package
// catalog) are matched like protected tables. A write to a view over a
// protected table, to a table whose triggers write one, or a DELETE/UPDATE
// of a parent whose foreign keys cascade into one, is fenced with the
// protected tables' leases (a protected table's own triggers and cascades
// add the leases of the other protected tables they reach); a call of a
// routine that writes one is refused.
// Their names are needles of the fast path, so a statement that names none
// of them is decided as before.

// catalogWords are the needles the catalog adds.
func catalogWords(o Options) []string {
	words := o.Catalog.Names()
	if o.CatalogStale != "" {
		// Any write may be to an object the last good catalog never saw.
		words = append(words, "insert", "replace", "update", "delete", "call", "load")
	}
	return words
}

// ProtectedFor lists a policy's protected tables and lease tables as the
// catalog closure takes them.
func ProtectedFor(p *policy.Policy) []catalog.Protected {
	if p == nil {
		return nil
	}
	var out []catalog.Protected
	seen := map[string]bool{}
	for _, t := range p.Tables {
		out = append(out, catalog.Protected{Schema: t.Schema, Table: t.Table, Lease: t.Lease})
		ls, lt := p.LeaseTableFor(t.Schema)
		if k := lowerASCII(ls) + "." + lowerASCII(lt); !seen[k] {
			seen[k] = true
			out = append(out, catalog.Protected{Schema: ls, Table: lt, LeaseTable: true})
		}
	}
	return out
}

// fencedRef returns the catalog's entry for a table reference that is not
// itself protected.
func (e *Engine) fencedRef(schema, name string) *catalog.Fenced {
	if e.cat == nil || name == "" {
		return nil
	}
	return e.cat.Table(foldName(schema), foldName(name))
}

// derivedTargets returns the targets of writing r with ops through the
// catalog, or a refusal.
func (in *stmtIn) derivedTargets(ts []Target, r *tref, ops catalog.Op) ([]Target, *stmtRes) {
	e := in.pc.e
	if r.derived || r.cte {
		return ts, nil
	}
	f := r.fenced
	if f == nil && r.prot != nil {
		return ts, nil // the table's own fence; the catalog adds nothing
	}
	if f == nil {
		if e.catStale != "" && !e.cat.Known(foldName(r.schema), foldName(r.name)) {
			res := in.refuse(r.schema+"."+r.name, "fenceproxy cannot read its schema catalog ("+e.catStale+"), and this "+
				"table or view was not in the last catalog it read: it may write protected tables through triggers, "+
				"views or foreign keys that fenceproxy does not know; retry when the catalog is readable again")
			return nil, &res
		}
		if !e.cat.Known(foldName(r.schema), foldName(r.name)) {
			if res, ok := in.unknownObject(r.schema, r.name, "table or view"); ok {
				return nil, &res
			}
		}
		return ts, nil
	}
	if f.Refuse&ops != 0 {
		res := in.refuse(r.schema+"."+r.name, f.RefuseWhy)
		return nil, &res
	}
	for _, t := range f.For(ops) {
		if e.templateOf(t.Schema, t.Table) != nil {
			res := in.refuse(t.Schema+"."+t.Table, RowLeaseNote+"; this statement writes it through "+r.schema+"."+r.name+
				" (a view, trigger or cascading foreign key), where fenceproxy cannot check each row's lease; write the table itself")
			return nil, &res
		}
		ts = addTarget(ts, Target{Schema: t.Schema, Table: t.Table, Lease: t.Lease})
	}
	return ts, nil
}

// insertOps: the row operations an INSERT or REPLACE may perform.
func insertOps(n *ast.InsertStmt) catalog.Op {
	ops := catalog.OpInsert
	if n.IsReplace {
		ops |= catalog.OpDelete
	}
	if len(n.OnDuplicate) > 0 {
		ops |= catalog.OpUpdate
	}
	return ops
}

// catalogRefusal refuses a statement that calls a refused routine (CALL,
// or a stored function anywhere in it), reads a view whose reading calls
// one, or, while the catalog cannot be read, calls a procedure, or a
// function that is not built in, that the last good catalog did not know.
func (in *stmtIn) catalogRefusal() (stmtRes, bool) {
	e := in.pc.e
	if e.cat == nil && e.catStale == "" {
		return stmtRes{}, false
	}
	schema := foldName(in.st.schema)
	// In a compound statement or a stored program's definition a
	// procedure may be called without CALL (sql_mode=ORACLE blocks: "BEGIN
	// touch; END"): there any name of a refused procedure counts, save
	// the name a definition gives its own routine.
	program := in.isCompound() || in.isStoredProgram()
	for i := range in.toks {
		if !in.isName(i) || in.op(i-1, ".") {
			continue
		}
		s, n, next := schema, foldName(in.identName(i)), i+1
		if in.op(i+1, ".") && in.isName(i+2) {
			s, n, next = foldName(in.identName(i)), foldName(in.identName(i+2)), i+3
		}
		if in.kw(i, "call") {
			continue
		}
		if r := in.packageCall(i, schema, program); r != nil {
			return in.refuse(r.Table, r.Reason()), true
		}
		if in.kw(i-1, "call") {
			// CALL anywhere: the statement's own, or one inside a
			// compound statement.
			if r := e.cat.Procedure(s, n); r != nil {
				return in.refuse(r.Table, r.Reason()), true
			}
			if e.catStale != "" {
				return in.refuse("", "fenceproxy cannot read its schema catalog ("+e.catStale+"), so it cannot tell "+
					"whether this procedure writes protected tables; retry when the catalog is readable again"), true
			}
			if !e.cat.KnownProcedure(s, n) {
				if res, ok := in.unknownObject(s, n, "procedure"); ok {
					return res, true
				}
			}
		} else if program && !in.kw(i-1, "procedure") && !in.kw(i-1, "function") {
			if r := e.cat.Procedure(s, n); r != nil {
				return in.refuse(r.Table, r.Reason()), true
			}
		}
		if in.op(next, "(") {
			if r := e.cat.Function(s, n); r != nil {
				return in.refuse(r.Table, r.Reason()), true
			}
		}
		if f := e.cat.Table(s, n); f != nil && f.ReadRefuse != "" {
			return in.refuse(f.Schema+"."+f.Name, "reading this view calls the function "+f.ReadRefuse+
				", which writes protected tables without a fence; read the tables directly"), true
		}
	}
	return in.staleCallRefusal()
}

// packageCall returns the refused package a call at token i may run: a
// dotted name a.b( (or CALL a.b, or a.b bare in a compound statement)
// calls the routine b of the package a of the session's schema under
// sql_mode=ORACLE, and db.a.b( that of db's package a (measured on
// MariaDB 10.11: SELECT pk.f() FROM DUAL ran the package function, which
// the catalog, reading a.b as schema a's function b, had not seen). The
// catalog counts a package as one procedure whose body is the package's,
// so the call is refused when that procedure is, whatever the session's
// sql_mode (the proxy may not know it).
func (in *stmtIn) packageCall(i int, schema string, program bool) *catalog.Refused {
	if !in.op(i+1, ".") || !in.isName(i+2) {
		return nil
	}
	end := i + 2
	for in.op(end+1, ".") && in.isName(end+2) {
		end += 2
	}
	if !in.op(end+1, "(") && !in.kw(i-1, "call") && !program {
		return nil
	}
	e := in.pc.e
	if r := e.cat.Procedure(schema, foldName(in.identName(i))); r != nil {
		return r
	}
	if end > i+2 {
		return e.cat.Procedure(foldName(in.identName(i)), foldName(in.identName(i+2)))
	}
	return nil
}

func (in *stmtIn) isName(i int) bool {
	if i < 0 || i >= len(in.toks) {
		return false
	}
	k := in.toks[i].Kind
	return k == sqlread.Word || k == sqlread.QuotedIdent
}

// identName is token i's name: unquoted, quotes undoubled.
func (in *stmtIn) identName(i int) string {
	b := in.text(i)
	if in.toks[i].Kind != sqlread.QuotedIdent || len(b) < 2 {
		return string(b)
	}
	q := b[0]
	b = b[1 : len(b)-1]
	out := make([]byte, 0, len(b))
	for k := 0; k < len(b); k++ {
		out = append(out, b[k])
		if b[k] == q && k+1 < len(b) && b[k+1] == q {
			k++
		}
	}
	return string(out)
}

// catName is a catalog object's name: the needle, and how to name it.
type catName struct{ needle, full string }

func catalogNames(c *catalog.Closure) []catName {
	if c == nil {
		return nil
	}
	var out []catName
	for _, f := range c.Tables {
		out = append(out, catName{lowerASCII(f.Name), f.Schema + "." + f.Name})
	}
	for _, r := range c.Routines {
		out = append(out, catName{lowerASCII(r.Name), r.Schema + "." + r.Name})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].full < out[j].full })
	return out
}

// mentionsDerived returns the first catalog object whose name occurs in
// text, as schema.name (whatever schema the text meant), or "".
func mentionsDerived(e *Engine, text []byte) string {
	for _, n := range e.catNames {
		if containsFold(text, n.needle) {
			return n.full
		}
	}
	return ""
}

// derivedIn returns the first catalog object among the TableNames of n,
// as schema.name, or "".
func (in *stmtIn) derivedIn(n ast.Node) string {
	if n == nil || in.pc.e.cat == nil {
		return ""
	}
	for _, tn := range sqlread.TableNames(n) {
		schema := tn.Schema.O
		if schema == "" {
			schema = in.st.schema
		}
		if f := in.pc.e.fencedRef(schema, tn.Name.O); f != nil {
			return f.Schema + "." + f.Name
		}
	}
	return ""
}
