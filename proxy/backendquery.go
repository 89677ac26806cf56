package proxy

import (
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// value is one column value of a row the proxy reads for itself.
type value struct {
	s    string
	null bool
}

// backendError is an ERR the backend returned to a query of the proxy's own.
type backendError struct{ errInfo }

func (e *backendError) Error() string {
	return fmt.Sprintf("backend error %d (%s): %s", e.code, e.state, e.msg)
}

// ErrorNumber is the server's error number: lease.IsConflict reads it to
// retry the SQL lease functions' statements on Galera's 1213.
func (e *backendError) ErrorNumber() uint16 { return e.code }

// backendQuery runs sql on the client's backend connection for the proxy's
// own purposes (lease checks, lease functions) and returns the rows of its
// result (text protocol). Nothing of it reaches the client; the session's
// status flags are updated from the final packet.
func (c *clientConn) backendQuery(sql string) ([][]value, error) {
	if err := c.queueOwn(sql); err != nil {
		return nil, err
	}
	if err := c.backend.flush(); err != nil {
		return nil, err
	}
	return c.readOwn()
}

// queueOwn writes a COM_QUERY of the proxy's own to the backend without
// flushing: several can be sent in one write and their responses read in
// order with readOwn (the server reads the next command only after it
// answered the last one).
func (c *clientConn) queueOwn(sql string) error {
	_, err := c.backend.writeCommand(0, []byte{mysql.COM_QUERY}, []byte(sql))
	return err
}

// readOwn reads the response to a statement of the proxy's own: the rows of
// its first result set (nil for an OK), or a *backendError for an ERR.
func (c *clientConn) readOwn() ([][]value, error) {
	var rows [][]value
	var firstErr error
	for {
		p, _, err := c.backend.readPacket(nil, maxWholePacket)
		if err != nil {
			return nil, err
		}
		if len(p) == 0 {
			return nil, c.backend.sideErr(malformed("empty response packet"))
		}
		more := false
		switch p[0] {
		case mysql.OK_HEADER:
			ok, valid := parseOK(p)
			if !valid {
				return nil, c.backend.sideErr(malformed("OK packet"))
			}
			c.noteStatus(ok.status)
			c.ownAffected = ok.affectedRows
			more = ok.status&mysql.SERVER_MORE_RESULTS_EXISTS != 0
		case mysql.ERR_HEADER:
			c.statusStale = true
			if firstErr == nil {
				firstErr = &backendError{parseErr(p)}
			}
		default:
			cols, _, _ := lenEnc(p)
			st, r, err := c.readRows(int(cols))
			if err != nil {
				return nil, err
			}
			if rows == nil {
				rows = r
			}
			more = st&mysql.SERVER_MORE_RESULTS_EXISTS != 0
		}
		if !more {
			return rows, firstErr
		}
	}
}

// backendExec runs a statement of the proxy's own that returns no rows on
// the client's backend connection and returns its affected-row count.
func (c *clientConn) backendExec(sql string) (uint64, error) {
	if _, err := c.backend.writeCommand(0, []byte{mysql.COM_QUERY}, []byte(sql)); err != nil {
		return 0, err
	}
	if err := c.backend.flush(); err != nil {
		return 0, err
	}
	p, _, err := c.backend.readPacket(nil, maxWholePacket)
	if err != nil {
		return 0, err
	}
	switch {
	case len(p) > 0 && p[0] == mysql.OK_HEADER:
		ok, valid := parseOK(p)
		if !valid {
			return 0, c.backend.sideErr(malformed("OK packet"))
		}
		c.noteStatus(ok.status)
		if ok.status&mysql.SERVER_MORE_RESULTS_EXISTS != 0 {
			return 0, c.backend.sideErr(malformed("unexpected further results"))
		}
		return ok.affectedRows, nil
	case len(p) > 0 && p[0] == mysql.ERR_HEADER:
		c.statusStale = true
		return 0, &backendError{parseErr(p)}
	}
	return 0, c.backend.sideErr(malformed("statement returned rows"))
}

// readRows reads a text result set after its column-count packet.
func (c *clientConn) readRows(cols int) (uint16, [][]value, error) {
	skip := cols
	if !c.deprecateEOF {
		skip++
	}
	for i := 0; i < skip; i++ {
		if _, _, err := c.backend.readPacket(nil, maxWholePacket); err != nil {
			return 0, nil, err
		}
	}
	var rows [][]value
	for {
		p, _, err := c.backend.readPacket(nil, maxWholePacket)
		if err != nil {
			return 0, nil, err
		}
		if len(p) > 0 && isTerminator(p[0], len(p)) {
			st, valid := eofStatus(p, c.deprecateEOF)
			if !valid {
				return 0, nil, c.backend.sideErr(malformed("result set terminator"))
			}
			c.noteStatus(st)
			return st, rows, nil
		}
		if len(p) > 0 && p[0] == mysql.ERR_HEADER {
			c.statusStale = true
			return 0, rows, &backendError{parseErr(p)}
		}
		row := make([]value, 0, cols)
		for i := 0; i < cols; i++ {
			v, n, null := lenEnc(p)
			if n == 0 || (!null && uint64(len(p)-n) < v) {
				return 0, nil, c.backend.sideErr(malformed("row"))
			}
			if null {
				row = append(row, value{null: true})
				p = p[n:]
				continue
			}
			row = append(row, value{s: string(p[n : n+int(v)])})
			p = p[n+int(v):]
		}
		rows = append(rows, row)
	}
}
