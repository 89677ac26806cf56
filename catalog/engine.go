package catalog

import (
	"sort"
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
)

// Tables whose engine keeps no rows of its own: a write to them is a write
// somewhere else that the statement does not name.
//
//   - MERGE (MRG_MyISAM) writes the MyISAM tables of its UNION list, in the
//     statement's own execution: like a view over them, it is fenced with
//     their leases.
//   - FEDERATED (and FederatedX, which MariaDB also reports as FEDERATED),
//     CONNECT and SPIDER send their rows over a connection of their own, to
//     any server, this one included, through any account: fenceproxy sees
//     neither what they write nor where, so every write to them is refused
//     (fail closed), whatever their CONNECTION says: a host name, a port or
//     a server definition may name this server or another one that
//     forwards here, and the connection string may carry a password that
//     fenceproxy does not read. Reads pass.
//   - An engine this code does not know counts as forwarding.

// EngineClass is what an engine does with a table's rows.
type EngineClass uint8

const (
	EngineLocal   EngineClass = iota // its own rows, in this server's storage
	EngineMerge                      // the rows of the tables of its UNION list
	EngineForward                    // rows elsewhere, over a connection of its own
	EngineUnknown                    // an engine this code does not know: treated as EngineForward
)

// localEngines keep a table's own rows (lower case, as the server reports
// them folded). S3 tables are read-only; SEQUENCE tables are virtual.
var localEngines = map[string]bool{
	"innodb": true, "myisam": true, "aria": true, "memory": true, "heap": true, "csv": true,
	"archive": true, "blackhole": true, "sequence": true, "rocksdb": true, "tokudb": true,
	"mroonga": true, "columnstore": true, "s3": true, "performance_schema": true,
}

var forwardEngines = map[string]bool{"federated": true, "federatedx": true, "connect": true, "spider": true}

var mergeEngines = map[string]bool{"mrg_myisam": true, "merge": true, "mrg_isam": true}

// ClassOf classifies an engine name as information_schema.TABLES.ENGINE or
// an ENGINE= table option gives it, in any case.
func ClassOf(engine string) EngineClass {
	e := strings.ToLower(strings.TrimSpace(engine))
	switch {
	case localEngines[e]:
		return EngineLocal
	case mergeEngines[e]:
		return EngineMerge
	case forwardEngines[e]:
		return EngineForward
	}
	return EngineUnknown
}

// KnownForwarding reports whether engine is one this code knows to forward
// rows (not merely an unknown one).
func KnownForwarding(engine string) bool { return ClassOf(engine) == EngineForward }

// TableEngine is a base table whose engine is not EngineLocal (one row of
// information_schema.TABLES, and for a MERGE table its UNION list from
// SHOW CREATE TABLE, which information_schema does not have).
type TableEngine struct {
	Schema, Name string
	Engine       string // as the server reports it: MRG_MyISAM, FEDERATED, CONNECT, SPIDER, ...
	Union        []Name // MERGE: the tables of its UNION list, schema-qualified
	// UnionUnknown: a MERGE table whose UNION list could not be read:
	// treated as forwarding (its writes are refused).
	UnionUnknown bool
}

func forwardWhy(schema, name, engine string) string {
	if ClassOf(engine) == EngineMerge {
		return "the MERGE table " + schema + "." + name + " writes the tables of its UNION list, which fenceproxy could not read " +
			"(SHOW CREATE TABLE failed or showed no list it can read); write the tables directly instead"
	}
	return "the table " + schema + "." + name + " has ENGINE=" + engine + ", which writes its rows over a connection of its own " +
		"(possibly to this server, to a protected table) that fenceproxy cannot fence; write the remote table on its own " +
		"server directly (fenced, through fenceproxy if it is protected) instead, or change the table's engine"
}

// MergeUnion reads the UNION=(...) list of a MERGE table's SHOW CREATE
// TABLE text; unqualified names are in schema (the server prints them
// so when they are in the MERGE table's own schema). ok is false when the
// text has no UNION list it can read, or the server may read the text in
// more than one way (an executable comment: the server's version is not
// known here): the caller then does not know what the table writes.
func MergeUnion(create, schema string) (names []Name, ok bool) {
	toks, _, issue, _ := lex(create, sqlread.Mode{Flavor: sqlread.MariaDB}, 0)
	if issue != "" {
		return nil, false
	}
	depth := 0
	for i, t := range toks {
		switch {
		case t.op('('):
			depth++
		case t.op(')'):
			depth--
		}
		// Table options follow the column list, at depth 0.
		if depth != 0 || !t.is("union") {
			continue
		}
		j := i + 1
		if j < len(toks) && toks[j].op('=') {
			j++
		}
		if j >= len(toks) || !toks[j].op('(') {
			return nil, false
		}
		for j++; j < len(toks); j++ {
			if toks[j].op(')') {
				return names, true
			}
			if toks[j].op(',') {
				continue
			}
			r, rok := qualifiedAt(toks, j, schema)
			if !rok {
				return nil, false
			}
			if j+2 < len(toks) && toks[j+1].op('.') {
				j += 2
			}
			names = append(names, Name{Schema: r.schema, Name: r.name})
		}
		return nil, false
	}
	// A MERGE table with no UNION list (or an empty one) writes nothing.
	return nil, true
}

// RowsHere lists the engines (lower case) whose tables keep their rows in
// this server, MERGE ones included: any other engine is EngineForward or
// EngineUnknown. For queries that must not open the others.
func RowsHere() []string {
	var out []string
	for e := range localEngines {
		out = append(out, e)
	}
	for e := range mergeEngines {
		out = append(out, e)
	}
	sort.Strings(out)
	return out
}
