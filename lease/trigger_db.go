package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// The database side of guard triggers: which engine the server is, the
// lease table's partition, reading a table's triggers, installing and
// removing guards. Used by fenceproxy init, serve's start-up check and
// doctor.

// queryer is what the readers need of a *sql.DB or *sql.Conn.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// DetectEngine says which engine family the server behind q is: TiDB
// (VERSION() names it), Galera (@@wsrep_on is ON), or InnoDB (MariaDB,
// MySQL). A server without @@wsrep_on (MySQL) is InnoDB.
func DetectEngine(ctx context.Context, q queryer) (Engine, string, error) {
	var version string
	if err := q.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return InnoDB, "", fmt.Errorf("lease: reading the server version: %w", err)
	}
	if strings.Contains(strings.ToLower(version), "tidb") {
		return TiDB, version, nil
	}
	var on sql.NullString
	err := q.QueryRowContext(ctx, "SELECT @@wsrep_on").Scan(&on)
	var me *mysql.MySQLError
	switch {
	case err == nil && (on.String == "1" || strings.EqualFold(on.String, "ON")):
		return Galera, version, nil
	case err == nil, errors.As(err, &me) && me.Number == 1193:
		return InnoDB, version, nil
	}
	return InnoDB, version, fmt.Errorf("lease: reading @@wsrep_on: %w", err)
}

// ReadTriggers reads the triggers of schema.table.
func ReadTriggers(ctx context.Context, q queryer, schema, table string) ([]InstalledTrigger, error) {
	rows, err := q.QueryContext(ctx, `SELECT TRIGGER_NAME, EVENT_MANIPULATION, ACTION_TIMING, ACTION_ORDER,
  COALESCE(ACTION_STATEMENT, ''), SQL_MODE FROM information_schema.TRIGGERS
  WHERE EVENT_OBJECT_SCHEMA = ? AND EVENT_OBJECT_TABLE = ? ORDER BY ACTION_TIMING, EVENT_MANIPULATION, ACTION_ORDER`, schema, table)
	if err != nil {
		return nil, fmt.Errorf("lease: reading the triggers of %s.%s: %w", schema, table, err)
	}
	defer rows.Close()
	var out []InstalledTrigger
	for rows.Next() {
		var t InstalledTrigger
		if err := rows.Scan(&t.Name, &t.Event, &t.Timing, &t.Order, &t.Body, &t.SQLMode); err != nil {
			return nil, fmt.Errorf("lease: reading the triggers of %s.%s: %w", schema, table, err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lease: reading the triggers of %s.%s: %w", schema, table, err)
	}
	return out, nil
}

// BaseTableExists tells whether schema.table exists as a base table (not
// a view): a protected table declared created_later may not yet, and has
// no guards to check or install until it does.
func BaseTableExists(ctx context.Context, q queryer, schema, table string) (bool, error) {
	var n int
	if err := q.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND TABLE_TYPE = 'BASE TABLE'",
		schema, table).Scan(&n); err != nil {
		return false, fmt.Errorf("lease: reading whether %s.%s exists: %w", schema, table, err)
	}
	return n > 0, nil
}

// GuardPartitionProblem says why the lease table schema.table cannot serve
// guard triggers ("" when it can): they read it as PARTITION (p0), which it
// must have as its only partition.
func GuardPartitionProblem(ctx context.Context, q queryer, schema, table string) (string, error) {
	rows, err := q.QueryContext(ctx, "SELECT COALESCE(PARTITION_NAME, '') FROM information_schema.PARTITIONS "+
		"WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", schema, table)
	if err != nil {
		return "", fmt.Errorf("lease: reading the partitions of %s.%s: %w", schema, table, err)
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return "", err
		}
		parts = append(parts, p)
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	switch {
	case len(parts) == 0:
		return "the lease table " + schema + "." + table + " does not exist", nil
	case len(parts) == 1 && parts[0] == "":
		return "the lease table " + schema + "." + table + " is not partitioned (guard triggers read it as PARTITION (" +
			GuardPartition + "), which a temporary table cannot fake)", nil
	case len(parts) == 1 && strings.EqualFold(parts[0], GuardPartition):
		return "", nil
	}
	return fmt.Sprintf("the lease table %s.%s has partitions %s: guard triggers read only PARTITION (%s), which must be its only one",
		schema, table, strings.Join(parts, ", "), GuardPartition), nil
}

// PartitionForGuards gives the lease table schema.table its one partition
// p0 if it has none (ALTER TABLE ... PARTITION BY KEY (lease_name)
// PARTITIONS 1: a copy of the table, which blocks lease changes while it
// runs). A table partitioned otherwise is an error.
func PartitionForGuards(ctx context.Context, c *sql.Conn, schema, table string) (bool, error) {
	problem, err := GuardPartitionProblem(ctx, c, schema, table)
	if err != nil || problem == "" {
		return false, err
	}
	var parts int
	if err := c.QueryRowContext(ctx, "SELECT COUNT(PARTITION_NAME) FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
		schema, table).Scan(&parts); err != nil {
		return false, err
	}
	if parts > 0 {
		return false, fmt.Errorf("%w: %s; repartition it: ALTER TABLE %s PARTITION BY KEY (lease_name) PARTITIONS 1",
			ErrSchema, problem, quoteIdent(schema)+"."+quoteIdent(table))
	}
	if _, err := c.ExecContext(ctx, "ALTER TABLE "+quoteIdent(schema)+"."+quoteIdent(table)+" PARTITION BY KEY (lease_name) PARTITIONS 1"); err != nil {
		return false, fmt.Errorf("lease: partitioning %s.%s for guard triggers: %w", schema, table, err)
	}
	return true, nil
}

// InstallResult is what InstallGuardTriggers did to one table.
type InstallResult struct {
	Table   string   // schema.table
	Created []string // triggers created
	Dropped []string // older guard triggers dropped
}

// guardSession sets the session settings guard triggers are created under
// (a trigger keeps its sql_mode and character set).
func guardSession(ctx context.Context, c *sql.Conn) error {
	for _, q := range []string{"SET SESSION sql_mode = '" + GuardSQLMode + "'", "SET NAMES utf8mb4"} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("lease: %s: %w", q, err)
		}
	}
	return nil
}

