package integration

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/lease"
)

// The proxy's closed protocol model against the real server, with the
// catalog on (the proxy's own account): every command byte, capability
// flag and statement id a client can send, tried from a session whose
// fence is stale to land a write in a protected table, and checked
// against what the server does without the proxy.

// relayedCommands are the command bytes the proxy relays (its command
// table); every other byte must be refused.
var relayedCommands = map[byte]bool{
	0x01: true, 0x02: true, 0x03: true, 0x04: true, 0x07: true, 0x08: true, 0x09: true, 0x0a: true,
	0x0c: true, 0x0d: true, 0x0e: true, 0x11: true, 0x12: true, 0x15: true, 0x16: true, 0x17: true,
	0x18: true, 0x19: true, 0x1a: true, 0x1b: true, 0x1c: true, 0x1e: true, 0x1f: true,
}

// MariaDB's extended capabilities (bits 32-63, bytes 28-31 of the
// handshake response).
const (
	extProgress      = 1 << 0
	extBulk          = 1 << 2
	extMetadata      = 1 << 3
	extCacheMetadata = 1 << 4
	capNoSchema      = 1 << 4
)

// protoEnv is a fenced environment whose proxy has its own account, a lease
// held by another owner, and the app's stale and valid fences.
type protoEnv struct {
	*fencedEnv
	held  lease.Lease // the valid fence
	stale string      // SET of a stale fence (the lease's token, another owner)
	valid string      // SET of the valid fence
}

func newProtoEnv(t *testing.T) *protoEnv {
	t.Helper()
	e := newFencedEnv(t, envOptions{account: true})
	mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-10', 10)")
	l := e.acquire(t, "invoice:acme", 10*time.Minute)
	pe := &protoEnv{fencedEnv: e, held: l}
	pe.stale = fmt.Sprintf("SET @fence_lease = 'invoice:acme', @fence_owner = 'someone-else', @fence_token = %d", l.Token)
	pe.valid = fmt.Sprintf("SET @fence_lease = 'invoice:acme', @fence_owner = X'%x', @fence_token = %d", l.Owner, l.Token)
	return pe
}

