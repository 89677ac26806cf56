package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy/fencing"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// The SQL lease functions (SELECT fence_acquire('name', ttl) and friends)
// are answered by the proxy on the client's connection. Lease changes run
// on the proxy's own account when backend.user is configured (apps then need
// only SELECT on the lease table), else in the client's own session; either
// way fence_acquire then sets the session's fence variables.

const erWrongArguments = 1210 // ER_WRONG_ARGUMENTS

// leaseCallTimeout bounds a lease function: it must answer, never hang.
const leaseCallTimeout = 10 * time.Second

// answerLeaseCall answers a lease function sent as COM_QUERY.
func (c *clientConn) answerLeaseCall(rt *runtime, call *rewrite.LeaseCall) error {
	c.p.metrics.stmtAnswered.Inc()
	args := make([]wire.Value, len(call.Args))
	for i, a := range call.Args {
		if a.Placeholder {
			return c.sendError(erWrongArguments, "HY000", "fenceproxy: placeholders in "+call.Func.String()+" need a prepared statement")
		}
		args[i] = wire.Value{S: a.String, Null: a.Null}
	}
	return c.runLeaseCall(rt, call, args, false)
}

// prepareLeaseCall answers COM_STMT_PREPARE of a lease function with a
// statement id of the proxy's own.
func (c *clientConn) prepareLeaseCall(rt *runtime, call *rewrite.LeaseCall) error {
	c.p.metrics.stmtAnswered.Inc()
	if c.stmts.own >= maxOwnStmts {
		return c.ownStmtLimit()
	}
	params := 0
	for _, a := range call.Args {
		if a.Placeholder {
			params++
		}
	}
	if c.nextStmtID == 0 {
		c.nextStmtID = firstProxyStmtID
	}
	id := c.nextStmtID
	c.nextStmtID--
	cols := leaseColumns(call)
	ok := wire.Prepared{StmtID: id, Columns: uint16(len(cols)), Params: uint16(params)}
	c.x.started = true
	seq, err := c.client.WritePacket(c.x.cmdSeq+1, ok.Payload())
	if err != nil {
		return err
	}
	pcols := make([]wire.Column, params)
	for i := range pcols {
		pcols[i] = wire.Column{Name: "?", Type: mysql.MYSQL_TYPE_VAR_STRING, Charset: wire.CharsetBinary}
	}
	if seq, err = c.writeColumns(seq, pcols); err != nil {
		return err
	}
	if _, err = c.writeColumns(seq, cols); err != nil {
		return err
	}
	if c.prepared == nil {
		c.prepared = map[uint32]*preparedStmt{}
	}
	c.prepared[id] = &preparedStmt{call: call, id: id, params: params}
	c.stmts.own++
	c.stmts.prepared(id)
	return nil
}

// executeLeaseCall answers COM_STMT_EXECUTE of a lease function prepared
// by prepareLeaseCall.
func (c *clientConn) executeLeaseCall(rt *runtime, ps *preparedStmt) error {
	payload, inPlace, err := c.readCommand(wire.MaxWholePacket)
	if payload == nil {
		return err
	}
	pkt := append([]byte(nil), payload...)
	c.consumeCommand(payload, inPlace)
	vals, types, err := parseExecuteParams(pkt, ps.params, ps.types)
	if err != nil {
		return c.sendError(erWrongArguments, "HY000", "fenceproxy: "+ps.call.Func.String()+": "+err.Error())
	}
	ps.types = types
	args := make([]wire.Value, len(ps.call.Args))
	next := 0
	for i, a := range ps.call.Args {
		if a.Placeholder {
			args[i] = vals[next]
			next++
		} else {
			args[i] = wire.Value{S: a.String, Null: a.Null}
		}
	}
	return c.runLeaseCall(rt, ps.call, args, true)
}

// leaseColumns are the result columns of a lease function.
func leaseColumns(call *rewrite.LeaseCall) []wire.Column {
	num := func(name string, typ byte, length uint32) wire.Column {
		return wire.Column{Name: name, Type: typ, Charset: wire.CharsetBinary, Length: length,
			Flags: mysql.BINARY_FLAG | mysql.NUM_FLAG}
	}
	switch call.Func {
	case rewrite.FenceAcquire:
		c := num(call.Column, mysql.MYSQL_TYPE_LONGLONG, 20)
		c.Flags |= mysql.UNSIGNED_FLAG
		return []wire.Column{c}
	case rewrite.FenceStatus:
		str := func(name string, n uint32) wire.Column {
			return wire.Column{Name: name, Type: mysql.MYSQL_TYPE_VAR_STRING, Charset: wire.CharsetUTF8MB4, Length: n * 4}
		}
		tok := num("token", mysql.MYSQL_TYPE_LONGLONG, 20)
		tok.Flags |= mysql.UNSIGNED_FLAG
		return []wire.Column{str("lease", 191), str("owner", 16), tok, str("leased_until", 23), num("held", mysql.MYSQL_TYPE_TINY, 1)}
	}
	return []wire.Column{num(call.Column, mysql.MYSQL_TYPE_TINY, 1)}
}

