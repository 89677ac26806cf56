package proxy

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy/fencing"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// maxKeptBuffer bounds the scratch buffer a connection keeps between
// commands; a larger one (a huge statement) is dropped after use.
const maxKeptBuffer = 1 << 20

// readCommand returns the payload of the client's current command packet:
// in place when it fits the read buffer (consume it with consume), else
// read into c.buf up to limit bytes. A larger statement is consumed and
// answered with an error, and payload is nil.
func (c *clientConn) readCommand(limit int) (payload []byte, inPlace bool, err error) {
	pkt, ok, err := c.client.PeekPacket()
	if err != nil {
		return nil, false, err
	}
	if ok {
		return pkt[wire.HeaderLen:], true, nil
	}
	payload, c.x.cmdSeq, err = c.client.ReadPacket(c.buf[:0], limit+1)
	if errors.Is(err, wire.ErrTooLarge) {
		// As a server past max_allowed_packet: the error, then the end of
		// the connection.
		c.sendError(erNetPacketTooBig, "08S01", fmt.Sprintf(
			"fenceproxy: statement larger than limits.max_query_bytes (%d bytes): it cannot be checked for protected tables", limit))
		c.client.Flush()
		return nil, false, c.client.Err(wire.ErrTooLarge)
	}
	if err != nil {
		return nil, false, err
	}
	if cap(payload) <= maxKeptBuffer {
		c.buf = payload[:0]
	}
	return payload, false, nil
}

// consumeCommand drops the current command packet if it is still unread.
func (c *clientConn) consumeCommand(payload []byte, inPlace bool) {
	if inPlace {
		c.client.Discard(wire.HeaderLen + len(payload))
	}
}

// sendOriginal forwards the client's command as it came.
func (c *clientConn) sendOriginal(payload []byte, inPlace bool) error {
	if inPlace {
		return c.forwardCommand()
	}
	if _, err := c.backend.WritePacket(0, payload); err != nil {
		return err
	}
	return c.backend.Flush()
}

// sendRewritten sends cmd+sql in place of the client's command and aligns
// the response's sequence numbers with what the client expects.
func (c *clientConn) sendRewritten(cmd byte, sql []byte) error {
	next, err := c.backend.WriteCommand(0, []byte{cmd}, sql)
	if err != nil {
		return err
	}
	c.x.align(next, c.x.cmdSeq+1)
	return c.backend.Flush()
}

// comQuery handles COM_QUERY: ask the rewriter, then forward, send the
// fenced text, refuse, or answer a lease function.
func (c *clientConn) comQuery(rt *runtime) error {
	payload, inPlace, err := c.readCommand(rt.cfg.Limits.MaxQueryBytes)
	if payload == nil {
		return err
	}
	if c.prevWarn != nil {
		switch rewrite.ReadWarningsQuery(payload[1:], c.srv, &c.sess) {
		case rewrite.ShowWarnings:
			c.consumeCommand(payload, inPlace)
			return c.answerWarnings()
		case rewrite.CountWarnings:
			c.consumeCommand(payload, inPlace)
			return c.answerWarningCount()
		}
	}
	d := c.decide(rt, payload[1:], false)
	if len(d.Stmts) > 1 && !c.multiStatements {
		// Never more than the server would run for this session.
		if handled, err := c.refuseMultiStatement(payload, inPlace, len(d.Stmts)); handled {
			return err
		}
	}
	if d.Action == rewrite.Forward && d.Stmts == nil && d.SQL == nil {
		// The hot path: nothing here concerns fencing.
		c.p.metrics.stmtForwarded.Inc()
		if c.p.catalog != nil && d.ChangesSchema {
			if err := c.sendOriginal(payload, inPlace); err != nil {
				return err
			}
			err := c.relayResults(nil)
			c.afterDDL()
			return err
		}
		if err := c.sendOriginal(payload, inPlace); err != nil {
			return err
		}
		return c.relayResults(nil)
	}
	if r := c.staleNamedPrepare(rt, d.Stmts); r != nil {
		d = rewrite.Decision{Action: rewrite.Refuse, Refusal: r}
	}
	if r := c.xaRefusal(d.Stmts); r != nil {
		if rt.policy.Mode != policy.ModeShadow {
			c.consumeCommand(payload, inPlace)
			return c.fence.Refuse(rt.fenceRT(), r, string(payload[1:]))
		}
		c.fence.AuditRefusal(rt.fenceRT(), r, string(payload[1:]), "shadow")
	}
	if p := stmtFenceForTriggers(rt, d); p != nil {
		return c.underStmtFence(p, func() error { return c.runQuery(rt, d, payload, inPlace) },
			func() error { c.consumeCommand(payload, inPlace); return nil })
	}
	return c.runQuery(rt, d, payload, inPlace)
}