// conn opens a raw session through the proxy (or, direct, to the server).
func (e *protoEnv) conn(t *testing.T, direct bool, o wireOptions) *wireConn {
	t.Helper()
	addr := e.proxy.Addr
	if direct {
		addr = e.srv.Addr
	}
	o.User, o.Password, o.DB = dbserver.AppUser, dbserver.AppPassword, e.db
	if o.Timeout == 0 {
		o.Timeout = 20 * time.Second
	}
	w, err := dialWire(addr, o)
	if err != nil {
		t.Fatalf("login (caps +%08x -%08x ext %08x): %v", o.ExtraCaps, o.ClearCaps, o.ExtCaps, err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// invoices is the protected table's contents.
func (e *protoEnv) invoices(t *testing.T) string { return tableDump(t, e.root, "invoices") }

// attempts counts the bypass attempts the tests in this file make.
var attempts int

// unchanged fails the test if the protected table differs from want.
func (e *protoEnv) unchanged(t *testing.T, want, what string) {
	t.Helper()
	attempts++
	if got := e.invoices(t); got != want {
		t.Fatalf("%s changed a protected table:\nwant %s\ngot  %s", what, want, got)
	}
}

const (
	staleInsert = "INSERT INTO invoices (customer, period, amount) VALUES ('mallory', '2026-12', 1)"
	staleUpdate = "UPDATE invoices SET amount = 0"
)

// prepare prepares sql and returns its id (failing the test on an ERR).
func (w *wireConn) prepare(t *testing.T, sql string) (uint32, int) {
	t.Helper()
	if err := w.send(append([]byte{comStmtPrepare}, sql...)); err != nil {
		t.Fatal(err)
	}
	r, id, params, err := w.readPrepare()
	if err != nil || r.err() != nil {
		t.Fatalf("prepare %s: %v %v", sql, err, r.err())
	}
	return id, params
}

// exec executes statement id with params and returns the response.
func (w *wireConn) exec(t *testing.T, id uint32, params ...stmtParam) wireResponse {
	t.Helper()
	if err := w.send(executePacket(id, 0, params)); err != nil {
		t.Fatal(err)
	}
	r, err := w.readResults(false)
	if err != nil {
		t.Fatalf("execute %x: %v", id, err)
	}
	return r
}

// bulkPacket is COM_STMT_BULK_EXECUTE of statement id with one BIGINT
// parameter per row.
func bulkPacket(id uint32, rows ...int64) []byte {
	b := []byte{0xfa}
	b = binary.LittleEndian.AppendUint32(b, id)
	b = binary.LittleEndian.AppendUint16(b, 128) // types sent
	b = append(b, 0x08, 0)
	for _, v := range rows {
		b = append(b, 0)
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return b
}

// TestProtocolCommandBytes sends every command byte the proxy does not
// relay, with the text of a stale INSERT as its payload, through the proxy
// and to the server: the proxy answers with the server's error code and
// SQLSTATE, nothing changes, and the session goes on.
func TestProtocolCommandBytes(t *testing.T) {
	e := newProtoEnv(t)
	want := e.invoices(t)
	p := e.conn(t, false, wireOptions{DeprecateEOF: true})
	p.mustQuery(t, e.stale)
	d := e.conn(t, true, wireOptions{DeprecateEOF: true})
	for b := 0; b < 256; b++ {
		if relayedCommands[byte(b)] {
			continue
		}
		payload := append([]byte{byte(b)}, staleInsert...)
		var answers [2]*wireError
		for i, w := range []*wireConn{d, p} {
			if err := w.send(payload); err != nil {
				t.Fatal(err)
			}
			r, err := w.readOne()
			if err != nil {
				t.Fatalf("0x%02x: %v", b, err)
			}
			answers[i] = r.err()
		}
		if answers[1] == nil || answers[0] == nil || answers[0].Code != answers[1].Code || answers[0].State != answers[1].State {
			t.Errorf("command 0x%02x: server %v, proxy %v", b, answers[0], answers[1])
		}
		e.unchanged(t, want, fmt.Sprintf("command 0x%02x", b))
	}
	// The session goes on, and still has its fence.
	p.mustQuery(t, "SELECT 1")
	if r, _ := p.query(staleInsert); r.err() != nil {
		t.Fatalf("a stale INSERT after the refused commands: %v", r.err())
	}
	e.unchanged(t, want, "the stale INSERT after them")
}

// TestProtocolRelayedCommands: every command the proxy relays answers as
// the server does (its first byte, error code and SQLSTATE), and the
// session goes on. COM_SHUTDOWN is left out: it would stop the shared
// server.
func TestProtocolRelayedCommands(t *testing.T) {
	e := newProtoEnv(t)
	mustExec(t, e.root, "CREATE TABLE t2 (id INT PRIMARY KEY, v VARCHAR(10))")
	type step struct {
		name    string
		payload func(w *wireConn) []byte
		read    func(w *wireConn) (wireResponse, error)
	}
	stmt := func(cmd byte, extra ...byte) func(w *wireConn) []byte {
		return func(w *wireConn) []byte {
			id, _ := w.prepare(t, "SELECT id, v FROM t2 WHERE id > ?")
			return append(binary.LittleEndian.AppendUint32([]byte{cmd}, id), extra...)
		}
	}
	fixed := func(p []byte) func(*wireConn) []byte { return func(*wireConn) []byte { return p } }
	none := func(*wireConn) (wireResponse, error) { return wireResponse{}, nil }
	steps := []step{
		{"COM_INIT_DB", fixed(append([]byte{comInitDB}, e.db...)), (*wireConn).readOne},
		{"COM_QUERY", fixed(append([]byte{comQuery}, "SELECT 1"...)), func(w *wireConn) (wireResponse, error) { return w.readResults(false) }},
		{"COM_FIELD_LIST", fixed(append([]byte{comFieldList}, "t2\x00"...)), (*wireConn).readRows},
		{"COM_REFRESH", fixed([]byte{0x07, 0x10}), (*wireConn).readOne},
		{"COM_STATISTICS", fixed([]byte{comStatistics}), (*wireConn).readOne},
		{"COM_PROCESS_INFO", fixed([]byte{0x0a}), func(w *wireConn) (wireResponse, error) { return w.readResults(false) }},
		{"COM_PROCESS_KILL", fixed([]byte{comProcessKill, 0xff, 0xff, 0xff, 0x7f}), (*wireConn).readOne},
		{"COM_DEBUG", fixed([]byte{0x0d}), (*wireConn).readOne},
		{"COM_PING", fixed([]byte{comPing}), (*wireConn).readOne},
		{"COM_REGISTER_SLAVE", fixed([]byte{0x15, 9, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}), (*wireConn).readOne},
		{"COM_STMT_PREPARE", fixed(append([]byte{comStmtPrepare}, "SELECT 1"...)), func(w *wireConn) (wireResponse, error) { r, _, _, err := w.readPrepare(); return r, err }},
		{"COM_STMT_EXECUTE", func(w *wireConn) []byte {
			id, _ := w.prepare(t, "SELECT id, v FROM t2 WHERE id > ?")
			return executePacket(id, 0, []stmtParam{intParam(0)})
		}, func(w *wireConn) (wireResponse, error) { return w.readResults(false) }},
		{"COM_STMT_SEND_LONG_DATA", stmt(comStmtSendLongData, 0, 0, 'x'), none},
		{"COM_STMT_CLOSE", stmt(comStmtClose), none},
		{"COM_STMT_RESET", stmt(comStmtReset), (*wireConn).readOne},
		{"COM_SET_OPTION", fixed([]byte{comSetOption, 1, 0}), (*wireConn).readOne},
		{"COM_STMT_FETCH", stmt(comStmtFetch, 1, 0, 0, 0), (*wireConn).readRows},
		{"COM_BINLOG_DUMP_GTID", fixed(append([]byte{0x1e}, make([]byte, 20)...)), (*wireConn).readOne},
		{"COM_RESET_CONNECTION", fixed([]byte{comResetConnection}), (*wireConn).readOne},
	}
	p := e.conn(t, false, wireOptions{DeprecateEOF: true})
	d := e.conn(t, true, wireOptions{DeprecateEOF: true})
	for _, s := range steps {
		var got [2]string
		for i, w := range []*wireConn{d, p} {
			if err := w.send(s.payload(w)); err != nil {
				t.Fatal(err)
			}
			r, err := s.read(w)
			if err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			got[i] = "no answer"
			if last := r.last(); last != nil {
				got[i] = fmt.Sprintf("first byte %02x", r.Packets[0].Payload[0])
				if e := r.err(); e != nil {
					got[i] += fmt.Sprintf(", ERR %d %s", e.Code, e.State)
				}
			}
			if _, err := w.query("SELECT 1"); err != nil {
				t.Fatalf("%s: the session did not go on: %v", s.name, err)
			}
		}
		if got[0] != got[1] {
			t.Errorf("%s: server %s, proxy %s", s.name, got[0], got[1])
		}
	}
}

// TestProtocolCapabilityBits logs in with each of the 32 capability flags
// set (CLIENT_SSL and CLIENT_COMPRESS aside, which would change this
// client's own framing), and with every MariaDB extended capability, with
// CLIENT_MYSQL set and clear, and tries a stale INSERT and UPDATE, as text
// and prepared, and a bulk INSERT: nothing changes.
func TestProtocolCapabilityBits(t *testing.T) {
	e := newProtoEnv(t)
	type login struct {
		name string
		o    wireOptions
	}
	var logins []login
	for bit := 0; bit < 32; bit++ {
		if f := uint32(1) << bit; f != capSSL && f != capCompress {
			logins = append(logins, login{fmt.Sprintf("flag bit %d", bit), wireOptions{ExtraCaps: f}})
		}
	}
	for _, clear := range []uint32{0, capLongPassword} {
		for _, ext := range []uint32{extProgress, extBulk, extMetadata, extCacheMetadata, 0xffffffff} {
			logins = append(logins, login{fmt.Sprintf("extended %08x, CLIENT_MYSQL %v", ext, clear == 0),
				wireOptions{ClearCaps: clear, ExtCaps: ext}})
		}
	}
	logins = append(logins, login{"every flag and every extended one", wireOptions{ExtraCaps: 0xffffffff &^ (capSSL | capCompress), ExtCaps: 0xffffffff}})
	for _, l := range logins {
		t.Run(l.name, func(t *testing.T) {
			want := e.invoices(t) // each login's attempts on their own
			l.o.DeprecateEOF = true
			w := e.conn(t, false, l.o)
			w.mustQuery(t, e.stale)
			for _, q := range []string{staleInsert, staleUpdate, "UPDATE nosuch.invoices SET amount = 0"} {
				w.query(q)
				e.unchanged(t, want, l.name+": "+q)
			}
			id, _ := w.prepare(t, "INSERT INTO invoices (customer, period, amount) VALUES ('mallory', ?, 1)")
			w.exec(t, id, strParam("2026-12"))
			e.unchanged(t, want, l.name+": prepared INSERT")
			w.send(bulkPacket(id, 1, 2, 3))
			if r, err := w.readOne(); err != nil || r.err() == nil {
				t.Fatalf("%s: bulk execution was not refused: %v %s", l.name, err, r)
			}
			e.unchanged(t, want, l.name+": bulk INSERT")
			// A 2-column prepared SELECT answers with its metadata
			// (no cached metadata) and does not hang.
			sel, _ := w.prepare(t, "SELECT id, amount FROM invoices WHERE id > ?")
			for range 2 {
				r := w.exec(t, sel, intParam(0))
				if len(r.Packets) < 4 || r.err() != nil {
					t.Fatalf("prepared SELECT: %s", r)
				}
			}
			w.mustQuery(t, e.valid)
			if r := w.mustQuery(t, "INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2027-01', 1)"); r.err() != nil {
				t.Fatal(r.err())
			}
			mustExec(t, e.root, "DELETE FROM invoices WHERE period = '2027-01'")
		})
	}
}

// TestProtocolNoSchema: with CLIENT_NO_SCHEMA the server drops the schema
// of db.table names (measured here directly), so UPDATE nosuch.invoices
// would write the current schema's protected table. The proxy never lets
// it reach the server.
func TestProtocolNoSchema(t *testing.T) {
	e := newProtoEnv(t)
	mustExec(t, e.root, "CREATE TABLE notes2 (id INT PRIMARY KEY, v INT)")
	mustExec(t, e.root, "INSERT INTO notes2 VALUES (1, 0)")
	d := e.conn(t, true, wireOptions{ExtraCaps: capNoSchema})
	d.mustQuery(t, "UPDATE nosuch.notes2 SET v = 5")
	if got := queryString(t, e.root, "SELECT v FROM notes2"); got != "5" {
		t.Fatalf("directly, CLIENT_NO_SCHEMA did not drop the schema (v = %s): the attack below proves nothing", got)
	}
	want := e.invoices(t)
	p := e.conn(t, false, wireOptions{ExtraCaps: capNoSchema})
	p.mustQuery(t, e.stale)
	for _, q := range []string{"UPDATE nosuch.invoices SET amount = 0", "INSERT INTO nosuch.invoices (customer, period, amount) VALUES ('x', '2026-12', 1)",
		"DELETE FROM nosuch.invoices", "REPLACE INTO nosuch.invoices (id, customer, period, amount) VALUES (1, 'x', '2026-12', 1)"} {
		p.query(q)
		e.unchanged(t, want, "CLIENT_NO_SCHEMA: "+q)
	}
}

// TestProtocolLastStatementID: MariaDB's statement id 0xFFFFFFFF ("the
// last prepared statement") of a prepared guarded INSERT changes nothing
// with a stale fence and inserts with a valid one; after a lease function
// prepared last it runs that; with no last statement it runs nothing and
// answers as the server does.
func TestProtocolLastStatementID(t *testing.T) {
	e := newProtoEnv(t)
	want := e.invoices(t)
	const last = 0xffffffff
	p := e.conn(t, false, wireOptions{DeprecateEOF: true})
	d := e.conn(t, true, wireOptions{DeprecateEOF: true})
	for _, w := range []*wireConn{d, p} {
		r := w.exec(t, last)
		if e := r.err(); e == nil || e.Code != 1243 || !strings.Contains(e.Msg, "4294967295") {
			t.Fatalf("execute of no last statement: %s", r)
		}
	}
	p.mustQuery(t, e.stale)
	p.prepare(t, staleInsert)
	p.exec(t, last)
	e.unchanged(t, want, "EXECUTE 0xFFFFFFFF of a guarded INSERT")
	long, _ := p.prepare(t, "INSERT INTO invoices (customer, period, amount) VALUES ('mallory', ?, 1)")
	p.send(append(binary.LittleEndian.AppendUint32([]byte{comStmtSendLongData}, last), 0, 0, '2', '0', '2', '6', '-', '1', '2'))
	p.exec(t, last, longDataParam())
	e.unchanged(t, want, "SEND_LONG_DATA and EXECUTE 0xFFFFFFFF")
	p.send(bulkPacket(last, 1, 2))
	p.readOne()
	e.unchanged(t, want, "BULK_EXECUTE 0xFFFFFFFF")
	h, _ := p.prepare(t, "SELECT fence_status()")
	if h < 0xf0000000 {
		t.Fatalf("fence_status() got a server id %d", h)
	}
	r := p.exec(t, last)
	if rows := len(r.Packets); r.err() != nil || rows < 5 {
		t.Fatalf("EXECUTE 0xFFFFFFFF after a lease function: %s", r)
	}
	e.unchanged(t, want, "EXECUTE 0xFFFFFFFF after a lease function")
	p.send(append([]byte{comStmtPrepare}, "TRUNCATE invoices"...))
	if r, _, _, _ := p.readPrepare(); r.err() == nil {
		t.Fatal("PREPARE TRUNCATE of a protected table was not refused")
	}
	if r := p.exec(t, last); r.err() == nil || r.err().Code != 1243 {
		t.Fatalf("EXECUTE 0xFFFFFFFF after a refused prepare: %s", r)
	}
	e.unchanged(t, want, "EXECUTE 0xFFFFFFFF after a refused prepare")
	p.exec(t, long, strParam("2026-12"))
	e.unchanged(t, want, "the INSERT by its own id")
	p.mustQuery(t, e.valid)
	p.prepare(t, "INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2027-02', 1)")
	if r := p.exec(t, last); r.err() != nil {
		t.Fatalf("valid fence: %v", r.err())
	}
	if got := queryString(t, e.root, "SELECT COUNT(*) FROM invoices WHERE period = '2027-02'"); got != "1" {
		t.Fatalf("EXECUTE 0xFFFFFFFF with a valid fence inserted %s rows", got)
	}
}

// TestProtocolMultiStatements: a session without CLIENT_MULTI_STATEMENTS
// gets, through the proxy, the server's own answer to a packet of several
// statements (byte for byte) and nothing runs, even with a valid fence;
// COM_SET_OPTION turns them on (fenced, guarded) and off again; the state
// survives COM_RESET_CONNECTION as on the server.
func TestProtocolMultiStatements(t *testing.T) {
	e := newProtoEnv(t)
	want := e.invoices(t)
	p := e.conn(t, false, wireOptions{DeprecateEOF: true})
	d := e.conn(t, true, wireOptions{DeprecateEOF: true})
	packets := []string{
		"SELECT 1; " + staleInsert,
		"SELECT 1; " + staleUpdate,
		staleInsert + "; SELECT 1",
		"SET @x = 1; DELETE FROM invoices",
		"SELECT 1;\n" + staleInsert,
		"SELECT 1; /* c */ " + staleInsert + ";",
		"DO 1; " + staleUpdate + "; " + staleInsert,
	}
	for _, fence := range []string{e.stale, e.valid} {
		p.mustQuery(t, fence)
		d.mustQuery(t, fence)
		for _, q := range packets {
			var got [2]wireResponse
			for i, w := range []*wireConn{d, p} {
				r, err := w.query(q)
				if err != nil {
					t.Fatalf("%q: %v", q, err)
				}
				got[i] = r
				e.unchanged(t, want, fmt.Sprintf("%q without multi-statements", q))
			}
			if got[0].String() != got[1].String() {
				t.Errorf("%q: server answered\n%s proxy answered\n%s", q, got[0], got[1])
			}
		}
	}
	setOption := func(w *wireConn, opt byte) {
		t.Helper()
		w.send([]byte{comSetOption, opt, 0})
		if r, err := w.readOne(); err != nil || r.err() != nil {
			t.Fatalf("COM_SET_OPTION %d: %v %s", opt, err, r)
		}
	}
	p.mustQuery(t, e.stale)
	setOption(p, 0)
	r, err := p.query("SELECT 1; " + staleInsert)
	if err != nil || r.err() != nil {
		t.Fatalf("multi-statements on: %v %s", err, r)
	}
	e.unchanged(t, want, "multi-statements on, stale")
	p.resetConnection()
	d.resetConnection()
	p.mustQuery(t, e.stale)
	r, err = p.query("SELECT 1; " + staleInsert)
	if err != nil || r.err() != nil {
		t.Fatalf("multi-statements after COM_RESET_CONNECTION: %v %s", err, r)
	}
	e.unchanged(t, want, "multi-statements on after a reset, stale")
	setOption(p, 1)
	p.query("SELECT 1; " + staleInsert)
	e.unchanged(t, want, "multi-statements off again")
	p.mustQuery(t, e.valid)
	setOption(p, 0)
	p.mustQuery(t, "SELECT 1; INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2027-03', 1)")
	if got := queryString(t, e.root, "SELECT COUNT(*) FROM invoices WHERE period = '2027-03'"); got != "1" {
		t.Fatalf("a valid fenced INSERT in a multi-statement packet inserted %s rows", got)
	}
	// Trailing ';' and spaces are stripped by the server before it reads a
	// statement: without multi-statements `UPDATE ...;;` is one statement,
	// fenced as one (stale: 0 rows; valid: it runs).
	setOption(p, 1)
	want = e.invoices(t)
	for _, q := range []string{staleUpdate + ";;", staleUpdate + " ; ;\n"} {
		p.mustQuery(t, e.stale)
		if r, err := p.query(q); err != nil || r.err() != nil {
			t.Fatalf("%q without multi-statements, stale: %v %s", q, err, r)
		}
		e.unchanged(t, want, fmt.Sprintf("%q without multi-statements, stale", q))
	}
	p.mustQuery(t, e.valid)
	if r, err := p.query("UPDATE invoices SET amount = amount WHERE period = '2027-03';;"); err != nil || r.err() != nil {
		t.Fatalf("trailing semicolons without multi-statements, valid: %v %s", err, r)
	}
}

// TestProtocolBinlogDumpWithoutPrivilege: a session without REPLICATION
// SLAVE sends COM_BINLOG_DUMP; the server refuses it and reads commands
// again, and so must the proxy: a stale INSERT after it is guarded, not
// piped through.
func TestProtocolBinlogDumpWithoutPrivilege(t *testing.T) {
	e := newProtoEnv(t)
	var b [4]byte
	rand.Read(b[:])
	user := "fp_norepl_" + hex.EncodeToString(b[:])
	mustExec(t, e.root, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'norepl-Pw1'")
	t.Cleanup(func() { e.root.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	mustExec(t, e.root, "GRANT SELECT, INSERT, UPDATE, DELETE ON `"+e.db+"`.* TO '"+user+"'@'%'")
	want := e.invoices(t)
	for _, cmd := range []byte{0x12, 0x1e} {
		for _, direct := range []bool{true, false} {
			addr := e.proxy.Addr
			if direct {
				addr = e.srv.Addr
			}
			w, err := dialWire(addr, wireOptions{User: user, Password: "norepl-Pw1", DB: e.db, DeprecateEOF: true, Timeout: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			w.mustQuery(t, e.stale)
			w.send(append([]byte{cmd, 4, 0, 0, 0, 0, 0, 9, 9, 0, 0}, "binlog.000001"...))
			r, err := w.readOne()
			if err != nil || r.err() == nil {
				t.Fatalf("0x%02x direct=%v: the dump was not refused: %v %s", cmd, direct, err, r)
			}
			if _, err := w.query(staleInsert); err != nil {
				t.Fatalf("0x%02x direct=%v: the session did not go on: %v", cmd, direct, err)
			}
			if !direct {
				e.unchanged(t, want, fmt.Sprintf("a stale INSERT after a refused 0x%02x", cmd))
			} else {
				mustExec(t, e.root, "DELETE FROM invoices WHERE customer = 'mallory'")
			}
		}
	}
}

// TestProtocolReportAttempts logs how many bypass attempts this file made
// (run it last: go test -run 'TestProtocol' -v).
func TestProtocolReportAttempts(t *testing.T) {
	t.Logf("protocol bypass attempts so far: %d", attempts)
}

// TestProtocolMultiStatementsTiDB: on TiDB the session's
// tidb_multi_statement_mode decides what a session without
// CLIENT_MULTI_STATEMENTS gets: OFF (the default) TiDB's error 8130 and
// nothing runs, byte for byte as directly; ON the packet runs, fenced.
func TestProtocolMultiStatementsTiDB(t *testing.T) {
	fe := newFencedEnv(t, envOptions{engine: engTiDB, account: true})
	mustExec(t, fe.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-10', 10)")
	l := fe.acquire(t, "invoice:acme", 10*time.Minute)
	e := &protoEnv{fencedEnv: fe, held: l,
		stale: fmt.Sprintf("SET @fence_lease = 'invoice:acme', @fence_owner = 'someone-else', @fence_token = %d", l.Token),
		valid: fmt.Sprintf("SET @fence_lease = 'invoice:acme', @fence_owner = X'%x', @fence_token = %d", l.Owner, l.Token)}
	want := e.invoices(t)
	p := e.conn(t, false, wireOptions{DeprecateEOF: true})
	d := e.conn(t, true, wireOptions{DeprecateEOF: true})
	for _, w := range []*wireConn{d, p} {
		w.mustQuery(t, e.valid)
	}
	q := "SELECT 1; INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2027-04', 1)"
	var got [2]wireResponse
	for i, w := range []*wireConn{d, p} {
		r, err := w.query(q)
		if err != nil {
			t.Fatal(err)
		}
		got[i] = r
		e.unchanged(t, want, "a multi-statement packet on TiDB without the capability")
	}
	if got[0].String() != got[1].String() || got[0].err() == nil {
		t.Fatalf("server answered\n%s proxy answered\n%s", got[0], got[1])
	}
	p.mustQuery(t, "SET tidb_multi_statement_mode = 'ON'")
	p.mustQuery(t, e.stale)
	if r, err := p.query(staleInsert + "; SELECT 1"); err != nil || r.err() != nil {
		t.Fatalf("tidb_multi_statement_mode ON: %v %s", err, r)
	}
	e.unchanged(t, want, "a stale multi-statement packet on TiDB in mode ON")
	p.mustQuery(t, e.valid)
	p.mustQuery(t, q)
	if n := queryString(t, e.root, "SELECT COUNT(*) FROM invoices WHERE period = '2027-04'"); n != "1" {
		t.Fatalf("the valid INSERT of the packet in mode ON inserted %s rows", n)
	}
}