// runLeaseCall performs a lease function and answers with its result set.
func (c *clientConn) runLeaseCall(rt *runtime, call *rewrite.LeaseCall, args []wire.Value, binaryRows bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), leaseCallTimeout)
	defer cancel()
	name := call.Func.String()
	callErr := func(format string, a ...any) error {
		c.p.metrics.leaseCalls(name, "error").Inc()
		return c.sendError(erWrongArguments, "HY000", "fenceproxy: "+name+": "+fmt.Sprintf(format, a...))
	}
	if call.Func != rewrite.FenceStatus && (c.statusStale || c.inTransaction()) {
		// The check below must see what the server says now: after an ERR
		// the transaction may have ended (a deadlock) or begun (a failed
		// write under autocommit=0), and on Galera a replicated write may
		// have aborted it since its last answer (the server reports that
		// to the next command: here, the ping).
		if err := c.askStatus(); err != nil {
			be, ok := err.(*wire.ServerError)
			if !ok {
				return err
			}
			c.p.metrics.leaseCalls(name, "error").Inc()
			if err := c.fence.NoteError(be.Code); err != nil {
				return err
			}
			return c.sendError(be.Code, be.State, be.Msg)
		}
	}
	if call.Func != rewrite.FenceStatus && c.inTransaction() {
		return callErr("call it outside a transaction: a lease change inside one would commit or roll back with it and hold the lease row's lock until then")
	}
	table, err := c.leaseTable(rt)
	if err != nil {
		return callErr("%v", err)
	}
	conn, release, err := c.leaseConn(ctx)
	if err != nil {
		return callErr("%v", err)
	}
	defer release()
	// With autocommit=0 and no transaction open, the lease statements open
	// one of their own: commit it, so the change is real at once and the
	// lease row is not left locked.
	commitOwn := c.p.adminDB == nil && call.Func != rewrite.FenceStatus && c.status&mysql.SERVER_STATUS_AUTOCOMMIT == 0
	commit := func() {
		if commitOwn && c.inTransaction() {
			if _, err := c.backendExec("COMMIT"); err != nil {
				c.log().Warn("committing a lease change failed", "err", err)
			}
		}
	}
	defer commit()

	var row []wire.Value
	result := "ok"
	switch call.Func {
	case rewrite.FenceAcquire:
		if len(args) != 2 || args[0].Null || args[1].Null {
			return callErr("usage: SELECT fence_acquire('lease name', ttl_seconds)")
		}
		ttl, err := lease.ParseTTLSeconds(args[1].S)
		if err != nil {
			return callErr("%v", err)
		}
		sent := time.Now()
		l, err := lease.AcquireOn(ctx, conn, table, args[0].S, ttl)
		switch {
		case errors.Is(err, lease.ErrHeld), errors.Is(err, lease.ErrLost):
			// Held by another owner; or acquired and already expired again
			// before it could be read back (a TTL shorter than a round
			// trip): either way this session does not hold it.
			row = []wire.Value{{Null: true}}
			result = "held"
		case err != nil:
			return c.leaseError(name, err)
		default:
			if err := c.setFenceVars(rt, l); err != nil {
				return c.leaseError(name, err)
			}
			c.acquired = lease.Lease{Name: l.Name, Token: l.Token}
			c.acquiredUntil, c.acquiredTTL = sent.Add(ttl), ttl
			row = []wire.Value{{S: strconv.FormatUint(l.Token, 10)}}
		}
	case rewrite.FenceRenew, rewrite.FenceRelease:
		l, ok, err := c.sessionLease(rt)
		if err != nil {
			return c.leaseError(name, err)
		}
		done := false
		if ok {
			if call.Func == rewrite.FenceRenew {
				if len(args) != 1 || args[0].Null {
					return callErr("usage: SELECT fence_renew(ttl_seconds)")
				}
				ttl, perr := lease.ParseTTLSeconds(args[0].S)
				if perr != nil {
					return callErr("%v", perr)
				}
				sent := time.Now()
				_, err = lease.RenewOn(ctx, conn, table, l, ttl)
				if err == nil && l.Name == c.acquired.Name && l.Token == c.acquired.Token {
					c.acquiredUntil, c.acquiredTTL = sent.Add(ttl), ttl // the lease gauges
				}
			} else {
				err = lease.ReleaseOn(ctx, conn, table, l)
				if err == nil || errors.Is(err, lease.ErrLost) {
					c.acquired = lease.Lease{}
				}
			}
			if err != nil && !errors.Is(err, lease.ErrLost) {
				return c.leaseError(name, err)
			}
			done = err == nil
		}
		if !done {
			result = "lost"
		}
		row = []wire.Value{{S: boolDigit(done)}}
	case rewrite.FenceStatus:
		l, ok, err := c.sessionLease(rt)
		if err != nil {
			return c.leaseError(name, err)
		}
		row = []wire.Value{{Null: true}, {Null: true}, {Null: true}, {Null: true}, {S: "0"}}
		if ok {
			row[0] = wire.Value{S: l.Name}
			st, err := lease.GetOn(ctx, conn, table, l.Name)
			if err != nil && !errors.Is(err, lease.ErrNotFound) {
				return c.leaseError(name, err)
			}
			if err == nil {
				row[1] = wire.Value{S: st.OwnerID()}
				row[2] = wire.Value{S: strconv.FormatUint(st.Token, 10)}
				row[3] = wire.Value{S: st.Until.UTC().Format("2006-01-02 15:04:05.000")}
				row[4] = wire.Value{S: boolDigit(st.Held && st.Owner == l.Owner && st.Token == l.Token)}
			}
		}
	}
	commit()
	c.p.metrics.leaseCalls(name, result).Inc()
	c.publishLease() // before the client hears of it: /connections and the lease gauges agree with it
	return c.writeResultSet(leaseColumns(call), [][]wire.Value{row}, binaryRows)
}

