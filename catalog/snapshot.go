// Package catalog knows the schema objects of a backend that can write a
// table without the statement naming it: views, triggers, stored
// procedures and functions, foreign keys with cascading rules, events, and
// tables whose engine writes elsewhere (MERGE, FEDERATED, CONNECT, SPIDER).
// A Snapshot holds them as information_schema reports them; Close derives,
// from a policy's protected tables, which objects reach them and how (see
// closure.go). The package is pure: the loader that reads information_schema
// lives elsewhere.
package catalog

import "strings"

// Op is a set of the row operations a write performs on a table: what
// decides which triggers fire and which foreign key rules apply.
type Op uint8

const (
	OpInsert Op = 1 << iota
	OpUpdate
	OpDelete

	OpAll = OpInsert | OpUpdate | OpDelete
)

func (o Op) String() string {
	var parts []string
	if o&OpInsert != 0 {
		parts = append(parts, "INSERT")
	}
	if o&OpUpdate != 0 {
		parts = append(parts, "UPDATE")
	}
	if o&OpDelete != 0 {
		parts = append(parts, "DELETE")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "|")
}

// ParseOp reads a trigger event (information_schema.TRIGGERS.EVENT_MANIPULATION).
// MariaDB 10.11 reports one event per trigger; a comma-separated list (as a
// later MariaDB may report for multi-event triggers) is accepted too.
func ParseOp(s string) (Op, bool) {
	var o Op
	for _, p := range strings.Split(s, ",") {
		switch strings.ToUpper(strings.TrimSpace(p)) {
		case "INSERT":
			o |= OpInsert
		case "UPDATE":
			o |= OpUpdate
		case "DELETE":
			o |= OpDelete
		default:
			return 0, false
		}
	}
	return o, o != 0
}

// View is one row of information_schema.VIEWS.
type View struct {
	Schema, Name string
	Definition   string // VIEW_DEFINITION: a SELECT, names qualified by the server
}

// Trigger is one row of information_schema.TRIGGERS.
type Trigger struct {
	Schema, Name string // the trigger's schema is its table's
	Table        string // EVENT_OBJECT_TABLE
	Event        Op     // EVENT_MANIPULATION
	Timing       string // ACTION_TIMING: BEFORE or AFTER
	Body         string // ACTION_STATEMENT; "" when the account may not see it
	SQLMode      string // the sql_mode the body was created under
}

// Routine is one row of information_schema.ROUTINES.
type Routine struct {
	Schema, Name string
	Function     bool   // ROUTINE_TYPE FUNCTION; else PROCEDURE
	Body         string // ROUTINE_DEFINITION; "" (NULL) when the account may not see it
	SQLMode      string
}

// ForeignKey is one row of information_schema.REFERENTIAL_CONSTRAINTS with
// its tables: deleting or updating a row of the parent (RefTable) makes the
// server change rows of the child (Table) when a rule says so.
type ForeignKey struct {
	Schema, Name       string // the constraint; Schema is the child table's
	Table              string // the child: the table holding the foreign key
	RefSchema          string // the parent
	RefTable           string
	OnDelete, OnUpdate string // CASCADE, SET NULL, SET DEFAULT, RESTRICT, NO ACTION
}

// Event is one row of information_schema.EVENTS.
type Event struct {
	Schema, Name string
	Body         string // EVENT_DEFINITION
	SQLMode      string
}

// Name is a schema-qualified table or view name.
type Name struct{ Schema, Name string }

// Snapshot is the schema objects of one backend at one moment. Bodies and
// definitions are parsed by Close; a Snapshot is not modified afterwards.
type Snapshot struct {
	// Server: the server's VERSION(), which decides how it reads the
	// bodies (executable comments by flavor and version) and with which
	// grammar they are parsed; "" = unknown (see server).
	Server string
	// Tables: every base table and view the catalog saw. When the catalog
	// cannot be read, a write to a name not among them is refused: it may
	// be an object created since, which the last good catalog never
	// classified.
	Tables      []Name
	Views       []View
	Triggers    []Trigger
	Routines    []Routine
	ForeignKeys []ForeignKey
	Events      []Event
	// UDFs: the names of the loadable functions (CREATE FUNCTION ...
	// SONAME, mysql.func). They have no schema and no body to read; while
	// the catalog cannot be read, a call of a name that is neither a
	// built-in function, a UDF nor a stored function seen here is refused.
	UDFs []string
	// Engines: the base tables whose engine is not one that keeps their
	// own rows here (MERGE, FEDERATED, CONNECT, SPIDER, unknown ones).
	Engines []TableEngine
}

// key is a lookup key for a schema-qualified name: case-insensitive, as
// the server may fold names (lower_case_table_names) and always folds
// routine names; a false match only over-fences.
func key(schema, name string) string {
	return strings.ToLower(schema) + "." + strings.ToLower(name)
}

// readMode is how the server reads a body stored with the sql_mode mode.
func (s *Snapshot) readMode(mode string) readMode {
	m := readMode{lex: s.server(), oracle: strings.Contains(strings.ToUpper(mode), "ORACLE")}
	for _, f := range strings.Split(strings.ToUpper(mode), ",") {
		switch strings.TrimSpace(f) {
		case "ANSI_QUOTES", "ANSI", "DB2", "MAXDB", "MSSQL", "ORACLE", "POSTGRESQL":
			m.lex.ANSIQuotes = true
		case "NO_BACKSLASH_ESCAPES":
			m.lex.NoBackslash = true
		}
	}
	return m
}
