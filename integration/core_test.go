package integration

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// outcome is what a client observes of one statement.
type outcome struct {
	Err          string
	Columns      []string
	Rows         [][]string
	AffectedRows int64
	LastInsertID int64
}

func runQuery(db *sql.DB, q string, args ...any) outcome {
	var o outcome
	rows, err := db.Query(q, args...)
	if err != nil {
		o.Err = err.Error()
		return o
	}
	defer rows.Close()
	for {
		cols, _ := rows.Columns()
		o.Columns = append(o.Columns, strings.Join(cols, ","))
		for rows.Next() {
			vals := make([]sql.RawBytes, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				o.Err = err.Error()
				return o
			}
			row := make([]string, len(vals))
			for i, v := range vals {
				if v == nil {
					row[i] = "NULL"
				} else {
					row[i] = string(v)
				}
			}
			o.Rows = append(o.Rows, row)
		}
		if !rows.NextResultSet() {
			break
		}
	}
	if err := rows.Err(); err != nil {
		o.Err = err.Error()
	}
	return o
}

func runExec(db *sql.DB, q string, args ...any) outcome {
	var o outcome
	r, err := db.Exec(q, args...)
	if err != nil {
		o.Err = err.Error()
		return o
	}
	o.AffectedRows, _ = r.RowsAffected()
	o.LastInsertID, _ = r.LastInsertId()
	return o
}

// TestProxyMatchesDirect runs the same statements directly and through the
// proxy, in two databases with identical contents, with several driver
// settings, and requires identical outcomes.
func TestProxyMatchesDirect(t *testing.T) {
	s := dbtest.Shared(t)
	tp := startProxy(t, s.Addr, "")
	setup := []string{
		"CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(20) NOT NULL, n INT, d DATETIME(3), b BLOB)",
		"INSERT INTO t (name, n, d) VALUES ('a', 1, '2024-01-02 03:04:05.678'), ('b', NULL, NULL), ('c', 3, '1999-12-31 23:59:59')",
	}
	steps := []struct {
		name string
		exec bool
		q    string
		args []any
	}{
		{"select", false, "SELECT * FROM t ORDER BY id", nil},
		{"select args", false, "SELECT id, name FROM t WHERE n > ? ORDER BY id", []any{0}},
		{"insert", true, "INSERT INTO t (name, n) VALUES (?, ?), (?, ?)", []any{"d", 4, "e", 5}},
		{"update", true, "UPDATE t SET n = n + 1 WHERE n IS NOT NULL", nil},
		{"update unchanged", true, "UPDATE t SET name = name", nil},
		{"delete", true, "DELETE FROM t WHERE name = ?", []any{"e"}},
		{"warning", true, "INSERT IGNORE INTO t (id, name) VALUES (1, 'dup')", nil},
		{"syntax error", false, "SELEKT 1", nil},
		{"unknown table", false, "SELECT * FROM nope", nil},
		{"duplicate key", true, "INSERT INTO t (id, name) VALUES (1, 'x')", nil},
		{"null and types", false, "SELECT NULL, 1.5, -7, 'x', X'00ff', CAST('2020-01-01' AS DATE), 1e300", nil},
		{"empty result", false, "SELECT * FROM t WHERE 1 = 0", nil},
		{"after all", false, "SELECT id, name, n FROM t ORDER BY id", nil},
	}
	modes := []struct {
		name   string
		params []string
	}{
		{"server-side prepared", nil},
		{"interpolateParams", []string{"interpolateParams=true"}},
		{"clientFoundRows", []string{"clientFoundRows=true"}},
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			dbA := dbtest.NewDatabase(t, s)
			dbB := dbtest.NewDatabase(t, s)
			direct := directDB(t, s, dbA, mode.params...)
			proxied := appDB(t, tp, dbB, mode.params...)
			for _, q := range setup {
				mustExec(t, direct, q)
				mustExec(t, proxied, q)
			}
			for _, st := range steps {
				var want, got outcome
				if st.exec {
					want, got = runExec(direct, st.q, st.args...), runExec(proxied, st.q, st.args...)
				} else {
					want, got = runQuery(direct, st.q, st.args...), runQuery(proxied, st.q, st.args...)
				}
				got.Err = strings.ReplaceAll(got.Err, dbB, dbA)
				if !reflect.DeepEqual(want, got) {
					t.Errorf("%s: %q\ndirect: %+v\nproxy:  %+v", st.name, st.q, want, got)
				}
			}
		})
	}
}

