package rewrite

import (
	"strings"

	"github.com/fenceproxy/fenceproxy/catalog"
	"github.com/fenceproxy/fenceproxy/internal/sqlread"
	"github.com/pingcap/tidb/pkg/parser/ast"
)

// Tables whose engine forwards their rows (FEDERATED, CONNECT, SPIDER; see
// catalog/engine.go): the catalog refuses every write to one it knows. DDL
// through the proxy that would make one is refused too, rather than relayed
// with a catalog refresh after it: until that refresh, writes to the new
// table on other connections would pass, and a TEMPORARY one never appears
// in the catalog at all. Such tables can only be created directly on the
// server, where the catalog finds them within catalog.refresh.
//
// What makes a table forward its rows: ENGINE=<a forwarding engine> (of the
// table or of a partition), a CONNECTION= option (it means nothing to other
// engines, and with a forwarding default_storage_engine it alone makes
// one), CREATE TABLE ... LIKE a forwarding or MERGE table (LIKE copies the
// engine, the connection and the UNION list), or a table created without
// ENGINE= while the session's default_storage_engine or
// default_tmp_storage_engine is a forwarding engine: SET of those to
// anything but a local engine is refused.

const forwardFix = "; create such tables directly on the server (fenceproxy's catalog then refuses their writes), " +
	"not through fenceproxy"

// forwardTokens refuses, before parsing, a CREATE or ALTER (of a table, or
// any statement that may hold one: a stored program, a compound
// statement) that names a forwarding engine or a CONNECTION, and a SET of a
// storage engine variable to a value that is not a local engine. Token
// level, so that the statements the parser cannot read (CONNECT's own
// table options) are covered too.
func (in *stmtIn) forwardTokens() (stmtRes, bool) {
	if len(in.toks) == 0 {
		return stmtRes{}, false
	}
	set := in.kw(0, "set")
	if !set && !in.kw(0, "create") && !in.kw(0, "alter") && !in.isCompound() {
		return stmtRes{}, false
	}
	for i := range in.toks {
		t := in.toks[i]
		switch {
		case t.Kind == sqlread.Word || t.Kind == sqlread.SysVar || t.Kind == sqlread.QuotedIdent:
		default:
			continue
		}
		name := strings.ToLower(in.identName(i))
		switch {
		case strings.HasSuffix(name, "storage_engine"):
			// SET [SESSION|GLOBAL|STATEMENT] [@@[scope.]]x_storage_engine = v
			j := i + 1
			if !in.op(j, "=") && !in.op(j, ":=") {
				continue
			}
			j++
			if j >= len(in.toks) {
				return stmtRes{}, false
			}
			v, ok := in.engineValue(j)
			if ok && (strings.EqualFold(v, "default") || catalog.ClassOf(v) == catalog.EngineLocal) {
				continue
			}
			return in.refuse("", "setting "+name+" to anything but a local storage engine through fenceproxy is refused: "+
				"a table created without ENGINE= would then take an engine that may write its rows elsewhere (FEDERATED, "+
				"CONNECT, SPIDER), which fenceproxy cannot fence"+forwardFix), true
		case name == "engine" && t.Kind == sqlread.Word && !t.AfterDot:
			j := i + 1
			if in.op(j, "=") {
				j++
			}
			if v, ok := in.engineValue(j); ok && catalog.KnownForwarding(v) {
				return in.refuse("", "ENGINE="+v+" writes a table's rows over a connection of its own (possibly to a "+
					"protected table) that fenceproxy cannot fence"+forwardFix), true
			}
		case name == "connection" && t.Kind == sqlread.Word && !t.AfterDot:
			j := i + 1
			if in.op(j, "=") {
				j++
			}
			if j < len(in.toks) && (in.toks[j].Kind == sqlread.String || in.toks[j].Kind == sqlread.NString) {
				return in.refuse("", "a table with CONNECTION= forwards its rows to another server, or back to this one, "+
					"over a connection that fenceproxy cannot fence"+forwardFix), true
			}
		}
	}
	return stmtRes{}, false
}

