package dbtest_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/go-sql-driver/mysql"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// wantAccessDenied checks that err is the server's own ER_ACCESS_DENIED_ERROR.
func wantAccessDenied(t *testing.T, err error) {
	t.Helper()
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1045 {
		t.Fatalf("got %v, want the server's error 1045 (access denied)", err)
	}
}

func TestAppUserLogsInWithItsPasswordOnly(t *testing.T) {
	s := dbtest.Shared(t)
	db := dbtest.Open(t, s.DSN(dbserver.AppUser, dbserver.AppPassword, ""))
	var user string
	if err := db.QueryRow("SELECT CURRENT_USER()").Scan(&user); err != nil {
		t.Fatal(err)
	}
	if user != dbserver.AppUser+"@%" {
		t.Errorf("CURRENT_USER() = %q", user)
	}

	wrong, err := sql.Open("mysql", s.DSN(dbserver.AppUser, "wrong-password", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	wantAccessDenied(t, wrong.Ping())
}

func TestRootDSNAndNewDatabase(t *testing.T) {
	s := dbtest.Shared(t)
	if !strings.Contains(s.RootDSN("x"), "@tcp(") || !strings.Contains(s.RootDSN(""), ":") {
		t.Fatalf("RootDSN must be TCP with a password: %s", s.RootDSN(""))
	}
	name := dbtest.NewDatabase(t, s)
	app := dbtest.Open(t, s.DSN(dbserver.AppUser, dbserver.AppPassword, name))
	if _, err := app.Exec("CREATE TABLE t (id INT PRIMARY KEY, at DATETIME)"); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Exec("INSERT INTO t VALUES (1, '2024-01-02 03:04:05')"); err != nil {
		t.Fatal(err)
	}
	var at time.Time // parseTime=true
	if err := app.QueryRow("SELECT at FROM t").Scan(&at); err != nil {
		t.Fatal(err)
	}
	if at.Year() != 2024 {
		t.Errorf("at = %v", at)
	}
	if s.Flavor != dbserver.FlavorMariaDB && s.Flavor != dbserver.FlavorMySQL || s.Version == "" {
		t.Errorf("Flavor %q Version %q", s.Flavor, s.Version)
	}
}

func TestTLSServerAcceptsClientTrustingTheCA(t *testing.T) {
	s := dbtest.SharedTLS(t)
	db := dbtest.Open(t, s.DSN(dbserver.AppUser, dbserver.AppPassword, "")+"&tls="+s.TLSName)
	var name, cipher string
	if err := db.QueryRow("SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &cipher); err != nil {
		t.Fatal(err)
	}
	if cipher == "" {
		t.Fatal("connection is not encrypted")
	}

	// A client trusting another CA must refuse the server's certificate.
	other, err := dbserver.WriteCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	name = "dbtest-other-ca"
	if err := mysql.RegisterTLSConfig(name, other.ClientTLS()); err != nil {
		t.Fatal(err)
	}
	defer mysql.DeregisterTLSConfig(name)
	untrusting, err := sql.Open("mysql", s.DSN(dbserver.AppUser, dbserver.AppPassword, "")+"&tls="+name)
	if err != nil {
		t.Fatal(err)
	}
	defer untrusting.Close()
	if err := untrusting.Ping(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client trusting another CA connected: %v", err)
	}
}

func TestCreateUserEd25519(t *testing.T) {
	s := dbtest.Shared(t)
	ctx := context.Background()
	err := s.CreateUser(ctx, "fp_ed", "ed-Pw-1", "ed25519")
	if s.Flavor != dbserver.FlavorMariaDB {
		if !errors.Is(err, dbserver.ErrUnsupported) {
			t.Fatalf("ed25519 on %s: got %v, want ErrUnsupported", s.Flavor, err)
		}
		t.Skip("ed25519 is MariaDB's")
	}
	if errors.Is(err, dbserver.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	db := dbtest.Open(t, s.DSN("fp_ed", "ed-Pw-1", ""))
	var plugin string
	if err := db.QueryRow("SELECT plugin FROM mysql.user WHERE user = 'fp_ed'").Scan(&plugin); err != nil {
		t.Fatal(err)
	}
	if plugin != "ed25519" {
		t.Errorf("plugin = %q", plugin)
	}
	wrong, err := sql.Open("mysql", s.DSN("fp_ed", "nope", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	wantAccessDenied(t, wrong.Ping())

	if err := s.CreateUser(ctx, "fp_x", "x", "no_such_plugin"); !errors.Is(err, dbserver.ErrUnsupported) {
		t.Errorf("unknown plugin: got %v, want ErrUnsupported", err)
	}
}

func TestStartAndCloseLeaveNothingBehind(t *testing.T) {
	if os.Getenv(dbtest.EnvDSN) != "" {
		t.Skip("an external server is configured")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := dbserver.Start(ctx, dbserver.Options{})
	if err != nil {
		dbtest.Unavailable(t, err)
	}
	t.Cleanup(func() { s.Close() })
	pidText, err := os.ReadFile(s.Dir + "/pid")
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.ErrorLog(), "ready for connections") {
		t.Errorf("error log tail lacks the ready message:\n%s", s.ErrorLog())
	}
	dbtest.Open(t, s.RootDSN(""))

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("Dir %s still there: %v", s.Dir, err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("server pid %d still exists: kill(0) = %v", pid, err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestNewDatabaseIsDroppedAfterTheTest(t *testing.T) {
	s := dbtest.Shared(t)
	var name string
	t.Run("inner", func(t *testing.T) { name = dbtest.NewDatabase(t, s) })
	root := dbtest.Open(t, s.RootDSN(""))
	var n int
	if err := root.QueryRow("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("database %s still exists", name)
	}
}
