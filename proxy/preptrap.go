package proxy

import (
	"encoding/binary"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy/fencing"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// The row-lease trap of a prepared UPDATE or DELETE whose WHERE pins no
// lease (rewrite.Trap.Prepared). The client's statement S is prepared with
// the plain per-row condition, and its N parameters are the client's. The
// trap repeats the WHERE, and with it the WHERE's k placeholders (the
// statement's last ones), so the proxy prepares the trapped statement T
// beside S on the same connection, with N+k parameters, and reads its
// answer itself. Each execution of S goes out as an execution of T, built
// from the client's packet: the N values as sent, then copies of the k
// values of the WHERE's placeholders, every type bound. When the trap
// fires, the server rolled T back; the proxy audits it (Tracker.TrapErr)
// and answers ERR 1644, or under zero_rows executes S, which changes the
// rows of the lease only. Where the proxy has no T (the server refused to
// prepare it) or cannot build T's execution (long data sent for S, a value
// type it does not decode, an execution larger than it reads), the
// execution is refused: S alone would skip the rows of other leases with
// no record.
//
// T lives and dies with S: COM_STMT_CLOSE of S closes it, a session reset
// drops both on the server and in the proxy, and its id is no statement
// of the client's (resolveStmt). COM_STMT_RESET of S is not sent for T:
// it drops long data and a cursor, and T never has either (the proxy sends
// it no long data, and an UPDATE or DELETE opens no cursor). Executions of
// T bind their types to T, so the server's types for S fall behind the
// client's (typesStale); an execution of S that binds none gets them from
// the proxy (plainExecute), in shadow mode too; an execution larger than
// the proxy reads that binds none is refused (the proxy does not rewrite
// what it does not read).

// trapStmt is the trapped variant T of a prepared statement, as the
// server knows it.
type trapStmt struct {
	id     uint32 // T's id on the server
	params int    // k: T's parameters after S's, copies of S's last k
}

// discardPrepare reads the answer to the proxy's own COM_STMT_PREPARE,
// which the client never sees, keeping an error's code.
type discardPrepare struct {
	c       *clientConn
	errCode uint16
}

func (h *discardPrepare) Prepared(_ wire.Prepared, n int) error {
	h.c.backend.DiscardPacket(n)
	return nil
}

func (h *discardPrepare) Err(p []byte, n int, _ bool) error {
	h.errCode = wire.ParseErr(p).Code
	h.c.backend.DiscardPacket(n)
	return nil
}

func (h *discardPrepare) Def() error {
	_, err := h.c.backend.SkipPacket()
	return err
}

// prepareTrap prepares T for ps, just prepared from sent (the text the
// server holds for S). Without T (the server refused it, say at
// max_prepared_stmt_count, or counts other parameters than the proxy)
// ps.trapLost says why, and its executions are refused.
func (c *clientConn) prepareTrap(rt *runtime, ps *preparedStmt, sent []byte) error {
	f := ps.stmt.Fence
	if rt.policy.Mode == policy.ModeShadow || !ps.fenced || ps.stmt.Kind != rewrite.Write || f == nil || f.Trap == nil ||
		!f.Trap.Prepared {
		return nil
	}
	text := f.Trap.Trapped(sent)
	if text == nil {
		ps.trapLost = "its text repeats fenceproxy's per-row condition (in a comment or a literal), and fenceproxy cannot " +
			"tell which copy to put its check of each row in"
		return nil
	}
	if len(text) >= wire.MaxPayload {
		ps.trapLost = "its check of each row would be longer than a packet"
		return nil
	}
	p, ok, errCode, err := c.prepareOwn(text)
	if err != nil {
		return err
	}
	if !ok {
		ps.trapLost = fmt.Sprintf("the server refused to prepare fenceproxy's check of each row beside it (ERR %d; "+
			"at max_prepared_stmt_count, close statements or raise it), then prepare it again", errCode)
		return nil
	}
	if int(p.Params) != ps.params+f.Trap.Params {
		ps.trapLost = fmt.Sprintf("the server counts %d placeholders in fenceproxy's check of each row and fenceproxy %d",
			p.Params, ps.params+f.Trap.Params)
		return c.closeServerStmt(p.StmtID, true)
	}
	ps.trap = &trapStmt{id: p.StmtID, params: f.Trap.Params}
	return nil
}

// trapRefusal refuses an execution of ps, an UPDATE or DELETE whose WHERE
// pins no lease, that cannot run with its trap (why).
func trapRefusal(ps *preparedStmt, why string) *rewrite.Refusal {
	r := &rewrite.Refusal{}
	var tpl *policy.Template
	if f := ps.stmt.Fence; f != nil && len(f.Targets) > 0 {
		r.Table, tpl = f.Targets[0].Schema+"."+f.Targets[0].Table, f.Targets[0].Template
	}
	r.Reason = rewrite.UnpinnedRefusal(tpl, "statement", why)
	return r
}

// prepareOwn prepares text, a statement of the proxy's own, and reads the
// answer, which the client never sees: the statement (ok), or the code of
// the server's ERR.
func (c *clientConn) prepareOwn(text []byte) (p wire.Prepared, ok bool, errCode uint16, err error) {
	if _, err := c.backend.WriteCommand(0, []byte{mysql.COM_STMT_PREPARE}, text); err != nil {
		return p, false, 0, err
	}
	if err := c.backend.Flush(); err != nil {
		return p, false, 0, err
	}
	h := &discardPrepare{c: c}
	p, ok, err = c.walker().Prepare(h)
	return p, ok, h.errCode, err
}

// closeServerStmt sends COM_STMT_CLOSE of a statement the proxy prepared,
// which the server does not answer; flush when nothing follows it.
func (c *clientConn) closeServerStmt(id uint32, flush bool) error {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], id)
	if _, err := c.backend.WriteCommand(0, []byte{mysql.COM_STMT_CLOSE}, b[:]); err != nil {
		return err
	}
	if flush {
		return c.backend.Flush()
	}
	return nil
}

