package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// env is one test database with the lease schema, an app connection pool
// and a root pool on the harness server.
type env struct {
	srv   *dbserver.Server
	db    string
	app   *sql.DB
	root  *sql.DB
	store *lease.Store
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := dbtest.Shared(t)
	db := dbtest.NewDatabase(t, srv)
	e := &env{srv: srv, db: db,
		app:  dbtest.Open(t, srv.DSN(dbserver.AppUser, dbserver.AppPassword, db)),
		root: dbtest.Open(t, srv.RootDSN(db)),
	}
	if err := lease.CreateSchema(ctxT(t), e.app, ""); err != nil {
		t.Fatalf("CreateSchema: %v", err)
	}
	var err error
	if e.store, err = lease.NewStore(e.app, ""); err != nil {
		t.Fatal(err)
	}
	return e
}

// session opens a pool of exactly one connection (so session settings stick)
// for the app user, with extra DSN parameters (name=value, URL-escaped
// values) and statements run once on it.
func (e *env) session(t *testing.T, params url.Values, setup ...string) *sql.DB {
	t.Helper()
	dsn := e.srv.DSN(dbserver.AppUser, dbserver.AppPassword, e.db)
	if len(params) > 0 {
		dsn += "&" + params.Encode()
	}
	db := dbtest.Open(t, dsn)
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	for _, s := range setup {
		if _, err := db.ExecContext(ctxT(t), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	return db
}

// ctxT is the test's context bounded to a minute: no test waits forever on
// the database.
func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// await polls cond every few milliseconds until it is true, failing the
// test after limit. It waits for a condition, never for a fixed time.
func await(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitExpired waits until the database considers lease name expired.
func awaitExpired(t *testing.T, s *lease.Store, name string) {
	t.Helper()
	await(t, 10*time.Second, "lease "+name+" to expire by database time", func() bool {
		st, err := s.Get(ctxT(t), name)
		if err != nil {
			t.Fatalf("Get(%q): %v", name, err)
		}
		return !st.Held
	})
}

func mustAcquire(t *testing.T, s *lease.Store, name string, ttl time.Duration, opts ...lease.AcquireOption) lease.Lease {
	t.Helper()
	l, err := s.Acquire(ctxT(t), name, ttl, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q, %v): %v", name, ttl, err)
	}
	return l
}

func mustGet(t *testing.T, s *lease.Store, name string) lease.Status {
	t.Helper()
	st, err := s.Get(ctxT(t), name)
	if err != nil {
		t.Fatalf("Get(%q): %v", name, err)
	}
	return st
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}