func boolDigit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func (c *clientConn) leaseError(name string, err error) error {
	c.p.metrics.leaseCalls(name, "error").Inc()
	c.log().Warn("lease function failed", "func", name, "err", err)
	return c.sendError(erWrongArguments, "HY000", "fenceproxy: "+name+" failed: "+err.Error())
}

// leaseTable is where this session's leases live: fencing.lease_table,
// qualified with the current schema when it is not qualified itself.
func (c *clientConn) leaseTable(rt *runtime) (string, error) {
	if c.sess.Schema == "" && !strings.Contains(rt.policy.LeaseTable, ".") {
		return "", errors.New("no database selected: USE the schema of your protected tables (the lease table " +
			rt.policy.LeaseTable + " lives there), or qualify fencing.lease_table")
	}
	schema, table := rt.policy.LeaseTableFor(c.sess.Schema)
	return schema + "." + table, nil
}

// leaseConn is where lease changes run: the proxy's own account when it
// has one, else the client's session. Reads of the session's variables
// always happen in the client's session.
func (c *clientConn) leaseConn(ctx context.Context) (lease.Conn, func(), error) {
	if c.p.adminDB == nil {
		return sessionConn{c}, func() {}, nil
	}
	conn, err := c.p.adminDB.Conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("the proxy's backend account: %w", err)
	}
	return lease.NewConn(conn), func() { conn.Close() }, nil
}

// sessionLease reads the session's fence context from its variables.
func (c *clientConn) sessionLease(rt *runtime) (lease.Lease, bool, error) {
	rows, err := c.backendQuery(lease.SessionVarsSQL(fencing.LeaseVars(rt.policy)))
	if err != nil {
		return lease.Lease{}, false, err
	}
	l, ok, valid := lease.ReadSessionVars(fencing.ToFields(rows))
	if !valid {
		return lease.Lease{}, false, errors.New("reading the fence variables: unexpected result")
	}
	return l, ok, nil
}

// setFenceVars sets the session's fence variables to a lease just acquired.
func (c *clientConn) setFenceVars(rt *runtime, l lease.Lease) error {
	_, err := c.backendExec(lease.SetVarsSQL(fencing.LeaseVars(rt.policy), l))
	return err
}

// sessionConn runs lease statements in the client's own session.
type sessionConn struct{ c *clientConn }

func (s sessionConn) Exec(ctx context.Context, q string) (int64, error) {
	defer s.c.deadlineFrom(ctx)()
	n, err := s.c.backendExec(q)
	return int64(n), err
}

