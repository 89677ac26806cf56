package rewrite

import "strings"

// The server's system schema (mysql) holds the definitions the server runs
// on its own: stored routines (mysql.proc keeps the body the server runs,
// body, apart from the one information_schema shows, body_utf8), events
// (mysql.event), loadable functions and plugins loaded at start
// (mysql.func, mysql.plugin), FEDERATEDX and SPIDER connections
// (mysql.servers), accounts and their privileges; on TiDB, global
// variables and bindings. A direct write there changes what later
// statements run where the proxy reads no statement and the catalog sees
// only what information_schema shows: measured on MariaDB 10.11, UPDATE
// mysql.proc SET body = 'UPDATE app.invoices ...' of a procedure whose
// shown body was SELECT 1 made the next CALL of it write the protected
// table unfenced. While the policy protects a table, a statement that may
// write a table and names the system schema (mysql.x, or an unqualified
// name while the session's schema is mysql) is refused; reads are relayed.

const systemSchema = "mysql"

// systemWriteLeads are the statement kinds that write the tables they
// name; sysWriteInside those that write only when a write word is in them
// (WITH ... UPDATE, EXPLAIN ANALYZE / ANALYZE of a write).
var (
	systemWriteLeads = map[string]bool{
		"insert": true, "replace": true, "update": true, "delete": true, "load": true, "truncate": true,
		"create": true, "alter": true, "drop": true, "rename": true,
	}
	sysWriteInside = map[string]bool{"with": true, "explain": true, "describe": true, "desc": true, "analyze": true}
	sysWriteWords  = map[string]bool{"insert": true, "replace": true, "update": true, "delete": true}
)

// systemSchemaRefusal refuses a statement that may write the system
// schema's tables.
func (in *stmtIn) systemSchemaRefusal() (stmtRes, bool) {
	if !in.pc.e.hasTables() || len(in.toks) == 0 || !in.isName(0) {
		return stmtRes{}, false
	}
	lead := strings.ToLower(in.identName(0))
	writes := systemWriteLeads[lead]
	if !writes && sysWriteInside[lead] {
		for i := range in.toks {
			if in.isName(i) && sysWriteWords[strings.ToLower(in.identName(i))] {
				writes = true
				break
			}
		}
	}
	if !writes {
		return stmtRes{}, false
	}
	names := strings.EqualFold(in.st.schema, systemSchema)
	for i := 0; i < len(in.toks) && !names; i++ {
		names = in.isName(i) && strings.EqualFold(in.identName(i), systemSchema) && in.op(i+1, ".")
	}
	if !names {
		return stmtRes{}, false
	}
	return in.refuse(systemSchema, "this statement may write the server's system schema (mysql), whose tables define "+
		"what the server runs on its own (stored routines, events, plugins, servers, accounts) where fenceproxy "+
		"reads no statement; run it directly on the server, or use the statements made for it (CREATE PROCEDURE, "+
		"CREATE EVENT, GRANT ...)"), true
}
