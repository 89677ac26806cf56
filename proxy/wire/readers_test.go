package wire

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// nullSession is a Session that keeps nothing.
type nullSession struct{}

func (nullSession) Status(uint16) {}
func (nullSession) ErrSeen()      {}

func walkerOver(dep bool, pkts [][]byte) (Walker, *Conn) {
	c := NewStreamConn(Backend, bytes.NewReader(stream(pkts)), io.Discard)
	return Walker{Conn: c, DeprecateEOF: dep, Session: nullSession{}}, c
}

func textRow(vals ...*string) []byte {
	var p []byte
	for _, v := range vals {
		if v == nil {
			p = append(p, 0xfb)
			continue
		}
		p = AppendLenEncString(p, *v)
	}
	return p
}

func str(s string) *string { return &s }

// TestQuery: the reader of the proxy's own queries keeps the rows of the
// first result set that has any, the first ERR, and the affected rows of
// the last OK; an ERR in the middle of rows leaves no rows.
func TestQuery(t *testing.T) {
	v := func(s string) Value { return Value{S: s} }
	null := Value{Null: true}
	for _, tc := range []struct {
		name   string
		build  func(s *script)
		want   Result
		errNum uint16
	}{
		{"ok", func(s *script) { s.ok(3, auto) }, Result{Affected: 3, OK: true}, 0},
		{"err", func(s *script) { s.errEnd() }, Result{}, 1146},
		{"one row", func(s *script) {
			s.head(1).add(textRow(str("a"))).end(auto)
		}, Result{Rows: [][]Value{{v("a")}}}, 0},
		{"rows with NULL", func(s *script) {
			s.head(2).add(textRow(str("a"), nil)).add(textRow(str("b"), str(""))).end(auto)
		}, Result{Rows: [][]Value{{v("a"), null}, {v("b"), v("")}}}, 0},
		{"the first set with rows", func(s *script) {
			s.set(1, nil, auto|more).head(1).add(textRow(str("x"))).end(auto | more).head(1).add(textRow(str("y"))).end(auto)
		}, Result{Rows: [][]Value{{v("x")}}}, 0},
		{"err cuts the rows", func(s *script) { s.head(1).add(textRow(str("x"))).cut() }, Result{}, 1146},
		{"ok then err", func(s *script) { s.ok(1, auto|more).errEnd() }, Result{Affected: 1, OK: true}, 1146},
		{"the last OK counts", func(s *script) { s.ok(1, auto|more).ok(5, auto) }, Result{Affected: 5, OK: true}, 0},
	} {
		for _, dep := range []bool{false, true} {
			t.Run(tc.name, func(t *testing.T) {
				s := &script{dep: dep}
				tc.build(s)
				w, c := walkerOver(dep, s.pkts)
				res, err := w.Query()
				if err != nil {
					t.Fatal(err)
				}
				if (res.Err != nil) != (tc.errNum != 0) || res.Err != nil && res.Err.Code != tc.errNum {
					t.Fatalf("err %+v, want %d", res.Err, tc.errNum)
				}
				res.Err = nil
				if !reflect.DeepEqual(res, tc.want) {
					t.Fatalf("result %+v, want %+v", res, tc.want)
				}
				if _, _, err := c.PeekHeader(); !errors.Is(err, io.EOF) {
					t.Fatalf("response not read to its end: %v", err)
				}
			})
		}
	}
}

// TestQueryRowMalformed: a row whose values overrun it fails.
func TestQueryRowMalformed(t *testing.T) {
	s := &script{dep: true}
	s.head(2).add(textRow(str("a"))).end(auto)
	w, _ := walkerOver(true, s.pkts)
	if _, err := w.Query(); !errors.Is(err, ErrMalformed) {
		t.Fatalf("err = %v, want malformed", err)
	}
}

// TestExec: a statement of the proxy's own that must return no rows fails
// on rows or on further results.
func TestExec(t *testing.T) {
	for _, tc := range []struct {
		name      string
		build     func(s *script)
		malformed bool
	}{
		{"ok", func(s *script) { s.ok(2, auto) }, false},
		{"err", func(s *script) { s.errEnd() }, false},
		{"rows", func(s *script) { s.set(1, nil, auto) }, true},
		{"more results", func(s *script) { s.ok(1, auto|more).ok(0, auto) }, true},
		{"LOCAL INFILE", func(s *script) { s.add([]byte{mysql.LocalInFile_HEADER, 'f'}) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{dep: true}
			tc.build(s)
			w, _ := walkerOver(true, s.pkts)
			res, err := w.Exec()
			if got := errors.Is(err, ErrMalformed); got != tc.malformed {
				t.Fatalf("err = %v, want malformed: %v", err, tc.malformed)
			}
			if tc.name == "ok" && (res.Affected != 2 || !res.OK || res.Err != nil) {
				t.Fatalf("result %+v", res)
			}
			if tc.name == "err" && (res.Err == nil || res.Err.Code != 1146) {
				t.Fatalf("result %+v", res)
			}
		})
	}
}