// executeTrapped runs an execution of ps as an execution of its trapped
// variant (trap), or of ps itself with the types the server must be given
// again (shadow mode, after executions of T). An execution that cannot run
// as T's is refused (trapRefusal). handled is false when it left the
// packet unread, for the caller to run as any other execution: in shadow
// mode, one larger than the proxy reads, unless it binds no types while
// the server's types for S are stale: that one is refused (the server
// would read its values with other types).
func (c *clientConn) executeTrapped(rt *runtime, ps *preparedStmt, trap bool) (handled bool, err error) {
	limit := max(rt.cfg.Limits.MaxQueryBytes, wire.MaxWholePacket)
	n, _, err := c.client.PeekHeader()
	if err != nil {
		return true, err
	}
	refuse := func(why string) error {
		return c.fence.Refuse(rt.fenceRT(), trapRefusal(ps, why), ps.text)
	}
	if trap && (n == wire.MaxPayload || n-1 > limit) {
		if _, err := c.client.SkipPacket(); err != nil {
			return true, err
		}
		return true, refuse(fmt.Sprintf("this execution is larger than fenceproxy reads (%d bytes, limits.max_query_bytes)", limit))
	}
	if n == wire.MaxPayload || n-1 > limit {
		nb := (ps.params + 7) / 8
		if !ps.typesStale || ps.params == 0 || n < 10+nb+1 {
			return false, nil
		}
		head, err := c.client.PeekPrefix(n, wire.HeaderLen+10+nb+1)
		if err != nil {
			return true, err
		}
		if head[wire.HeaderLen+10+nb] != 0 {
			return false, nil
		}
		if _, err := c.client.SkipPacket(); err != nil {
			return true, err
		}
		return true, c.fence.Refuse(rt.fenceRT(), &rewrite.Refusal{Reason: "this execution is larger than fenceproxy reads " +
			"(limits.max_query_bytes) and binds no parameter types, which the server no longer holds for this statement " +
			"(fenceproxy ran its row-lease trap in its place); send the types with it (new-params-bound 1) or raise the limit"}, ps.text)
	}
	var payload []byte
	pkt, ok, err := c.client.PeekPacket()
	if err != nil {
		return true, err
	}
	if ok {
		payload = append([]byte(nil), pkt[wire.HeaderLen:]...)
		c.x.cmdSeq = pkt[3]
		c.client.Discard(len(pkt))
	} else if payload, c.x.cmdSeq, err = c.client.ReadPacket(nil, limit); err != nil {
		return true, err
	}
	if !trap {
		return true, c.runTrapped(rt, ps, c.plainExecute(ps, payload), nil, nil)
	}
	if ps.longData {
		// The values sent as long data are not in the packet, and T
		// holds none.
		return true, refuse("long data was sent for this statement (COM_STMT_SEND_LONG_DATA), which fenceproxy cannot " +
			"repeat for its check; bind every value in the execution (or COM_STMT_RESET the statement first)")
	}
	_, types, raw, derr := decodeParams(payload, ps.params, ps.types, func(int) bool { return false })
	if derr != nil {
		return true, refuse("fenceproxy cannot read the values bound to this execution: " + derr.Error())
	}
	if ps.trap.params > ps.params {
		return true, refuse("the server counts fewer placeholders in this statement than its WHERE holds")
	}
	trapped := buildExecute(payload, ps.trap.id, ps.params, ps.trap.params, types, raw)
	if len(trapped) >= wire.MaxPayload {
		return true, refuse("this execution with its check would be longer than a packet")
	}
	plain := c.plainExecute(ps, payload)
	ps.types = types
	var confirm func() (bool, error)
	if k := ps.trap.params; k > 0 && ps.stmt.Fence.Trap.Confirm != "" {
		where := lastParams(ps.params, k) // the WHERE's values
		confirm = func() (bool, error) {
			return c.confirmPrepared(ps.stmt.Fence.Trap.Confirm, k, func(id uint32) []byte {
				x := executeOf(payload, id, where, types, raw)
				// No cursor: the client's flags may ask for one
				// (CURSOR_TYPE_READ_ONLY), and a SELECT executed so
				// answers without its rows.
				x[5] = 0
				return x
			})
		}
	}
	return true, c.runTrapped(rt, ps, trapped, plain, confirm)
}