func TestMultiStatementsAndTransactions(t *testing.T) {
	s := dbtest.Shared(t)
	tp := startProxy(t, s.Addr, "")
	db := dbtest.NewDatabase(t, s)
	c := appDB(t, tp, db, "multiStatements=true")
	mustExec(t, c, "CREATE TABLE m (id INT PRIMARY KEY, v INT)")
	got := runQuery(c, "INSERT INTO m VALUES (1, 10); SELECT v FROM m; SELECT 2 AS two, 'x' AS x; UPDATE m SET v = 11; SELECT v FROM m")
	want := outcome{Columns: []string{"v", "two,x", "v"}, Rows: [][]string{{"10"}, {"2", "x"}, {"11"}}}
	if got.Err != "" || !reflect.DeepEqual(got.Rows, want.Rows) {
		t.Fatalf("multi-statement: got %+v, want rows %v", got, want.Rows)
	}
	// An error stops the packet where the server stops it.
	if o := runExec(c, "UPDATE m SET v = 12; SELEKT; UPDATE m SET v = 13"); !strings.Contains(o.Err, "1064") {
		t.Fatalf("want a syntax error, got %+v", o)
	}
	if o := runQuery(c, "SELECT v FROM m"); o.Rows[0][0] != "12" {
		t.Fatalf("statements after the error ran: %+v", o)
	}

	tx, err := c.Begin()
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx, "UPDATE m SET v = 99")
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if o := runQuery(c, "SELECT v FROM m"); o.Rows[0][0] != "12" {
		t.Fatalf("rollback did not undo: %+v", o)
	}
	tx, _ = c.Begin()
	mustExec(t, tx, "UPDATE m SET v = 100")
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if o := runQuery(c, "SELECT v FROM m"); o.Rows[0][0] != "100" {
		t.Fatalf("commit lost: %+v", o)
	}
}

func TestAuthErrorsAreTheServers(t *testing.T) {
	s := dbtest.Shared(t)
	tp := startProxy(t, s.Addr, "")
	cases := []struct {
		name     string
		user, pw string
		db       string
		code     uint16
	}{
		{"wrong password", dbserver.AppUser, "wrong", "", 1045},
		{"unknown user", "nobody", "x", "", 1045},
		{"unknown database", dbserver.AppUser, dbserver.AppPassword, "no_such_db", 1049},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			direct := connectErr(s.DSN(tc.user, tc.pw, tc.db))
			proxied := connectErr(tp.DSN(tc.user, tc.pw, tc.db))
			var de, pe *mysql.MySQLError
			if !errors.As(direct, &de) || !errors.As(proxied, &pe) {
				t.Fatalf("want server errors, got direct %v, proxy %v", direct, proxied)
			}
			if de.Number != tc.code || *de != *pe {
				t.Fatalf("direct %v, proxy %v", de, pe)
			}
		})
	}
	if n := testutilCounter(t, tp.Reg, "fenceproxy_auth_failures_total"); n < 2 {
		t.Errorf("auth failures counted %v, want >= 2", n)
	}
}

func connectErr(dsn string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.Ping()
}

