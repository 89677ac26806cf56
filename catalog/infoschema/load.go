// Package infoschema reads a catalog.Snapshot from a MariaDB, MySQL 8 or TiDB
// server's information_schema, tells cheaply whether it changed, and keeps
// one fresh (Watcher).
//
// The account needs, globally (objects in any schema can write a protected
// table): SELECT (on MariaDB 10.11 the routine bodies come from mysql.proc;
// on MySQL 8 global SELECT or SHOW_ROUTINE shows them), SHOW VIEW (view
// definitions), TRIGGER (without it MariaDB hides triggers entirely, or
// shows them with a NULL body), EVENT (events are hidden without it).
// Load refuses to return a snapshot it knows to be blind.
package infoschema

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/fenceproxy/fenceproxy/catalog"
)

// bodyChars: bodies and view definitions are read up to one character
// past catalog.MaxBodyBytes (a character is at least a byte): a longer one
// then counts as unreadable, and the snapshot never holds more of it.
var bodyChars = strconv.Itoa(catalog.MaxBodyBytes + 1)

// systemSchemas hold no application objects; their objects cannot be
// created by applications.
const systemSchemas = "('mysql','information_schema','performance_schema','sys')"

// Schema names are compared in lower case: TiDB's information_schema
// compares them byte by byte (utf8mb4_bin) and spells its own
// INFORMATION_SCHEMA and PERFORMANCE_SCHEMA in capitals; MariaDB's
// compares them ignoring case already. appTables also leaves out the
// server's own read-only tables (TiDB's METRICS_SCHEMA holds 700 of
// them), which nothing can write or redefine.
const appTables = " AND TABLE_TYPE <> 'SYSTEM VIEW'"

// BlindError: the account cannot see some kind of object, so a snapshot
// would miss writes.
type BlindError struct{ Missing []string }

func (e *BlindError) Error() string {
	return "fenceproxy's catalog account cannot see every schema object that can write tables: it lacks the global " +
		strings.Join(e.Missing, ", ") + " privilege (GRANT " + strings.Join(e.Missing, ", ") + " ON *.* TO the backend.user account)"
}

// currentGrantee is the current account as USER_PRIVILEGES.GRANTEE spells
// it: USER_PRIVILEGES lists every account's privileges to an account that
// may read mysql.user.
const currentGrantee = `CONCAT("'", SUBSTRING_INDEX(CURRENT_USER(), '@', 1), "'@'", SUBSTRING_INDEX(CURRENT_USER(), '@', -1), "'")`

// Required are the global privileges Load needs.
var Required = []string{"SELECT", "SHOW VIEW", "TRIGGER", "EVENT"}