// runQuery carries out the decision d on a COM_QUERY.
func (c *clientConn) runQuery(rt *runtime, d rewrite.Decision, payload []byte, inPlace bool) error {
	switch d.Action {
	case rewrite.Refuse:
		sql := rewrite.DigestInput(payload[1:]) // all that the audit record's digest reads
		c.consumeCommand(payload, inPlace)
		return c.fence.Refuse(rt.fenceRT(), d.Refusal, sql)
	case rewrite.Answer:
		c.consumeCommand(payload, inPlace)
		return c.answerLeaseCall(rt, d.Call)
	case rewrite.Send:
		if sendsFence(d) {
			c.p.metrics.stmtFenced.Inc()
		} else {
			c.p.metrics.stmtForwarded.Inc() // only a statement fence's keys removed
		}
		c.consumeCommand(payload, inPlace)
		// A write with a row-lease trap runs alone too: when it fires the
		// proxy sends it again without the trap, and the server stops a
		// packet at the first error.
		if len(d.Stmts) > 1 && (rt.policy.OnStale == policy.OnStaleError && hasWrite(d.Stmts) || c.fence.HasGuarded(d.Stmts) ||
			hasTrap(d.Stmts)) {
			return c.fence.RunOneByOne(rt.fenceRT(), d.SQL, d.Stmts)
		}
		if len(d.Stmts) == 1 {
			if f := c.fence.GuardOf(&d.Stmts[0]); f != nil {
				sql := d.SQL
				return c.fence.Guarded(rt.fenceRT(), f, d.Stmts, sql, func() error { return c.sendRewritten(mysql.COM_QUERY, sql) }, nil)
			}
		}
		if err := c.sendRewritten(mysql.COM_QUERY, d.SQL); err != nil {
			return err
		}
	default: // Forward, with statements to follow (session effects, shadow mode)
		if hasWrite(d.Stmts) {
			c.p.metrics.stmtFenced.Inc()
		} else {
			c.p.metrics.stmtForwarded.Inc()
		}
		if rt.policy.Mode == policy.ModeShadow {
			if err := c.fence.ShadowCheck(rt.fenceRT(), d.Stmts); err != nil {
				return err
			}
			if d.SQL != nil {
				c.consumeCommand(payload, inPlace)
				if err := c.sendRewritten(mysql.COM_QUERY, d.SQL); err != nil {
					return err
				}
				t := fencing.NewTracker(&c.fence, rt.fenceRT(), d.Stmts, len(d.Stmts) == 1)
				if err := c.relayResults(t); err != nil {
					return err
				}
				return t.Finish()
			}
		} else if len(d.Stmts) > 1 && c.fence.HasGuarded(d.Stmts) {
			sql := append([]byte(nil), payload[1:]...)
			c.consumeCommand(payload, inPlace)
			return c.fence.RunOneByOne(rt.fenceRT(), sql, d.Stmts)
		} else if len(d.Stmts) == 1 {
			if f := c.fence.GuardOf(&d.Stmts[0]); f != nil {
				return c.fence.Guarded(rt.fenceRT(), f, d.Stmts, nil, func() error { return c.sendOriginal(payload, inPlace) },
					func() error { c.consumeCommand(payload, inPlace); return nil })
			}
		}
		if err := c.sendOriginal(payload, inPlace); err != nil {
			return err
		}
	}
	t := fencing.NewTracker(&c.fence, rt.fenceRT(), d.Stmts, len(d.Stmts) == 1)
	if d.Action == rewrite.Send {
		t.SetText(d.SQL)
	}
	if err := c.relayResults(t); err != nil {
		return err
	}
	return t.Finish()
}

// hasTrap reports whether a statement is a write with a row-lease trap
// (rewrite.Fence.Trap).
func hasTrap(stmts []rewrite.Stmt) bool {
	for i := range stmts {
		if f := stmts[i].Fence; stmts[i].Kind == rewrite.Write && f != nil && f.Trap != nil {
			return true
		}
	}
	return false
}

