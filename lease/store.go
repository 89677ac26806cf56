package lease

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// DefaultTable is the lease table's default name (the contract's).
const DefaultTable = "fenced_job_leases"

// Store is the lease table over database/sql. It is safe for concurrent use.
// Each operation takes one connection from the pool and runs its statements
// there in autocommit mode: do not give it a pool whose DSN turns autocommit
// off.
type Store struct {
	db    *sql.DB
	table string
}

// NewStore returns a Store over db for the lease table table ("name" or
// "schema.name"; empty: DefaultTable in the DSN's database).
func NewStore(db *sql.DB, table string) (*Store, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := ValidateTable(table); err != nil {
		return nil, err
	}
	return &Store{db: db, table: table}, nil
}

// Table is the lease table's name as given to NewStore.
func (s *Store) Table() string { return s.table }

func (s *Store) with(ctx context.Context, f func(Conn) error) error {
	c, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	defer c.Close()
	return f(NewConn(c))
}

// Acquire takes lease name for ttl (database time) if it is absent or
// expired, under a fresh random owner token unless WithOwner is given. The
// fence token is one more than the lease's last one (1 for a new lease).
// ErrHeld if the lease is held.
//
// Any other error leaves the outcome unknown (the UPDATE may have committed
// before the connection failed); the lease then expires on its own. To be
// able to check and release it, generate the owner yourself
// (WithOwner(NewOwner())) and look at Get.
func (s *Store) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...AcquireOption) (l Lease, err error) {
	err = s.with(ctx, func(c Conn) error {
		l, err = AcquireOn(ctx, c, s.table, name, ttl, opts...)
		return err
	})
	return l, err
}

// Renew extends l to now + ttl (database time) if it is still held at its
// token, and returns it with its new expiry; ErrLost otherwise.
func (s *Store) Renew(ctx context.Context, l Lease, ttl time.Duration) (nl Lease, err error) {
	err = s.with(ctx, func(c Conn) error {
		nl, err = RenewOn(ctx, c, s.table, l, ttl)
		return err
	})
	return nl, err
}

// Release expires l now and keeps its row; ErrLost if it was not held at
// its token any more (expired included).
func (s *Store) Release(ctx context.Context, l Lease) error {
	return s.with(ctx, func(c Conn) error { return ReleaseOn(ctx, c, s.table, l) })
}

// Get reads lease name; ErrNotFound if it has no row.
func (s *Store) Get(ctx context.Context, name string) (st Status, err error) {
	err = s.with(ctx, func(c Conn) error {
		st, err = GetOn(ctx, c, s.table, name)
		return err
	})
	return st, err
}

// List reads every lease, ordered by name.
func (s *Store) List(ctx context.Context) (sts []Status, err error) {
	err = s.with(ctx, func(c Conn) error {
		sts, err = ListOn(ctx, c, s.table)
		return err
	})
	return sts, err
}