// CheckVisibility returns the global privileges of Required the current
// account lacks (ALL PRIVILEGES shows as each privilege in
// USER_PRIVILEGES).
func CheckVisibility(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES
		WHERE GRANTEE = `+currentGrantee)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	have := map[string]bool{}
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, err
		}
		have[strings.ToUpper(p)] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var missing []string
	for _, p := range Required {
		if !have[p] {
			missing = append(missing, p)
		}
	}
	return missing, nil
}

// Load reads every application schema's views, triggers, routines, foreign
// keys, events, table names, the loadable functions, and the engines of
// tables that write elsewhere (with MERGE tables' UNION lists, one SHOW
// CREATE TABLE each). It fails with a *BlindError when the account lacks a
// privilege it needs to see them.
func Load(ctx context.Context, db *sql.DB) (*catalog.Snapshot, error) {
	missing, err := CheckVisibility(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("reading the catalog account's privileges: %w", err)
	}
	if len(missing) > 0 {
		return nil, &BlindError{Missing: missing}
	}
	s := &catalog.Snapshot{}
	// The server's version decides how it reads the bodies below (their
	// executable comments), and so how the catalog must read them.
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&s.Server); err != nil {
		return nil, fmt.Errorf("reading the server's version: %w", err)
	}
	var merges []int
	var tables []tableRow
	forwarding := false
	err = each(ctx, db, `SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE, COALESCE(ENGINE, '') FROM information_schema.TABLES
		WHERE LOWER(TABLE_SCHEMA) NOT IN `+systemSchemas+appTables, func(r *sql.Rows) error {
		var n catalog.Name
		var typ, engine string
		err := r.Scan(&n.Schema, &n.Name, &typ, &engine)
		s.Tables = append(s.Tables, n)
		tables = append(tables, tableRow{n, typ, engine})
		if strings.EqualFold(typ, "BASE TABLE") && !rowsHere(engine) {
			forwarding = true
		}
		if strings.Contains(strings.ToUpper(typ), "VIEW") {
			return err
		}
		if engine == "" {
			// A base table whose engine is not loaded has no ENGINE: what
			// it writes once the engine is loaded again is unknown. Other
			// kinds without one (TiDB's sequences) hold no rows to write.
			if !strings.EqualFold(typ, "BASE TABLE") {
				return err
			}
			engine = "unknown"
		}
		switch catalog.ClassOf(engine) {
		case catalog.EngineLocal:
		case catalog.EngineMerge:
			merges = append(merges, len(s.Engines))
			fallthrough
		default:
			s.Engines = append(s.Engines, catalog.TableEngine{Schema: n.Schema, Name: n.Name, Engine: engine})
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading information_schema.TABLES: %w", err)
	}
	for _, i := range merges {
		te := &s.Engines[i]
		te.Union, te.UnionUnknown = mergeUnion(ctx, db, te.Schema, te.Name)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	err = each(ctx, db, `SELECT TABLE_SCHEMA, TABLE_NAME, COALESCE(LEFT(VIEW_DEFINITION, `+bodyChars+`), '') FROM information_schema.VIEWS
		WHERE LOWER(TABLE_SCHEMA) NOT IN `+systemSchemas, func(r *sql.Rows) error {
		var v catalog.View
		err := r.Scan(&v.Schema, &v.Name, &v.Definition)
		s.Views = append(s.Views, v)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading information_schema.VIEWS: %w", err)
	}
	err = each(ctx, db, `SELECT TRIGGER_SCHEMA, TRIGGER_NAME, EVENT_OBJECT_TABLE, EVENT_MANIPULATION, ACTION_TIMING,
		COALESCE(LEFT(ACTION_STATEMENT, `+bodyChars+`), ''), SQL_MODE FROM information_schema.TRIGGERS
		WHERE LOWER(TRIGGER_SCHEMA) NOT IN `+systemSchemas, func(r *sql.Rows) error {
		var t catalog.Trigger
		var ev string
		if err := r.Scan(&t.Schema, &t.Name, &t.Table, &ev, &t.Timing, &t.Body, &t.SQLMode); err != nil {
			return err
		}
		op, ok := catalog.ParseOp(ev)
		if !ok {
			op = catalog.OpAll // an event this code does not know: it may be any
		}
		t.Event = op
		s.Triggers = append(s.Triggers, t)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading information_schema.TRIGGERS: %w", err)
	}
	// ROUTINE_TYPE may also be PACKAGE / PACKAGE BODY (MariaDB's Oracle
	// mode): their routines are called as package.routine and count as
	// procedures whose body is the package's.
	err = each(ctx, db, `SELECT ROUTINE_SCHEMA, ROUTINE_NAME, ROUTINE_TYPE, COALESCE(LEFT(ROUTINE_DEFINITION, `+bodyChars+`), ''), SQL_MODE
		FROM information_schema.ROUTINES WHERE LOWER(ROUTINE_SCHEMA) NOT IN `+systemSchemas, func(r *sql.Rows) error {
		var rt catalog.Routine
		var typ string
		err := r.Scan(&rt.Schema, &rt.Name, &typ, &rt.Body, &rt.SQLMode)
		rt.Function = strings.EqualFold(typ, "FUNCTION")
		s.Routines = append(s.Routines, rt)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading information_schema.ROUTINES: %w", err)
	}
	fkQuery, fkArgs := `SELECT `+fkColumns+` FROM information_schema.REFERENTIAL_CONSTRAINTS
		WHERE LOWER(CONSTRAINT_SCHEMA) NOT IN `+systemSchemas, []any(nil)
	if forwarding {
		fkQuery, fkArgs = fkAround(tables)
	}
	err = each(ctx, db, fkQuery, func(r *sql.Rows) error {
		var fk catalog.ForeignKey
		err := r.Scan(&fk.Schema, &fk.Name, &fk.Table, &fk.RefSchema, &fk.RefTable, &fk.OnDelete, &fk.OnUpdate)
		s.ForeignKeys = append(s.ForeignKeys, fk)
		return err
	}, fkArgs...)
	if err != nil {
		return nil, fmt.Errorf("reading information_schema.REFERENTIAL_CONSTRAINTS: %w", err)
	}
	err = each(ctx, db, `SELECT EVENT_SCHEMA, EVENT_NAME, COALESCE(LEFT(EVENT_DEFINITION, `+bodyChars+`), ''), SQL_MODE
		FROM information_schema.EVENTS WHERE LOWER(EVENT_SCHEMA) NOT IN `+systemSchemas, func(r *sql.Rows) error {
		var e catalog.Event
		err := r.Scan(&e.Schema, &e.Name, &e.Body, &e.SQLMode)
		s.Events = append(s.Events, e)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading information_schema.EVENTS: %w", err)
	}
	// Loadable functions (CREATE FUNCTION ... SONAME): global SELECT reads
	// mysql.func on MariaDB and MySQL 8 alike. Only their names matter: a
	// known one may be called while the catalog cannot be read. TiDB has
	// no loadable functions and no mysql.func.
	udfs, err := hasUDFTable(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("looking for mysql.func: %w", err)
	}
	if !udfs {
		return s, nil
	}
	err = each(ctx, db, `SELECT name FROM mysql.func`, func(r *sql.Rows) error {
		var n string
		err := r.Scan(&n)
		s.UDFs = append(s.UDFs, n)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading mysql.func: %w", err)
	}
	return s, nil
}

// mergeUnion reads a MERGE table's UNION list from SHOW CREATE TABLE
// (information_schema has none). unknown: it could not be read (the
// table is broken, or dropped since); its writes are then refused.
func mergeUnion(ctx context.Context, db *sql.DB, schema, name string) (union []catalog.Name, unknown bool) {
	create, err := showCreate(ctx, db, schema, name)
	if err != nil {
		return nil, true
	}
	union, ok := catalog.MergeUnion(create, schema)
	return union, !ok
}

func showCreate(ctx context.Context, db *sql.DB, schema, name string) (string, error) {
	var n, create string
	err := db.QueryRowContext(ctx, "SHOW CREATE TABLE "+quoteIdent(schema)+"."+quoteIdent(name)).Scan(&n, &create)
	return create, err
}

func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

func each(ctx context.Context, db *sql.DB, q string, f func(*sql.Rows) error, args ...any) error {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := f(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Reading information_schema.REFERENTIAL_CONSTRAINTS (and TABLE_CONSTRAINTS,
// KEY_COLUMN_USAGE, TABLES' CREATE_OPTIONS) opens every table it covers,
// and opening a FEDERATED or SPIDER table connects to its remote: measured
// on MariaDB 10.11, a FederatedX table whose remote table was dropped
// fails the whole query (error 1146, "Remote table does not exist"), and so
// does a SPIDER table linking to its own server (error 12720); an
// unreachable host would hold it up to the connect timeout. So while such
// tables exist, foreign keys are read without opening them: one UNION ALL
// branch per schema that has none (CONSTRAINT_SCHEMA = ?) and, in a schema
// that has one, per other table (CONSTRAINT_SCHEMA = ? AND TABLE_NAME = ?),
// which the server answers by opening that table alone (measured).
// Forwarding tables have no foreign keys of their own.

const fkColumns = `CONSTRAINT_SCHEMA, CONSTRAINT_NAME, TABLE_NAME, UNIQUE_CONSTRAINT_SCHEMA, REFERENCED_TABLE_NAME, DELETE_RULE, UPDATE_RULE`

type tableRow struct {
	name        catalog.Name
	typ, engine string
}

// rowsHere: the engine keeps its rows in this server (opening the table
// connects nowhere).
func rowsHere(engine string) bool {
	c := catalog.ClassOf(engine)
	return c == catalog.EngineLocal || c == catalog.EngineMerge
}

// notHere is the condition, on information_schema.TABLES, of a base table
// whose engine is not one of catalog.RowsHere (an empty ENGINE counts:
// the engine is not loaded).
var notHere = func() string {
	var q []string
	for _, e := range catalog.RowsHere() {
		q = append(q, "'"+e+"'")
	}
	return "TABLE_TYPE = 'BASE TABLE' AND LOWER(COALESCE(ENGINE, '')) NOT IN (" + strings.Join(q, ", ") + ")"
}()

// forwardingCount counts the tables that notHere describes.
var forwardingCount = "(SELECT COUNT(*) FROM information_schema.TABLES WHERE LOWER(TABLE_SCHEMA) NOT IN " + systemSchemas + " AND " + notHere + ")"

// fkAround returns a query of the foreign keys (fkColumns) that opens no
// table whose engine forwards rows, and its arguments.
func fkAround(tables []tableRow) (string, []any) {
	dirty := map[string]bool{}
	var schemas []string
	seen := map[string]bool{}
	for _, t := range tables {
		if !seen[t.name.Schema] {
			seen[t.name.Schema] = true
			schemas = append(schemas, t.name.Schema)
		}
		if strings.EqualFold(t.typ, "BASE TABLE") && !rowsHere(t.engine) {
			dirty[t.name.Schema] = true
		}
	}
	head := "SELECT " + fkColumns + " FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = ?"
	var branches []string
	var args []any
	for _, s := range schemas {
		if !dirty[s] {
			branches = append(branches, head)
			args = append(args, s)
		}
	}
	for _, t := range tables {
		if dirty[t.name.Schema] && strings.EqualFold(t.typ, "BASE TABLE") && rowsHere(t.engine) {
			branches = append(branches, head+" AND TABLE_NAME = ?")
			args = append(args, t.name.Schema, t.name.Name)
		}
	}
	if len(branches) == 0 {
		return "SELECT " + fkColumns + " FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE 1 = 0", nil
	}
	return strings.Join(branches, "\nUNION ALL\n"), args
}

// digestQuery fingerprints, in one round trip and a few rows, everything
// Load reads (the account's privileges included, so that losing one is
// noticed): names, and each definition's MD5 (timestamps alone are not
// enough: ROUTINES.LAST_ALTERED has one-second resolution, and VIEWS and
// REFERENTIAL_CONSTRAINTS have none). information_schema.TABLES'
// UPDATE_TIME says nothing about DDL. The order of rows inside each
// aggregate does not matter: the sum of CRC32s is order-free.
var digestQuery = `
SELECT 'tables', COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS(0x1f, TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE, COALESCE(ENGINE, '')))), 0)
  FROM information_schema.TABLES WHERE LOWER(TABLE_SCHEMA) NOT IN ` + systemSchemas + appTables + `
