package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/go-sql-driver/mysql"
)

// Candidate fence shapes on TiDB, measured with plain SQL on a real
// tidb-server (no proxy): what the proxy would send for a client's UPDATE,
// DELETE or INSERT. TiDB takes no lock on rows it only reads, so every shape
// reads the lease row FOR UPDATE; they differ in where that read is.
const (
	// shapeGuard: a separate statement on the same connection and in the
	// same transaction locks and reads the lease row, and the client's
	// statement follows verbatim only if the row says the fence holds.
	shapeGuard = "guard"
	// shapeIn: the statement carries `@fence_token IN (SELECT ... FOR
	// UPDATE)`.
	shapeIn = "in"
	// shapeDerived: the statement joins a derived table `(SELECT ... FOR
	// UPDATE)`.
	shapeDerived = "derived"
	// shapeExists: the statement carries `EXISTS (SELECT ... FOR UPDATE)`,
	// the fence the rewriter produces for TiDB today.
	shapeExists = "exists"
	// shapeProxy: the client's statement as written, through fenceproxy
	// (which guards it).
	shapeProxy = "proxy"
)

var tidbShapes = []string{shapeGuard, shapeIn, shapeDerived, shapeExists}

var tidbKinds = []string{"UPDATE", "DELETE", "INSERT"}

// fenceHolds is the fence condition on the lease row fence_l.
const fenceHolds = "fence_l.owner_token = @fence_owner AND fence_l.fence_token = @fence_token AND fence_l.leased_until > SYSDATE(3)"

// leaseRef is how a statement names the lease: the session variable, or the
// table's fixed lease as a literal.
func leaseRef(name string, literal bool) string {
	if literal {
		return "'" + name + "'"
	}
	return "@fence_lease"
}

// clientSQL is the client's statement on the protected table items.
func clientSQL(kind string, id int64) string {
	switch kind {
	case "UPDATE":
		return fmt.Sprintf("UPDATE items SET v = v + 1, token = @fence_token WHERE id = %d", id)
	case "DELETE":
		return fmt.Sprintf("DELETE FROM items WHERE id = %d", id)
	default:
		return fmt.Sprintf("INSERT INTO items (id, v, token) VALUES (%d, 0, @fence_token)", id)
	}
}

// guardSQL returns one row whose only column is 1 when the fence holds.
func guardSQL(ref string) string {
	return "SELECT " + fenceHolds + " FROM fenced_job_leases AS fence_l WHERE fence_l.lease_name = " + ref + " FOR UPDATE"
}

// fencedSQL is the client's statement with an in-statement fence.
func fencedSQL(shape, kind string, id int64, ref string) string {
	sub := "SELECT fence_l.fence_token FROM fenced_job_leases AS fence_l WHERE fence_l.lease_name = " + ref + " AND " + fenceHolds + " FOR UPDATE"
	if shape == shapeDerived {
		switch kind {
		case "UPDATE":
			return fmt.Sprintf("UPDATE items JOIN (%s) AS fence_d SET items.v = items.v + 1, items.token = @fence_token WHERE items.id = %d", sub, id)
		case "DELETE":
			return fmt.Sprintf("DELETE items FROM items JOIN (%s) AS fence_d WHERE items.id = %d", sub, id)
		default:
			return fmt.Sprintf("INSERT INTO items (id, v, token) SELECT %d, 0, @fence_token FROM (%s) AS fence_d", id, sub)
		}
	}
	cond := "EXISTS (" + sub + ")"
	if shape == shapeIn {
		cond = "@fence_token IN (" + sub + ")"
	}
	if kind == "INSERT" {
		return fmt.Sprintf("INSERT INTO items (id, v, token) SELECT %d, 0, @fence_token FROM DUAL WHERE %s", id, cond)
	}
	return clientSQL(kind, id) + " AND " + cond
}