// comPrepare handles COM_STMT_PREPARE: the statement is fenced once and the
// fence is evaluated at every execution.
func (c *clientConn) comPrepare(rt *runtime) error {
	payload, inPlace, err := c.readCommand(rt.cfg.Limits.MaxQueryBytes)
	if payload == nil {
		return err
	}
	d := c.decide(rt, payload[1:], true)
	switch d.Action {
	case rewrite.Refuse:
		sql := rewrite.DigestInput(payload[1:]) // all that the audit record's digest reads
		c.consumeCommand(payload, inPlace)
		c.stmts.failed()
		return c.fence.Refuse(rt.fenceRT(), d.Refusal, sql)
	case rewrite.Answer:
		c.consumeCommand(payload, inPlace)
		return c.prepareLeaseCall(rt, d.Call)
	case rewrite.Send:
		if sendsFence(d) {
			c.p.metrics.stmtFenced.Inc()
		} else {
			c.p.metrics.stmtForwarded.Inc()
		}
		c.consumeCommand(payload, inPlace)
		if err := c.sendRewritten(mysql.COM_STMT_PREPARE, d.SQL); err != nil {
			return err
		}
	default:
		c.p.metrics.stmtForwarded.Inc()
		if d.SQL != nil {
			// Shadow mode: without the statement's fence keys.
			c.consumeCommand(payload, inPlace)
			if err := c.sendRewritten(mysql.COM_STMT_PREPARE, d.SQL); err != nil {
				return err
			}
		} else if err := c.sendOriginal(payload, inPlace); err != nil {
			return err
		}
	}
	id, params, ok, err := c.relayPrepareResponse()
	if err != nil {
		return err
	}
	if !ok {
		c.stmts.failed()
		return nil
	}
	c.stmts.prepared(id)
	// Remember what executing it does (a protected write to check, a
	// session effect such as a prepared SET sql_mode, or nothing), and
	// under which policy that was decided.
	if c.prepared == nil {
		c.prepared = map[uint32]*preparedStmt{}
	}
	// A guarded write is prepared as it was written; every execution is
	// guarded.
	ps := &preparedStmt{gen: rt.gen, fenced: sendsFence(d) || len(d.Stmts) == 1 && c.fence.GuardOf(&d.Stmts[0]) != nil,
		text: string(payload[1:]), sent: sentDigest(d, payload[1:]), params: int(params)}
	if len(d.Stmts) == 1 {
		ps.stmt = d.Stmts[0]
	}
	c.prepared[id] = ps
	if d.Action == rewrite.Send {
		return c.prepareTrap(rt, ps, d.SQL)
	}
	return nil
}

// decide asks the rewriter about a COM_QUERY text or a statement to
// prepare, as the current policy says: when the answer depends on what the
// proxy can learn (the catalog since the statement arrived, an sql_mode or
// character set it could not track), it learns it and asks again (settle);
// in shadow mode what would be sent or refused is relayed unfenced, without
// the fence keys in its comments (rewrite.Engine.Shadow).
func (c *clientConn) decide(rt *runtime, sql []byte, prepare bool) rewrite.Decision {
	arrived := time.Now()
	ask := func(e *rewrite.Engine) rewrite.Decision {
		if prepare {
			return e.Prepare(sql, c.srv, &c.sess)
		}
		return e.Query(sql, c.srv, &c.sess)
	}
	eng := rt.engine
	d := settle(ask(eng), settler{
		catalog: func(d rewrite.Decision) rewrite.Decision {
			d = c.freshCatalogFor(d, arrived, ask)
			eng = c.p.rt.Load().engine
			return d
		},
		sqlMode: c.learnSQLMode,
		charset: func(d rewrite.Decision) bool {
			return (c.charsetUnknown || d.Refusal.CharsetUnknown) && c.learnCharset()
		},
		ask: func() rewrite.Decision { return ask(eng) },
	})
	d = c.unguardedRefusal(rt, d)
	if rt.policy.Mode == policy.ModeShadow && d.Action != rewrite.Forward && d.Action != rewrite.Answer {
		d = c.fence.Shadow(rt.fenceRT(), d, eng.Shadow(d, sql, c.srv, &c.sess, prepare), sql)
	}
	return d
}

// settler is what the proxy can do about a statement refused for what it
// does not know yet: read the catalog again (freshCatalogFor), learn the
// session's sql_mode or character set (each reports whether the reading
// changed), and ask the rewriter again.
type settler struct {
	catalog func(rewrite.Decision) rewrite.Decision
	sqlMode func() bool
	charset func(rewrite.Decision) bool
	ask     func() rewrite.Decision
}

