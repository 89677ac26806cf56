package rewrite

import (
	"strings"

	"github.com/fenceproxy/fenceproxy/catalog"
	"github.com/fenceproxy/fenceproxy/internal/sqlread"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/pingcap/tidb/pkg/parser/ast"
)

// Target analysis: which protected tables a statement writes, from the
// parser's AST. Names are resolved as the server does: db-qualified, or in
// the session's current schema; aliases stand for their table. Over-fencing
// is harmless (with a valid lease the statement's effect is unchanged), so
// wherever the reading is ambiguous the protected table counts as written,
// or the statement is refused when even that is unclear.

// tref is one table reference of a statement's FROM / table list.
type tref struct {
	schema, name string // the table; schema resolved against the session
	alias        string // lower-cased alias, "" if none
	derived      bool   // a derived table (subquery): alias only
	cte          bool   // an unqualified name that a CTE of the statement shadows
	prot         *policy.Table
	fenced       *catalog.Fenced // not protected, but reaches protected tables (catalog.go)
}

// lookup returns the protected table schema.name, if any.
// A lease table counts as protected too (see Engine.isLease): statements
// that would write it are refused.
func (e *Engine) lookup(schema, name string) *policy.Table {
	if name == "" {
		return nil
	}
	s, n := foldName(schema), foldName(name)
	if t, ok := e.pol.Lookup(s, n); ok {
		return t
	}
	return e.leases[s+"."+n]
}

// tableRef resolves a TableName.
func (in *stmtIn) tableRef(tn *ast.TableName, alias string, ctes map[string]bool) tref {
	r := tref{name: tn.Name.O, alias: strings.ToLower(alias)}
	if tn.Schema.O != "" {
		r.schema = tn.Schema.O
	} else {
		r.schema = in.st.schema
		r.cte = ctes[strings.ToLower(tn.Name.O)]
	}
	r.prot = in.pc.e.lookup(r.schema, r.name)
	if !r.cte {
		r.fenced = in.pc.e.fencedRef(r.schema, r.name)
	}
	return r
}

// collectRefs lists the table references of a FROM / table list tree.
func (in *stmtIn) collectRefs(n ast.ResultSetNode, ctes map[string]bool, out []tref) []tref {
	switch x := n.(type) {
	case *ast.Join:
		if x == nil {
			return out
		}
		if x.Left != nil {
			out = in.collectRefs(x.Left, ctes, out)
		}
		if x.Right != nil {
			out = in.collectRefs(x.Right, ctes, out)
		}
	case *ast.TableSource:
		switch s := x.Source.(type) {
		case *ast.TableName:
			out = append(out, in.tableRef(s, x.AsName.O, ctes))
		case *ast.Join:
			out = in.collectRefs(s, ctes, out)
		default:
			out = append(out, tref{alias: x.AsName.L, derived: true})
		}
	case *ast.TableName:
		out = append(out, in.tableRef(x, "", ctes))
	}
	return out
}

func cteNames(w *ast.WithClause) map[string]bool {
	if w == nil || len(w.CTEs) == 0 {
		return nil
	}
	m := make(map[string]bool, len(w.CTEs))
	for _, c := range w.CTEs {
		m[c.Name.L] = true
	}
	return m
}

// matchQualifier returns the references a column or delete-target
// qualifier [schema.]name may denote. Matching is case-insensitive
// (over-matching only over-fences).
func matchQualifier(refs []tref, schema, name string) []int {
	var idx []int
	for i, r := range refs {
		switch {
		case schema == "":
			if r.alias != "" {
				if strings.EqualFold(r.alias, name) {
					idx = append(idx, i)
				}
			} else if !r.derived && strings.EqualFold(r.name, name) {
				idx = append(idx, i)
			}
		default:
			if !r.derived && strings.EqualFold(r.schema, schema) && strings.EqualFold(r.name, name) {
				idx = append(idx, i)
			}
		}
	}
	return idx
}

func anyProtected(refs []tref) *tref {
	for i := range refs {
		if refs[i].prot != nil && !refs[i].cte {
			return &refs[i]
		}
	}
	return nil
}

// anyFenced is anyProtected for the tables and views of the catalog.
func anyFenced(refs []tref) *tref {
	for i := range refs {
		if refs[i].fenced != nil && !refs[i].cte {
			return &refs[i]
		}
	}
	return nil
}

// refName names a reference in a refusal.
func refName(r *tref) string {
	if r.prot != nil {
		return qualified(r.prot)
	}
	return r.schema + "." + r.name
}

func qualified(t *policy.Table) string { return t.Schema + "." + t.Table }

