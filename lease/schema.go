package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// AuditTable is the name of the audit table CreateSchema creates next to the
// lease table (same schema). The proxy's audit writer fills it.
const AuditTable = "fenced_audit"

// WriteCounter is the lease table's write-counter column. On MariaDB Galera
// every fenced write bumps it in its own transaction (the proxy's guard:
// UPDATE lease SET fence_writes = fence_writes + 1 WHERE <fence>): a row
// lock taken by a read is local to a node and not certified, a change to
// the lease row is, so certification orders the write against a takeover
// on any node. Single-server engines do not use it; it is in every table
// CreateSchema makes so that one schema serves both.
const WriteCounter = "fence_writes"

// ErrSchema is wrapped by the errors that report an existing table whose
// definition does not match what the lease operations rely on.
var ErrSchema = errors.New("lease: table definition does not match")

// SchemaSQL returns the CREATE TABLE IF NOT EXISTS statements of the lease
// table (the contract's DDL) and of the audit table (AuditTable, in the lease
// table's schema).
//
// Both tables are utf8mb4 with the utf8mb4_bin collation. The proxy's fence
// compares lease_name with a session variable (@fence_lease); a latin1 column
// or a collation other than the variable's dominant one turns that
// primary-key lookup into an index scan that share-locks every lease row
// (measured on MariaDB 10.11 with EXPLAIN); utf8mb4_bin wins against every
// utf8mb4/utf8mb3 collation the variable can have, so the lookup stays a
// primary-key lookup whatever the client's character set.
func SchemaSQL(table string) ([]string, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := ValidateTable(table); err != nil {
		return nil, err
	}
	return []string{
		"CREATE TABLE IF NOT EXISTS " + quoteTable(table) + ` (
  lease_name   VARCHAR(191)    NOT NULL PRIMARY KEY,
  owner_token  VARBINARY(64)   NOT NULL,
  fence_token  BIGINT UNSIGNED NOT NULL,
  leased_until TIMESTAMP(3)    NOT NULL,
  fence_writes BIGINT UNSIGNED NOT NULL DEFAULT 0
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		"CREATE TABLE IF NOT EXISTS " + quoteTable(siblingTable(table, AuditTable)) + ` (
  ` + "`id`" + `              BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  ` + "`time`" + `            TIMESTAMP(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  ` + "`reason`" + `          VARCHAR(32)     NOT NULL,
  ` + "`mode`" + `            VARCHAR(16)     NOT NULL,
  ` + "`lease`" + `           VARCHAR(191)    NULL,
  ` + "`table_name`" + `      VARCHAR(129)    NOT NULL,
  ` + "`presented_owner`" + ` VARCHAR(64)     NULL,
  ` + "`presented_token`" + ` BIGINT UNSIGNED NULL,
  ` + "`current_token`" + `   BIGINT UNSIGNED NULL,
  ` + "`client`" + `          VARCHAR(255)    NOT NULL DEFAULT '',
  ` + "`user`" + `            VARCHAR(255)    NOT NULL DEFAULT '',
  ` + "`schema_name`" + `     VARCHAR(64)     NOT NULL DEFAULT '',
  ` + "`digest`" + `          TEXT            NULL,
  ` + auditAddedColumns + `,
  KEY ` + "`time`" + ` (` + "`time`" + `),
  KEY ` + "`lease_time`" + ` (` + "`lease`" + `, ` + "`time`" + `)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	}, nil
}

// auditColumnsAdded are the audit table's columns added after its first
// definition: CreateSchema adds them to an existing table.
var auditColumnsAdded = []struct{ name, def string }{
	{"outcome", "VARCHAR(16) NOT NULL DEFAULT ''"},
	{"detail", "TEXT NULL"},
	{"instance", "VARCHAR(255) NOT NULL DEFAULT ''"},
	{"conn_id", "BIGINT UNSIGNED NOT NULL DEFAULT 0"},
	{"backend_conn_id", "INT UNSIGNED NOT NULL DEFAULT 0"},
	{"client_host", "VARCHAR(255) NOT NULL DEFAULT ''"},
	{"program_name", "VARCHAR(255) NOT NULL DEFAULT ''"},
}

var auditAddedColumns = func() string {
	parts := make([]string, len(auditColumnsAdded))
	for i, c := range auditColumnsAdded {
		parts[i] = fmt.Sprintf("%-19s %s", "`"+c.name+"`", c.def)
	}
	return strings.Join(parts, ",\n  ")
}()

// migrateAsMySQL makes tests take MySQL's path on MariaDB.
var migrateAsMySQL bool

// migrateAudit adds the columns an audit table created by an older init
// lacks. MariaDB has ADD COLUMN IF NOT EXISTS (safe against a concurrent
// init); MySQL 8 does not, so its columns are looked up first.
func migrateAudit(ctx context.Context, c *sql.Conn, table string) error {
	schema, name, err := splitTable(ctx, c, siblingTable(table, AuditTable))
	if err != nil {
		return err
	}
	var version string
	if err := c.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return fmt.Errorf("lease: migrating the audit table: %w", err)
	}
	have := map[string]bool{}
	mariadb := strings.Contains(strings.ToLower(version), "mariadb") && !migrateAsMySQL
	if !mariadb {
		rows, err := c.QueryContext(ctx, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", schema, name)
		if err != nil {
			return fmt.Errorf("lease: migrating the audit table: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var col string
			if err := rows.Scan(&col); err != nil {
				return fmt.Errorf("lease: migrating the audit table: %w", err)
			}
			have[strings.ToLower(col)] = true
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("lease: migrating the audit table: %w", err)
		}
	}
	var adds []string
	for _, col := range auditColumnsAdded {
		switch {
		case mariadb:
			adds = append(adds, "ADD COLUMN IF NOT EXISTS `"+col.name+"` "+col.def)
		case !have[col.name]:
			adds = append(adds, "ADD COLUMN `"+col.name+"` "+col.def)
		}
	}
	if len(adds) == 0 {
		return nil
	}
	q := "ALTER TABLE " + quoteTable(schema+"."+name) + " " + strings.Join(adds, ", ")
	_, err = c.ExecContext(ctx, q)
	// On MySQL two inits racing may both ALTER: the loser's duplicate
	// column (1060) means the columns are there.
	var me *mysql.MySQLError
	if err != nil && !(errors.As(err, &me) && me.Number == 1060) {
		return fmt.Errorf("lease: migrating the audit table %s.%s: %w", schema, name, err)
	}
	return nil
}

// CreateSchema creates the lease table table (empty: DefaultTable) and the
// audit table if they do not exist, checks the lease table's definition
// with CheckSchema (an existing table created otherwise: a latin1 column, a
// case-insensitive collation, DATETIME instead of TIMESTAMP, an
// auto-updating timestamp, is reported, not silently used), then adds the
// WriteCounter column to a lease table that predates it (one ALTER TABLE;
// existing rows get 0) and the columns an older audit table lacks.
// Idempotent.
func CreateSchema(ctx context.Context, db *sql.DB, table string) error {
	if table == "" {
		table = DefaultTable
	}
	stmts, err := SchemaSQL(table)
	if err != nil {
		return err
	}
	c, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	defer c.Close()
	// With explicit_defaults_for_timestamp off (MySQL 5.7, MariaDB < 10.10)
	// the first TIMESTAMP NOT NULL column silently becomes DEFAULT
	// CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP. Turn it on for this
	// session where allowed; CheckSchema catches the rest.
	var explicit sql.NullString
	if err := c.QueryRowContext(ctx, "SELECT @@SESSION.explicit_defaults_for_timestamp").Scan(&explicit); err == nil &&
		explicit.Valid && (explicit.String == "0" || strings.EqualFold(explicit.String, "OFF")) {
		if _, err := c.ExecContext(ctx, "SET SESSION explicit_defaults_for_timestamp = 1"); err == nil {
			defer c.ExecContext(context.WithoutCancel(ctx), "SET SESSION explicit_defaults_for_timestamp = 0")
		}
	}
	for _, s := range stmts {
		if _, err := c.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("lease: creating schema: %w", err)
		}
	}
	// Checked first: a table refused for another reason is left as it was.
	if err := checkSchema(ctx, c, table); err != nil {
		return err
	}
	if err := addWriteCounter(ctx, c, table); err != nil {
		return err
	}
	return migrateAudit(ctx, c, table)
}

// addWriteCounter adds WriteCounter to a lease table without it. The check
// goes through information_schema because MySQL has no ADD COLUMN IF NOT
// EXISTS; two inits racing may both ALTER, and the loser's duplicate-column
// error (1060) means the column is there.
func addWriteCounter(ctx context.Context, c *sql.Conn, table string) error {
	schema, name, err := splitTable(ctx, c, table)
	if err != nil {
		return err
	}
	var n int
	if err := c.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME = ?",
		schema, name, WriteCounter).Scan(&n); err != nil {
		return fmt.Errorf("lease: checking schema: %w", err)
	}
	if n > 0 {
		return nil
	}
	_, err = c.ExecContext(ctx, "ALTER TABLE "+quoteTable(schema+"."+name)+" ADD COLUMN "+WriteCounter+" BIGINT UNSIGNED NOT NULL DEFAULT 0")
	var me *mysql.MySQLError
	if err != nil && !(errors.As(err, &me) && me.Number == 1060) {
		return fmt.Errorf("lease: adding %s to %s.%s: %w", WriteCounter, schema, name, err)
	}
	return nil
}

// splitTable qualifies table with the connection's database if needed.
func splitTable(ctx context.Context, c *sql.Conn, table string) (schema, name string, err error) {
	schema, name, qualified := strings.Cut(table, ".")
	if qualified {
		return schema, name, nil
	}
	var cur sql.NullString
	if err := c.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&cur); err != nil {
		return "", "", fmt.Errorf("lease: checking schema: %w", err)
	}
	if !cur.Valid {
		return "", "", fmt.Errorf("lease: table %s is unqualified and the connection has no default database", table)
	}
	return cur.String, table, nil
}

