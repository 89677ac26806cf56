package proxy

import (
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// backendQuery runs sql on the client's backend connection for the proxy's
// own purposes (lease checks, lease functions) and returns the rows of its
// result (text protocol). Nothing of it reaches the client; the session's
// status flags are updated from the final packet.
func (c *clientConn) backendQuery(sql string) ([][]wire.Value, error) {
	if err := c.queueOwn(sql); err != nil {
		return nil, err
	}
	if err := c.backend.Flush(); err != nil {
		return nil, err
	}
	return c.readOwn()
}

// queueOwn writes a COM_QUERY of the proxy's own to the backend without
// flushing: several can be sent in one write and their responses read in
// order with readOwn (the server reads the next command only after it
// answered the last one).
func (c *clientConn) queueOwn(sql string) error {
	c.warn = nil
	_, err := c.backend.WriteCommand(0, []byte{mysql.COM_QUERY}, []byte(sql))
	return err
}

// readOwn reads the response to a statement of the proxy's own: the rows of
// its first result set that has rows (nil for an OK), or a *wire.ServerError
// for an ERR. ownAffected takes the affected rows of its OKs.
func (c *clientConn) readOwn() ([][]wire.Value, error) {
	res, err := c.walker().Query()
	if res.OK {
		c.ownAffected = res.Affected
	}
	if err != nil {
		return nil, err
	}
	return res.Rows, backendErr(res.Err)
}

// backendErr is the ERR of a statement of the proxy's own as an error
// (nil: none).
func backendErr(e *wire.ErrInfo) error {
	if e == nil {
		return nil
	}
	return &wire.ServerError{ErrInfo: *e}
}

// backendExec runs a statement of the proxy's own that returns no rows on
// the client's backend connection and returns its affected-row count.
func (c *clientConn) backendExec(sql string) (uint64, error) {
	c.warn = nil
	if _, err := c.backend.WriteCommand(0, []byte{mysql.COM_QUERY}, []byte(sql)); err != nil {
		return 0, err
	}
	if err := c.backend.Flush(); err != nil {
		return 0, err
	}
	res, err := c.walker().Exec()
	if err != nil {
		return 0, err
	}
	return res.Affected, backendErr(res.Err)
}

// learnStatus makes c.status the server's again after an ERR, which
// carries no status flags: some errors end the transaction (a deadlock,
// a lock wait timeout under innodb_rollback_on_timeout, a failed COMMIT,
// Galera's certification failures, TiDB's write conflicts, a failing
// statement that commits implicitly: DROP TABLE of a missing table inside
// a transaction ends it), most do not (a duplicate key, a killed query,
// a plain lock wait timeout), and a failed first write under autocommit=0
// starts one. The proxy does not guess which: it asks the server with
// COM_PING, whose OK carries the status flags and which leaves SHOW
// WARNINGS, @@warning_count, @@error_count, FOUND_ROWS() and
// LAST_INSERT_ID() as they were (measured on MariaDB 10.11, Galera and
// TiDB 8.4: TestPingLeavesSessionAsItWas); on MariaDB it sets ROW_COUNT()
// to 0. Only a decision that depends on the transaction state asks (a
// guarded write, which sets ROW_COUNT() itself; a lease function, answered
// by the proxy; a drain), so an error costs nothing until one does.
//
// A *wire.ServerError is the server's answer to the ping (Galera reports a
// transaction aborted by a replicated write to the next command): the
// caller answers the client's command with it, as the server would have.
// Any other error is a failure of the backend connection.
func (c *clientConn) learnStatus() error {
	if !c.statusStale {
		return nil
	}
	return c.askStatus()
}

// askStatus asks the server for its status flags (COM_PING) whatever the
// proxy believes: see learnStatus.
func (c *clientConn) askStatus() error {
	c.warn = nil
	if _, err := c.backend.WriteCommand(0, []byte{mysql.COM_PING}, nil); err != nil {
		return err
	}
	if err := c.backend.Flush(); err != nil {
		return err
	}
	res, err := c.walker().Exec()
	if err != nil {
		return err
	}
	return backendErr(res.Err)
}
