package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Errors of the lease operations. They are wrapped: test with errors.Is.
var (
	// ErrHeld: acquire found the lease unexpired (held by another owner, or
	// by the same owner: an unexpired lease is renewed, not re-acquired).
	ErrHeld = errors.New("lease: held")
	// ErrLost: renew or release found the lease no longer this owner's at
	// this token: expired, taken over, or released already. Also returned by
	// acquire when the lease expired again before it could be read back.
	ErrLost = errors.New("lease: lost")
	// ErrNotFound: the lease has no row (it was never acquired).
	ErrNotFound = errors.New("lease: not found")
)

// Lease is a held lease: what a job needs to renew, release and fence its
// writes. Owner is a bearer secret; String and GoString print its hash only.
type Lease struct {
	Name  string
	Owner string
	Token uint64    // fence token: +1 at every acquire, never goes backwards
	Until time.Time // expiry by database time, UTC, millisecond precision
}

// String prints the lease without its owner secret.
func (l Lease) String() string {
	return fmt.Sprintf("lease %q token %d owner %s until %s", l.Name, l.Token, OwnerHash(l.Owner),
		l.Until.UTC().Format(time.RFC3339Nano))
}

// GoString keeps %#v from printing the owner secret too.
func (l Lease) GoString() string { return "lease.Lease{" + l.String() + "}" }

// Status is a lease row as read, with the database's view of its time.
type Status struct {
	Lease
	// Held: leased_until > SYSDATE(3) when the row was read.
	Held bool
	// Remaining: leased_until - SYSDATE(3) when the row was read; negative:
	// expired that long ago.
	Remaining time.Duration
}

// OwnerID is the owner's short hash, for display.
func (s Status) OwnerID() string { return OwnerHash(s.Owner) }

// Conn runs the lease statements on one database session. Store uses
// database/sql; the proxy implements Conn over its own MySQL connection
// (text protocol) to run the same operations inside a client's session.
// Statements must run in autocommit mode outside any transaction: inside
// an application's transaction a lease change would be undone by its
// ROLLBACK and would hold the lease row's lock until its COMMIT. A
// statement that fails with 1213 is run again (see IsConflict): that is
// only right because each one commits on its own.
type Conn interface {
	// Exec runs a statement that returns no rows and reports the affected-row
	// count as the server's OK packet gives it.
	Exec(ctx context.Context, query string) (affected int64, err error)
	// Query runs a statement and returns every row, each column as text.
	// The lease queries never return NULL.
	Query(ctx context.Context, query string) (rows [][]string, err error)
}

// AcquireOption changes how Acquire acquires.
type AcquireOption func(*acquireConfig)

type acquireConfig struct {
	owner string
}

// WithOwner acquires under the given owner token instead of a fresh random
// one. An owner token is a secret; a guessable one lets others write under
// the lease.
func WithOwner(owner string) AcquireOption {
	return func(c *acquireConfig) { c.owner = owner }
}

// AcquireOn acquires lease name on c (see AcquirePlan for the statements and
// how their results are read). It returns ErrHeld if the lease is held.
func AcquireOn(ctx context.Context, c Conn, table, name string, ttl time.Duration, opts ...AcquireOption) (Lease, error) {
	cfg := acquireConfig{}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.owner == "" {
		cfg.owner = NewOwner()
	}
	plan, err := AcquireSQL(table, name, cfg.owner, ttl)
	if err != nil {
		return Lease{}, err
	}
	n, err := execRetrying(ctx, c, plan.Update)
	if err != nil {
		return Lease{}, fmt.Errorf("lease: acquire %q: %w", name, err)
	}
	if n == 0 {
		if n, err = execRetrying(ctx, c, plan.Insert); err != nil {
			return Lease{}, fmt.Errorf("lease: acquire %q: %w", name, err)
		}
		if n == 0 {
			return Lease{}, fmt.Errorf("%w: %q is held and not expired", ErrHeld, name)
		}
	}
	st, ok, err := queryOne(ctx, c, plan.Read)
	if err != nil {
		return Lease{}, fmt.Errorf("lease: acquire %q: reading it back: %w", name, err)
	}
	if !ok || !st.Held {
		return Lease{}, fmt.Errorf("%w: %q was acquired but had expired again when read back (ttl %v)", ErrLost, name, ttl)
	}
	return st.Lease, nil
}

