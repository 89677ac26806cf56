package proxy

import (
	"fmt"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// With guard triggers (fencing.database_guard: triggers), a write that
// carries its own fence (a fence comment) is checked by the triggers
// against the statement fence variables (lease.StmtFenceSetSQL), which the
// proxy sets right before that write and clears right after it, before it
// reads the client's next command: no later statement of the session sees
// them. The rewriter refuses a query of several statements with such a
// write. What the session shows afterwards: ROW_COUNT() is the clearing
// SET's 0; the write's warnings and FOUND_ROWS() stay (MariaDB 10.11).

// stmtFenceForTriggers is the fence a query's one write carries, when the
// guard triggers must see it; nil otherwise.
func stmtFenceForTriggers(rt *runtime, d rewrite.Decision) *lease.Presented {
	if d.Action == rewrite.Refuse || d.Action == rewrite.Answer || len(d.Stmts) != 1 {
		return nil
	}
	return stmtFenceOf(rt, &d.Stmts[0])
}

// stmtFenceOf is the fence st carries, when the guard triggers must see it.
func stmtFenceOf(rt *runtime, st *rewrite.Stmt) *lease.Presented {
	if rt.policy.DatabaseGuard != policy.GuardTriggers || rt.policy.Mode == policy.ModeShadow ||
		st.Kind != rewrite.Write || st.Fence == nil {
		return nil
	}
	return st.Fence.Presented
}

// underStmtFence runs a write that carries its own fence p between the
// setting and the clearing of the statement fence variables. skip consumes
// the client's command when the setting fails: the client then gets the
// server's error instead, and nothing of its command is sent.
func (c *clientConn) underStmtFence(p *lease.Presented, run, skip func() error) error {
	if _, err := c.backendExec(lease.StmtFenceSetSQL(*p)); err != nil {
		be, ok := err.(*wire.ServerError)
		if !ok {
			return err
		}
		if err := skip(); err != nil {
			return err
		}
		c.statusStale = true
		return c.sendError(be.Code, be.State, be.Msg)
	}
	if err := run(); err != nil {
		return err
	}
	return c.clearStmtFence()
}

// clearStmtFence clears the statement fence variables. An error there is
// the server's answer to a statement the client did not send: Galera
// reports a transaction that a replicated write aborted to the next
// statement, and a KILL QUERY may meet it. The SET is sent again, and the
// error kept for the client's next command (pendingErr), which the server
// would have answered with it; a second failure ends the session, since
// the variables may still hold the fence.
func (c *clientConn) clearStmtFence() error {
	_, err := c.backendExec(lease.StmtFenceClearSQL)
	if err == nil {
		return nil
	}
	first, ok := err.(*wire.ServerError)
	if !ok {
		return err
	}
	if _, err := c.backendExec(lease.StmtFenceClearSQL); err != nil {
		return c.backend.Err(fmt.Errorf("the statement fence variables could not be cleared (error %d, then %v): ending the session", first.Code, err))
	}
	c.statusStale = true
	if first.Code != erQueryInterrupted {
		c.pendingErr = first
	}
	return nil
}
