package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// The walker against every command kind and every response shape, with
// and without CLIENT_DEPRECATE_EOF, from recorded bytes (no server): what
// the walker tells its handler and the session, packet by packet, and that
// it consumes exactly the response, or fails it as malformed.

const (
	more   = mysql.SERVER_MORE_RESULTS_EXISTS
	auto   = mysql.SERVER_STATUS_AUTOCOMMIT
	inTx   = mysql.SERVER_STATUS_IN_TRANS
	cursor = mysql.SERVER_STATUS_CURSOR_EXISTS
)

// script is a backend response under construction: its logical packets,
// and the events a walker reading it must report.
type script struct {
	dep  bool // CLIENT_DEPRECATE_EOF
	pkts [][]byte
	want []string
}

func (s *script) add(p []byte, events ...string) *script {
	s.pkts = append(s.pkts, p)
	s.want = append(s.want, events...)
	return s
}

func final(st uint16) string {
	if st&more != 0 {
		return "more"
	}
	return "final"
}

func okBytes(affected uint64, st uint16) []byte {
	p := mysql.AppendLengthEncodedInteger([]byte{mysql.OK_HEADER}, affected)
	p = append(p, 0)
	p = binary.LittleEndian.AppendUint16(p, st)
	return append(p, 0, 0)
}

func eofBytes(st uint16) []byte {
	return binary.LittleEndian.AppendUint16([]byte{mysql.EOF_HEADER, 0, 0}, st)
}

// terminatorBytes ends rows: an EOF, or an OK with 0xFE under
// CLIENT_DEPRECATE_EOF.
func (s *script) terminatorBytes(st uint16) []byte {
	if !s.dep {
		return eofBytes(st)
	}
	p := okBytes(0, st)
	p[0] = mysql.EOF_HEADER
	return p
}

var errBytes = ErrPayload(1146, "42S02", "Table 'app.t' doesn't exist")

func colDef(name string) []byte {
	return Column{Name: name, Type: mysql.MYSQL_TYPE_VAR_STRING}.Definition()
}

// ok: an OK ending a statement's result.
func (s *script) ok(affected uint64, st uint16) *script {
	return s.add(okBytes(affected, st), fmt.Sprintf("S:%x", st), fmt.Sprintf("ok(%d,%s)", affected, final(st)))
}

// errEnd: an ERR answering the statement.
func (s *script) errEnd() *script { return s.add(errBytes, "S:err", "err(1146)") }

// set: a result set of cols columns and rows of the given payload sizes
// (a size above MaxPayload-1 is split), ended with status st.
func (s *script) set(cols int, rows []int, st uint16) *script {
	s.head(cols)
	for _, n := range rows {
		s.row(n)
	}
	return s.end(st)
}

func (s *script) head(cols int) *script {
	s.add(mysql.AppendLengthEncodedInteger(nil, uint64(cols)), fmt.Sprintf("setStart(%d)", cols))
	for i := range cols {
		s.add(colDef(fmt.Sprintf("c%d", i)), "meta")
	}
	if !s.dep {
		s.add(eofBytes(auto), fmt.Sprintf("metaEnd(%x)", auto))
	}
	return s
}

// row: a row of n payload bytes; its first value's length says 0xFE
// (8-byte length) when n is MaxPayload or more, as a server sends it.
func (s *script) row(n int) *script {
	p := bytes.Repeat([]byte{'x'}, n)
	switch {
	case n >= MaxPayload:
		p[0] = 0xfe
	case n > 0:
		p[0] = byte(min(n-1, 250))
	}
	return s.add(p, fmt.Sprintf("row(%d)", n))
}

func (s *script) end(st uint16) *script {
	return s.add(s.terminatorBytes(st), fmt.Sprintf("S:%x", st), fmt.Sprintf("setEnd(%x,%s)", st, final(st)), fmt.Sprintf("done(%x)", st))
}

// cut: an ERR in the middle of rows.
func (s *script) cut() *script {
	return s.add(errBytes, "S:err", "err(1146,inSet)", "done(0)")
}

// stream frames the logical packets as a server does, splitting at
// MaxPayload (a payload of exactly MaxPayload bytes is followed by an empty
// packet).
func stream(pkts [][]byte) []byte {
	var out []byte
	seq := byte(1)
	for _, p := range pkts {
		for {
			n := min(len(p), MaxPayload)
			out = append(out, byte(n), byte(n>>8), byte(n>>16), seq)
			out = append(out, p[:n]...)
			p = p[n:]
			seq++
			if n < MaxPayload {
				break
			}
		}
	}
	return out
}

