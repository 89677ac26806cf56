package proxy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/fenceproxy/fenceproxy/catalog/infoschema"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
)

// SchemaCheck is what the backend says about a configuration, read with
// the proxy's own account (backend.user): check-config --connect, serve at
// start and every reload run it.
type SchemaCheck struct {
	// Errors stop serve (and a reload): a protected table that does not
	// exist, is a view, or is spelled in another case on a case-sensitive
	// server; a missing lease table; an account that cannot read the
	// catalog while the catalog is on. Each is a *policy.Error at its key.
	Errors []error
	// Notes are worth a log line: a table declared created_later that is
	// not there yet.
	Notes []string
}

// CheckSchema reads each protected table, the lease tables and the
// account's catalog privileges from db (a pool on backend.user). err is
// set when the backend could not be asked at all (not reachable, login
// refused): nothing was checked.
func CheckSchema(ctx context.Context, db *sql.DB, cfg *policy.Config) (*SchemaCheck, error) {
	if err := db.PingContext(ctx); err != nil {
		return nil, err
	}
	r := &SchemaCheck{}
	var account string
	if err := db.QueryRowContext(ctx, "SELECT CURRENT_USER()").Scan(&account); err != nil {
		return nil, err
	}
	grantee := granteeOf(account)

	// The catalog's privileges, when the catalog is on.
	missing, err := infoschema.CheckVisibility(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("reading the privileges of %s: %w", account, err)
	}
	seesAll := len(missing) == 0 || !contains(missing, "SELECT")
	if cfg.Catalog.Refresh > 0 && len(missing) > 0 {
		r.Errors = append(r.Errors, cfg.ErrorAt("backend.user", fmt.Sprintf(
			"%s cannot read the schema catalog: it lacks the global %s privilege, so writes through views, triggers, "+
				"cascading foreign keys and routines could not be fenced; run GRANT %s ON *.* TO %s "+
				"(or set catalog.refresh: 0s to run without the catalog knowingly)",
			account, strings.Join(missing, ", "), strings.Join(missing, ", "), grantee)))
	}

	// backend.engine against the server: it picks the fence's shape.
	if cfg.Backend.Engine != "" && cfg.Backend.Engine != policy.EngineAuto {
		eng, version, err := lease.DetectEngine(ctx, db)
		if err != nil {
			return nil, err
		}
		if why := EngineMismatch(cfg.Backend.Engine, eng, version); why != "" {
			r.Errors = append(r.Errors, cfg.ErrorAt("backend.engine", why))
		}
	}

	var lctn int
	if err := db.QueryRowContext(ctx, "SELECT @@lower_case_table_names").Scan(&lctn); err != nil {
		return nil, err
	}
	schemas, err := stringColumn(ctx, db, "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")
	if err != nil {
		return nil, fmt.Errorf("reading information_schema.SCHEMATA: %w", err)
	}
	// The tables of every schema a protected table names (in any case),
	// and of the lease tables' schemas.
	want := map[string]bool{}
	for _, t := range cfg.Tables {
		if t.Schema != "" {
			want[strings.ToLower(t.Schema)] = true
			ls, _ := lease.TableFor(cfg.Fencing.LeaseTable, t.Schema)
			want[strings.ToLower(ls)] = true
		}
	}
	objects := map[string][]object{} // lower(schema) -> its tables and views
	if len(want) > 0 {
		var args []any
		for s := range want {
			args = append(args, s)
		}
		q := "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE LOWER(TABLE_SCHEMA) IN (?" +
			strings.Repeat(", ?", len(args)-1) + ")"
		rows, err := db.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("reading information_schema.TABLES: %w", err)
		}
		for rows.Next() {
			var o object
			if err := rows.Scan(&o.schema, &o.name, &o.typ); err != nil {
				rows.Close()
				return nil, err
			}
			k := strings.ToLower(o.schema)
			objects[k] = append(objects[k], o)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	invisible := ""
	if !seesAll {
		invisible = fmt.Sprintf(" or %s cannot see it (without global SELECT an account sees only the tables it has a privilege on: GRANT SELECT ON *.* TO %s)",
			account, grantee)
	}

	leaseChecked := map[string]bool{}
	for i, t := range cfg.Tables {
		key := fmt.Sprintf("tables[%d].name", i)
		if t.Schema == "" || cfg.Reported(key) {
			continue
		}
		f := find(objects, schemas, t.Schema, t.Table, lctn)
		switch {
		case t.CreatedLater && f.exact != nil && f.exact.base():
			// There already: protected as any other.
		case t.CreatedLater:
			r.Notes = append(r.Notes, fmt.Sprintf("%s (line %d, created_later): not there yet; it is fenced from the moment it appears%s",
				t.Name, t.Line, f.hint()))
		case f.exact != nil && f.exact.base():
		case f.exact != nil:
			r.Errors = append(r.Errors, cfg.ErrorAt(key, fmt.Sprintf(
				"%s is a %s, not a table: protect the tables it writes (writes through a view are fenced through the catalog)",
				t.Name, strings.ToLower(f.exact.typ))))
		case f.folded != nil:
			r.Errors = append(r.Errors, cfg.ErrorAt(key, fmt.Sprintf(
				"%s does not exist: the server has %s.%s, and names are case-sensitive there (lower_case_table_names=0); write the name as the server has it",
				t.Name, f.folded.schema, f.folded.name)))
		default:
			hint := f.hint()
			if invisible != "" {
				hint = "" // the nearest name the account sees says nothing
			}
			r.Errors = append(r.Errors, cfg.ErrorAt(key, fmt.Sprintf(
				"%s does not exist%s%s; fix the name, or declare the entry created_later: true if a migration creates it after the proxy starts",
				t.Name, invisible, hint)))
		}
		if f.exact == nil {
			if t.Template != nil && t.CreatedLater {
				r.Errors = append(r.Errors, cfg.ErrorAt(fmt.Sprintf("tables[%d].lease", i), fmt.Sprintf(
					"%s has a lease template and does not exist yet: the template's columns are checked at start, "+
						"so create the table before the proxy starts (or use a fixed lease until then)", t.Name)))
			}
			continue // the lease table is looked for once the table is right
		}
		if t.Template != nil {
			errs, err := checkTemplate(ctx, db, cfg, i, f.exact)
			if err != nil {
				return nil, err
			}
			r.Errors = append(r.Errors, errs...)
		}
		// The lease table of this table's schema, once per schema.
		ls, ln := lease.TableFor(cfg.Fencing.LeaseTable, t.Schema)
		if t.CreatedLater || leaseChecked[strings.ToLower(ls+"."+ln)] {
			continue
		}
		leaseChecked[strings.ToLower(ls+"."+ln)] = true
		if lf := find(objects, schemas, ls, ln, lctn); lf.exact == nil || !lf.exact.base() {
			if lf.folded != nil {
				continue // a case mismatch of the schema is reported at the table
			}
			lkey := "fencing.lease_table"
			if !strings.Contains(cfg.Fencing.LeaseTable, ".") {
				lkey = key
			}
			r.Errors = append(r.Errors, cfg.ErrorAt(lkey, fmt.Sprintf(
				"the lease table %s.%s (for %s) does not exist%s: create it with `fenceproxy init --table %s.%s` (every fenced write to %s fails without it)",
				ls, ln, t.Name, invisible, ls, ln, t.Name)))
			continue
		}
		// Its definition: the fence's comparisons are only as good as the
		// columns' types. A DATETIME leased_until follows SET time_zone (an
		// expired lease reads as held in a session a few hours west), a
		// case-insensitive lease_name folds names together, and a server
		// with --sysdate-is-now lets SET timestamp move SYSDATE().
		if err := lease.CheckSchema(ctx, db, ls+"."+ln); err != nil {
			if !errors.Is(err, lease.ErrSchema) {
				return nil, err
			}
			lkey := "fencing.lease_table"
			if !strings.Contains(cfg.Fencing.LeaseTable, ".") {
				lkey = key
			}
			r.Errors = append(r.Errors, cfg.ErrorAt(lkey, fmt.Sprintf(
				"the lease table %s.%s (for %s) cannot fence: %s",
				ls, ln, t.Name, strings.TrimPrefix(err.Error(), lease.ErrSchema.Error()+": "))))
		}
	}
	return r, nil
}

type object struct{ schema, name, typ string }

func (o *object) base() bool { return strings.EqualFold(o.typ, "BASE TABLE") }

// found is what the server has for a configured schema.table.
type found struct {
	exact   *object // the same name (ignoring case where the server folds it)
	folded  *object // the same name ignoring case, on a case-sensitive server
	closest string  // the nearest existing name, for a typo
}

func (f found) hint() string {
	if f.closest == "" {
		return ""
	}
	return " (closest existing name: " + f.closest + ")"
}

// find looks schema.table up. lower_case_table_names 1 and 2 compare
// names ignoring case; 0 compares them exactly (Linux's default).
func find(objects map[string][]object, schemas []string, schema, table string, lctn int) found {
	var f found
	list := objects[strings.ToLower(schema)]
	for i := range list {
		o := &list[i]
		if !strings.EqualFold(o.name, table) || !strings.EqualFold(o.schema, schema) {
			continue
		}
		if lctn != 0 || o.schema == schema && o.name == table {
			f.exact = o
			return f
		}
		f.folded = o
	}
	if f.folded != nil {
		return f
	}
	// A typo: the nearest table of the schema; or, when the schema itself
	// is not there, the nearest schema (with the table if it has one).
	var names []string
	for _, o := range list {
		if o.schema == schema || lctn != 0 {
			names = append(names, o.schema+"."+o.name)
		}
	}
	if len(names) == 0 {
		if s := closest(schema, schemas); s != "" {
			f.closest = s + "." + table + " (schema " + schema + " does not exist)"
			if s == schema || strings.EqualFold(s, schema) {
				f.closest = "schema " + s + " exists, but has no table like it"
			}
		}
		return f
	}
	f.closest = closest(schema+"."+table, names)
	return f
}

// closest returns the candidate at the smallest edit distance from s
// (ignoring case; ties: the first in sorted order), or "".
func closest(s string, candidates []string) string {
	sort.Strings(candidates)
	best, bestD := "", -1
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(s), strings.ToLower(c)); bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, by bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// granteeOf turns CURRENT_USER()'s user@host into 'user'@'host'.
func granteeOf(account string) string {
	i := strings.LastIndexByte(account, '@')
	if i < 0 {
		return "'" + account + "'"
	}
	return "'" + account[:i] + "'@'" + account[i+1:] + "'"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func stringColumn(ctx context.Context, db *sql.DB, q string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// EngineMismatch says why backend.engine (configured, not auto) does not
// fit the server (eng and version as lease.DetectEngine reads them), ""
// when it does. The setting picks the fence's shape and the grammar
// statements are read with: mariadb or mysql in front of a Galera node
// fences with a share lock that a takeover on another node does not wait
// for (stale writes commit: TestGaleraFenceShapesRace's exists_share_lock
// control), and a grammar or a TiDB shape of another server misreads it.
// galera is safe in front of any InnoDB server (the write-counter shape),
// so it is accepted on MariaDB and MySQL.
func EngineMismatch(configured string, eng lease.Engine, version string) string {
	v := strings.ToLower(version)
	isMariaDB := strings.Contains(v, "mariadb")
	server := "MySQL " + version
	switch {
	case eng == lease.TiDB:
		server = "TiDB (" + version + ")"
	case eng == lease.Galera:
		server = "a Galera node (wsrep_on is ON, " + version + ")"
	case isMariaDB:
		server = "MariaDB " + version
	}
	fix := "; set backend.engine to auto (or to what the server is)"
	switch configured {
	case policy.EngineMariaDB, policy.EngineMySQL:
		switch {
		case eng == lease.Galera:
			return configured + ", but the server is " + server + ": the " + configured + " fence takes a share lock that a takeover " +
				"on another node does not wait for, so stale writes commit; set backend.engine to galera (or auto)"
		case eng == lease.TiDB, configured == policy.EngineMariaDB && !isMariaDB, configured == policy.EngineMySQL && isMariaDB:
			return configured + ", but the server is " + server + ": statements would be read with another server's grammar " +
				"and fenced in another engine's shape" + fix
		}
	case policy.EngineGalera:
		if eng == lease.TiDB {
			return "galera, but the server is " + server + ": its fence is not TiDB's" + fix
		}
	case policy.EngineTiDB:
		if eng != lease.TiDB {
			return "tidb, but the server is " + server + ": statements would be read with TiDB's grammar and fenced in TiDB's shape" + fix
		}
	}
	return ""
}
