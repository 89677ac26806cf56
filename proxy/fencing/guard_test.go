package fencing

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/internal/logging"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// The fencing layer's unit tests: guardedWrite and the Tracker driven
// through the fencing layer's interfaces (Session, Runner,
// Responder, Effects) by fakeFence, which answers the proxy's own
// statements from a script. What each verdict and engine sends to the
// backend, in order, what the client gets and what is audited are
// checked here without a server; that the statements do what the script
// says on the real engines is the integration tests' (TestGuardedInserts*,
// TestNoWriteAfterExpiry, TestGalera*, TestTiDB*).

// The statements the fake backend gets, by what they are.
const (
	sStart    = "START"     // START TRANSACTION (the proxy's own)
	sSave     = "SAVEPOINT" // the savepoint before a guard in the client's transaction
	sGuard    = "GUARD"     // the guard (Galera: its UPDATE)
	sClassify = "CLASSIFY"  // Galera: the locking read after the guard's UPDATE
	sVars     = "VARS"      // the session's fence variables (no lease row)
	sCheck    = "CHECK"     // the lease check after a 0-row fenced write
	sWrite    = "WRITE"     // the client's write
	sWarnings = "WARNINGS"  // SHOW WARNINGS (TiDB)
	sRecheck  = "RECHECK"   // the expiry recheck after the write
	sCommit   = "COMMIT"    // the proxy's COMMIT
	sRollback = "ROLLBACK"  // the proxy's ROLLBACK (or the client's transaction's)
	sUndo     = "UNDO"      // ROLLBACK TO SAVEPOINT
	sDo0      = "DO0"       // DO 0
	sReadOnly = "READONLY"  // SET TRANSACTION READ ONLY
)

// label names a statement of the proxy's own by what it is.
func label(sql string) string {
	switch {
	case sql == "START TRANSACTION":
		return sStart
	case strings.HasPrefix(sql, "SAVEPOINT "):
		return sSave
	case strings.HasPrefix(sql, "UPDATE "):
		return sGuard
	case strings.HasPrefix(sql, "SELECT FROM_UNIXTIME("):
		return sRecheck
	case strings.Contains(sql, "(SELECT CONCAT_WS("):
		return sCheck
	case strings.HasPrefix(sql, "SELECT ") && strings.Contains(sql, " FROM "):
		return sGuard
	case strings.HasPrefix(sql, "SELECT "):
		return sVars
	case sql == "SHOW WARNINGS":
		return sWarnings
	case sql == commitOwn:
		return sCommit
	case sql == rollbackOwn, sql == "ROLLBACK":
		return sRollback
	case strings.HasPrefix(sql, "ROLLBACK TO SAVEPOINT "):
		return sUndo
	case sql == "DO 0":
		return sDo0
	case sql == "SET TRANSACTION READ ONLY":
		return sReadOnly
	}
	return "?" + sql
}

// fakeAnswer is the fake backend's response to one statement.
type fakeAnswer struct {
	rows     [][]wire.Value
	affected uint64
	status   uint16
	err      *wire.ServerError
	write    bool   // the client's write, relayed to the client
	label    string // the statement's label
}

func beErr(code uint16) *wire.ServerError {
	return &wire.ServerError{ErrInfo: wire.ErrInfo{Code: code, State: "HY000", Msg: fmt.Sprintf("error %d", code)}}
}

// fakeFence implements the fencing layer's four interfaces: a session in
// a scripted state, a backend that answers the proxy's statements from
// the script in order, and a client that records what it gets.
type fakeFence struct {
	srv    rewrite.Server
	status uint16
	locks  bool

	guardRow    []string // the guard's row (lease.GuardColumns); nil: no lease row
	galeraHolds bool     // Galera: the guard's UPDATE changed the lease row
	varsRow     []string // the fence variables' row
	checkRow    []string // the lease check's row (lease.VerdictColumns)
	recheck     string   // the recheck's value
	write       fakeAnswer
	errs        map[string]*wire.ServerError // by label: that statement fails
	statusAfter map[string]uint16            // by label: the status flags its answer carries
	learnErr    error

	pending []fakeAnswer
	lastAff uint64
	sent    []string
	x       fakeExchange
	client  []string
	records []audit.Record
	kept    *KeptWarnings
}