// eventLog is a Handler, PrepareHandler, PacketHandler and Session that
// logs what it is told and consumes each packet.
type eventLog struct {
	c      *Conn
	events []string
}

func (r *eventLog) log(format string, a ...any) {
	r.events = append(r.events, fmt.Sprintf(format, a...))
}

func (r *eventLog) Status(st uint16) { r.log("S:%x", st) }
func (r *eventLog) ErrSeen()         { r.log("S:err") }

func (r *eventLog) skip() error {
	_, err := r.c.SkipPacket()
	return err
}

func (r *eventLog) Ok(_ []byte, n int, ok OKPacket, final bool) error {
	if final {
		r.log("ok(%d,final)", ok.AffectedRows)
	} else {
		r.log("ok(%d,more)", ok.AffectedRows)
	}
	r.c.DiscardPacket(n)
	return nil
}

func (r *eventLog) Err(payload []byte, n int, inSet bool) error {
	if inSet {
		r.log("err(%d,inSet)", ParseErr(payload).Code)
	} else {
		r.log("err(%d)", ParseErr(payload).Code)
	}
	r.c.DiscardPacket(n)
	return nil
}

func (r *eventLog) LocalInfile() error { r.log("infile"); return r.skip() }
func (r *eventLog) EOF() error         { r.log("eof"); return r.skip() }
func (r *eventLog) SetStart(cols uint64) error {
	r.log("setStart(%d)", cols)
	return r.skip()
}
func (r *eventLog) Meta() error { r.log("meta"); return r.skip() }
func (r *eventLog) MetaEnd(n int, st uint16) error {
	r.log("metaEnd(%x)", st)
	r.c.DiscardPacket(n)
	return nil
}

func (r *eventLog) Row() error {
	p, _, err := r.c.ReadPacket(nil, 2*MaxPayload)
	r.log("row(%d)", len(p))
	return err
}

func (r *eventLog) SetEnd(n int, st uint16, final bool) error {
	if final {
		r.log("setEnd(%x,final)", st)
	} else {
		r.log("setEnd(%x,more)", st)
	}
	r.c.DiscardPacket(n)
	return nil
}

func (r *eventLog) SetDone(st uint16) { r.log("done(%x)", st) }

func (r *eventLog) Prepared(p Prepared, n int) error {
	r.log("prepared(%d,%d,%d)", p.StmtID, p.Columns, p.Params)
	r.c.DiscardPacket(n)
	return nil
}

func (r *eventLog) Def() error    { r.log("def"); return r.skip() }
func (r *eventLog) Packet() error { r.log("packet"); return r.skip() }

// entry is how a command's response is read.
type entry int

const (
	response entry = iota
	rows
	prepare
	one
	setOption
	dumpStart
)

// walk runs the walker's entry point on stream b and returns the events,
// the entry point's own result as an event, and its error.
func walk(e entry, dep bool, b []byte) (*eventLog, *Conn, error) {
	c := NewStreamConn(Backend, bytes.NewReader(b), io.Discard)
	r := &eventLog{c: c}
	w := Walker{Conn: c, DeprecateEOF: dep, Session: r}
	var err error
	switch e {
	case response:
		err = w.Response(r)
	case rows:
		var st uint16
		st, err = w.Rows(r)
		r.log("rows=%x", st)
	case prepare:
		var ok bool
		_, ok, err = w.Prepare(r)
		r.log("prepared=%v", ok)
	case one:
		var ok bool
		ok, err = w.One(r)
		r.log("isOK=%v", ok)
	case setOption:
		var done bool
		done, err = w.SetOption(r)
		r.log("done=%v", done)
	case dumpStart:
		var started bool
		started, err = w.DumpStart(r)
		r.log("started=%v", started)
	}
	return r, c, err
}

type walkCase struct {
	name  string
	entry entry
	// build writes the response into s and returns the events the entry
	// point reports after the handler's (nil: none)
	build     func(s *script) []string
	malformed bool // the walker must fail the response
	rest      int  // packets the walker must leave unread
}