// CheckSchema verifies that the lease table exists and has the definition
// the lease operations and the proxy's fence rely on: lease_name VARCHAR(191)
// utf8mb4_bin primary key, owner_token VARBINARY(64), fence_token BIGINT
// UNSIGNED, leased_until TIMESTAMP(3) without ON UPDATE, all NOT NULL,
// InnoDB. Mismatches are reported in one error wrapping ErrSchema.
func CheckSchema(ctx context.Context, db *sql.DB, table string) error {
	if table == "" {
		table = DefaultTable
	}
	if err := ValidateTable(table); err != nil {
		return err
	}
	c, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	defer c.Close()
	return checkSchema(ctx, c, table)
}

func checkSchema(ctx context.Context, c *sql.Conn, table string) error {
	schema, name, err := splitTable(ctx, c, table)
	if err != nil {
		return err
	}
	if err := checkSysdate(ctx, c); err != nil {
		return err
	}
	var engine sql.NullString
	err = c.QueryRowContext(ctx,
		"SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
		schema, name).Scan(&engine)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: table %s.%s does not exist (run fenceproxy init)", ErrSchema, schema, name)
	}
	if err != nil {
		return fmt.Errorf("lease: checking schema: %w", err)
	}
	rows, err := c.QueryContext(ctx, `SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE,
  COALESCE(CHARACTER_MAXIMUM_LENGTH, 0), COALESCE(DATETIME_PRECISION, 0),
  COALESCE(CHARACTER_SET_NAME, ''), COALESCE(COLLATION_NAME, ''), IS_NULLABLE, COLUMN_KEY, EXTRA,
  COLUMN_DEFAULT IS NOT NULL
FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?`, schema, name)
	if err != nil {
		return fmt.Errorf("lease: checking schema: %w", err)
	}
	defer rows.Close()
	type column struct {
		dataType, colType, charset, collation, nullable, key, extra string
		length, precision                                           int64
		hasDefault                                                  bool
	}
	cols := map[string]column{}
	var pk []string
	for rows.Next() {
		var n string
		var col column
		if err := rows.Scan(&n, &col.dataType, &col.colType, &col.length, &col.precision,
			&col.charset, &col.collation, &col.nullable, &col.key, &col.extra, &col.hasDefault); err != nil {
			return fmt.Errorf("lease: checking schema: %w", err)
		}
		n = strings.ToLower(n)
		col.dataType, col.colType = strings.ToLower(col.dataType), strings.ToLower(col.colType)
		col.extra = strings.ToLower(col.extra)
		cols[n] = col
		if col.key == "PRI" {
			pk = append(pk, n)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("lease: checking schema: %w", err)
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if !strings.EqualFold(engine.String, "InnoDB") {
		bad("engine is %s, want InnoDB (row locks are what makes the fence safe)", engine.String)
	}
	want := []string{"lease_name", "owner_token", "fence_token", "leased_until"}
	for _, n := range want {
		col, ok := cols[n]
		if !ok {
			bad("column %s is missing", n)
			continue
		}
		if col.nullable != "NO" {
			bad("%s is nullable, want NOT NULL", n)
		}
		switch n {
		case "lease_name":
			if col.dataType != "varchar" || col.length != 191 {
				bad("lease_name is %s, want varchar(191)", col.colType)
			}
			if col.charset != "utf8mb4" || col.collation != "utf8mb4_bin" {
				bad("lease_name is %s/%s, want utf8mb4/utf8mb4_bin (a case-insensitive or other collation folds distinct names together or turns the fence's lookup into a scan; fix: ALTER TABLE %s CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)",
					col.charset, col.collation, quoteTable(table))
			}
		case "owner_token":
			if col.dataType != "varbinary" || col.length != MaxOwnerBytes {
				bad("owner_token is %s, want varbinary(64) (a character column may compare case- and space-insensitively)", col.colType)
			}
		case "fence_token":
			if col.dataType != "bigint" || !strings.Contains(col.colType, "unsigned") {
				bad("fence_token is %s, want bigint unsigned", col.colType)
			}
		case "leased_until":
			if col.dataType != "timestamp" || col.precision != 3 {
				bad("leased_until is %s, want timestamp(3) (a DATETIME moves with SET time_zone)", col.colType)
			}
			if strings.Contains(col.extra, "on update") {
				bad("leased_until has %q: it must change only when a lease operation sets it (fix, in a session with explicit_defaults_for_timestamp=1: ALTER TABLE %s MODIFY leased_until TIMESTAMP(3) NOT NULL)",
					col.extra, quoteTable(table))
			}
		}
	}
	// Optional (a table from before it works everywhere but on Galera, where
	// the proxy refuses fenced writes until init adds it), but when present
	// the lease INSERT relies on its default and the guard on its type.
	if col, ok := cols[WriteCounter]; ok {
		if col.dataType != "bigint" || !strings.Contains(col.colType, "unsigned") || col.nullable != "NO" || !col.hasDefault {
			bad("%s is %s (nullable %s), want BIGINT UNSIGNED NOT NULL DEFAULT 0", WriteCounter, col.colType, col.nullable)
		}
	}
	if len(pk) != 1 || pk[0] != "lease_name" {
		bad("primary key is %v, want (lease_name)", pk)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s.%s: %s", ErrSchema, schema, name, strings.Join(problems, "; "))
	}
	return nil
}

// checkSysdate verifies that SYSDATE() ignores the session clock. A server
// started with --sysdate-is-now makes SYSDATE() an alias of NOW(), which any
// session moves with SET timestamp: every session could then revive or
// expire leases at will.
func checkSysdate(ctx context.Context, c *sql.Conn) error {
	if _, err := c.ExecContext(ctx, "SET @@SESSION.timestamp = 86400"); err != nil {
		return fmt.Errorf("lease: checking SYSDATE: %w", err)
	}
	var year int
	err := c.QueryRowContext(ctx, "SELECT YEAR(SYSDATE())").Scan(&year)
	if _, rerr := c.ExecContext(context.WithoutCancel(ctx), "SET @@SESSION.timestamp = DEFAULT"); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("lease: checking SYSDATE: %w", err)
	}
	if year <= 1970 {
		return fmt.Errorf("%w: SYSDATE() follows SET timestamp on this server (--sysdate-is-now): any session could move lease expiry; restart the server without it", ErrSchema)
	}
	return nil
}