// RenewOn renews l on c for ttl from now (database time), and returns the
// lease with its new expiry. It returns ErrLost if l is no longer held at
// its token. A renewal may also shorten a lease: the expiry becomes now + ttl.
func RenewOn(ctx context.Context, c Conn, table string, l Lease, ttl time.Duration) (Lease, error) {
	plan, err := RenewSQL(table, l.Name, l.Owner, l.Token, ttl)
	if err != nil {
		return Lease{}, err
	}
	if _, err := execRetrying(ctx, c, plan.Update); err != nil {
		return Lease{}, fmt.Errorf("lease: renew %q: %w", l.Name, err)
	}
	st, ok, err := queryOne(ctx, c, plan.Read)
	if err != nil {
		return Lease{}, fmt.Errorf("lease: renew %q: reading it back: %w", l.Name, err)
	}
	if !ok {
		return Lease{}, fmt.Errorf("%w: %q at token %d (expired, taken over or released)", ErrLost, l.Name, l.Token)
	}
	return st.Lease, nil
}

// ReleaseOn releases l on c: it expires the lease and keeps its row. It
// returns ErrLost if l was no longer held at its token, including when it
// had already expired: the caller's work may then have overlapped with
// another owner's, which the caller should know.
func ReleaseOn(ctx context.Context, c Conn, table string, l Lease) error {
	q, err := ReleaseSQL(table, l.Name, l.Owner, l.Token)
	if err != nil {
		return err
	}
	n, err := execRetrying(ctx, c, q)
	if err != nil {
		return fmt.Errorf("lease: release %q: %w", l.Name, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %q at token %d (expired, taken over or released)", ErrLost, l.Name, l.Token)
	}
	return nil
}

// GetOn reads lease name's row on c; ErrNotFound if it has none.
func GetOn(ctx context.Context, c Conn, table, name string) (Status, error) {
	q, err := StatusSQL(table, name)
	if err != nil {
		return Status{}, err
	}
	st, ok, err := queryOne(ctx, c, q)
	if err != nil {
		return Status{}, fmt.Errorf("lease: get %q: %w", name, err)
	}
	if !ok {
		return Status{}, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return st, nil
}

// ListOn reads every lease row on c, ordered by name.
func ListOn(ctx context.Context, c Conn, table string) ([]Status, error) {
	q, err := ListSQL(table)
	if err != nil {
		return nil, err
	}
	rows, err := queryRetrying(ctx, c, q)
	if err != nil {
		return nil, fmt.Errorf("lease: list: %w", err)
	}
	out := make([]Status, 0, len(rows))
	for _, r := range rows {
		st, err := ParseStatus(r)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

func queryOne(ctx context.Context, c Conn, q string) (Status, bool, error) {
	rows, err := queryRetrying(ctx, c, q)
	if err != nil {
		return Status{}, false, err
	}
	switch len(rows) {
	case 0:
		return Status{}, false, nil
	case 1:
		st, err := ParseStatus(rows[0])
		return st, err == nil, err
	default:
		return Status{}, false, fmt.Errorf("lease: %d rows for one lease", len(rows))
	}
}

// Queryer is what NewConn needs: *sql.DB, *sql.Conn and *sql.Tx have it.
type Queryer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// NewConn adapts database/sql to Conn. Give it a *sql.Conn to keep an
// operation's statements on one session (Store does); a *sql.Tx would run
// them inside a transaction, which the lease operations must not be in.
// Statements are sent without arguments, so go-sql-driver/mysql uses the
// text protocol and no server-side prepare.
func NewConn(q Queryer) Conn { return sqlConn{q} }

type sqlConn struct{ q Queryer }

func (c sqlConn) Exec(ctx context.Context, query string) (int64, error) {
	res, err := c.q.ExecContext(ctx, query)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (c sqlConn) Query(ctx context.Context, query string) ([][]string, error) {
	rows, err := c.q.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out [][]string
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		row := make([]string, len(cols))
		for i, v := range vals {
			if !v.Valid {
				return nil, fmt.Errorf("lease: unexpected NULL in column %s", cols[i])
			}
			row[i] = v.String
		}
		out = append(out, row)
	}
	return out, rows.Err()
}