// confirmPrepared runs the trap's confirming read (text, with k
// placeholders) of a prepared write whose WHERE has placeholders: the
// proxy prepares it, executes it with the WHERE's values of the write's
// execution (exec builds that execution for the read's id), and closes
// it. found is whether it read a row; a server that refused to prepare it
// answers found, and the trap stands.
func (c *clientConn) confirmPrepared(text string, k int, exec func(id uint32) []byte) (found bool, err error) {
	p, ok, _, err := c.prepareOwn([]byte(text))
	if err != nil || !ok {
		return true, err
	}
	if int(p.Params) != k {
		return true, c.closeServerStmt(p.StmtID, true)
	}
	if _, err := c.backend.WritePacket(0, exec(p.StmtID)); err != nil {
		return false, err
	}
	if err := c.backend.Flush(); err != nil {
		return false, err
	}
	n, res, err := c.walker().Count()
	if err != nil {
		return false, err
	}
	if err := c.closeServerStmt(p.StmtID, true); err != nil {
		return false, err
	}
	if res.Err != nil {
		return false, backendErr(res.Err)
	}
	return n > 0, nil
}

// plainExecute is the client's execution of S as the server must get it:
// as sent, or, when it binds no types (new-params-bound 0) and an
// execution of T left the server's types for S other than the client's
// last (typesStale), with those types bound. It notes the types an
// execution that binds them binds.
func (c *clientConn) plainExecute(ps *preparedStmt, payload []byte) []byte {
	if ps.params == 0 {
		return payload
	}
	h, err := readExecuteHeader(payload, ps.params)
	switch {
	case err != nil:
		return payload // the server answers it
	case h.bound:
		ps.types = h.types
		return payload
	case !ps.typesStale || len(ps.types) != ps.params:
		return payload
	}
	out := make([]byte, 0, len(payload)+2*ps.params)
	out = append(out, payload[:h.flagAt]...)
	out = append(out, 1)
	for _, t := range ps.types {
		out = binary.LittleEndian.AppendUint16(out, t)
	}
	return append(out, h.values...)
}