func walkCases() []walkCase {
	return []walkCase{
		// COM_QUERY (text rows), COM_STMT_EXECUTE (binary rows: the walker
		// reads them alike), COM_PROCESS_INFO: Response.
		{name: "query/ok", entry: response, build: func(s *script) []string { s.ok(1, auto); return nil }},
		{name: "query/ok in transaction", entry: response, build: func(s *script) []string { s.ok(0, auto|inTx); return nil }},
		{name: "query/err", entry: response, build: func(s *script) []string { s.errEnd(); return nil }},
		{name: "query/1 column 0 rows", entry: response, build: func(s *script) []string { s.set(1, nil, auto); return nil }},
		{name: "query/1 column 1 row", entry: response, build: func(s *script) []string { s.set(1, []int{3}, auto); return nil }},
		{name: "query/many columns many rows", entry: response, build: func(s *script) []string {
			s.set(12, []int{1, 20, 300, 0, 4000, 70000}, auto)
			return nil
		}},
		{name: "query/row of 16 MiB - 1 (split, then an empty packet)", entry: response, build: func(s *script) []string {
			s.set(1, []int{MaxPayload, 5}, auto)
			return nil
		}},
		{name: "query/row longer than a packet, starting with 0xFE", entry: response, build: func(s *script) []string {
			s.set(2, []int{MaxPayload + 1000, MaxPayload - 1}, auto)
			return nil
		}},
		{name: "query/err cuts the rows", entry: response, build: func(s *script) []string {
			s.head(2).row(5).row(6).cut()
			return nil
		}},
		{name: "query/multi-result", entry: response, build: func(s *script) []string {
			s.set(1, []int{1}, auto|more).ok(2, auto|more).set(3, []int{4, 5}, auto|more).ok(0, auto)
			return nil
		}},
		{name: "query/multi-result ending in an err", entry: response, build: func(s *script) []string {
			s.ok(1, auto|more).set(1, []int{1}, auto|more).errEnd()
			return nil
		}},
		{name: "call/result sets then the trailing OK", entry: response, build: func(s *script) []string {
			s.set(2, []int{7}, auto|more).set(1, nil, auto|more).ok(0, auto)
			return nil
		}},
		{name: "query/LOCAL INFILE then its OK", entry: response, build: func(s *script) []string {
			s.add(append([]byte{mysql.LocalInFile_HEADER}, "/tmp/data.csv"...), "infile").ok(3, auto)
			return nil
		}},
		{name: "query/LOCAL INFILE then its err", entry: response, build: func(s *script) []string {
			s.add(append([]byte{mysql.LocalInFile_HEADER}, "/tmp/data.csv"...), "infile").errEnd()
			return nil
		}},
		{name: "query/bare EOF", entry: response, build: func(s *script) []string {
			s.add(eofBytes(auto), fmt.Sprintf("S:%x", auto), "eof")
			return nil
		}},
		{name: "execute/binary rows with a cursor", entry: response, build: func(s *script) []string {
			// The server opens a cursor: metadata, then the terminator
			// (EOF or OK) carrying SERVER_STATUS_CURSOR_EXISTS, no rows.
			s.add(mysql.AppendLengthEncodedInteger(nil, 2), "setStart(2)").
				add(colDef("a"), "meta").add(colDef("b"), "meta")
			if !s.dep {
				s.add(eofBytes(auto|cursor), fmt.Sprintf("metaEnd(%x)", auto|cursor), fmt.Sprintf("S:%x", auto|cursor), fmt.Sprintf("done(%x)", auto|cursor))
			} else {
				s.end(auto | cursor)
			}
			return nil
		}},
		{name: "query/empty packet", entry: response, malformed: true, build: func(s *script) []string { s.add(nil); return nil }},
		{name: "query/oversized first packet", entry: response, malformed: true, build: func(s *script) []string {
			s.add(bytes.Repeat([]byte{1}, BufSize+1))
			return nil
		}},
		{name: "query/truncated OK", entry: response, malformed: true, build: func(s *script) []string {
			s.add([]byte{mysql.OK_HEADER, 0})
			return nil
		}},
		{name: "query/column count with a metadata flag", entry: response, malformed: true, build: func(s *script) []string {
			s.add([]byte{1, 1})
			return nil
		}},
		{name: "query/fewer definitions than columns", entry: response, malformed: true, build: func(s *script) []string {
			s.add([]byte{2}, "setStart(2)").add(colDef("a"), "meta")
			s.pkts = append(s.pkts, s.terminatorBytes(auto))
			return nil
		}},
		{name: "query/invalid terminator", entry: response, malformed: true, build: func(s *script) []string {
			s.head(1)
			s.pkts = append(s.pkts, []byte{mysql.EOF_HEADER, 0})
			return nil
		}},

		// COM_STMT_FETCH (binary rows), COM_FIELD_LIST (definitions): Rows.
		{name: "fetch/rows", entry: rows, build: func(s *script) []string {
			s.row(4).row(9)
			s.add(s.terminatorBytes(auto|cursor), fmt.Sprintf("S:%x", auto|cursor), fmt.Sprintf("setEnd(%x,final)", auto|cursor))
			return []string{fmt.Sprintf("rows=%x", auto|cursor)}
		}},
		{name: "fetch/last rows", entry: rows, build: func(s *script) []string {
			st := uint16(auto | mysql.SERVER_STATUS_LAST_ROW_SEND)
			s.row(MaxPayload).add(s.terminatorBytes(st), fmt.Sprintf("S:%x", st), fmt.Sprintf("setEnd(%x,final)", st))
			return []string{fmt.Sprintf("rows=%x", st)}
		}},
		{name: "fetch/err", entry: rows, build: func(s *script) []string {
			s.add(errBytes, "S:err", "err(1146,inSet)")
			return []string{"rows=0"}
		}},
		{name: "field list/definitions", entry: rows, build: func(s *script) []string {
			s.add(colDef("a"), fmt.Sprintf("row(%d)", len(colDef("a")))).add(colDef("bb"), fmt.Sprintf("row(%d)", len(colDef("bb"))))
			// COM_FIELD_LIST ends with an EOF packet in either mode.
			s.add(eofBytes(auto), fmt.Sprintf("S:%x", auto), fmt.Sprintf("setEnd(%x,final)", auto))
			return []string{fmt.Sprintf("rows=%x", auto)}
		}},
		{name: "field list/no columns", entry: rows, build: func(s *script) []string {
			s.add(eofBytes(auto), fmt.Sprintf("S:%x", auto), fmt.Sprintf("setEnd(%x,final)", auto))
			return []string{fmt.Sprintf("rows=%x", auto)}
		}},

		// COM_STMT_PREPARE: Prepare.
		{name: "prepare/err", entry: prepare, build: func(s *script) []string {
			s.add(errBytes, "err(1146)") // no statement ran: the session learns nothing
			return []string{"prepared=false"}
		}},
		{name: "prepare/no params no columns", entry: prepare, build: func(s *script) []string {
			s.add(Prepared{StmtID: 7}.Payload(), "prepared(7,0,0)")
			return []string{"prepared=true"}
		}},
		{name: "prepare/params only", entry: prepare, build: func(s *script) []string {
			s.add(Prepared{StmtID: 8, Params: 2}.Payload(), "prepared(8,0,2)").defs(2)
			return []string{"prepared=true"}
		}},
		{name: "prepare/columns only", entry: prepare, build: func(s *script) []string {
			s.add(Prepared{StmtID: 9, Columns: 3}.Payload(), "prepared(9,3,0)").defs(3)
			return []string{"prepared=true"}
		}},
		{name: "prepare/params and columns", entry: prepare, build: func(s *script) []string {
			s.add(Prepared{StmtID: 1 << 20, Columns: 2, Params: 1}.Payload(), "prepared(1048576,2,1)").defs(1).defs(2)
			return []string{"prepared=true"}
		}},
		{name: "prepare/fewer definitions than said", entry: prepare, malformed: true, build: func(s *script) []string {
			s.add(Prepared{StmtID: 1, Columns: 2}.Payload(), "prepared(1,2,0)").add(colDef("a"), "def")
			s.pkts = append(s.pkts, eofBytes(auto))
			return nil
		}},
		{name: "prepare/short OK", entry: prepare, malformed: true, build: func(s *script) []string {
			s.add(okBytes(0, auto))
			return nil
		}},

		// Commands answered by one packet: One.
		{name: "ping/ok", entry: one, build: func(s *script) []string {
			s.add(okBytes(0, auto), fmt.Sprintf("S:%x", auto), "packet")
			return []string{"isOK=true"}
		}},
		{name: "init db/err", entry: one, build: func(s *script) []string {
			s.add(errBytes, "packet") // no statement ran: the status stands
			return []string{"isOK=false"}
		}},
		{name: "reset connection/ok", entry: one, build: func(s *script) []string {
			s.add(okBytes(0, auto), fmt.Sprintf("S:%x", auto), "packet")
			return []string{"isOK=true"}
		}},
		{name: "debug/eof", entry: one, build: func(s *script) []string {
			s.add(s.terminatorBytes(auto), "packet")
			return []string{"isOK=false"}
		}},
		{name: "statistics/string", entry: one, build: func(s *script) []string {
			s.add([]byte("Uptime: 42  Threads: 1  Questions: 9  Slow queries: 0"), "packet")
			return []string{"isOK=false"}
		}},
		{name: "ping/truncated OK", entry: one, build: func(s *script) []string {
			s.add([]byte{mysql.OK_HEADER, 0}, "packet")
			return []string{"isOK=false"}
		}},

		// COM_SET_OPTION: SetOption.
		{name: "set option/eof", entry: setOption, build: func(s *script) []string {
			s.add(s.terminatorBytes(auto), fmt.Sprintf("S:%x", auto), "packet")
			return []string{"done=true"}
		}},
		{name: "set option/err", entry: setOption, build: func(s *script) []string {
			s.add(errBytes, "packet")
			return []string{"done=false"}
		}},

		// COM_BINLOG_DUMP: DumpStart.
		{name: "binlog dump/err", entry: dumpStart, build: func(s *script) []string {
			s.add(errBytes, "packet")
			return []string{"started=false"}
		}},
		{name: "binlog dump/stream", entry: dumpStart, rest: 2, build: func(s *script) []string {
			// Events start with 0x00, like an OK: left for the pipe.
			s.add(append([]byte{0}, bytes.Repeat([]byte{9}, 19)...)).add(append([]byte{0}, bytes.Repeat([]byte{8}, 30)...))
			return []string{"started=true"}
		}},
	}
}