UNION ALL
SELECT 'merge', COUNT(*), 0
  FROM information_schema.TABLES WHERE LOWER(TABLE_SCHEMA) NOT IN ` + systemSchemas + ` AND ENGINE IN ('MRG_MyISAM', 'MRG_MYISAM')
UNION ALL
SELECT 'views', COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS(0x1f, TABLE_SCHEMA, TABLE_NAME, MD5(VIEW_DEFINITION)))), 0)
  FROM information_schema.VIEWS WHERE LOWER(TABLE_SCHEMA) NOT IN ` + systemSchemas + `
UNION ALL
SELECT 'triggers', COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS(0x1f, TRIGGER_SCHEMA, TRIGGER_NAME, EVENT_OBJECT_TABLE,
    EVENT_MANIPULATION, ACTION_TIMING, CREATED, SQL_MODE, MD5(ACTION_STATEMENT)))), 0)
  FROM information_schema.TRIGGERS WHERE LOWER(TRIGGER_SCHEMA) NOT IN ` + systemSchemas + `
UNION ALL
SELECT 'routines', COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS(0x1f, ROUTINE_SCHEMA, ROUTINE_NAME, ROUTINE_TYPE,
    LAST_ALTERED, SQL_MODE, MD5(ROUTINE_DEFINITION)))), 0)
  FROM information_schema.ROUTINES WHERE LOWER(ROUTINE_SCHEMA) NOT IN ` + systemSchemas + `
