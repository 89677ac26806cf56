package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// scriptedBackend is a clientConn whose backend connection reads the given
// bytes, for the readers of the proxy's own queries.
func scriptedBackend(t *testing.T, deprecateEOF bool, pkts ...[]byte) *clientConn {
	t.Helper()
	var b []byte
	for i, p := range pkts {
		b = append(b, benchPacket(byte(i+1), p)...)
	}
	c := &clientConn{deprecateEOF: deprecateEOF}
	c.backend = wire.NewStreamConn(wire.Backend, bytes.NewReader(b), io.Discard)
	c.fence = newFencing(c)
	return c
}

// okWithWarnings is an OK packet payload (warnings 0).
func okWithWarnings(affected byte, status uint16) []byte {
	return append(binary.LittleEndian.AppendUint16([]byte{mysql.OK_HEADER, affected, 0}, status), 0, 0)
}

func eofPayload(status uint16) []byte {
	return binary.LittleEndian.AppendUint16([]byte{mysql.EOF_HEADER, 0, 0}, status)
}

func rowPayload(vals ...string) []byte {
	var p []byte
	for _, v := range vals {
		if v == "NULL" {
			p = append(p, 0xfb)
			continue
		}
		p = wire.AppendLenEncString(p, v)
	}
	return p
}

var errPacketPayload = wire.ErrPayload(1146, "42S02", "Table 'app.fenced_job_leases' doesn't exist")

// TestReadOwn: the reader of the proxy's own queries keeps the rows of the
// first result set that has any, the first ERR, and the affected rows of
// the OKs; an ERR in the middle of rows leaves no rows.
func TestReadOwn(t *testing.T) {
	const more = mysql.SERVER_MORE_RESULTS_EXISTS
	col := benchColumn("c", mysql.MYSQL_TYPE_VAR_STRING)
	for _, tc := range []struct {
		name         string
		deprecateEOF bool
		pkts         [][]byte
		rows         [][]string // nil: no rows
		err          bool
		affected     uint64
	}{
		{"ok", true, [][]byte{okWithWarnings(3, 0)}, nil, false, 3},
		{"err", true, [][]byte{errPacketPayload}, nil, true, 0},
		{"one row, deprecate EOF", true, [][]byte{{1}, col, rowPayload("a"), {mysql.EOF_HEADER, 0, 0, 0, 0, 0, 0}}, [][]string{{"a"}}, false, 0},
		{"rows with EOF packets", false, [][]byte{{2}, col, col, eofPayload(0), rowPayload("a", "NULL"), rowPayload("b", "c"), eofPayload(0)},
			[][]string{{"a", "NULL"}, {"b", "c"}}, false, 0},
		{"the first set with rows", false, [][]byte{{1}, col, eofPayload(0), eofPayload(more), {1}, col, eofPayload(0), rowPayload("x"),
			eofPayload(more), {1}, col, eofPayload(0), rowPayload("y"), eofPayload(0)}, [][]string{{"x"}}, false, 0},
		{"err cuts the rows", false, [][]byte{{1}, col, eofPayload(0), rowPayload("x"), errPacketPayload}, nil, true, 0},
		{"ok then err", true, [][]byte{okWithWarnings(1, more), errPacketPayload}, nil, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := scriptedBackend(t, tc.deprecateEOF, tc.pkts...)
			rows, err := c.readOwn()
			var be *wire.ServerError
			if tc.err != errors.As(err, &be) {
				t.Fatalf("err = %v, want a backend error: %v", err, tc.err)
			}
			if !tc.err && err != nil {
				t.Fatal(err)
			}
			if got := rowStrings(rows); !equalRows(got, tc.rows) {
				t.Fatalf("rows %q, want %q", got, tc.rows)
			}
			if c.ownAffected != tc.affected {
				t.Fatalf("affected %d, want %d", c.ownAffected, tc.affected)
			}
			if _, _, err := c.backend.PeekHeader(); !errors.Is(err, io.EOF) {
				t.Fatalf("the response not read to its end: %v", err)
			}
		})
	}
}

