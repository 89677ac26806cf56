package proxy

import (
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy/fencing"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// applyResult records what a statement the fencing layer's tracker followed did to the
// session: its table locks, and, when it succeeded, its session effects.
func (c *clientConn) applyResult(rt fencing.Runtime, st *rewrite.Stmt, r fencing.Result) {
	c.applyLocks(st, r)
	if !r.IsErr {
		c.applyEffect(rt, st)
	}
}

// Errors after which a LOCK TABLES kept the session's earlier table locks:
// the server raised them before it released anything (measured on
// MariaDB 10.11; 1146, a missing table, came after the release).
const (
	erParseError   = 1064
	erNonuniqTable = 1066
)

// applyLocks follows the session's table locks through a statement's result.
func (c *clientConn) applyLocks(st *rewrite.Stmt, r fencing.Result) {
	locks := st.Locks
	if st.Kind == rewrite.Execute {
		if ps := c.named[st.Name]; ps != nil {
			locks = ps.stmt.Locks
		}
	}
	switch locks {
	case rewrite.LocksTaken:
		if !r.IsErr {
			c.setTablesLocked(true)
		} else if r.Err.Code != erParseError && r.Err.Code != erNonuniqTable {
			c.setTablesLocked(false)
		}
	case rewrite.LocksReleased:
		if !r.IsErr {
			c.setTablesLocked(false)
		}
	case rewrite.LocksReleasedIfChained:
		// COMMIT and ROLLBACK chain a new transaction under completion_type
		// = CHAIN, and a transaction that starts releases the table locks.
		if !r.IsErr && r.OK.Status&mysql.SERVER_STATUS_IN_TRANS != 0 {
			c.setTablesLocked(false)
		}
	case rewrite.LocksMaybeReleased:
		c.setTablesLocked(false)
	}
}

// applyEffect records what a successful statement changed in the session.
func (c *clientConn) applyEffect(rt fencing.Runtime, st *rewrite.Stmt) {
	// NO_BACKSLASH_ESCAPES came from the OK's status flags already.
	if c.sess.Apply(st, rewrite.AfterResult).Charset {
		c.setCharset(c.sess.UnsafeCharset)
	}
	switch st.Kind {
	case rewrite.Prepare:
		inner := st.Prepared
		if inner == nil && st.Fence != nil {
			inner = &rewrite.Stmt{Kind: rewrite.Write, Fence: st.Fence}
		}
		if c.named == nil {
			c.named = map[string]*preparedStmt{}
		}
		ps := &preparedStmt{gen: rt.Gen}
		if inner != nil {
			ps.stmt = *inner
			ps.fenced = inner.Kind == rewrite.Write && rt.Policy.Mode != policy.ModeShadow
		}
		c.named[st.Name] = ps
	case rewrite.Execute:
		// EXECUTE of a prepared SET has that SET's effect.
		if ps := c.named[st.Name]; ps != nil && ps.stmt.Kind != rewrite.Write && ps.stmt.Kind != rewrite.Execute {
			c.applyEffect(rt, &ps.stmt)
		}
	case rewrite.Deallocate:
		delete(c.named, st.Name)
	case rewrite.XAStart:
		c.xaBranch = true
	}
}
