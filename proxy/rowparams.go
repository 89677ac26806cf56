package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy/fencing"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// Prepared INSERT and REPLACE into a table whose lease is a template, with
// placeholders in template columns (rewrite.RowParams): the lease of the
// rows follows from the values each COM_STMT_EXECUTE binds. The proxy
// reads the execution packet, decodes the bound values as the server does
// (types sent now or remembered from the last execution the server saw,
// the NULL bitmap), computes the lease with the rules of literal values,
// and guards the write under it as for literals. What it cannot decode
// exactly is refused, nothing of it sent: a value type it does not know,
// long data (COM_STMT_SEND_LONG_DATA) sent for the statement, an
// execution larger than it reads.

// rowParamsOf returns the template target of a prepared write whose rows'
// lease follows from bound values, or -1.
func rowParamsOf(st *rewrite.Stmt) int {
	if st.Kind != rewrite.Write || st.Fence == nil {
		return -1
	}
	for i := range st.Fence.Targets {
		if st.Fence.Targets[i].RowParams != nil {
			return i
		}
	}
	return -1
}

// withRowLease is st with target i's RowLease set to l: a copy, the
// prepared statement itself is left as it was.
func withRowLease(st rewrite.Stmt, i int, l string) rewrite.Stmt {
	f := *st.Fence
	f.Targets = append([]rewrite.Target(nil), f.Targets...)
	f.Targets[i].RowLease = l
	st.Fence = &f
	return st
}

// executeRowParams runs COM_STMT_EXECUTE of a prepared write whose rows'
// lease follows from its bound values (target ti of ps.stmt). An
// execution whose lease the proxy cannot compute is refused, a pinned
// UPDATE's or DELETE's (rewrite.RowParams.Pinned) too: its per-row
// condition alone would skip the rows of other leases with no record.
func (c *clientConn) executeRowParams(rt *runtime, ps *preparedStmt, ti int) error {
	rp := ps.stmt.Fence.Targets[ti].RowParams
	limit := max(rt.cfg.Limits.MaxQueryBytes, wire.MaxWholePacket)
	var payload []byte
	inPlace := false
	pkt, ok, err := c.client.PeekPacket()
	if err != nil {
		return err
	}
	if ok {
		payload, inPlace = pkt[wire.HeaderLen:], true
	} else {
		payload, c.x.cmdSeq, err = c.client.ReadPacket(c.buf[:0], limit)
		if errors.Is(err, wire.ErrTooLarge) {
			// The packet was consumed whole; the stream is in sync.
			return c.fence.Refuse(rt.fenceRT(), c.rowParamsRefusal(ps, ti, fmt.Sprintf("this execution is larger than fenceproxy "+
				"reads to find the values bound to the lease template's columns (%d bytes, limits.max_query_bytes)", limit)), ps.text)
		}
		if err != nil {
			return err
		}
		if cap(payload) <= maxKeptBuffer {
			c.buf = payload[:0]
		}
	}
	drop := func() error { c.consumeCommand(payload, inPlace); return nil }
	var why string
	var types []uint16
	var l string
	switch {
	case ps.longData:
		why = "long data was sent for this statement (COM_STMT_SEND_LONG_DATA), and fenceproxy reads the values bound " +
			"to the lease template's columns from the execution only; bind every value in the execution " +
			"(or COM_STMT_RESET the statement first)"
	case ps.params != rp.Placeholders():
		why = fmt.Sprintf("the server counts %d placeholders in this statement and fenceproxy %d", ps.params, rp.Placeholders())
	default:
		var vals []rewrite.BoundValue
		vals, types, err = decodeExecute(payload, ps.params, ps.types, rp.Uses)
		if err != nil {
			why = "fenceproxy cannot read the values bound to this execution: " + err.Error()
		} else if l, why = rp.Lease(vals); why != "" && rp.Pinned() && pinsNull(rp, vals) {
			// A template column = NULL matches no row: there is no row
			// of another lease to skip, and the write runs as sent.
			why = ""
		}
	}
	st := ps.stmt
	if why == "" {
		st = withRowLease(ps.stmt, ti, l)
	}
	// The server holds the types of an execution it received, for the
	// next one that sends none (nil: not read, the next one must send
	// them).
	send := func() error {
		ps.types = types
		return c.sendOriginal(payload, inPlace)
	}
	return c.runRowParams(rt, ps, ti, st, why, send, drop)
}