func TestEd25519Auth(t *testing.T) {
	s := dbtest.Shared(t)
	if err := s.CreateUser(t.Context(), "fp_ed", "ed-Secret-1", "ed25519"); err != nil {
		if errors.Is(err, dbserver.ErrUnsupported) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	tp := startProxy(t, s.Addr, "")
	if err := ed25519Login(tp.DSN("fp_ed", "ed-Secret-1", "")); err != nil {
		t.Fatalf("ed25519 login through the proxy: %v", err)
	}
	c, err := sql.Open("mysql", tp.DSN("fp_ed", "ed-Secret-1", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var plugin string
	err = c.QueryRow("SELECT plugin FROM mysql.user WHERE user = 'fp_ed'").Scan(&plugin)
	for i := 0; i < 4 && errors.Is(err, mysql.ErrMalformPkt); i++ { // see ed25519Login
		err = c.QueryRow("SELECT plugin FROM mysql.user WHERE user = 'fp_ed'").Scan(&plugin)
	}
	if err != nil {
		t.Fatal(err)
	}
	if plugin != "ed25519" {
		t.Fatalf("user plugin %q", plugin)
	}
	if err := ed25519Login(tp.DSN("fp_ed", "wrong", "")); err == nil || !strings.Contains(err.Error(), "1045") {
		t.Fatalf("wrong ed25519 password: %v", err)
	}
}

// ed25519Login logs in once, or again after go-sql-driver's "malformed
// packet": measured directly against MariaDB 10.11 with no proxy between,
// about 1 in 100 client_ed25519 logins of go-sql-driver fails so (between
// 4 and 8 in 800 through the proxy, the same rate), a fault of the
// driver or the server that the proxy relays byte for byte. A proxy that
// broke the exchange would fail every attempt.
func ed25519Login(dsn string) error {
	var err error
	for i := 0; i < 5; i++ {
		if err = connectErr(dsn); !errors.Is(err, mysql.ErrMalformPkt) {
			return err
		}
	}
	return err
}

func TestLoadDataLocalInfile(t *testing.T) {
	s := dbtest.Shared(t)
	tp := startProxy(t, s.Addr, "")
	db := dbtest.NewDatabase(t, s)
	var data bytes.Buffer
	for i := 0; i < 50000; i++ {
		fmt.Fprintf(&data, "%d\tname-%d\n", i, i)
	}
	mysql.RegisterReaderHandler("fp-data", func() io.Reader { return bytes.NewReader(data.Bytes()) })
	defer mysql.DeregisterReaderHandler("fp-data")
	c := appDB(t, tp, db, "allowAllFiles=true")
	mustExec(t, c, "CREATE TABLE l (id INT PRIMARY KEY, name VARCHAR(30))")
	r := mustExec(t, c, "LOAD DATA LOCAL INFILE 'Reader::fp-data' INTO TABLE l")
	if n, _ := r.RowsAffected(); n != 50000 {
		t.Fatalf("loaded %d rows", n)
	}
	var sum int64
	if err := c.QueryRow("SELECT SUM(id) FROM l").Scan(&sum); err != nil || sum != 49999*50000/2 {
		t.Fatalf("sum %d, %v", sum, err)
	}
}

func TestPacketsOver16MiB(t *testing.T) {
	s := dbtest.Shared(t)
	tp := startProxy(t, s.Addr, "")
	db := dbtest.NewDatabase(t, s)
	c := appDB(t, tp, db, "maxAllowedPacket=0")
	mustExec(t, c, "CREATE TABLE big (id INT PRIMARY KEY, b LONGBLOB)")
	blob := bytes.Repeat([]byte("0123456789abcdef"), 20<<20/16) // 20 MiB
	blob[12345] = 0
	for _, mode := range []string{"prepared", "text"} {
		t.Run(mode, func(t *testing.T) {
			mustExec(t, c, "DELETE FROM big")
			if mode == "prepared" {
				mustExec(t, c, "INSERT INTO big VALUES (1, ?)", blob)
			} else {
				mustExec(t, c, "INSERT INTO big VALUES (1, X'"+fmt.Sprintf("%x", blob)+"')")
			}
			var got []byte
			if err := c.QueryRow("SELECT b FROM big WHERE id = 1").Scan(&got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, blob) {
				t.Fatalf("blob of %d bytes came back as %d bytes", len(blob), len(got))
			}
			var n int
			if err := c.QueryRow("SELECT LENGTH(b) FROM big WHERE id = ?", 1).Scan(&n); err != nil || n != len(blob) {
				t.Fatalf("length %d, %v", n, err)
			}
		})
	}
}