UNION ALL
SELECT 'forwarding', ` + forwardingCount + `, 0
UNION ALL
SELECT 'foreign keys', COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS(0x1f, ` + fkColumns + `))), 0)
  FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE LOWER(CONSTRAINT_SCHEMA) NOT IN ` + systemSchemas + `
  AND ` + forwardingCount + ` = 0
UNION ALL
SELECT 'events', COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS(0x1f, EVENT_SCHEMA, EVENT_NAME, LAST_ALTERED, SQL_MODE,
    MD5(EVENT_DEFINITION)))), 0)
  FROM information_schema.EVENTS WHERE LOWER(EVENT_SCHEMA) NOT IN ` + systemSchemas + `
UNION ALL
SELECT 'privileges', COUNT(*), COALESCE(SUM(CRC32(PRIVILEGE_TYPE)), 0)
  FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = ` + currentGrantee

// udfDigest is digestQuery's row of the loadable functions, where the
// server has mysql.func.
const udfDigest = `
UNION ALL
SELECT 'udfs', COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS(0x1f, name, ret, dl, type))), 0) FROM mysql.func`

// hasUDFTable reports whether the server keeps loadable functions in
// mysql.func (MariaDB, MySQL; not TiDB). A server without that table has
// none.
func hasUDFTable(ctx context.Context, db *sql.DB) (bool, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = 'mysql' AND TABLE_NAME = 'func'`).Scan(&n)
	return n > 0, err
}