func values(s []string) []wire.Value {
	out := make([]wire.Value, len(s))
	for i, v := range s {
		if v == "NULL" {
			out[i] = wire.Value{Null: true}
		} else {
			out[i] = wire.Value{S: v}
		}
	}
	return out
}

func (f *fakeFence) answer(l string) fakeAnswer {
	if e := f.errs[l]; e != nil {
		return fakeAnswer{err: e}
	}
	switch l {
	case sGuard:
		if f.srv.Galera {
			if f.galeraHolds {
				return fakeAnswer{affected: 1}
			}
			return fakeAnswer{}
		}
		fallthrough
	case sClassify:
		if f.guardRow == nil {
			return fakeAnswer{rows: [][]wire.Value{}}
		}
		return fakeAnswer{rows: [][]wire.Value{values(f.guardRow)}}
	case sVars:
		return fakeAnswer{rows: [][]wire.Value{values(f.varsRow)}}
	case sCheck:
		return fakeAnswer{rows: [][]wire.Value{values(f.checkRow)}}
	case sRecheck:
		return fakeAnswer{rows: [][]wire.Value{values([]string{f.recheck})}}
	case sWarnings:
		return fakeAnswer{rows: [][]wire.Value{}}
	}
	return fakeAnswer{}
}

// Session
func (f *fakeFence) Server() rewrite.Server                     { return f.srv }
func (f *fakeFence) ServerStatus() uint16                       { return f.status }
func (f *fakeFence) InTransaction() bool                        { return f.status&mysql.SERVER_STATUS_IN_TRANS != 0 }
func (f *fakeFence) LocksHeld() bool                            { return f.locks }
func (f *fakeFence) NamedStmt(string) *rewrite.Stmt             { return nil }
func (f *fakeFence) Digest(sql string) string                   { return sql }
func (f *fakeFence) Log() *slog.Logger                          { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
func (f *fakeFence) ApplyResult(Runtime, *rewrite.Stmt, Result) {}

// Runner
func (f *fakeFence) Queue(sql string) error {
	l := label(sql)
	if l == sGuard && f.srv.Galera && !strings.HasPrefix(sql, "UPDATE ") {
		l = sClassify
	}
	f.sent = append(f.sent, l)
	a := f.answer(l)
	a.label = l
	f.pending = append(f.pending, a)
	return nil
}
func (f *fakeFence) Flush() error { return nil }
func (f *fakeFence) pop() fakeAnswer {
	if len(f.pending) == 0 {
		panic("read with nothing sent")
	}
	a := f.pending[0]
	f.pending = f.pending[1:]
	return a
}
func (f *fakeFence) Read() ([][]wire.Value, error) {
	a := f.pop()
	if a.write {
		panic("the proxy read the client's write's response as its own")
	}
	if st, ok := f.statusAfter[a.label]; ok && a.err == nil {
		f.status = st
	}
	if a.err != nil {
		return nil, a.err
	}
	if a.rows == nil {
		f.lastAff = a.affected // an OK's (a result set leaves it)
	}
	return a.rows, nil
}
func (f *fakeFence) Affected() uint64 { return f.lastAff }
func (f *fakeFence) Query(sql string) ([][]wire.Value, error) {
	f.Queue(sql)
	return f.Read()
}
func (f *fakeFence) Exec(sql string) (uint64, error) {
	f.Queue(sql)
	_, err := f.Read()
	return f.lastAff, err
}
func (f *fakeFence) SendStatement([]byte) error { return f.sendWrite() }
func (f *fakeFence) sendWrite() error {
	f.sent = append(f.sent, sWrite)
	a := f.write
	a.write = true
	f.pending = append(f.pending, a)
	return nil
}
func (f *fakeFence) LearnStatus() error { return f.learnErr }
func (f *fakeFence) StatusUnknown()     {}
func (f *fakeFence) ReadWarnings() (*wire.Recorded, error) {
	_, err := f.Read()
	if _, ok := err.(*wire.ServerError); ok {
		return nil, nil
	}
	return nil, err
}
func (f *fakeFence) Broken(err error) error { return err }

// Responder
func (f *fakeFence) Holding() bool        { return f.x.held != nil }
func (f *fakeFence) DropHeld()            { f.x.held = nil }
func (f *fakeFence) HeldWarnings() uint16 { return wire.Warnings(f.x.held, false) }
func (f *fakeFence) Answered() bool       { return f.x.started }
func (f *fakeFence) Failed() bool         { return f.x.lastErr }
func (f *fakeFence) MoreFollows() bool    { return f.x.more }
func (f *fakeFence) MarkEnd(ok []byte) bool {
	return f.x.markEnd(ok)
}
func (f *fakeFence) Statement(first, more bool) {
	f.x.more, f.x.held, f.x.own, f.x.conflict = more, nil, 0, nil
}
func (f *fakeFence) OwnTransaction(own uint16) { f.x.own = own }
func (f *fakeFence) TakeConflict() (*Txn, uint16) {
	ft, code := f.x.conflict, f.x.conflictCode
	f.x.conflict = nil
	return ft, code
}
func (f *fakeFence) RelayResponse(h Hook, holdEnd bool) error {
	a := f.pop()
	if !a.write {
		panic("relayed a response of the proxy's own to the client")
	}
	if a.err != nil {
		f.x.started, f.x.lastErr = true, true
		f.client = append(f.client, fmt.Sprintf("ERR %d", a.err.Code))
		h.Result(Result{IsErr: true, Err: a.err.ErrInfo})
		return nil
	}
	st := a.status
	ok := wire.OKPacket{AffectedRows: a.affected, Status: st}
	payload := wire.OKPayload(a.affected, st)
	_, hold := h.OKPacket(payload, ok, true)
	if holdEnd || hold {
		f.x.held = payload
	} else {
		f.x.started = true
		f.client = append(f.client, fmt.Sprintf("OK %d status %#x", a.affected, f.x.endStatus(st)))
	}
	h.Result(Result{OK: ok})
	return nil
}
func (f *fakeFence) SendError(code uint16, _, msg string) error {
	f.x.started, f.x.lastErr = true, true
	f.client = append(f.client, fmt.Sprintf("ERR %d", code))
	return nil
}
func (f *fakeFence) SendNoRows() error {
	f.x.started = true
	f.client = append(f.client, "NOROWS")
	return nil
}
func (f *fakeFence) WriteHeld() error {
	p := f.x.held
	f.x.held = nil
	if !f.x.markEnd(p) {
		return fmt.Errorf("held packet")
	}
	ok, _ := wire.ParseOK(p)
	f.x.started = true
	f.client = append(f.client, fmt.Sprintf("OK %d status %#x", ok.AffectedRows, ok.Status))
	return nil
}
func (f *fakeFence) KeepWarnings(w *KeptWarnings)           { f.kept = w }
func (f *fakeFence) Audit(rec audit.Record)                 { f.records = append(f.records, rec) }
func (f *fakeFence) CountRefused(string, string, bool)      {}
func (f *fakeFence) LogLimited(logging.Key, string, ...any) {}
func (f *fakeFence) GuardHeld()                             {}

// fakeExchange is the client's side of the command as far as the fencing
// layer reads or sets it, for OK packets: what the proxy's exchange
// (proxy/exchange.go) keeps.
type fakeExchange struct {
	started, lastErr, more bool
	held                   []byte // the held final OK's payload; nil: none
	own                    uint16 // status bits of the proxy's own transaction
	conflict               *Txn
	conflictCode           uint16
}

// endStatus is the status flags the response's end shows: the server's,
// less the proxy's own transaction, "more results" as the proxy says.
func (x *fakeExchange) endStatus(st uint16) uint16 {
	st &^= mysql.SERVER_MORE_RESULTS_EXISTS | x.own
	if x.more {
		st |= mysql.SERVER_MORE_RESULTS_EXISTS
	}
	return st
}

func (x *fakeExchange) markEnd(p []byte) bool {
	off, ok := wire.StatusOffset(p, false)
	if ok {
		binary.LittleEndian.PutUint16(p[off:], x.endStatus(binary.LittleEndian.Uint16(p[off:])))
	}
	return ok
}

func (f *fakeFence) layer() *Layer { l := New(f, f, f, f); return &l }

func (f *fakeFence) reasons() []string {
	var out []string
	for _, r := range f.records {
		out = append(out, r.Reason)
	}
	return out
}

// unitRuntime is a runtime whose policy protects app.invoices under the
// session's lease variable.
func unitRuntime(t *testing.T, onStale string) Runtime {
	t.Helper()
	cfg, err := policy.Parse("unit.yaml", []byte("listen: 127.0.0.1:0\nadmin: \"\"\nfencing:\n  on_stale: "+onStale+
		"\ncatalog:\n  refresh: 0s\ntables:\n  - name: app.invoices\n"))
	if err != nil {
		t.Fatal(err)
	}
	return Runtime{Policy: cfg.Policy(1), Gen: 1}
}

var unitFence = &rewrite.Fence{Targets: []rewrite.Target{{Schema: "app", Table: "invoices"}}, Digest: "INSERT INTO invoices VALUES (?)", Guard: true}

const (
	until      = "1796126183.460"
	longLeft   = "30000000" // 30 s left: a write answered at once needs no recheck
	autocommit = mysql.SERVER_STATUS_AUTOCOMMIT
	inTrans    = mysql.SERVER_STATUS_IN_TRANS
)

// The guard's rows for each verdict (lease.GuardColumns), and whether a
// Galera guard's UPDATE changes the row.
var guardVerdicts = []struct {
	reason string
	row    []string
}{
	{"", []string{"0", "1", "1", "1", "7", "job", "abcd", "7", until, longLeft}},
	{audit.StaleToken, []string{"0", "0", "1", "1", "8", "job", "abcd", "7", until, longLeft}},
	{audit.OwnerMismatch, []string{"0", "1", "0", "1", "7", "job", "abcd", "7", until, longLeft}},
	{audit.Expired, []string{"0", "1", "1", "0", "7", "job", "abcd", "7", until, "-5000"}},
	{audit.NoFence, []string{"1", "NULL", "NULL", "1", "7", "NULL", "NULL", "NULL", until, longLeft}},
	{audit.LeaseMissing, nil},
}

var unitEngines = []struct {
	name string
	srv  rewrite.Server
}{
	{"mariadb", rewrite.Server{Flavor: rewrite.MariaDB, Version: 101100}},
	{"galera", rewrite.Server{Flavor: rewrite.MariaDB, Version: 101100, Galera: true}},
	{"tidb", rewrite.Server{Flavor: rewrite.TiDB, Version: 80400}},
}

// TestGuardedWriteVerdicts: every verdict of the guard on every engine,
// in autocommit mode (the proxy's own transaction) and in the client's
// transaction, under both on_stale settings: the statements the backend
// gets in order, whether the write is sent, what the client gets, and
// the audit record.
func TestGuardedWriteVerdicts(t *testing.T) {
	for _, eng := range unitEngines {
		for _, gv := range guardVerdicts {
			for _, shape := range []string{"autocommit", "transaction"} {
				for _, onStale := range []string{"zero_rows", "error"} {
					name := fmt.Sprintf("%s/%s/%s/%s", eng.name, gv.reason, shape, onStale)
					if gv.reason == "" {
						name = fmt.Sprintf("%s/holds/%s/%s", eng.name, shape, onStale)
					}
					t.Run(name, func(t *testing.T) {
						f := &fakeFence{srv: eng.srv, guardRow: gv.row, galeraHolds: gv.reason == "",
							varsRow: []string{"0", "job", "abcd", "7"}, recheck: "1",
							write: fakeAnswer{affected: 1, status: autocommit | inTrans}}
						f.status = autocommit
						if shape == "transaction" {
							f.status = autocommit | inTrans
						}
						rt := unitRuntime(t, onStale)
						fg := f.layer()
						tr := NewTracker(fg, rt, []rewrite.Stmt{{Kind: rewrite.Write, Fence: unitFence}}, true)
						if err := fg.guardedWrite(rt, unitFence, tr, f.sendWrite, func() error { return nil }); err != nil {
							t.Fatal(err)
						}
						if err := tr.Finish(); err != nil {
							t.Fatal(err)
						}

						// What the backend gets.
						var want []string
						if shape == "autocommit" {
							want = append(want, sStart)
						} else {
							want = append(want, sSave)
						}
						want = append(want, sGuard)
						if eng.srv.Galera {
							want = append(want, sClassify)
						}
						if gv.reason == audit.LeaseMissing {
							want = append(want, sVars)
						}
						switch {
						case gv.reason != "" && shape == "autocommit":
							want = append(want, sRollback)
						case gv.reason != "":
							want = append(want, sDo0)
						case shape == "autocommit":
							want = append(want, sWrite)
							if eng.srv.Flavor == rewrite.TiDB {
								want = append(want, sWarnings)
							}
							want = append(want, sRecheck, sCommit)
						default:
							// Answered within half the lease's time left: no recheck.
							want = append(want, sWrite)
						}
						if !slices.Equal(f.sent, want) {
							t.Errorf("backend got %v, want %v", f.sent, want)
						}

						// What the client gets, and the record.
						var client, reasons []string
						switch {
						case gv.reason == "" && shape == "autocommit":
							// The proxy's own transaction does not show.
							client = []string{fmt.Sprintf("OK 1 status %#x", autocommit)}
						case gv.reason == "":
							client = []string{fmt.Sprintf("OK 1 status %#x", autocommit|inTrans)}
						case onStale == "error":
							client, reasons = []string{fmt.Sprintf("ERR %d", erSignal)}, []string{gv.reason}
						default:
							client, reasons = []string{"NOROWS"}, []string{gv.reason}
						}
						if !slices.Equal(f.client, client) {
							t.Errorf("client got %v, want %v", f.client, client)
						}
						if !slices.Equal(f.reasons(), reasons) {
							t.Errorf("audited %v, want %v", f.reasons(), reasons)
						}
						if len(f.records) == 1 {
							r := f.records[0]
							if r.Table != "app.invoices" || r.Digest != unitFence.Digest {
								t.Errorf("record %+v: want table app.invoices and the write's digest", r)
							}
							if gv.reason != audit.NoFence && (r.Lease != "job" || r.PresentedToken == nil || *r.PresentedToken != 7) {
								t.Errorf("record %+v: want the session's lease and token", r)
							}
						}
						if len(f.pending) != 0 {
							t.Errorf("%d responses left unread", len(f.pending))
						}
					})
				}
			}
		}
	}
}

// TestGuardedWriteCases: the paths of a guarded write past the guard's
// verdict: the write outliving its lease, the write's own error, the
// guard's error, a conflict at the proxy's COMMIT, an error the server
// reports at the status probe, LOCK TABLES, a write that answers with
// rows.
func TestGuardedWriteCases(t *testing.T) {
	holds := guardVerdicts[0].row
	late := slices.Clone(holds)
	late[9] = "0" // no time left by the guard's reading: the write's answer is late
	okWrite := fakeAnswer{affected: 1, status: autocommit | inTrans}
	for _, tc := range []struct {
		name    string
		eng     int // unitEngines
		status  uint16
		locks   bool
		row     []string
		recheck string
		write   fakeAnswer
		errs    map[string]*wire.ServerError
		learn   error
		onStale string
		fence   *rewrite.Fence
		sent    []string
		client  []string
		reasons []string
	}{
		{name: "own transaction, the write outlived its lease", status: autocommit, row: holds, recheck: "0", write: okWrite,
			sent:   []string{sStart, sGuard, sWrite, sRecheck, sRollback},
			client: []string{"NOROWS"}, reasons: []string{audit.Expired}},
		{name: "own transaction, the write outlived its lease, on_stale error", status: autocommit, row: holds, recheck: "0", write: okWrite,
			onStale: "error", sent: []string{sStart, sGuard, sWrite, sRecheck, sRollback},
			client: []string{fmt.Sprintf("ERR %d", erSignal)}, reasons: []string{audit.Expired}},
		{name: "client's transaction, late answer, lease still live", status: autocommit | inTrans, row: late, recheck: "1", write: okWrite,
			sent:   []string{sSave, sGuard, sWrite, sRecheck},
			client: []string{fmt.Sprintf("OK 1 status %#x", autocommit|inTrans)}},
		{name: "client's transaction, late answer, lease ended: undone to the savepoint", status: autocommit | inTrans, row: late, recheck: "0",
			write: okWrite, sent: []string{sSave, sGuard, sWrite, sRecheck, sUndo},
			client: []string{"NOROWS"}, reasons: []string{audit.Expired}},
		{name: "tidb, client's transaction, late answer: warnings kept first", eng: 2, status: autocommit | inTrans, row: late, recheck: "1",
			write: okWrite, sent: []string{sSave, sGuard, sWrite, sWarnings, sRecheck},
			client: []string{fmt.Sprintf("OK 1 status %#x", autocommit|inTrans)}},
		{name: "own transaction, the write fails: rolled back, its ERR", status: autocommit, row: holds, recheck: "1",
			write: fakeAnswer{err: beErr(1062)}, sent: []string{sStart, sGuard, sWrite, sRecheck, sRollback},
			client: []string{"ERR 1062"}},
		{name: "lease table missing", status: autocommit, row: holds, errs: map[string]*wire.ServerError{sGuard: beErr(mysql.ER_NO_SUCH_TABLE)},
			sent: []string{sStart, sGuard, sRollback}, client: []string{fmt.Sprintf("ERR %d", mysql.ER_NO_SUCH_TABLE)}},
		{name: "guard waits too long for the lease row", status: autocommit | inTrans, row: holds, errs: map[string]*wire.ServerError{sGuard: beErr(erLockWait)},
			sent: []string{sSave, sGuard, sDo0}, client: []string{fmt.Sprintf("ERR %d", erLockWait)}},
		{name: "galera, conflict at the proxy's COMMIT: the engine's error, audited", eng: 1, status: autocommit, row: holds, recheck: "1",
			write: okWrite, errs: map[string]*wire.ServerError{sCommit: beErr(erConflict)},
			sent:   []string{sStart, sGuard, sClassify, sWrite, sRecheck, sCommit},
			client: []string{fmt.Sprintf("ERR %d", erConflict)}, reasons: []string{audit.Conflict}},
		{name: "galera, conflict reported at the status probe: nothing sent", eng: 1, status: autocommit, row: holds,
			learn: beErr(erConflict), client: []string{fmt.Sprintf("ERR %d", erConflict)}},
		{name: "mariadb under LOCK TABLES: no transaction of the proxy's", status: autocommit, locks: true, row: holds, recheck: "1", write: okWrite,
			sent: []string{sGuard, sWrite}, client: []string{fmt.Sprintf("OK 1 status %#x", autocommit|inTrans)}},
		{name: "tidb under LOCK TABLES: wrapped all the same", eng: 2, status: autocommit, locks: true, row: holds, recheck: "1", write: okWrite,
			sent:   []string{sStart, sGuard, sWrite, sWarnings, sRecheck, sCommit},
			client: []string{fmt.Sprintf("OK 1 status %#x", autocommit)}},
		{name: "rejected write that answers with rows: ERR under zero_rows", status: autocommit, row: guardVerdicts[1].row,
			fence: &rewrite.Fence{Targets: unitFence.Targets, Digest: unitFence.Digest, Guard: true, Rows: true},
			sent:  []string{sStart, sGuard, sRollback}, client: []string{fmt.Sprintf("ERR %d", erSignal)}, reasons: []string{audit.StaleToken}},
		{name: "autocommit off: the guard opens the client's transaction", status: 0, row: holds, recheck: "1",
			write: fakeAnswer{affected: 1, status: inTrans}, sent: []string{sSave, sGuard, sWrite},
			client: []string{fmt.Sprintf("OK 1 status %#x", inTrans)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeFence{srv: unitEngines[tc.eng].srv, status: tc.status, locks: tc.locks, guardRow: tc.row, galeraHolds: true,
				varsRow: []string{"0", "job", "abcd", "7"}, recheck: tc.recheck, write: tc.write, errs: tc.errs, learnErr: tc.learn}
			onStale := tc.onStale
			if onStale == "" {
				onStale = "zero_rows"
			}
			fence := tc.fence
			if fence == nil {
				fence = unitFence
			}
			rt := unitRuntime(t, onStale)
			fg := f.layer()
			if tc.eng != 0 {
				// A guarded write on TiDB and Galera is watched for the
				// engine's conflicts until its transaction ends.
				defer func() { fg.fenced = nil }()
			}
			tr := NewTracker(fg, rt, []rewrite.Stmt{{Kind: rewrite.Write, Fence: fence}}, true)
			if err := fg.guardedWrite(rt, fence, tr, f.sendWrite, func() error { return nil }); err != nil {
				t.Fatal(err)
			}
			if err := tr.Finish(); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(f.sent, tc.sent) {
				t.Errorf("backend got %v, want %v", f.sent, tc.sent)
			}
			if !slices.Equal(f.client, tc.client) {
				t.Errorf("client got %v, want %v", f.client, tc.client)
			}
			if !slices.Equal(f.reasons(), tc.reasons) {
				t.Errorf("audited %v, want %v", f.reasons(), tc.reasons)
			}
			if len(f.pending) != 0 {
				t.Errorf("%d responses left unread", len(f.pending))
			}
		})
	}
}

// TestTrackerLeaseCheck: a fenced write (the fence in its own text) that
// changed no row has its lease checked after it; every verdict on MariaDB
// and TiDB, a lone write (its OK held until the check) and a write in a
// packet of several (its OK gone already), under both on_stale settings,
// and the check's own failures.
func TestTrackerLeaseCheck(t *testing.T) {
	fence := &rewrite.Fence{Targets: unitFence.Targets, Digest: "UPDATE invoices SET paid = ? WHERE id = ?"}
	checks := []struct {
		reason string
		row    []string
		err    *wire.ServerError
	}{
		{"", []string{"0", "job", "abcd", "7", "7,1,1"}, nil},
		{audit.StaleToken, []string{"0", "job", "abcd", "7", "8,1,1"}, nil},
		{audit.OwnerMismatch, []string{"0", "job", "abcd", "7", "7,0,1"}, nil},
		{audit.Expired, []string{"0", "job", "abcd", "7", "7,1,0"}, nil},
		{audit.NoFence, []string{"1", "NULL", "NULL", "NULL", "NULL"}, nil},
		{audit.LeaseMissing, []string{"0", "job", "abcd", "7", "NULL"}, nil},
		{"lock wait", nil, beErr(erLockWait)},
		{"deadlock", nil, beErr(erConflict)},
	}
	ok0 := fmt.Sprintf("OK 0 status %#x", autocommit)
	for _, eng := range []int{0, 2} {
		for _, ck := range checks {
			for _, single := range []bool{true, false} {
				for _, onStale := range []string{"zero_rows", "error"} {
					name := fmt.Sprintf("%s/%s/single=%v/%s", unitEngines[eng].name, ck.reason, single, onStale)
					t.Run(name, func(t *testing.T) {
						f := &fakeFence{srv: unitEngines[eng].srv, status: autocommit, checkRow: ck.row,
							varsRow: []string{"0", "job", "abcd", "7"}, write: fakeAnswer{affected: 0, status: autocommit}}
						if ck.err != nil {
							f.errs = map[string]*wire.ServerError{sCheck: ck.err}
						}
						rt := unitRuntime(t, onStale)
						fg := f.layer()
						stmts := []rewrite.Stmt{{Kind: rewrite.Write, Fence: fence}}
						if !single {
							// The write is the last of two statements.
							stmts = append([]rewrite.Stmt{{Kind: rewrite.Other}}, stmts...)
						}
						tr := NewTracker(fg, rt, stmts, single)
						tr.pos = len(stmts) - 1
						f.sendWrite()
						if err := fg.out.RelayResponse(tr, false); err != nil {
							t.Fatal(err)
						}
						err := tr.Finish()
						if ck.reason == "deadlock" && !single {
							// The write's OK went out with the packet's
							// other results; the rolled-back transaction
							// ends the connection (abortCommand).
							if be, ok := err.(*wire.ServerError); !ok || be.Code != erConflict {
								t.Fatalf("finish: %v, want the check's 1213", err)
							}
						} else if err != nil {
							t.Fatal(err)
						}
						rejected := ck.reason != "" && ck.err == nil
						var sent, client, reasons []string
						sent = []string{sWrite, sCheck, sDo0}
						client = []string{ok0}
						switch {
						case rejected && single && onStale == "error":
							sent, client = []string{sWrite, sCheck}, []string{fmt.Sprintf("ERR %d", erSignal)}
							reasons = []string{ck.reason}
						case rejected:
							reasons = []string{ck.reason}
						case ck.reason == "deadlock" && single:
							// The transaction is gone: the client hears so.
							sent, client = []string{sWrite, sCheck, sVars}, []string{fmt.Sprintf("ERR %d", erConflict)}
							reasons = []string{audit.Conflict}
						case ck.reason == "deadlock":
							sent = []string{sWrite, sCheck}
						case ck.reason == "lock wait" && single && onStale == "error":
							sent, client = []string{sWrite, sCheck, sVars}, []string{fmt.Sprintf("ERR %d", erLockWait)}
							reasons = []string{audit.Conflict}
						case ck.reason == "lock wait":
							sent = []string{sWrite, sCheck, sVars, sDo0}
							reasons = []string{audit.Conflict}
						}
						if !slices.Equal(f.sent, sent) {
							t.Errorf("backend got %v, want %v", f.sent, sent)
						}
						if !slices.Equal(f.client, client) {
							t.Errorf("client got %v, want %v", f.client, client)
						}
						if !slices.Equal(f.reasons(), reasons) {
							t.Errorf("audited %v, want %v", f.reasons(), reasons)
						}
					})
				}
			}
		}
	}
}

// TestGuardedWriteKeepsReadOnly: when the proxy's START TRANSACTION for an
// autocommit write says the transaction is READ ONLY (a one-shot SET
// TRANSACTION READ ONLY, which the server keeps past a write it refuses
// with 1792), the proxy sets READ ONLY again once its transaction has
// ended, whatever the verdict; not on TiDB, and not when the transaction
// is an ordinary one.
func TestGuardedWriteKeepsReadOnly(t *testing.T) {
	const ro = mysql.SERVER_STATUS_IN_TRANS_READONLY
	for _, tc := range []struct {
		name     string
		srv      rewrite.Server
		readOnly bool
		guard    []string
		want     []string
	}{
		{"mariadb, holds", unitEngines[0].srv, true, guardVerdicts[0].row, []string{sStart, sGuard, sWrite, sRecheck, sRollback, sReadOnly}},
		{"mariadb, stale", unitEngines[0].srv, true, guardVerdicts[1].row, []string{sStart, sGuard, sRollback, sReadOnly}},
		{"mariadb, read-write", unitEngines[0].srv, false, guardVerdicts[0].row, []string{sStart, sGuard, sWrite, sRecheck, sRollback}},
		{"tidb, holds", unitEngines[2].srv, true, guardVerdicts[0].row, []string{sStart, sGuard, sWrite, sWarnings, sRecheck, sRollback}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := uint16(autocommit | inTrans)
			if tc.readOnly {
				start |= ro
			}
			f := &fakeFence{srv: tc.srv, guardRow: tc.guard, recheck: "1", varsRow: []string{"0", "job", "abcd", "7"},
				write:       fakeAnswer{err: &wire.ServerError{ErrInfo: wire.ErrInfo{Code: 1792, State: "25006", Msg: "Cannot execute statement in a READ ONLY transaction"}}},
				statusAfter: map[string]uint16{sStart: start, sRollback: autocommit}}
			f.status = autocommit
			rt := unitRuntime(t, "zero_rows")
			fg := f.layer()
			tr := NewTracker(fg, rt, []rewrite.Stmt{{Kind: rewrite.Write, Fence: unitFence}}, true)
			if err := fg.guardedWrite(rt, unitFence, tr, f.sendWrite, func() error { return nil }); err != nil {
				t.Fatal(err)
			}
			if err := tr.Finish(); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(f.sent, tc.want) {
				t.Errorf("backend got %v, want %v", f.sent, tc.want)
			}
		})
	}
}