func (s sessionConn) Query(ctx context.Context, q string) ([][]string, error) {
	defer s.c.deadlineFrom(ctx)()
	rows, err := s.c.backendQuery(q)
	if err != nil {
		return nil, err
	}
	out := make([][]string, len(rows))
	for i, r := range rows {
		out[i] = make([]string, len(r))
		for j, v := range r {
			out[i][j] = v.S
		}
	}
	return out, nil
}

// deadlineFrom bounds backend I/O by ctx's deadline until the returned func
// is called.
func (c *clientConn) deadlineFrom(ctx context.Context) func() {
	if dl, ok := ctx.Deadline(); ok {
		c.backend.SetDeadline(dl)
		return func() { c.backend.SetDeadline(time.Time{}) }
	}
	return func() {}
}

// parseExecuteParams decodes the parameters of a COM_STMT_EXECUTE payload.
// prev are the types bound by an earlier execution (the client may omit
// them).
func parseExecuteParams(p []byte, n int, prev []uint16) ([]wire.Value, []uint16, error) {
	// cmd(1) id(4) flags(1) iterations(4)
	if len(p) < 10 {
		return nil, nil, errors.New("short COM_STMT_EXECUTE")
	}
	if n == 0 {
		return nil, prev, nil
	}
	p = p[10:]
	nb := (n + 7) / 8
	if len(p) < nb+1 {
		return nil, nil, errors.New("short COM_STMT_EXECUTE")
	}
	nulls := p[:nb]
	bound := p[nb]
	p = p[nb+1:]
	types := prev
	if bound == 1 {
		if len(p) < 2*n {
			return nil, nil, errors.New("short parameter types")
		}
		types = make([]uint16, n)
		for i := range types {
			types[i] = binary.LittleEndian.Uint16(p[2*i:])
		}
		p = p[2*n:]
	}
	if len(types) != n {
		return nil, nil, errors.New("parameter types were never sent")
	}
	vals := make([]wire.Value, n)
	for i := 0; i < n; i++ {
		if nulls[i/8]&(1<<(i%8)) != 0 {
			vals[i] = wire.Value{Null: true}
			continue
		}
		t, unsigned := byte(types[i]), types[i]&0x8000 != 0
		var size int
		switch t {
		case mysql.MYSQL_TYPE_TINY:
			size = 1
		case mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_YEAR:
			size = 2
		case mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_FLOAT:
			size = 4
		case mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_DOUBLE:
			size = 8
		case mysql.MYSQL_TYPE_NULL:
			vals[i] = wire.Value{Null: true}
			continue
		case mysql.MYSQL_TYPE_DECIMAL, mysql.MYSQL_TYPE_NEWDECIMAL, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING,
			mysql.MYSQL_TYPE_STRING, mysql.MYSQL_TYPE_BLOB, mysql.MYSQL_TYPE_TINY_BLOB, mysql.MYSQL_TYPE_MEDIUM_BLOB,
			mysql.MYSQL_TYPE_LONG_BLOB, mysql.MYSQL_TYPE_ENUM, mysql.MYSQL_TYPE_SET, mysql.MYSQL_TYPE_JSON:
			l, k, _ := wire.LenEnc(p)
			if k == 0 || uint64(len(p)-k) < l {
				return nil, nil, errors.New("truncated string parameter")
			}
			vals[i] = wire.Value{S: string(p[k : k+int(l)])}
			p = p[k+int(l):]
			continue
		default:
			return nil, nil, fmt.Errorf("parameter %d: type %d is not a string or a number", i+1, t)
		}
		if len(p) < size {
			return nil, nil, errors.New("truncated numeric parameter")
		}
		vals[i] = wire.Value{S: numberText(t, unsigned, p[:size])}
		p = p[size:]
	}
	return vals, types, nil
}

func numberText(t byte, unsigned bool, b []byte) string {
	switch t {
	case mysql.MYSQL_TYPE_FLOAT:
		return strconv.FormatFloat(float64(math.Float32frombits(binary.LittleEndian.Uint32(b))), 'f', -1, 32)
	case mysql.MYSQL_TYPE_DOUBLE:
		return strconv.FormatFloat(math.Float64frombits(binary.LittleEndian.Uint64(b)), 'f', -1, 64)
	}
	var u uint64
	for i := len(b) - 1; i >= 0; i-- {
		u = u<<8 | uint64(b[i])
	}
	if unsigned {
		return strconv.FormatUint(u, 10)
	}
	shift := 64 - 8*len(b)
	return strconv.FormatInt(int64(u<<shift)>>shift, 10)
}