// updateTargets returns the protected tables an UPDATE writes (through
// the catalog's views, trigger tables and cascading parents too).
func (in *stmtIn) updateTargets(n *ast.UpdateStmt) ([]Target, *stmtRes) {
	if n.TableRefs == nil || n.TableRefs.TableRefs == nil {
		return nil, nil
	}
	refs := in.collectRefs(n.TableRefs.TableRefs, cteNames(n.With), nil)
	var ts []Target
	var r *stmtRes
	if len(refs) == 1 {
		if refs[0].prot != nil {
			ts = addTarget(ts, target(refs[0].prot))
		}
		return in.derivedTargets(ts, &refs[0], catalog.OpUpdate)
	}
	// allDerived: which catalog object a SET column belongs to is unclear;
	// every one the statement names counts as written.
	allDerived := func() *stmtRes {
		for i := range refs {
			if ts, r = in.derivedTargets(ts, &refs[i], catalog.OpUpdate); r != nil {
				return r
			}
		}
		return nil
	}
	for _, a := range n.List {
		c := a.Column
		if c.Table.O == "" {
			if p := anyProtected(refs); p != nil {
				r := in.refuse(qualified(p.prot), "this multi-table UPDATE joins the protected table and sets the unqualified column "+
					c.Name.O+"; qualify the SET columns (alias.column) so fenceproxy can tell which table is written")
				return nil, &r
			}
			if r := allDerived(); r != nil {
				return nil, r
			}
			continue
		}
		idx := matchQualifier(refs, c.Schema.O, c.Table.O)
		if len(idx) == 0 {
			if p := anyProtected(refs); p != nil {
				r := in.refuse(qualified(p.prot), "fenceproxy cannot tell which table the column "+c.Table.O+"."+c.Name.O+
					" of this multi-table UPDATE belongs to; qualify it with a table alias of the statement")
				return nil, &r
			}
			if r := allDerived(); r != nil {
				return nil, r
			}
			continue
		}
		for _, i := range idx {
			if refs[i].prot != nil {
				ts = addTarget(ts, target(refs[i].prot))
			}
			if ts, r = in.derivedTargets(ts, &refs[i], catalog.OpUpdate); r != nil {
				return nil, r
			}
		}
	}
	return ts, nil
}

// deleteTargets returns the protected tables a DELETE writes.
func (in *stmtIn) deleteTargets(n *ast.DeleteStmt) ([]Target, *stmtRes) {
	if n.TableRefs == nil || n.TableRefs.TableRefs == nil {
		return nil, nil
	}
	refs := in.collectRefs(n.TableRefs.TableRefs, cteNames(n.With), nil)
	var ts []Target
	var r *stmtRes
	if !n.IsMultiTable {
		for i := range refs {
			if refs[i].prot != nil {
				ts = addTarget(ts, target(refs[i].prot))
			}
			if ts, r = in.derivedTargets(ts, &refs[i], catalog.OpDelete); r != nil {
				return nil, r
			}
		}
		return ts, nil
	}
	if n.Tables == nil {
		return nil, nil
	}
	for _, tn := range n.Tables.Tables {
		idx := matchQualifier(refs, tn.Schema.O, tn.Name.O)
		if len(idx) == 0 && len(n.Tables.Tables) == 1 && tn.Schema.O == "" && strings.EqualFold(tn.Name.O, "history") {
			// MariaDB reads DELETE HISTORY FROM t [BEFORE SYSTEM_TIME ...]
			// as the removal of t's history rows; the parser reads a
			// multi-table DELETE of a table named history (found by red
			// team 3: it went unfenced).
			for i := range refs {
				if refs[i].prot != nil {
					r := in.refuse(qualified(refs[i].prot), "DELETE HISTORY (MariaDB system versioning) cannot be fenced; "+
						"remove a protected table's history directly against the database, not through fenceproxy")
					return nil, &r
				}
			}
		}
		if len(idx) == 0 {
			// The server rejects an unknown target; fence a protected one
			// anyway, named directly.
			schema := tn.Schema.O
			if schema == "" {
				schema = in.st.schema
			}
			if p := in.pc.e.lookup(schema, tn.Name.O); p != nil {
				ts = addTarget(ts, target(p))
			}
			direct := tref{schema: schema, name: tn.Name.O, fenced: in.pc.e.fencedRef(schema, tn.Name.O)}
			if ts, r = in.derivedTargets(ts, &direct, catalog.OpDelete); r != nil {
				return nil, r
			}
			continue
		}
		for _, i := range idx {
			if refs[i].prot != nil {
				ts = addTarget(ts, target(refs[i].prot))
			}
			if ts, r = in.derivedTargets(ts, &refs[i], catalog.OpDelete); r != nil {
				return nil, r
			}
		}
	}
	return ts, nil
}

// insertTarget returns the protected table an INSERT / REPLACE writes.
func (in *stmtIn) insertTarget(n *ast.InsertStmt) ([]Target, *stmtRes) {
	if n.Table == nil || n.Table.TableRefs == nil {
		return nil, nil
	}
	refs := in.collectRefs(n.Table.TableRefs, nil, nil)
	var ts []Target
	var r *stmtRes
	for i := range refs {
		if refs[i].prot != nil {
			ts = addTarget(ts, target(refs[i].prot))
		}
		if ts, r = in.derivedTargets(ts, &refs[i], insertOps(n)); r != nil {
			return nil, r
		}
	}
	return ts, nil
}

// protectedIn returns the first protected table among the TableNames of n.
func (in *stmtIn) protectedIn(n ast.Node) *policy.Table {
	if n == nil {
		return nil
	}
	for _, tn := range sqlread.TableNames(n) {
		schema := tn.Schema.O
		if schema == "" {
			schema = in.st.schema
		}
		if p := in.pc.e.lookup(schema, tn.Name.O); p != nil {
			return p
		}
	}
	return nil
}

// protectedName returns the protected table named by tn, if any.
func (in *stmtIn) protectedName(tn *ast.TableName) *policy.Table {
	if tn == nil {
		return nil
	}
	schema := tn.Schema.O
	if schema == "" {
		schema = in.st.schema
	}
	return in.pc.e.lookup(schema, tn.Name.O)
}
