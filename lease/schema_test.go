package lease_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/lease"
)

func TestCreateSchemaIsIdempotent(t *testing.T) {
	e := newEnv(t) // created once already
	l := mustAcquire(t, e.store, "survives", long)
	for i := 0; i < 2; i++ {
		if err := lease.CreateSchema(ctxT(t), e.app, ""); err != nil {
			t.Fatalf("CreateSchema again: %v", err)
		}
	}
	if st := mustGet(t, e.store, "survives"); st.Token != l.Token || !st.Held {
		t.Fatalf("row after CreateSchema: %+v", st)
	}
	// The audit table has the contract's fields.
	var cols string
	if err := e.root.QueryRowContext(ctxT(t), `SELECT GROUP_CONCAT(COLUMN_NAME ORDER BY ORDINAL_POSITION)
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`, lease.AuditTable).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	if want := auditColumns; cols != want {
		t.Fatalf("audit columns %s, want %s", cols, want)
	}
	// Both tables are utf8mb4_bin.
	var n int
	if err := e.root.QueryRowContext(ctxT(t), `SELECT COUNT(*) FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (?, ?) AND TABLE_COLLATION = 'utf8mb4_bin'`,
		lease.DefaultTable, lease.AuditTable).Scan(&n); err != nil || n != 2 {
		t.Fatalf("utf8mb4_bin tables: %d, %v", n, err)
	}
}

// auditColumns are the audit table's columns: the contract's fields, then
// outcome, detail and where the statement came from.
const auditColumns = "id,time,reason,mode,lease,table_name,presented_owner,presented_token,current_token,client,user,schema_name,digest," +
	"outcome,detail,instance,conn_id,backend_conn_id,client_host,program_name"

// TestCreateSchemaMigratesAnOldAuditTable: an audit table made by an older
// init (the first definition) gets the new columns, keeps its rows, and a
// second run changes nothing.
func TestCreateSchemaMigratesAnOldAuditTable(t *testing.T) {
	for _, asMySQL := range []bool{false, true} {
		name := "ADD COLUMN IF NOT EXISTS (MariaDB)"
		if asMySQL {
			name = "information_schema first (MySQL's path)"
		}
		t.Run(name, func(t *testing.T) {
			lease.SetMigrateAsMySQL(t, asMySQL)
			testMigration(t)
		})
	}
}