// Digest returns a fingerprint of everything Load reads: equal digests,
// equal snapshots (up to CRC32 collisions of a changed row, which the
// periodic full reload in Watcher bounds). A MERGE table's UNION list is
// in no information_schema table: when there are MERGE tables, each one's
// SHOW CREATE TABLE goes into the digest too (one round trip each, none
// when there are none).
func Digest(ctx context.Context, db *sql.DB) (string, error) {
	d, _, err := digest(ctx, db)
	return d, err
}

// digestCounts: how many rows of each kind a digest counted (tables,
// views, triggers, routines, events), which a snapshot Load read after it
// must have (covers) to be the catalog that digest saw.
type digestCounts map[string]uint64

// covers reports whether snap has as many objects of each kind as the
// digest counted. It has not when an object changed between the digest and
// Load's reading of its kind: one dropped and created again in between is
// in the digest and not in the snapshot, and the digest taken after it is
// created again equals this one; so the snapshot is stored with no digest
// and the next refresh loads again.
func (c digestCounts) covers(snap *catalog.Snapshot) bool {
	return c["tables"] == uint64(len(snap.Tables)) && c["views"] == uint64(len(snap.Views)) &&
		c["triggers"] == uint64(len(snap.Triggers)) && c["routines"] == uint64(len(snap.Routines)) &&
		c["events"] == uint64(len(snap.Events))
}

func digest(ctx context.Context, db *sql.DB) (string, digestCounts, error) {
	counts := digestCounts{}
	h := sha256.New()
	merges, forwarding := uint64(0), uint64(0)
	udfs, err := hasUDFTable(ctx, db)
	if err != nil {
		return "", nil, err
	}
	q := digestQuery
	if udfs {
		q += udfDigest
	}
	// The rows of a UNION ALL come in any order (TiDB runs its branches
	// in parallel): they are hashed sorted.
	var lines []string
	err = each(ctx, db, q, func(r *sql.Rows) error {
		var kind string
		var n, sum uint64
		if err := r.Scan(&kind, &n, &sum); err != nil {
			return err
		}
		switch kind {
		case "merge":
			merges = n
		case "forwarding":
			forwarding = n
		}
		counts[kind] = n
		lines = append(lines, fmt.Sprintf("%s %d %d\n", kind, n, sum))
		return nil
	})
	if err != nil {
		return "", nil, err
	}
	sort.Strings(lines)
	for _, l := range lines {
		h.Write([]byte(l))
	}
	if forwarding > 0 {
		// The foreign keys row above was empty (it would open them).
		var tables []tableRow
		err := each(ctx, db, `SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE, COALESCE(ENGINE, '') FROM information_schema.TABLES
			WHERE LOWER(TABLE_SCHEMA) NOT IN `+systemSchemas+appTables, func(r *sql.Rows) error {
			var t tableRow
			err := r.Scan(&t.name.Schema, &t.name.Name, &t.typ, &t.engine)
			tables = append(tables, t)
			return err
		})
		if err != nil {
			return "", nil, err
		}
		q, args := fkAround(tables)
		var n, sum uint64
		err = db.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS(0x1f, "+fkColumns+"))), 0) FROM ("+q+") fk", args...).Scan(&n, &sum)
		if err != nil {
			return "", nil, err
		}
		fmt.Fprintf(h, "foreign keys around forwarding tables %d %d\n", n, sum)
	}
	if merges > 0 {
		var names []catalog.Name
		err := each(ctx, db, `SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE LOWER(TABLE_SCHEMA) NOT IN `+
			systemSchemas+` AND ENGINE IN ('MRG_MyISAM', 'MRG_MYISAM') ORDER BY TABLE_SCHEMA, TABLE_NAME`, func(r *sql.Rows) error {
			var n catalog.Name
			err := r.Scan(&n.Schema, &n.Name)
			names = append(names, n)
			return err
		})
		if err != nil {
			return "", nil, err
		}
		for _, n := range names {
			create, err := showCreate(ctx, db, n.Schema, n.Name)
			if err != nil {
				create = "error: " + err.Error()
			}
			fmt.Fprintf(h, "merge %q %q %q\n", n.Schema, n.Name, create)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), counts, nil
}

// IsBlind reports whether err is a *BlindError.
func IsBlind(err error) bool {
	var b *BlindError
	return errors.As(err, &b)
}
