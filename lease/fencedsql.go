package lease

import (
	"context"
	"database/sql/driver"
	"errors"
	"strconv"
	"strings"
)

// A job on a shared connection pool cannot keep its fence in session
// variables: the pool hands each statement whichever connection is free.
// Instead each statement carries its own fence, as a sqlcommenter comment
// the proxy reads and removes:
//
//	/*fence_lease='invoice%3Aacme',fence_owner='...',fence_token='42'*/ UPDATE ...
//
// WithFence puts a lease into a context; a database/sql pool opened with
// FencedConnector adds that lease's comment to every statement run with
// the context (ExecContext, QueryContext, PrepareContext, and every
// statement of a transaction begun with it). The proxy then fences that
// statement under the comment's lease and leaves the connection's session
// variables as they are. Run the job under the Keeper's context
// (Store.Keep): when the lease is lost the context is canceled and
// database/sql stops the job's statements.

type fenceCtxKey struct{}

// WithFence returns a context whose statements, run on a pool opened with
// FencedConnector, carry l's fence.
func WithFence(ctx context.Context, l Lease) context.Context {
	return context.WithValue(ctx, fenceCtxKey{}, l)
}

// FenceFrom returns the lease WithFence put into ctx.
func FenceFrom(ctx context.Context) (Lease, bool) {
	l, ok := ctx.Value(fenceCtxKey{}).(Lease)
	return l, ok
}

// FenceComment is l's fence as a sqlcommenter comment, keys in sorted
// order, values percent-encoded (every byte but A-Z a-z 0-9 - . _ ~), so
// that it reads the same under every sql_mode and character set. It is
// "" for a lease that cannot carry a fence (see ValidatePresented).
func FenceComment(l Lease) string {
	if ValidatePresented(Presented{Lease: l.Name, Owner: l.Owner, Token: l.Token}) != nil {
		return ""
	}
	return "/*fence_lease='" + urlEncode(l.Name) + "',fence_owner='" + urlEncode(l.Owner) +
		"',fence_token='" + strconv.FormatUint(l.Token, 10) + "'*/"
}

// WithFenceComment returns query with l's fence comment at its start.
// (At the start, not the end: a query that ends in a -- comment would
// swallow a comment appended to it.)
func WithFenceComment(query string, l Lease) (string, error) {
	c := FenceComment(l)
	if c == "" {
		return "", errors.New("lease: this lease cannot carry a statement fence (invalid name or owner)")
	}
	return c + " " + query, nil
}

func urlEncode(s string) string {
	const hexd = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexd[c>>4])
		b.WriteByte(hexd[c&15])
	}
	return b.String()
}

// FencedConnector wraps a database/sql connector (mysql.NewConnector of
// github.com/go-sql-driver/mysql, or any other) so that every statement
// run with a context from WithFence carries that fence:
//
//	c, _ := mysql.NewConnector(cfg)
//	db := sql.OpenDB(lease.FencedConnector(c))
//	jobCtx, k := store.Keep(ctx, l, ttl)
//	ctx := lease.WithFence(jobCtx, l)
//	db.ExecContext(ctx, "UPDATE invoices SET paid = 1 WHERE id = ?", id)
//
// A transaction begun with such a context carries its fence on every
// statement, whatever context they run with; a statement run with a
// context of its own fence carries that one. A prepared statement carries
// the fence of the context it was prepared with (database/sql may prepare
// it again on another connection with the context of the call that needs
// it: pass the fenced context to every call). Statements run without a
// fence are sent unchanged (the session's fence variables apply to them).
func FencedConnector(base driver.Connector) driver.Connector {
	return &fencedConnector{base: base}
}

type fencedConnector struct{ base driver.Connector }

func (c *fencedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &fencedConn{Conn: conn}, nil
}

func (c *fencedConnector) Driver() driver.Driver { return c.base.Driver() }

// fencedConn adds the fence comment to the statements of one connection.
type fencedConn struct {
	driver.Conn
	tx *Lease // the fence of the transaction in progress, if it was begun with one
}

// text returns query with the fence that applies to it: ctx's, else the
// transaction's.
func (c *fencedConn) text(ctx context.Context, query string) (string, error) {
	l, ok := FenceFrom(ctx)
	if !ok {
		if c.tx == nil {
			return query, nil
		}
		l = *c.tx
	}
	return WithFenceComment(query, l)
}

func (c *fencedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	q, err := c.text(ctx, query)
	if err != nil {
		return nil, err
	}
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, q)
	}
	return c.Conn.Prepare(q)
}

func (c *fencedConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *fencedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	q, err := c.text(ctx, query)
	if err != nil {
		return nil, err
	}
	return e.ExecContext(ctx, q, args)
}

func (c *fencedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	e, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	q, err := c.text(ctx, query)
	if err != nil {
		return nil, err
	}
	return e.QueryContext(ctx, q, args)
}

func (c *fencedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	var tx driver.Tx
	var err error
	if b, ok := c.Conn.(driver.ConnBeginTx); ok {
		tx, err = b.BeginTx(ctx, opts)
	} else {
		//lint:ignore SA1019 the driver has nothing else
		tx, err = c.Conn.Begin() //nolint:staticcheck
	}
	if err != nil {
		return nil, err
	}
	c.tx = nil
	if l, ok := FenceFrom(ctx); ok {
		c.tx = &l
	}
	return &fencedTx{Tx: tx, c: c}, nil
}

func (c *fencedConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *fencedConn) ResetSession(ctx context.Context) error {
	c.tx = nil
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *fencedConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *fencedConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *fencedConn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

type fencedTx struct {
	driver.Tx
	c *fencedConn
}

func (t *fencedTx) Commit() error {
	t.c.tx = nil
	return t.Tx.Commit()
}

func (t *fencedTx) Rollback() error {
	t.c.tx = nil
	return t.Tx.Rollback()
}
