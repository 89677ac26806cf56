package rewrite

import (
	"strings"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/pingcap/tidb/pkg/parser/ast"
)

// Statements other than the DML the rewriter fences. A statement that only
// reads a protected table passes; one that would change a protected table
// (or its definition, or whether it is the table the name denotes) without
// a fence is refused. Statement kinds fenceproxy does not know are refused
// when they name a protected table at all.

func (in *stmtIn) readOrRefuse(stmt ast.StmtNode) stmtRes {
	other := stmtRes{stmt: Stmt{Kind: Other}}
	refuseT := func(t string, why string) stmtRes { return in.refuse(t, why) }
	refuseP := func(p *policy.Table, why string) stmtRes {
		if in.pc.e.isLease(p) {
			why = "this is a lease table: only fenceproxy's lease functions change it, and its definition is fenceproxy's"
		}
		return in.refuse(qualified(p), why)
	}
	// A table renamed to a protected or lease table's name may be a
	// TEMPORARY one: it then shadows the real table for this session
	// (measured on MariaDB 10.11 and TiDB: RENAME TABLE and ALTER TABLE
	// ... RENAME of a temporary table).
	refuseRename := func(p *policy.Table) stmtRes {
		return in.refuse(qualified(p), "renaming a table to "+shadowed(in.pc.e, p)+" is refused: a TEMPORARY table renamed so "+
			shadowWhy(in.pc.e, p))
	}
	switch n := stmt.(type) {
	case *ast.TruncateTableStmt:
		if p := in.protectedName(n.Table); p != nil {
			return refuseP(p, "TRUNCATE cannot be fenced; use DELETE FROM "+p.Table+" (fenced) instead")
		}
		if r, ok := in.truncateRefusal(n.Table); ok {
			return r
		}
		return other
	case *ast.DropTableStmt:
		for _, tn := range n.Tables {
			if p := in.protectedName(tn); p != nil {
				return refuseP(p, "DROP of a protected table is refused; remove it from the fenceproxy policy first")
			}
		}
		return other
	case *ast.AlterTableStmt:
		if p := in.protectedName(n.Table); p != nil {
			return refuseP(p, "ALTER TABLE on a protected table is refused; run schema changes directly against the database, not through fenceproxy")
		}
		for _, spec := range n.Specs {
			if spec.Tp == ast.AlterTableRenameTable {
				if p := in.protectedName(spec.NewTable); p != nil {
					return refuseRename(p)
				}
			}
		}
		for _, spec := range n.Specs {
			if r, ok := in.unionRefusal(spec.Options); ok {
				return r
			}
			if r, ok := in.engineOptions(spec.Options, spec.Partition, spec.PartDefinitions); ok {
				return r
			}
		}
		// EXCHANGE PARTITION ... WITH TABLE protected, and anything else
		// that names a protected table.
		if p := in.protectedIn(stmt); p != nil {
			return refuseP(p, "this ALTER TABLE names a protected table (EXCHANGE PARTITION, ...); refused")
		}
		return other
	case *ast.RenameTableStmt:
		for _, tt := range n.TableToTables {
			if p := in.protectedName(tt.OldTable); p != nil {
				return refuseP(p, "renaming a protected table is refused; remove it from the fenceproxy policy first")
			}
			if p := in.protectedName(tt.NewTable); p != nil {
				return refuseRename(p)
			}
		}
		return other
	case *ast.CreateTableStmt:
		// CREATE TABLE x LIKE / AS SELECT only reads the protected table.
		if p := in.protectedName(n.Table); p != nil {
			if n.TemporaryKeyword != ast.TemporaryNone {
				return in.refuse(qualified(p), "a TEMPORARY table named like "+shadowed(in.pc.e, p)+" is refused: it "+
					shadowWhy(in.pc.e, p))
			}
			return refuseP(p, "creating a table with a protected table's name is refused")
		}
		if r, ok := in.unionRefusal(n.Options); ok {
			return r
		}
		if r, ok := in.engineOptions(n.Options, n.Partition, nil); ok {
			return r
		}
		if r, ok := in.likeRefusal(n.ReferTable); ok {
			return r
		}
		return other
	case *ast.CreateIndexStmt:
		if p := in.protectedName(n.Table); p != nil {
			return refuseP(p, "CREATE INDEX on a protected table is refused; run schema changes directly against the database")
		}
		return other
	case *ast.DropIndexStmt:
		if p := in.protectedName(n.Table); p != nil {
			return refuseP(p, "DROP INDEX on a protected table is refused; run schema changes directly against the database")
		}
		return other
	case *ast.DropDatabaseStmt:
		for i := range in.pc.e.pol.Tables {
			t := &in.pc.e.pol.Tables[i]
			if strings.EqualFold(foldName(n.Name.O), t.Schema) {
				return refuseT(qualified(t), "DROP DATABASE of a schema that holds protected tables is refused")
			}
		}
		return other
	case *ast.LoadDataStmt:
		if p := in.protectedName(n.Table); p != nil {
			return refuseP(p, "LOAD DATA into a protected table cannot be fenced; load into another table and INSERT ... SELECT from it")
		}
		if f := in.derivedIn(n.Table); f != "" {
			return refuseT(f, "LOAD DATA into a table or view that writes protected tables (triggers, views, foreign keys) "+
				"cannot be fenced; load into another table and INSERT ... SELECT from it")
		}
		return other
	case *ast.CreateViewStmt:
		if p := in.protectedName(n.ViewName); p != nil {
			return refuseP(p, "creating a view with a protected table's name is refused")
		}
		if p := in.protectedIn(n.Select); p != nil {
			return refuseP(p, "a view over a protected table could be written through without a fence; refused")
		}
		if f := in.derivedIn(n.Select); f != "" {
			return refuseT(f, "this view would be over an object that writes protected tables (a view, a table with "+
				"triggers or cascading foreign keys); create it directly on the server, fenceproxy's catalog then fences it")
		}
		return other
	case *ast.ExplainStmt:
		if n.Stmt == nil {
			return other
		}
		switch n.Stmt.(type) {
		case *ast.SelectStmt, *ast.SetOprStmt, *ast.ShowStmt:
			return other
		}
		if s, ok := n.Stmt.(ast.StmtNode); ok {
			return in.readOrRefuse(s)
		}
		return other
	case *ast.ShowStmt, *ast.LockTablesStmt, *ast.UnlockTablesStmt, *ast.AnalyzeTableStmt, *ast.FlushStmt,
		*ast.BeginStmt, *ast.CommitStmt, *ast.RollbackStmt, *ast.SavepointStmt, *ast.ReleaseSavepointStmt,
		*ast.DoStmt, *ast.CallStmt, *ast.GrantStmt, *ast.RevokeStmt, *ast.ExecuteStmt, *ast.DeallocateStmt,
		*ast.CreateDatabaseStmt, *ast.AlterDatabaseStmt, *ast.KillStmt, *ast.OptimizeTableStmt:
		return other
	}
	if p := in.protectedIn(stmt); p != nil {
		return refuseP(p, "fenceproxy does not know how to fence this kind of statement on a protected table")
	}
	return other
}