// InstallGuardTriggers makes spec's table have its current guard triggers,
// each the first BEFORE trigger of its event: a missing one is created, an
// outdated one (another version, another config) or one that another
// trigger precedes is replaced, the new trigger created before the old is
// dropped, so that no write finds the table unguarded. The user's own
// triggers are left alone. Idempotent. The lease table must be partitioned
// (PartitionForGuards). c's sql_mode and character set are changed.
func InstallGuardTriggers(ctx context.Context, c *sql.Conn, spec TriggerSpec) (InstallResult, error) {
	res := InstallResult{Table: spec.Schema + "." + spec.Table}
	want, err := GuardTriggers(spec)
	if err != nil {
		return res, err
	}
	if err := guardSession(ctx, c); err != nil {
		return res, err
	}
	for _, g := range want {
		have, err := ReadTriggers(ctx, c, spec.Schema, spec.Table)
		if err != nil {
			return res, err
		}
		st := CheckGuardTriggers([]GuardTrigger{g}, have)[0]
		if st.Current != "" && st.First && len(st.Outdated) == 0 {
			continue
		}
		old := st.Outdated
		if st.Current == "" || !st.First {
			if st.Current != "" {
				old = append(old, st.Current)
			}
			first := firstBefore(have, g.Event)
			taken := map[string]bool{}
			for _, t := range have {
				taken[strings.ToLower(t.Name)] = true
			}
			for salt := 1; taken[strings.ToLower(g.Name)]; salt++ {
				g.Name = guardName(g.Table, shortOf(g.Event), g.Body, salt)
			}
			if _, err := c.ExecContext(ctx, g.CreateSQL(first)); err != nil {
				return res, fmt.Errorf("lease: creating guard trigger %s on %s: %w", g.Name, res.Table, err)
			}
			res.Created = append(res.Created, g.Name)
		}
		for _, name := range old {
			if _, err := c.ExecContext(ctx, "DROP TRIGGER IF EXISTS "+quoteIdent(spec.Schema)+"."+quoteIdent(name)); err != nil {
				return res, fmt.Errorf("lease: dropping outdated guard trigger %s on %s: %w", name, res.Table, err)
			}
			res.Dropped = append(res.Dropped, name)
		}
	}
	return res, nil
}

// firstBefore is the first BEFORE trigger of event, or "".
func firstBefore(have []InstalledTrigger, event string) string {
	name, order := "", 0
	for _, t := range have {
		if strings.EqualFold(t.Event, event) && strings.EqualFold(t.Timing, "BEFORE") && (name == "" || t.Order < order) {
			name, order = t.Name, t.Order
		}
	}
	return name
}

func shortOf(event string) string {
	for _, ev := range guardEvents {
		if ev.event == event {
			return ev.short
		}
	}
	return strings.ToLower(event)
}

// RemoveGuardTriggers drops every guard trigger of schema.table (the
// user's own triggers stay), and returns their names.
func RemoveGuardTriggers(ctx context.Context, c *sql.Conn, schema, table string) ([]string, error) {
	have, err := ReadTriggers(ctx, c, schema, table)
	if err != nil {
		return nil, err
	}
	var dropped []string
	for _, t := range have {
		if !IsGuardName(t.Name) {
			continue
		}
		if _, err := c.ExecContext(ctx, "DROP TRIGGER IF EXISTS "+quoteIdent(schema)+"."+quoteIdent(t.Name)); err != nil {
			return dropped, fmt.Errorf("lease: dropping guard trigger %s on %s.%s: %w", t.Name, schema, table, err)
		}
		dropped = append(dropped, t.Name)
	}
	return dropped, nil
}