// settle asks again until the refusal is not one the proxy can do
// anything more about. Each answer is settled, not only the first: a
// statement first refused because the session's sql_mode was unknown may,
// once it is learned, be refused because it writes an object the catalog
// never saw, and that refusal must have its catalog read (without it a
// valid write to a table created a moment ago was refused for good).
// sql_mode and the character set are learned at most once; the catalog is
// read again for each new such refusal, until a read leaves one unsettled.
func settle(d rewrite.Decision, s settler) rewrite.Decision {
	mode, charset, catalogStuck := false, false, false
	for catalogReads := 0; d.Action == rewrite.Refuse; {
		switch {
		case d.Refusal.CatalogUnknown && !catalogStuck && catalogReads < 3:
			catalogReads++
			d = s.catalog(d)
			catalogStuck = d.Action == rewrite.Refuse && d.Refusal.CatalogUnknown
		case d.Refusal.SQLModeUnknown && !mode:
			mode = true
			if s.sqlMode() {
				d = s.ask()
			}
		case !charset:
			charset = true
			if s.charset(d) {
				d = s.ask()
			}
		default:
			return d
		}
	}
	return d
}

// redecide checks a statement prepared under an older fencing policy
// against the current one. A statement the server holds unfenced that now
// writes a protected table cannot run: the client must prepare it again
// (fail closed). It returns the refusal to answer with, or nil.
func (c *clientConn) redecide(rt *runtime, ps *preparedStmt) *rewrite.Refusal {
	d := c.decide(rt, []byte(ps.text), true)
	switch {
	case d.Action == rewrite.Refuse:
		return d.Refusal
	case sendsFence(d) && !ps.fenced:
		t := ""
		if f := writeFence(d.Stmts); f != nil && len(f.Targets) > 0 {
			t = f.Targets[0].Schema + "." + f.Targets[0].Table
		}
		return &rewrite.Refusal{Table: t, Reason: "the fencing policy changed since this statement was prepared " +
			"and now protects a table it writes; prepare it again"}
	case ps.fenced && (sentDigest(d, []byte(ps.text)) != ps.sent || len(d.Stmts) != 1 || !sameFence(ps.stmt.Fence, d.Stmts[0].Fence)):
		// The server holds the fence (or the guard checks the fence) the
		// statement was prepared with: a reload that changes it (a table's
		// lease made a template, another fixed lease) must not leave the
		// old one in force (found by red team 3: after "invoice:{customer_id}"
		// was configured, an UPDATE prepared before it changed beta's rows
		// under acme's fence).
		t := ""
		if f := ps.stmt.Fence; f != nil && len(f.Targets) > 0 {
			t = f.Targets[0].Schema + "." + f.Targets[0].Table
		}
		return &rewrite.Refusal{Table: t, Reason: "the fencing policy changed since this statement was prepared " +
			"and changes how its write is fenced; prepare it again"}
	}
	ps.gen = rt.gen
	switch {
	case !ps.fenced:
		ps.stmt = rewrite.Stmt{}
		if len(d.Stmts) == 1 {
			ps.stmt = d.Stmts[0]
		}
	case len(d.Stmts) == 1:
		// The same fence on the same text: the new decision's, which
		// reads the table as the last check did (a template column's
		// type).
		ps.stmt = d.Stmts[0]
	}
	return nil
}

// sentDigest is the SHA-256 of the text d sends the server for a
// statement whose client text is text.
func sentDigest(d rewrite.Decision, text []byte) [32]byte {
	if d.SQL != nil {
		return sha256.Sum256(d.SQL)
	}
	return sha256.Sum256(text)
}

// sameFence reports whether two decisions fence a write alike: the same
// targets under the same leases (fixed, the session's, a template and its
// row lease), the same presented fence, guard and answer.
func sameFence(a, b *rewrite.Fence) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Guard != b.Guard || a.Rows != b.Rows || (a.Presented == nil) != (b.Presented == nil) ||
		a.Presented != nil && *a.Presented != *b.Presented || len(a.Targets) != len(b.Targets) ||
		(a.Trap == nil) != (b.Trap == nil) || a.Trap != nil && (a.Trap.Cond != b.Trap.Cond || a.Trap.Confirm != b.Trap.Confirm) {
		// A reload that changes a template column's collation makes a
		// pinned WHERE unpinned: the write then needs the trap.
		return false
	}
	for i := range a.Targets {
		x, y := a.Targets[i], b.Targets[i]
		if !strings.EqualFold(x.Schema, y.Schema) || !strings.EqualFold(x.Table, y.Table) || x.Lease != y.Lease ||
			x.RowLease != y.RowLease || (x.RowParams == nil) != (y.RowParams == nil) || (x.Template == nil) != (y.Template == nil) ||
			x.Template != nil && x.Template.Text != y.Template.Text {
			return false
		}
	}
	return true
}