// TestExecReader: a statement of the proxy's own that must return no rows
// fails on rows or on further results.
func TestExecReader(t *testing.T) {
	col := benchColumn("c", mysql.MYSQL_TYPE_VAR_STRING)
	for _, tc := range []struct {
		name      string
		pkts      [][]byte
		malformed bool
	}{
		{"ok", [][]byte{okWithWarnings(2, 0)}, false},
		{"rows", [][]byte{{1}, col, {mysql.EOF_HEADER, 0, 0, 0, 0, 0, 0}}, true},
		{"more results", [][]byte{okWithWarnings(1, mysql.SERVER_MORE_RESULTS_EXISTS), okWithWarnings(0, 0)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := scriptedBackend(t, true, tc.pkts...)
			affected, err := c.backendExec("DO 1")
			if got := errors.Is(err, wire.ErrMalformed); got != tc.malformed {
				t.Fatalf("err = %v, want malformed: %v", err, tc.malformed)
			}
			if !tc.malformed && affected != 2 {
				t.Fatalf("affected %d, want 2", affected)
			}
		})
	}
}

// TestMarkEnd: the end of a response says "more results follow" exactly
// when the exchange says so, without the proxy's own transaction's bits,
// in an OK and in an EOF packet.
func TestMarkEnd(t *testing.T) {
	const (
		more  = mysql.SERVER_MORE_RESULTS_EXISTS
		trans = mysql.SERVER_STATUS_IN_TRANS
		auto  = mysql.SERVER_STATUS_AUTOCOMMIT
	)
	for _, tc := range []struct {
		name  string
		eof   bool
		more  bool
		in    uint16
		clear uint16
		want  uint16
	}{
		{"ok, more", false, true, auto, 0, auto | more},
		{"ok, last", false, false, auto | more, 0, auto},
		{"ok, clear in-trans", false, false, auto | trans, trans, auto},
		{"eof, more", true, true, auto, 0, auto | more},
		{"eof, clear and more", true, true, auto | trans, trans, auto | more},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := okWithWarnings(0, tc.in)
			if tc.eof {
				p = eofPayload(tc.in)
			}
			x := exchange{more: tc.more, own: tc.clear}
			if !x.markEnd(p, tc.eof) {
				t.Fatal("markEnd refused a valid packet")
			}
			st, _ := wire.EOFStatus(p, false)
			if !tc.eof {
				ok, _ := wire.ParseOK(p)
				st = ok.Status
			}
			if st != tc.want {
				t.Fatalf("status %#x, want %#x", st, tc.want)
			}
		})
	}
	var x exchange
	if x.markEnd([]byte{mysql.OK_HEADER, 0}, false) || x.markEnd([]byte{mysql.EOF_HEADER, 0}, true) {
		t.Fatal("markEnd accepted a truncated packet")
	}
}

// TestExchangeStatus: a status inside the response (a metadata EOF, a
// result that is not the last) loses the proxy's own transaction's bits and
// gains "more results" when the proxy runs the packet one statement at a
// time, but keeps the server's own "more results".
func TestExchangeStatus(t *testing.T) {
	const (
		more  = mysql.SERVER_MORE_RESULTS_EXISTS
		trans = mysql.SERVER_STATUS_IN_TRANS
		ro    = mysql.SERVER_STATUS_IN_TRANS_READONLY
		auto  = mysql.SERVER_STATUS_AUTOCOMMIT
	)
	for _, tc := range []struct {
		name      string
		x         exchange
		in, want  uint16
		needsMark bool
	}{
		{"plain relay", exchange{}, auto | trans | more, auto | trans | more, false},
		{"one by one", exchange{more: true}, auto, auto | more, true},
		{"own transaction", exchange{own: trans | ro}, auto | trans | ro, auto, true},
		{"own transaction, server's more kept", exchange{own: trans}, auto | trans | more, auto | more, true},
		{"both", exchange{more: true, own: trans}, auto | trans, auto | more, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.x.status(tc.in); got != tc.want {
				t.Errorf("status(%#x) = %#x, want %#x", tc.in, got, tc.want)
			}
			if got := tc.x.needsMarks(); got != tc.needsMark {
				t.Errorf("needsMarks = %v, want %v", got, tc.needsMark)
			}
		})
	}
}

func rowStrings(rows [][]wire.Value) [][]string {
	if rows == nil {
		return nil
	}
	out := make([][]string, len(rows))
	for i, r := range rows {
		for _, v := range r {
			s := v.S
			if v.Null {
				s = "NULL"
			}
			out[i] = append(out[i], s)
		}
	}
	return out
}

func equalRows(a, b [][]string) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				return false
			}
		}
	}
	return true
}