// engineValue reads an engine name at token j: a word, a quoted name or
// a string.
func (in *stmtIn) engineValue(j int) (string, bool) {
	if j < 0 || j >= len(in.toks) {
		return "", false
	}
	switch in.toks[j].Kind {
	case sqlread.Word, sqlread.QuotedIdent:
		return in.identName(j), true
	case sqlread.String:
		b := in.text(j)
		if len(b) >= 2 {
			return sqlread.UnquoteIdent(b), true
		}
	}
	return "", false
}

// engineOptions refuses table options (the table's and its partitions')
// that make a table forward its rows: a forwarding engine, an engine
// fenceproxy does not know, or a CONNECTION. MERGE is unionRefusal's.
func (in *stmtIn) engineOptions(opts []*ast.TableOption, part *ast.PartitionOptions, defs []*ast.PartitionDefinition) (stmtRes, bool) {
	all := append([]*ast.TableOption(nil), opts...)
	if part != nil {
		defs = append(defs, part.Definitions...)
	}
	for _, d := range defs {
		all = append(all, d.Options...)
		for _, s := range d.Sub {
			all = append(all, s.Options...)
		}
	}
	for _, o := range all {
		switch o.Tp {
		case ast.TableOptionEngine:
			switch catalog.ClassOf(o.StrValue) {
			case catalog.EngineLocal, catalog.EngineMerge:
				continue
			case catalog.EngineForward:
				return in.refuse("", "ENGINE="+o.StrValue+" writes a table's rows over a connection of its own (possibly to a "+
					"protected table) that fenceproxy cannot fence"+forwardFix), true
			}
			return in.refuse("", "fenceproxy does not know the storage engine "+o.StrValue+", so it cannot tell whether "+
				"it writes its rows elsewhere (as FEDERATED, CONNECT and SPIDER do)"+forwardFix), true
		case ast.TableOptionConnection:
			return in.refuse("", "a table with CONNECTION= forwards its rows to another server, or back to this one, "+
				"over a connection that fenceproxy cannot fence"+forwardFix), true
		}
	}
	return stmtRes{}, false
}

// likeRefusal refuses CREATE TABLE ... LIKE a table whose engine forwards
// rows, or a MERGE table over protected tables: the copy would be one too.
func (in *stmtIn) likeRefusal(refer *ast.TableName) (stmtRes, bool) {
	if refer == nil {
		return stmtRes{}, false
	}
	schema := refer.Schema.O
	if schema == "" {
		schema = in.st.schema
	}
	f := in.pc.e.fencedRef(schema, refer.Name.O)
	if f == nil || f.Kind&(catalog.KindForward|catalog.KindMerge) == 0 {
		return stmtRes{}, false
	}
	what := "its engine (" + f.Engine + ") writes its rows over a connection of its own"
	if f.Engine == "" {
		what = "it is a MERGE table over protected tables"
	}
	return in.refuse(f.Schema+"."+f.Name, "CREATE TABLE ... LIKE copies the table's engine, connection and UNION list, and "+
		what+forwardFix), true
}

// truncateRefusal refuses TRUNCATE of a table whose engine forwards rows
// (FEDERATED sends TRUNCATE to the remote table) or of a MERGE table over
// protected tables.
func (in *stmtIn) truncateRefusal(tn *ast.TableName) (stmtRes, bool) {
	if tn == nil {
		return stmtRes{}, false
	}
	schema := tn.Schema.O
	if schema == "" {
		schema = in.st.schema
	}
	f := in.pc.e.fencedRef(schema, tn.Name.O)
	if f == nil || f.Kind&(catalog.KindForward|catalog.KindMerge) == 0 && f.Refuse&catalog.OpDelete == 0 {
		return stmtRes{}, false
	}
	why := f.RefuseWhy
	if why == "" {
		why = "a TRUNCATE of it empties the tables it writes, which cannot be fenced; use DELETE (fenced) instead"
	}
	return in.refuse(f.Schema+"."+f.Name, "TRUNCATE: "+why), true
}