// comExecute handles COM_STMT_EXECUTE of the statement its id names as
// the server resolves it; only fenced statements and lease calls need more
// than a relay.
func (c *clientConn) comExecute(rt *runtime, head []byte) error {
	id, ps, none := c.resolveStmt(head)
	if none {
		return c.unknownStmt(mysql.COM_STMT_EXECUTE, id)
	}
	if ps == nil {
		// No statement the proxy knows: the server knows none either, and
		// answers for it.
		if err := c.forwardCommand(); err != nil {
			return err
		}
		return c.relayResults(nil)
	}
	if ps.call != nil {
		return c.executeLeaseCall(rt, ps)
	}
	if ps.gen != rt.gen {
		if r := c.redecide(rt, ps); r != nil {
			if _, err := c.client.SkipPacket(); err != nil {
				return err
			}
			return c.fence.Refuse(rt.fenceRT(), r, ps.text)
		}
	}
	if r := c.xaRefusal([]rewrite.Stmt{ps.stmt}); r != nil {
		if rt.policy.Mode != policy.ModeShadow {
			if _, err := c.client.SkipPacket(); err != nil {
				return err
			}
			return c.fence.Refuse(rt.fenceRT(), r, ps.text)
		}
		c.fence.AuditRefusal(rt.fenceRT(), r, ps.text, "shadow")
	}
	if ti := rowParamsOf(&ps.stmt); ti >= 0 {
		return c.executeRowParams(rt, ps, ti)
	}
	if ps.stmt.Kind == rewrite.Other && ps.stmt.Locks == rewrite.LocksKept {
		if err := c.forwardCommand(); err != nil {
			return err
		}
		return c.relayResults(nil)
	}
	if rt.policy.Mode == policy.ModeShadow {
		if err := c.fence.ShadowCheck(rt.fenceRT(), []rewrite.Stmt{ps.stmt}); err != nil {
			return err
		}
	}
	if p := stmtFenceOf(rt, &ps.stmt); p != nil {
		return c.underStmtFence(p, func() error { return c.runExecute(rt, ps) }, func() error {
			_, err := c.client.SkipPacket()
			return err
		})
	}
	return c.runExecute(rt, ps)
}

// runExecute sends a COM_STMT_EXECUTE of ps, fenced as ps says.
func (c *clientConn) runExecute(rt *runtime, ps *preparedStmt) error {
	if ps.trapLost != "" && rt.policy.Mode != policy.ModeShadow {
		if _, err := c.client.SkipPacket(); err != nil {
			return err
		}
		return c.fence.Refuse(rt.fenceRT(), trapRefusal(ps, ps.trapLost), ps.text)
	}
	if ps.trap != nil && (rt.policy.Mode != policy.ModeShadow || ps.typesStale) {
		if handled, err := c.executeTrapped(rt, ps, rt.policy.Mode != policy.ModeShadow); handled {
			return err
		}
	}
	if f := c.fence.GuardOf(&ps.stmt); f != nil && rt.policy.Mode != policy.ModeShadow {
		return c.fence.Guarded(rt.fenceRT(), f, []rewrite.Stmt{ps.stmt}, nil, c.forwardCommand, func() error {
			_, err := c.client.SkipPacket()
			return err
		})
	}
	if err := c.forwardCommand(); err != nil {
		return err
	}
	t := fencing.NewTracker(&c.fence, rt.fenceRT(), []rewrite.Stmt{ps.stmt}, true)
	if err := c.relayResults(t); err != nil {
		return err
	}
	return t.Finish()
}

func hasWrite(stmts []rewrite.Stmt) bool { return writeFence(stmts) != nil }

// sendsFence: the decision sends a fenced text. A Send that only removes
// a statement fence's keys (Decision.Stripped) from a statement that
// writes nothing protected sends no fence: the server holds it unfenced.
func sendsFence(d rewrite.Decision) bool {
	return d.Action == rewrite.Send && (d.Stripped == nil || hasWrite(d.Stmts))
}