// defs: n definitions of a COM_STMT_PREPARE response, and the EOF after
// them unless CLIENT_DEPRECATE_EOF.
func (s *script) defs(n int) *script {
	for i := range n {
		s.add(colDef(fmt.Sprintf("p%d", i)), "def")
	}
	if !s.dep {
		s.add(eofBytes(auto), "def")
	}
	return s
}

func TestWalker(t *testing.T) {
	for _, tc := range walkCases() {
		for _, dep := range []bool{false, true} {
			name := tc.name + "/eof"
			if dep {
				name = tc.name + "/deprecate_eof"
			}
			t.Run(name, func(t *testing.T) {
				s := &script{dep: dep}
				after := tc.build(s)
				want := append(s.want, after...)
				r, c, err := walk(tc.entry, dep, stream(s.pkts))
				if tc.malformed {
					if !errors.Is(err, ErrMalformed) {
						t.Fatalf("err = %v, want malformed", err)
					}
					var ce *ConnError
					if !errors.As(err, &ce) || ce.Side != Backend {
						t.Fatalf("err = %v, want the backend side's", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("err = %v\nevents %s", err, strings.Join(r.events, " "))
				}
				if got := strings.Join(r.events, " "); got != strings.Join(want, " ") {
					t.Fatalf("events\n got %s\nwant %s", got, strings.Join(want, " "))
				}
				left := 0
				for {
					if _, err := c.SkipPacket(); err != nil {
						if !errors.Is(err, io.EOF) {
							t.Fatalf("after the response: %v", err)
						}
						break
					}
					left++
				}
				if left != tc.rest {
					t.Fatalf("%d packets left unread, want %d", left, tc.rest)
				}
			})
		}
	}
}

// TestWalkerStopsOnHandlerError: a handler's error ends the walk at once,
// whatever the shape.
func TestWalkerStopsOnHandlerError(t *testing.T) {
	s := &script{dep: true}
	s.set(2, []int{1, 2}, auto|more).ok(1, auto)
	b := stream(s.pkts)
	stop := errors.New("stop")
	for i := range s.want {
		c := NewStreamConn(Backend, bytes.NewReader(b), io.Discard)
		h := &failAt{eventLog: eventLog{c: c}, at: i, err: stop}
		err := Walker{Conn: c, DeprecateEOF: true, Session: h}.Response(h)
		if h.n > i && !errors.Is(err, stop) {
			t.Fatalf("handler failed at event %d (%s): walker returned %v", i, s.want[i], err)
		}
	}
}

// failAt is a eventLog whose handler methods fail from event at on.
type failAt struct {
	eventLog
	at, n int
	err   error
}

func (f *failAt) check() error {
	f.n++
	if f.n > f.at {
		return f.err
	}
	return nil
}

func (f *failAt) Ok(p []byte, n int, ok OKPacket, final bool) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.eventLog.Ok(p, n, ok, final)
}

func (f *failAt) SetStart(cols uint64) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.eventLog.SetStart(cols)
}

func (f *failAt) Meta() error {
	if err := f.check(); err != nil {
		return err
	}
	return f.eventLog.Meta()
}

func (f *failAt) Row() error {
	if err := f.check(); err != nil {
		return err
	}
	return f.eventLog.Row()
}

func (f *failAt) SetEnd(n int, st uint16, final bool) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.eventLog.SetEnd(n, st, final)
}