func testMigration(t *testing.T) {
	e := newEnv(t)
	for _, q := range []string{
		"DROP TABLE " + lease.AuditTable,
		"CREATE TABLE " + lease.AuditTable + ` (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  time TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  reason VARCHAR(32) NOT NULL, mode VARCHAR(16) NOT NULL, lease VARCHAR(191) NULL,
  table_name VARCHAR(129) NOT NULL, presented_owner VARCHAR(64) NULL,
  presented_token BIGINT UNSIGNED NULL, current_token BIGINT UNSIGNED NULL,
  client VARCHAR(255) NOT NULL DEFAULT '', user VARCHAR(255) NOT NULL DEFAULT '',
  schema_name VARCHAR(64) NOT NULL DEFAULT '', digest TEXT NULL,
  KEY time (time), KEY lease_time (lease, time)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		"INSERT INTO " + lease.AuditTable + " (reason, mode, table_name) VALUES ('stale_token', 'enforce', 'app.t')",
	} {
		if _, err := e.root.ExecContext(ctxT(t), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for i := 0; i < 2; i++ {
		if err := lease.CreateSchema(ctxT(t), e.app, ""); err != nil {
			t.Fatalf("CreateSchema run %d: %v", i+1, err)
		}
		var cols string
		var rows int
		if err := e.root.QueryRowContext(ctxT(t), `SELECT GROUP_CONCAT(COLUMN_NAME ORDER BY ORDINAL_POSITION)
			FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`, lease.AuditTable).Scan(&cols); err != nil {
			t.Fatal(err)
		}
		if cols != auditColumns {
			t.Fatalf("run %d: audit columns %s, want %s", i+1, cols, auditColumns)
		}
		if err := e.root.QueryRowContext(ctxT(t), "SELECT COUNT(*) FROM "+lease.AuditTable+" WHERE reason = 'stale_token' AND outcome = '' AND conn_id = 0").Scan(&rows); err != nil || rows != 1 {
			t.Fatalf("run %d: the old row: %d, %v", i+1, rows, err)
		}
	}
}

func TestCreateSchemaQualifiedAndNamed(t *testing.T) {
	e := newEnv(t)
	table := e.db + ".other_leases"
	if err := lease.CreateSchema(ctxT(t), e.app, table); err != nil {
		t.Fatal(err)
	}
	s, err := lease.NewStore(e.app, table)
	if err != nil {
		t.Fatal(err)
	}
	if l := mustAcquire(t, s, "x", long); l.Token != 1 {
		t.Fatal(l)
	}
	if _, err := e.store.Get(ctxT(t), "x"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("the default table saw the other table's lease: %v", err)
	}
}

func TestCheckSchemaRefusesUnsafeTables(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name, ddl string
		want      []string
	}{
		{"latin1 case-insensitive", `CREATE TABLE t (
			lease_name VARCHAR(191) NOT NULL PRIMARY KEY, owner_token VARBINARY(64) NOT NULL,
			fence_token BIGINT UNSIGNED NOT NULL, leased_until TIMESTAMP(3) NOT NULL
		) ENGINE=InnoDB DEFAULT CHARSET=latin1`, []string{"utf8mb4/utf8mb4_bin"}},
		{"general_ci", `CREATE TABLE t (
			lease_name VARCHAR(191) NOT NULL PRIMARY KEY, owner_token VARBINARY(64) NOT NULL,
			fence_token BIGINT UNSIGNED NOT NULL, leased_until TIMESTAMP(3) NOT NULL
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci`, []string{"utf8mb4_general_ci"}},
		{"character owner, datetime", `CREATE TABLE t (
			lease_name VARCHAR(191) NOT NULL PRIMARY KEY, owner_token VARCHAR(64) NOT NULL,
			fence_token BIGINT NOT NULL, leased_until DATETIME(3) NOT NULL
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`, []string{"owner_token is varchar(64)", "fence_token is bigint", "leased_until is datetime(3)"}},
		{"auto-updating timestamp", `CREATE TABLE t (
			lease_name VARCHAR(191) NOT NULL PRIMARY KEY, owner_token VARBINARY(64) NOT NULL,
			fence_token BIGINT UNSIGNED NOT NULL,
			leased_until TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3)
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`, []string{"on update"}},
		{"no primary key, MyISAM", `CREATE TABLE t (
			lease_name VARCHAR(191) NOT NULL, owner_token VARBINARY(64) NOT NULL,
			fence_token BIGINT UNSIGNED NOT NULL, leased_until TIMESTAMP(3) NOT NULL
		) ENGINE=MyISAM DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`, []string{"primary key", "InnoDB"}},
		{"missing column", `CREATE TABLE t (lease_name VARCHAR(191) NOT NULL PRIMARY KEY) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
			[]string{"owner_token is missing"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.root.ExecContext(ctxT(t), "DROP TABLE IF EXISTS t"); err != nil {
				t.Fatal(err)
			}
			if _, err := e.root.ExecContext(ctxT(t), tc.ddl); err != nil {
				t.Fatal(err)
			}
			err := lease.CreateSchema(ctxT(t), e.app, "t")
			if !errors.Is(err, lease.ErrSchema) {
				t.Fatalf("CreateSchema over %s: %v, want ErrSchema", tc.name, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if err := lease.CheckSchema(ctxT(t), e.app, "nope"); !errors.Is(err, lease.ErrSchema) {
		t.Fatalf("missing table: %v", err)
	}
	if err := lease.CheckSchema(ctxT(t), e.app, ""); err != nil {
		t.Fatalf("the created table: %v", err)
	}
}

// A lease table made before the write counter existed gets it from
// CreateSchema (fenceproxy init), with its rows and leases intact.
func TestCreateSchemaAddsTheWriteCounter(t *testing.T) {
	e := newEnv(t)
	if _, err := e.root.ExecContext(ctxT(t), `CREATE TABLE old_leases (
		lease_name VARCHAR(191) NOT NULL PRIMARY KEY, owner_token VARBINARY(64) NOT NULL,
		fence_token BIGINT UNSIGNED NOT NULL, leased_until TIMESTAMP(3) NOT NULL
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`); err != nil {
		t.Fatal(err)
	}
	old, err := lease.NewStore(e.app, "old_leases")
	if err != nil {
		t.Fatal(err)
	}
	l := mustAcquire(t, old, "before", long)
	if err := lease.CheckSchema(ctxT(t), e.app, "old_leases"); err != nil {
		t.Fatalf("a table without %s is valid (single-server engines do not need it): %v", lease.WriteCounter, err)
	}
	for i := 0; i < 2; i++ { // idempotent
		if err := lease.CreateSchema(ctxT(t), e.app, "old_leases"); err != nil {
			t.Fatalf("CreateSchema over the old table: %v", err)
		}
	}
	var colType, nullable, def string
	if err := e.root.QueryRowContext(ctxT(t), `SELECT COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'old_leases' AND COLUMN_NAME = ?`, lease.WriteCounter).Scan(&colType, &nullable, &def); err != nil {
		t.Fatalf("%s after CreateSchema: %v", lease.WriteCounter, err)
	}
	if colType != "bigint(20) unsigned" && colType != "bigint unsigned" || nullable != "NO" || def != "0" {
		t.Errorf("%s is %s nullable=%s default=%s", lease.WriteCounter, colType, nullable, def)
	}
	var writes int
	if err := e.root.QueryRowContext(ctxT(t), "SELECT fence_writes FROM old_leases WHERE lease_name = 'before'").Scan(&writes); err != nil || writes != 0 {
		t.Fatalf("existing row's counter: %d, %v", writes, err)
	}
	// The lease taken before the migration is still held and usable.
	if st := mustGet(t, old, "before"); !st.Held || st.Token != l.Token || st.Owner != l.Owner {
		t.Fatalf("lease after the migration: %+v", st)
	}
	if _, err := old.Renew(ctxT(t), l, long); err != nil {
		t.Fatalf("Renew after the migration: %v", err)
	}
	if err := old.Release(ctxT(t), l); err != nil {
		t.Fatalf("Release after the migration: %v", err)
	}
	if l2 := mustAcquire(t, old, "before", long); l2.Token != l.Token+1 {
		t.Fatalf("re-acquired at token %d, want %d", l2.Token, l.Token+1)
	}
	if l3 := mustAcquire(t, old, "new", long); l3.Token != 1 {
		t.Fatalf("new lease at token %d", l3.Token)
	}
}

func TestCheckSchemaRefusesABadWriteCounter(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ name, col string }{
		{"nullable", "fence_writes BIGINT UNSIGNED NULL"},
		{"signed", "fence_writes BIGINT NOT NULL DEFAULT 0"},
		{"no default", "fence_writes BIGINT UNSIGNED NOT NULL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.root.ExecContext(ctxT(t), "DROP TABLE IF EXISTS t"); err != nil {
				t.Fatal(err)
			}
			if _, err := e.root.ExecContext(ctxT(t), `CREATE TABLE t (
				lease_name VARCHAR(191) NOT NULL PRIMARY KEY, owner_token VARBINARY(64) NOT NULL,
				fence_token BIGINT UNSIGNED NOT NULL, leased_until TIMESTAMP(3) NOT NULL, `+tc.col+`
			) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`); err != nil {
				t.Fatal(err)
			}
			err := lease.CheckSchema(ctxT(t), e.app, "t")
			if !errors.Is(err, lease.ErrSchema) || !strings.Contains(err.Error(), lease.WriteCounter) {
				t.Fatalf("CheckSchema with %s: %v, want ErrSchema naming %s", tc.col, err, lease.WriteCounter)
			}
		})
	}
}