// unionRefusal refuses a MERGE table's UNION=(...) that names a protected
// table or a catalog object: a write to the MERGE table writes them, and
// the catalog does not read UNION lists (information_schema has none).
func (in *stmtIn) unionRefusal(opts []*ast.TableOption) (stmtRes, bool) {
	for _, o := range opts {
		if o.Tp != ast.TableOptionUnion {
			continue
		}
		for _, tn := range o.TableNames {
			schema := tn.Schema.O
			if schema == "" {
				schema = in.st.schema
			}
			name := ""
			if p := in.protectedName(tn); p != nil {
				name = qualified(p)
			} else if f := in.pc.e.fencedRef(schema, tn.Name.O); f != nil {
				name = f.Schema + "." + f.Name
			}
			if name != "" {
				return in.refuse(name, "a MERGE table over it (UNION=...) would write it without a fence; refused"), true
			}
		}
	}
	return stmtRes{}, false
}

// shadowed names p in a refusal: the lease table or the protected table.
func shadowed(e *Engine, p *policy.Table) string {
	if e.isLease(p) {
		return "the lease table " + qualified(p)
	}
	return "the protected table " + qualified(p)
}

// shadowWhy is what a TEMPORARY table of p's name would do. Measured on
// MariaDB 10.11 and TiDB with two sessions: a session's temporary table
// hides the real table of the same schema and name from every statement
// of that session, schema-qualified names included (and, on MariaDB, from
// triggers the session fires); other sessions see the real table.
func shadowWhy(e *Engine, p *policy.Table) string {
	if e.isLease(p) {
		return "would shadow it for this session, and every fence of the session " +
			"would read the session's own rows instead of the lease (a stale write would pass); " +
			"use another name for temporary tables"
	}
	return "would shadow it for this session, and the session's writes would go " +
		"to the temporary table; use another name for temporary tables"
}

// guardTriggerDDL refuses DROP TRIGGER of a fenceproxy guard trigger
// (fencing.database_guard, named lease.GuardTriggerPrefix...): guards are
// fenceproxy init's to replace and remove, and an app account must not take
// one off through the proxy. CREATE TRIGGER on a protected table is refused
// as every stored program that names one is (programBody); ALTER of a
// protected table by readOrRefuse. The names start with "fence_", a needle:
// such a statement never takes the fast path.
func (in *stmtIn) guardTriggerDDL() (stmtRes, bool) {
	if !in.kw(0, "drop") || !in.kw(1, "trigger") {
		return stmtRes{}, false
	}
	i := 2
	if in.kw(i, "if") && in.kw(i+1, "exists") {
		i += 2
	}
	if in.isName(i) && in.op(i+1, ".") && in.isName(i+2) {
		i += 2
	}
	if !in.isName(i) || lease.IsGuardName(in.identName(i)) {
		return in.refuse("", "DROP TRIGGER of a fenceproxy guard trigger is refused: guard triggers are installed, "+
			"replaced and removed by fenceproxy init --config FILE (database_guard: off removes them)"), true
	}
	return stmtRes{}, false
}