// TestRecordReplay: a recorded result set is answered again byte for byte
// but for the status flags of its EOF packets and terminator, which the
// replay rewrites; an OK or ERR records nothing.
func TestRecordReplay(t *testing.T) {
	for _, dep := range []bool{false, true} {
		s := &script{dep: dep}
		s.head(3).row(10).row(20).end(auto | inTx)
		w, _ := walkerOver(dep, s.pkts)
		rec, err := w.Record()
		if err != nil || rec == nil {
			t.Fatalf("Record: %v %v", rec, err)
		}
		if rec.Rows != 2 || len(rec.Packets) != len(s.pkts) {
			t.Fatalf("recorded %d rows, %d packets; want 2, %d", rec.Rows, len(rec.Packets), len(s.pkts))
		}
		var out bytes.Buffer
		dst := NewStreamConn(Client, bytes.NewReader(nil), &out)
		if err := rec.Replay(dst, 1, func(st uint16) uint16 { return st &^ inTx }); err != nil {
			t.Fatal(err)
		}
		if err := dst.Flush(); err != nil {
			t.Fatal(err)
		}
		want := &script{dep: dep}
		want.head(3).row(10).row(20).end(auto)
		if !bytes.Equal(out.Bytes(), stream(want.pkts)) {
			t.Fatalf("deprecate EOF %v: replay\n got %x\nwant %x", dep, out.Bytes(), stream(want.pkts))
		}
		if !bytes.Equal(rec.Packets[len(rec.Packets)-1], s.pkts[len(s.pkts)-1]) {
			t.Fatal("Replay changed the recorded packets")
		}
	}
	for _, build := range []func(s *script){
		func(s *script) { s.ok(0, auto) },
		func(s *script) { s.errEnd() },
		func(s *script) { s.add(eofBytes(auto)) },
	} {
		s := &script{dep: true}
		build(s)
		w, _ := walkerOver(true, s.pkts)
		if rec, err := w.Record(); rec != nil || err != nil {
			t.Fatalf("Record of %x: %v %v, want nothing", s.pkts[0], rec, err)
		}
	}
}

// TestWriteResultSet: what the proxy writes itself reads back through the
// walker as the rows it wrote, in either mode, and as the binary protocol's
// fixed-width integers.
func TestWriteResultSet(t *testing.T) {
	cols := []Column{
		{Name: "token", Type: mysql.MYSQL_TYPE_LONGLONG, Charset: CharsetBinary, Length: 20},
		{Name: "lease", Type: mysql.MYSQL_TYPE_VAR_STRING, Charset: CharsetUTF8MB4, Length: 764},
	}
	rows := [][]Value{{{S: "42"}, {S: "invoice:7"}}, {{S: "0"}, {Null: true}}}
	for _, dep := range []bool{false, true} {
		var out bytes.Buffer
		c := NewStreamConn(Client, bytes.NewReader(nil), &out)
		if err := c.WriteResultSet(1, cols, rows, false, dep, auto); err != nil {
			t.Fatal(err)
		}
		c.Flush()
		r := NewStreamConn(Backend, bytes.NewReader(out.Bytes()), io.Discard)
		res, err := Walker{Conn: r, DeprecateEOF: dep, Session: nullSession{}}.Query()
		if err != nil || !reflect.DeepEqual(res.Rows, rows) {
			t.Fatalf("deprecate EOF %v: read back %+v, %v", dep, res.Rows, err)
		}
	}
	if got := BinaryRow(cols, rows[0]); !bytes.Equal(got, append([]byte{0, 0, 42, 0, 0, 0, 0, 0, 0, 0}, AppendLenEncString(nil, "invoice:7")...)) {
		t.Fatalf("binary row %x", got)
	}
	if got := BinaryRow(cols, rows[1]); !bytes.Equal(got, []byte{0, 0x08, 0, 0, 0, 0, 0, 0, 0, 0}) {
		t.Fatalf("binary row with NULL %x", got)
	}
}

func TestParseAuth(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    []byte
		want AuthPacket
		bad  bool
	}{
		{"ok", okBytes(0, auto), AuthPacket{Kind: AuthOK, OK: OKPacket{Status: auto, InfoOff: 7}, OKValid: true}, false},
		{"err", errBytes, AuthPacket{Kind: AuthErr, Err: ParseErr(errBytes)}, false},
		{"switch", append([]byte{0xfe}, "caching_sha2_password\x00abcdefghijklmnopqrst\x00"...),
			AuthPacket{Kind: AuthSwitch, Plugin: "caching_sha2_password", Challenge: []byte("abcdefghijklmnopqrst")}, false},
		{"switch without challenge", append([]byte{0xfe}, "mysql_old_password"...),
			AuthPacket{Kind: AuthSwitch, Plugin: "mysql_old_password"}, false},
		{"more data", []byte{0x01, 3}, AuthPacket{Kind: AuthMoreData, More: []byte{3}}, false},
		{"empty", nil, AuthPacket{}, true},
		{"unknown", []byte{0x02, 1}, AuthPacket{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseAuth(tc.p)
			if tc.bad {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("err = %v, want malformed", err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(a, tc.want) {
				t.Fatalf("ParseAuth = %+v, %v; want %+v", a, err, tc.want)
			}
		})
	}
	fast, _ := ParseAuth([]byte{0x01, mysql.CACHE_SHA2_FAST_AUTH})
	full, _ := ParseAuth([]byte{0x01, mysql.CACHE_SHA2_FULL_AUTH})
	key, _ := ParseAuth(MoreDataPayload([]byte("-----BEGIN PUBLIC KEY-----")))
	if !fast.SHA2FastAuth() || fast.SHA2FullAuth() || !full.SHA2FullAuth() || full.SHA2FastAuth() || key.SHA2FastAuth() || key.SHA2FullAuth() {
		t.Fatal("caching_sha2_password markers")
	}
}

func TestWarningsAndIsErr(t *testing.T) {
	ok := append(okBytes(1, auto), 0)
	ok[len(ok)-3] = 7 // warnings 7
	ok = ok[:len(ok)-1]
	eof := []byte{0xfe, 3, 0, 2, 0}
	if Warnings(ok, false) != 7 || Warnings(eof, true) != 3 || Warnings([]byte{0}, false) != 0 || Warnings([]byte{0xfe}, true) != 0 {
		t.Fatal("Warnings")
	}
	if !IsErr(errBytes) || IsErr(ok) || IsErr(nil) {
		t.Fatal("IsErr")
	}
}