// fencedWrite runs one fenced statement on c in its current transaction
// and returns the rows it changed: 0 means the fence refused it (for the
// guard: the guard said so and the statement was not sent).
func fencedWrite(ctx context.Context, c *sql.Conn, shape, kind string, id int64, ref string) (int64, error) {
	if shape == shapeProxy {
		r, err := c.ExecContext(ctx, clientSQL(kind, id))
		if err != nil {
			return 0, err
		}
		return r.RowsAffected()
	}
	if shape == shapeGuard {
		var ok sql.NullInt64
		err := c.QueryRowContext(ctx, guardSQL(ref)).Scan(&ok)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		if !ok.Valid || ok.Int64 != 1 {
			return 0, nil
		}
		r, err := c.ExecContext(ctx, clientSQL(kind, id))
		if err != nil {
			return 0, err
		}
		return r.RowsAffected()
	}
	r, err := c.ExecContext(ctx, fencedSQL(shape, kind, id, ref))
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// notCommitted reports whether err is TiDB's way of saying the transaction
// did not commit and may be retried: write conflict (9007), pessimistic
// retry errors (8002, 8022), schema change (8028), an old write conflict
// code (8005), lock wait timeout (1205), deadlock (1213).
func notCommitted(err error) bool {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Number {
	case 9007, 8002, 8005, 8022, 8028, 1205, 1213:
		return true
	}
	return false
}

// lastCommitTS is the commit timestamp (TSO) of the session's last
// transaction: TiDB's own commit order, comparable across sessions.
func lastCommitTS(ctx context.Context, c *sql.Conn) (uint64, error) {
	var ts uint64
	err := c.QueryRowContext(ctx, "SELECT CAST(JSON_EXTRACT(@@tidb_last_txn_info, '$.commit_ts') AS UNSIGNED)").Scan(&ts)
	return ts, err
}

// tidbEnv is a database on the shared tidb-server with the lease table and
// a protected table items.
type tidbEnv struct {
	srv  *dbserver.Server
	db   string
	root *sql.DB
}

func newTiDBEnv(t testing.TB) *tidbEnv {
	t.Helper()
	s := dbtest.SharedTiDB(t)
	db := dbtest.NewDatabase(t, s)
	root := dbtest.Open(t, s.RootDSN(db))
	if err := lease.CreateSchema(context.Background(), root, db+".fenced_job_leases"); err != nil {
		t.Fatal(err)
	}
	mustExec(t, root, "CREATE TABLE items (id BIGINT PRIMARY KEY, v BIGINT NOT NULL, token BIGINT UNSIGNED)")
	return &tidbEnv{srv: s, db: db, root: root}
}

// conn is one session of the app account, closed when the test ends.
func (e *tidbEnv) conn(t testing.TB) *sql.Conn {
	t.Helper()
	db := dbtest.Open(t, e.srv.DSN(dbserver.AppUser, dbserver.AppPassword, e.db))
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newLease creates a lease held by owner with token 1, valid for an hour.
func (e *tidbEnv) newLease(t *testing.T, name, owner string) {
	t.Helper()
	mustExec(t, e.root, "INSERT INTO fenced_job_leases (lease_name, owner_token, fence_token, leased_until) VALUES (?, ?, 1, SYSDATE(3) + INTERVAL 1 HOUR)", name, owner)
}

// takeover moves the lease to owner with the next token, in a transaction
// of the given mode ("pessimistic" or "optimistic"), retrying while TiDB
// says it did not commit. It returns the new token and the commit
// timestamp.
func takeover(ctx context.Context, c *sql.Conn, mode, name, owner string) (token, commitTS uint64, err error) {
	for attempt := 0; attempt < 200; attempt++ {
		token, err = takeoverOnce(ctx, c, mode, name, owner)
		if err == nil {
			commitTS, err = lastCommitTS(ctx, c)
			return token, commitTS, err
		}
		c.ExecContext(ctx, "ROLLBACK")
		if !notCommitted(err) || ctx.Err() != nil {
			return 0, 0, err
		}
	}
	return 0, 0, fmt.Errorf("takeover of %s: still conflicting after 200 attempts: %w", name, err)
}

func takeoverOnce(ctx context.Context, c *sql.Conn, mode, name, owner string) (uint64, error) {
	if _, err := c.ExecContext(ctx, "BEGIN "+strings.ToUpper(mode)); err != nil {
		return 0, err
	}
	r, err := c.ExecContext(ctx, "UPDATE fenced_job_leases SET owner_token = ?, fence_token = fence_token + 1, leased_until = SYSDATE(3) + INTERVAL 1 HOUR WHERE lease_name = ?", owner, name)
	if err != nil {
		return 0, err
	}
	if n, _ := r.RowsAffected(); n != 1 {
		return 0, fmt.Errorf("takeover of %s changed %d rows", name, n)
	}
	var token uint64
	if err := c.QueryRowContext(ctx, "SELECT fence_token FROM fenced_job_leases WHERE lease_name = ?", name).Scan(&token); err != nil {
		return 0, err
	}
	if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
		return 0, err
	}
	return token, nil
}

// setFenceVars gives a session the fence context.
func setFenceVars(ctx context.Context, c *sql.Conn, name, owner string, token uint64) error {
	_, err := c.ExecContext(ctx, "SET @fence_lease = ?, @fence_owner = ?, @fence_token = ?", name, owner, token)
	return err
}