// writeFence returns the fence of the first protected write among stmts.
func writeFence(stmts []rewrite.Stmt) *rewrite.Fence {
	for i := range stmts {
		if stmts[i].Kind == rewrite.Write && stmts[i].Fence != nil {
			return stmts[i].Fence
		}
	}
	return nil
}

// learnSQLMode asks the session for its sql_mode, for a statement that reads
// differently under the settings the proxy could not track (the server's
// default, or a SET from a variable). It reports whether it learned it.
func (c *clientConn) learnSQLMode() bool {
	rows, err := c.backendQuery("SELECT @@SESSION.sql_mode")
	if err != nil || len(rows) != 1 || len(rows[0]) != 1 {
		return false
	}
	modes := "," + strings.ToUpper(rows[0][0].S) + ","
	c.sess.ANSIQuotes = rewrite.Off
	if strings.Contains(modes, ",ANSI_QUOTES,") {
		c.sess.ANSIQuotes = rewrite.On
	}
	c.sess.NoBackslashEscapes = rewrite.Off
	if strings.Contains(modes, ",NO_BACKSLASH_ESCAPES,") {
		c.sess.NoBackslashEscapes = rewrite.On
	}
	c.sess.Oracle = rewrite.Off
	if strings.Contains(modes, ",ORACLE,") {
		c.sess.Oracle = rewrite.On
	}
	return true
}

// learnCharset asks the session for its client character set, which the
// proxy could not know (the server's default applies, see session.go), for
// a statement refused while it counted as unsafe. It reports whether that
// changed the proxy's reading.
func (c *clientConn) learnCharset() bool {
	c.charsetUnknown = false
	rows, err := c.backendQuery("SELECT @@SESSION.character_set_client")
	if err != nil || len(rows) != 1 || len(rows[0]) != 1 || rows[0][0].Null {
		return false
	}
	unsafe := rewrite.UnsafeCharsetName(rows[0][0].S)
	utf8 := rewrite.UTF8CharsetName(rows[0][0].S)
	remap := rewrite.RemapsASCIIName(rows[0][0].S)
	changed := unsafe != c.sess.UnsafeCharset || utf8 != c.sess.NamesUTF8 || remap != c.sess.ASCIIRemap
	c.sess.UnsafeCharset = unsafe
	c.sess.NamesUTF8 = utf8
	c.sess.ASCIIRemap = remap
	return changed
}

// staleNamedPrepare refuses EXECUTE of a SQL-level prepared statement that
// was prepared under an older fencing policy: the proxy does not keep its
// text to decide again, so the client must run PREPARE again. A fenced one
// too: the server holds the old policy's fence (red team 3: a table's lease
// made a template left the prepared write fenced under any valid lease).
func (c *clientConn) staleNamedPrepare(rt *runtime, stmts []rewrite.Stmt) *rewrite.Refusal {
	for _, st := range stmts {
		if st.Kind != rewrite.Execute {
			continue
		}
		if ps := c.named[st.Name]; ps != nil && ps.gen != rt.gen {
			return &rewrite.Refusal{Reason: "the fencing policy changed since PREPARE " + st.Name +
				"; run PREPARE " + st.Name + " again"}
		}
	}
	return nil
}

// xaRefusal refuses a packet that writes a protected table inside an XA
// branch: one the session is in, or one a statement of the packet starts
// before the write. No fence survives XA PREPARE: it releases the share
// lock that the guard and the in-statement fences take on the lease row
// (measured on MariaDB 10.11: a takeover then commits at once, and the
// branch's XA COMMIT lands its writes after it), and the exclusive locks
// that do survive hold every takeover back until an XA COMMIT that may
// come any time later, long after the lease expired (TestXAPrepareLocks).
// TiDB has no XA; Galera refuses XA PREPARE.
func (c *clientConn) xaRefusal(stmts []rewrite.Stmt) *rewrite.Refusal {
	xa := c.xaBranch
	for i := range stmts {
		st := &stmts[i]
		if st.Kind == rewrite.XAStart {
			xa = true
			continue
		}
		f := c.fence.FenceOf(st)
		if !xa || f == nil {
			continue
		}
		table := ""
		if len(f.Targets) > 0 {
			table = f.Targets[0].Schema + "." + f.Targets[0].Table
		}
		return &rewrite.Refusal{Table: table, Reason: "a write to a protected table inside an XA transaction cannot be fenced: " +
			"XA PREPARE releases the lock on the lease row, so the branch's XA COMMIT could land after a takeover or " +
			"after the lease expired; write protected tables outside XA transactions"}
	}
	return nil
}