// buildExecute is a COM_STMT_EXECUTE of statement id with n+k parameters
// from p, the client's execution of n: its flags and iteration count, the
// n values as sent, then copies of its last k, every type bound (types).
func buildExecute(p []byte, id uint32, n, k int, types []uint16, raw [][]byte) []byte {
	src := make([]int, 0, n+k)
	for i := 0; i < n; i++ {
		src = append(src, i)
	}
	return executeOf(p, id, append(src, lastParams(n, k)...), types, raw)
}

// lastParams are the indices of the last k of n parameters: the WHERE's,
// which the trapped variant repeats.
func lastParams(n, k int) []int {
	idx := make([]int, k)
	for i := range idx {
		idx[i] = n - k + i
	}
	return idx
}

// executeOf is a COM_STMT_EXECUTE of statement id from p, the client's
// execution: its flags and iteration count, and for each parameter the
// value of p's parameter src[i] (its NULL bit, its type from types, its
// bytes from raw), every type bound.
func executeOf(p []byte, id uint32, src []int, types []uint16, raw [][]byte) []byte {
	m := len(src)
	size := 10 + (m+7)/8 + 1 + 2*m
	for _, j := range src {
		size += len(raw[j])
	}
	out := make([]byte, 0, size)
	out = append(out, p[0])
	out = binary.LittleEndian.AppendUint32(out, id)
	out = append(out, p[5:10]...)
	if m == 0 {
		return out
	}
	bitmap := make([]byte, (m+7)/8)
	for i, j := range src {
		if p[10+j/8]&(1<<(j%8)) != 0 {
			bitmap[i/8] |= 1 << (i % 8)
		}
	}
	out = append(out, bitmap...)
	out = append(out, 1)
	for _, j := range src {
		out = binary.LittleEndian.AppendUint16(out, types[j])
	}
	for _, j := range src {
		out = append(out, raw[j]...)
	}
	return out
}

// runTrapped sends first (T's execution, or S's when T's could not be
// built) and relays its answer. again, S's execution, is what zero_rows
// sends when T's trap fired.
func (c *clientConn) runTrapped(rt *runtime, ps *preparedStmt, first, again []byte, confirm func() (bool, error)) error {
	sendPacket := func(p []byte) func() error {
		return func() error {
			next, err := c.backend.WritePacket(0, p)
			if err != nil {
				return err
			}
			c.x.align(next, c.x.cmdSeq+1)
			// T's execution binds its types, not S's: the server keeps
			// S's from S's last execution (or none).
			ps.typesStale = ps.params > 0 && binary.LittleEndian.Uint32(p[1:]) == ps.trap.id
			return c.backend.Flush()
		}
	}
	t := fencing.NewTracker(&c.fence, rt.fenceRT(), []rewrite.Stmt{ps.stmt}, true)
	if again != nil {
		t.SetResend(sendPacket(again)).SetRetrap(sendPacket(first)).SetConfirm(confirm)
	}
	if f := c.fence.GuardOf(&ps.stmt); f != nil && rt.policy.Mode != policy.ModeShadow {
		return c.fence.GuardedWith(rt.fenceRT(), f, t, sendPacket(first), func() error { return nil })
	}
	if err := sendPacket(first)(); err != nil {
		return err
	}
	if err := c.relayResults(t); err != nil {
		return err
	}
	return t.Finish()
}