// runRowParams sends (or refuses, why) an execution of ps as st.
func (c *clientConn) runRowParams(rt *runtime, ps *preparedStmt, ti int, st rewrite.Stmt, why string, send, drop func() error) error {
	if rt.policy.Mode == policy.ModeShadow {
		if why != "" {
			c.fence.AuditRefusal(rt.fenceRT(), c.rowParamsRefusal(ps, ti, why), ps.text, "shadow")
		} else if err := c.fence.ShadowCheck(rt.fenceRT(), []rewrite.Stmt{st}); err != nil {
			return err
		}
		if err := send(); err != nil {
			return err
		}
		t := fencing.NewTracker(&c.fence, rt.fenceRT(), []rewrite.Stmt{st}, true)
		if err := c.relayResults(t); err != nil {
			return err
		}
		return t.Finish()
	}
	if why != "" {
		drop()
		return c.fence.Refuse(rt.fenceRT(), c.rowParamsRefusal(ps, ti, why), ps.text)
	}
	if f := c.fence.GuardOf(&st); f != nil {
		return c.fence.Guarded(rt.fenceRT(), f, []rewrite.Stmt{st}, nil, send, drop)
	}
	if !st.Fence.Targets[ti].RowParams.Pinned() {
		// An INSERT into a protected table is always guarded (rewrite:
		// Fence.Guard); never send one unchecked.
		drop()
		return c.fence.Refuse(rt.fenceRT(), c.rowParamsRefusal(ps, ti, "this write has no lease check"), ps.text)
	}
	// An UPDATE or DELETE fenced in its text (MariaDB): the tracker's
	// verdict on 0 rows reads the pinned lease.
	if err := send(); err != nil {
		return err
	}
	t := fencing.NewTracker(&c.fence, rt.fenceRT(), []rewrite.Stmt{st}, true)
	if err := c.relayResults(t); err != nil {
		return err
	}
	return t.Finish()
}

// pinsNull reports whether a template column's placeholder is bound to
// NULL.
func pinsNull(rp *rewrite.RowParams, vals []rewrite.BoundValue) bool {
	for i, v := range vals {
		if v.Null && rp.Uses(i) {
			return true
		}
	}
	return false
}

// rowParamsRefusal refuses an execution of ps whose rows' lease the proxy
// cannot compute.
func (c *clientConn) rowParamsRefusal(ps *preparedStmt, ti int, why string) *rewrite.Refusal {
	tg := ps.stmt.Fence.Targets[ti]
	return &rewrite.Refusal{Table: tg.Schema + "." + tg.Table, Reason: rewrite.RowLeaseNote + "; " + why}
}

// decodeExecute decodes the n bound values of a COM_STMT_EXECUTE payload
// as MariaDB, MySQL and TiDB read them: command, statement id, flags,
// iteration count, then (n > 0) the NULL bitmap, the new-params-bound
// flag, the types when it is 1 (else prev, the types of the last
// execution the server received), and the values of the parameters that
// are not NULL. types are the types this execution leaves the server
// with. Only the values for which want is true are kept (the others are
// read past): integers (TINY .. LONGLONG, signed or unsigned) and strings
// (CHAR, VARCHAR, the BLOB types) as such, any other type named.
func decodeExecute(p []byte, n int, prev []uint16, want func(int) bool) (vals []rewrite.BoundValue, types []uint16, err error) {
	vals, types, _, err = decodeParams(p, n, prev, want)
	return vals, types, err
}

var errExecuteShort = errors.New("the packet is shorter than a COM_STMT_EXECUTE")

// executeHeader is what a COM_STMT_EXECUTE of n > 0 parameters holds
// before its values.
type executeHeader struct {
	nulls  []byte   // the NULL bitmap
	flagAt int      // the new-params-bound flag's offset in the packet
	bound  bool     // the flag is 1: types are the packet's
	types  []uint16 // the packet's types (bound only)
	values []byte   // the values
}

// readExecuteHeader reads the header of p, an execution of n > 0
// parameters.
func readExecuteHeader(p []byte, n int) (executeHeader, error) {
	var h executeHeader
	if len(p) < 10 || p[0] != mysql.COM_STMT_EXECUTE {
		return h, errExecuteShort
	}
	nb := (n + 7) / 8
	h.flagAt = 10 + nb
	if len(p) < h.flagAt+1 {
		return h, errors.New("the packet ends in its NULL bitmap")
	}
	h.nulls = p[10:h.flagAt]
	rest := p[h.flagAt+1:]
	switch p[h.flagAt] {
	case 1:
		if len(rest) < 2*n {
			return h, errors.New("the packet ends in its parameter types")
		}
		h.bound = true
		h.types = make([]uint16, n)
		for i := range h.types {
			h.types[i] = binary.LittleEndian.Uint16(rest[2*i:])
		}
		rest = rest[2*n:]
	case 0:
	default:
		return h, fmt.Errorf("its new-params-bound flag is %d, not 0 or 1", p[h.flagAt])
	}
	h.values = rest
	return h, nil
}

