package integration

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
)

// guardEnv is an app schema whose tables carry guard triggers, with the
// lease table in a schema of its own, and three fence contexts for direct
// connections:
//
//	items   id, v, n    lease from @fence_lease (GuardSpec without Lease)
//	fixed   id, v       fixed lease guard:fixed
//	other   id, v       not guarded (joins, triggers of another table)
//
// stale is a former holder of lease guard:items (its token was taken over),
// valid the current one; staleFixed and validFixed the same for guard:fixed.
type guardEnv struct {
	srv                    *dbserver.Server
	app, fence             string
	root                   *sql.DB // admin, on app
	store                  *lease.Store
	stale, valid           lease.Lease
	staleFixed, validFixed lease.Lease
	specs                  []lease.TriggerSpec
	fixed                  bool // the fence contexts are guard:fixed's
}

var guardVars = lease.Vars{Lease: "fence_lease", Owner: "fence_owner", Token: "fence_token"}

// newGuardEnv builds the schemas on s (engine e: lease.InnoDB or
// lease.Galera) and installs the guards as fenceproxy init does.
func newGuardEnv(t testing.TB, s *dbserver.Server, e lease.Engine, exempt ...lease.Account) *guardEnv {
	t.Helper()
	ctx := context.Background()
	app := dbtest.NewDatabase(t, s)
	fence := dbtest.NewDatabase(t, s)
	root := dbtest.Open(t, s.RootDSN(app))
	for _, q := range []string{
		"CREATE TABLE items (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(40) NOT NULL, n INT NOT NULL DEFAULT 0)",
		"CREATE TABLE fixed (id INT PRIMARY KEY, v VARCHAR(40) NOT NULL)",
		"CREATE TABLE other (id INT PRIMARY KEY, v VARCHAR(40) NOT NULL)",
		"INSERT INTO items (id, v) VALUES (1, 'one'), (2, 'two'), (3, 'three')",
		"INSERT INTO fixed VALUES (1, 'one')",
		"INSERT INTO other VALUES (1, 'o1'), (2, 'o2')",
	} {
		mustExec(t, root, q)
	}
	leaseTable := fence + "." + lease.DefaultTable
	if err := lease.CreateSchema(ctx, root, leaseTable); err != nil {
		t.Fatal(err)
	}
	env := &guardEnv{srv: s, app: app, fence: fence, root: root}
	c, err := root.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := lease.PartitionForGuards(ctx, c, fence, lease.DefaultTable); err != nil {
		t.Fatal(err)
	}
	for _, tb := range []struct{ name, lease string }{{"items", ""}, {"fixed", "guard:fixed"}} {
		spec := lease.TriggerSpec{Schema: app, Table: tb.name, Engine: e, Exempt: exempt,
			Fence: lease.GuardSpec{Schema: fence, Table: lease.DefaultTable, Lease: tb.lease, Vars: guardVars}}
		if _, err := lease.InstallGuardTriggers(ctx, c, spec); err != nil {
			t.Fatal(err)
		}
		env.specs = append(env.specs, spec)
	}
	env.store, err = lease.NewStore(root, leaseTable)
	if err != nil {
		t.Fatal(err)
	}
	env.stale, env.valid = env.takenOver(t, "guard:items")
	env.staleFixed, env.validFixed = env.takenOver(t, "guard:fixed")
	return env
}

// takenOver acquires lease name, lets it expire and has another owner take
// it over: the first holder's fence is stale, the second's valid.
func (e *guardEnv) takenOver(t testing.TB, name string) (stale, valid lease.Lease) {
	t.Helper()
	ctx := context.Background()
	stale, err := e.store.Acquire(ctx, name, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "lease "+name+" to expire", func() bool {
		st, err := e.store.Get(ctx, name)
		return err == nil && !st.Held
	})
	if valid, err = e.store.Acquire(ctx, name, time.Hour); err != nil {
		t.Fatal(err)
	}
	return stale, valid
}

// fenceKind is the fence context a direct session presents.
type fenceKind string

const (
	fenceStale fenceKind = "stale"
	fenceNone  fenceKind = "none"
	fenceValid fenceKind = "valid"
)

var fenceKinds = []fenceKind{fenceStale, fenceNone, fenceValid}

// lease returns the lease of kind k (zero for fenceNone).
func (e *guardEnv) lease(k fenceKind) lease.Lease {
	switch {
	case k == fenceStale && e.fixed:
		return e.staleFixed
	case k == fenceValid && e.fixed:
		return e.validFixed
	case k == fenceStale:
		return e.stale
	case k == fenceValid:
		return e.valid
	}
	return lease.Lease{}
}

// setSQL is the SET that gives a session the fence context of k, with
// literals only (for event bodies and raw connections).
func (e *guardEnv) setSQL(k fenceKind) string {
	l := e.lease(k)
	if k == fenceNone {
		return "SET @fence_lease = NULL, @fence_owner = NULL, @fence_token = NULL"
	}
	return lease.SetVarsSQL(guardVars, l)
}

// direct opens one direct connection to the app schema as the app user,
// with fence context k.
func (e *guardEnv) direct(t *testing.T, k fenceKind, params ...string) *sql.Conn {
	t.Helper()
	db := directDB(t, e.srv, e.app, params...)
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	mustExec(t, c, e.setSQL(k))
	return c
}

// dump is the guarded tables' contents, for before/after comparisons.
func (e *guardEnv) dump(t *testing.T) string {
	t.Helper()
	return tableDump(t, e.root, e.app+".items") + "--\n" + tableDump(t, e.root, e.app+".fixed")
}

// guardErr asserts that err is a guard trigger's refusal with reason,
// naming none of secrets, and returns its message.
func guardErr(t *testing.T, err error, reason lease.Reason, secrets ...string) string {
	t.Helper()
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		t.Fatalf("want the guard's error %d (%s), got %v", lease.GuardErrno, reason, err)
	}
	if me.Number != lease.GuardErrno || string(me.SQLState[:]) != lease.GuardSQLState {
		t.Fatalf("want error %d (%s), got %d (%s): %s", lease.GuardErrno, lease.GuardSQLState, me.Number, me.SQLState, me.Message)
	}
	r, ok := lease.ParseGuardError(me.Message)
	if !ok || r.Reason != reason {
		t.Fatalf("want reason %s in the guard's message, got %q", reason, me.Message)
	}
	for _, sec := range secrets {
		if sec != "" && strings.Contains(me.Message, sec) {
			t.Fatalf("the guard's message names a secret: %q", me.Message)
		}
	}
	return me.Message
}

// wantReason is the guard's reason for a refused fence kind.
func wantReason(k fenceKind) lease.Reason {
	if k == fenceNone {
		return lease.NoFence
	}
	return lease.StaleToken
}
