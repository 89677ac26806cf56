package dbserver

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestStartTiDB starts a disposable tidb-server and checks what the tests
// rely on: TCP logins of root and AppUser with their passwords, the flavor,
// and that Close stops the process and removes its directory.
func TestStartTiDB(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, err := StartTiDB(ctx)
	if (errors.Is(err, ErrTiDBNotFound) || errors.Is(err, ErrOutsideTier)) && os.Getenv(envRequire) != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Flavor != FlavorTiDB {
		t.Errorf("Flavor = %q, version %q", s.Flavor, s.Version)
	}
	for _, dsn := range []string{s.RootDSN(""), s.DSN(AppUser, AppPassword, "")} {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		var v string
		if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
			t.Errorf("login: %v", err)
		}
		db.Close()
	}
	bad, _ := sql.Open("mysql", s.DSN(AppUser, "wrong", ""))
	if err := bad.PingContext(ctx); err == nil {
		t.Error("AppUser logged in with a wrong password")
	}
	bad.Close()
	pid := s.proc.Pid()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("%s still exists after Close: %v", s.Dir, err)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); !os.IsNotExist(err) {
		t.Errorf("tidb-server pid %d still running after Close", pid)
	}
}