// decodeParams is decodeExecute that also returns each parameter's value
// as it stands in the packet (raw; empty for a NULL), which a packet built
// from this one copies (preptrap.go).
func decodeParams(p []byte, n int, prev []uint16, want func(int) bool) (vals []rewrite.BoundValue, types []uint16, raw [][]byte, err error) {
	if n == 0 {
		if len(p) < 10 || p[0] != mysql.COM_STMT_EXECUTE {
			return nil, nil, nil, errExecuteShort
		}
		return nil, prev, nil, nil
	}
	h, err := readExecuteHeader(p, n)
	if err != nil {
		return nil, nil, nil, err
	}
	types = h.types
	if !h.bound {
		types = prev
		if len(types) != n {
			return nil, nil, nil, errors.New("no execution sent the parameter types")
		}
	}
	nulls := h.nulls
	p = h.values
	vals = make([]rewrite.BoundValue, n)
	raw = make([][]byte, n)
	for i := 0; i < n; i++ {
		if nulls[i/8]&(1<<(i%8)) != 0 {
			vals[i] = rewrite.BoundValue{Null: true}
			continue
		}
		t, unsigned := byte(types[i]), types[i]&0x8000 != 0
		size := 0
		var kind string // "int", "string", or the name of another type
		switch t {
		case mysql.MYSQL_TYPE_NULL:
			vals[i] = rewrite.BoundValue{Null: true}
			continue
		case mysql.MYSQL_TYPE_TINY:
			size, kind = 1, "int"
		case mysql.MYSQL_TYPE_SHORT:
			size, kind = 2, "int"
		case mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_INT24:
			size, kind = 4, "int"
		case mysql.MYSQL_TYPE_LONGLONG:
			size, kind = 8, "int"
		case mysql.MYSQL_TYPE_YEAR:
			size, kind = 2, "YEAR"
		case mysql.MYSQL_TYPE_FLOAT:
			size, kind = 4, "FLOAT"
		case mysql.MYSQL_TYPE_DOUBLE:
			size, kind = 8, "DOUBLE"
		case mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_TIME:
			// A length byte, then that many bytes.
			if len(p) < 1 || len(p) < 1+int(p[0]) {
				return nil, nil, nil, fmt.Errorf("parameter %d: the packet ends in a temporal value", i+1)
			}
			size, kind = 1+int(p[0]), "DATE or TIME"
		case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_STRING, mysql.MYSQL_TYPE_BLOB,
			mysql.MYSQL_TYPE_TINY_BLOB, mysql.MYSQL_TYPE_MEDIUM_BLOB, mysql.MYSQL_TYPE_LONG_BLOB,
			mysql.MYSQL_TYPE_DECIMAL, mysql.MYSQL_TYPE_NEWDECIMAL, mysql.MYSQL_TYPE_ENUM, mysql.MYSQL_TYPE_SET,
			mysql.MYSQL_TYPE_JSON, mysql.MYSQL_TYPE_BIT, mysql.MYSQL_TYPE_GEOMETRY:
			l, k, _ := wire.LenEnc(p)
			if k == 0 || uint64(len(p)-k) < l {
				return nil, nil, nil, fmt.Errorf("parameter %d: the packet ends in a string value", i+1)
			}
			switch t {
			case mysql.MYSQL_TYPE_DECIMAL, mysql.MYSQL_TYPE_NEWDECIMAL:
				kind = "DECIMAL"
			case mysql.MYSQL_TYPE_ENUM, mysql.MYSQL_TYPE_SET, mysql.MYSQL_TYPE_JSON, mysql.MYSQL_TYPE_BIT, mysql.MYSQL_TYPE_GEOMETRY:
				kind = fmt.Sprintf("%d", t)
			default:
				kind = "string"
			}
			if want(i) {
				vals[i] = rewrite.BoundValue{Text: string(p[k : k+int(l)])}
				if kind != "string" {
					vals[i] = rewrite.BoundValue{Other: kind}
				}
			}
			raw[i] = p[:k+int(l)]
			p = p[k+int(l):]
			continue
		default:
			return nil, nil, nil, fmt.Errorf("parameter %d has type %d, which fenceproxy does not decode", i+1, t)
		}
		if len(p) < size {
			return nil, nil, nil, fmt.Errorf("parameter %d: the packet ends in its value", i+1)
		}
		if want(i) {
			if kind == "int" {
				vals[i] = rewrite.BoundValue{Int: true, Text: numberText(t, unsigned, p[:size])}
			} else {
				vals[i] = rewrite.BoundValue{Other: kind}
			}
		}
		raw[i] = p[:size]
		p = p[size:]
	}
	return vals, types, raw, nil
}
