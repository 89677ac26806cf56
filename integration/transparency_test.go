package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// Second account for COM_CHANGE_USER.
const (
	otherUser     = "fp_other"
	otherPassword = "fp-Other-Pw2"
)

// wireState is what a script remembers between steps.
type wireState struct {
	db    string
	stmts map[string]uint32
}

// wireStep is one command of a script and how to read its response.
type wireStep struct {
	name string
	run  func(w *wireConn, st *wireState) (wireResponse, error)
}

func queryStep(name, sql string) wireStep {
	return wireStep{name, func(w *wireConn, _ *wireState) (wireResponse, error) { return w.query(sql) }}
}

// cmdStep sends payload and reads a response with read.
func cmdStep(name string, payload func(st *wireState) []byte, read func(w *wireConn) (wireResponse, error)) wireStep {
	return wireStep{name, func(w *wireConn, st *wireState) (wireResponse, error) {
		if err := w.send(payload(st)); err != nil {
			return wireResponse{}, err
		}
		if read == nil {
			return wireResponse{}, nil // no response (COM_STMT_CLOSE, COM_STMT_SEND_LONG_DATA)
		}
		return read(w)
	}}
}

func fixed(b ...byte) func(*wireState) []byte { return func(*wireState) []byte { return b } }

func prepareStep(stmt, sql string) wireStep {
	return wireStep{"prepare " + stmt, func(w *wireConn, st *wireState) (wireResponse, error) {
		if err := w.send(append([]byte{comStmtPrepare}, sql...)); err != nil {
			return wireResponse{}, err
		}
		r, id, _, err := w.readPrepare()
		if err == nil && r.err() == nil {
			st.stmts[stmt] = id
			// Statement ids come from a server-wide counter: mask them.
			ok := append([]byte(nil), r.Packets[0].Payload...)
			clear(ok[1:5])
			r.Packets[0].Payload = ok
		}
		return r, err
	}}
}

func executeStep(name, stmt string, flags byte, params ...stmtParam) wireStep {
	return wireStep{name, func(w *wireConn, st *wireState) (wireResponse, error) {
		if err := w.send(executePacket(st.stmts[stmt], flags, params)); err != nil {
			return wireResponse{}, err
		}
		return w.readResults(flags != 0)
	}}
}

func stmtStep(name, stmt string, cmd byte, read func(w *wireConn) (wireResponse, error), extra ...byte) wireStep {
	return cmdStep(name, func(st *wireState) []byte { return stmtCmd(cmd, st.stmts[stmt], extra...) }, read)
}

func longDataStep(name, stmt string, param uint16, data string) wireStep {
	return cmdStep(name, func(st *wireState) []byte {
		b := binary.LittleEndian.AppendUint16(stmtCmd(comStmtSendLongData, st.stmts[stmt]), param)
		return append(b, data...)
	}, nil)
}

// fetchAllStep fetches n rows at a time until the server says the last row
// was sent (or answers with an error), and returns every packet of every
// fetch.
func fetchAllStep(name, stmt string, n uint32) wireStep {
	return wireStep{name, func(w *wireConn, st *wireState) (wireResponse, error) {
		var all wireResponse
		for i := 0; i < 100; i++ {
			if err := w.send(binary.LittleEndian.AppendUint32(stmtCmd(comStmtFetch, st.stmts[stmt]), n)); err != nil {
				return all, err
			}
			r, err := w.readRows()
			all.Packets = append(all.Packets, r.Packets...)
			if err != nil || r.err() != nil || w.status&stLastRowSent != 0 {
				return all, err
			}
		}
		return all, fmt.Errorf("no SERVER_STATUS_LAST_ROW_SENT after 100 fetches")
	}}
}

func changeUserStep(name, user, password string) wireStep {
	return wireStep{name, func(w *wireConn, st *wireState) (wireResponse, error) {
		return w.changeUser(user, password, st.db)
	}}
}

func (w *wireConn) readNone() (wireResponse, error) { return wireResponse{}, nil }

// maskResponse replaces what legitimately differs between two connections:
// the connection id (in rows, where it appears as a decimal string), the
// salt of an auth switch, and COM_STATISTICS's counters.
func maskResponse(w *wireConn, r wireResponse) wireResponse {
	id := strconv.FormatUint(uint64(w.connID), 10)
	encID := append(gomysql.AppendLengthEncodedInteger(nil, uint64(len(id))), id...)
	out := wireResponse{Closed: r.Closed}
	for _, p := range r.Packets {
		pl := p.Payload
		switch {
		case bytes.HasPrefix(pl, []byte("Uptime: ")):
			pl = []byte("<statistics>")
		case bytes.HasPrefix(pl, []byte("\xfemysql_native_password\x00")):
			pl = []byte("<auth switch mysql_native_password>")
		case len(pl) > 0 && pl[0] == 0xff:
			// statement ids (a server-wide counter) in error messages
			pl = stmtIDInError.ReplaceAll(pl, []byte("$1 (<id>)"))
		case bytes.HasPrefix(pl, encID) && pl[0] != 0 && pl[0] != 0xfe:
			// a row whose first column is this connection's id
			pl = append([]byte("<connid>"), pl[len(encID):]...)
		}
		out.Packets = append(out.Packets, wirePacket{Seq: p.Seq, Payload: pl})
	}
	return out
}

var stmtIDInError = regexp.MustCompile(`(statement|handler) \(\d+\)`)

// transparencyScript is every command the proxy relays, with results of
// many types, NULLs, warnings, errors and multiple results.
func transparencyScript() []wireStep {
	ok := (*wireConn).readOne
	return []wireStep{
		queryStep("select every type", "SELECT * FROM types ORDER BY id"),
		queryStep("literals", "SELECT NULL, 1, -1.5, 1e300, 'str', X'00FF', DATE'2020-01-01', CAST(1 AS UNSIGNED), "+
			"18446744073709551615, -9223372036854775808, CAST(NULL AS CHAR), '', REPEAT('x', 300), REPEAT('y', 70000)"),
		queryStep("empty result", "SELECT * FROM types WHERE 1 = 0"),
		queryStep("warnings", "SELECT 1/0, CAST('12abc' AS SIGNED)"),
		queryStep("show warnings", "SHOW WARNINGS"),
		queryStep("syntax error", "SELEKT 1"),
		queryStep("unknown table", "SELECT * FROM no_such_table"),
		queryStep("create temporary table", "CREATE TEMPORARY TABLE tt (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(10) UNIQUE, n INT)"),
		queryStep("insert", "INSERT INTO tt (v, n) VALUES ('a', 1), ('b', 2), ('c', NULL)"),
		queryStep("insert ignore with warning", "INSERT IGNORE INTO tt (v) VALUES ('a')"),
		queryStep("update", "UPDATE tt SET n = n + 1 WHERE n IS NOT NULL"),
		queryStep("update unchanged", "UPDATE tt SET v = v"),
		queryStep("functions of the last statement", "SELECT LAST_INSERT_ID(), ROW_COUNT()"),
		queryStep("duplicate key", "INSERT INTO tt (v) VALUES ('b')"),
		queryStep("user variables", "SET @x = 42, @y = 'text'"),
		queryStep("begin", "BEGIN"),
		queryStep("update in transaction", "UPDATE tt SET n = 100"),
		queryStep("select in transaction", "SELECT * FROM tt ORDER BY id"),
		queryStep("rollback", "ROLLBACK"),
		queryStep("multi-statement", "SELECT 1; SELECT 'two', NULL; UPDATE tt SET n = 0 WHERE id = 1; SELECT @x, @y"),
		queryStep("multi-statement with error", "SELECT 1; SELECT * FROM nope; SELECT 3"),
		queryStep("call with two result sets", "CALL two_sets()"),
		queryStep("connection id", "SELECT CONNECTION_ID()"),
		queryStep("processlist", "SELECT ID, USER, DB, COMMAND, INFO FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()"),
		cmdStep("COM_INIT_DB", func(st *wireState) []byte { return append([]byte{comInitDB}, st.db...) }, ok),
		cmdStep("COM_INIT_DB unknown", fixed(append([]byte{comInitDB}, "no_such_db_fp"...)...), ok),
		queryStep("database()", "SELECT DATABASE()"),
		cmdStep("COM_PING", fixed(comPing), ok),
		cmdStep("COM_FIELD_LIST", fixed(append([]byte{comFieldList}, "types\x00"...)...), (*wireConn).readRows),
		cmdStep("COM_FIELD_LIST wildcard", fixed(append([]byte{comFieldList}, "types\x00v%"...)...), (*wireConn).readRows),
		cmdStep("COM_FIELD_LIST unknown", fixed(append([]byte{comFieldList}, "nope\x00"...)...), (*wireConn).readRows),
		cmdStep("COM_STATISTICS", fixed(comStatistics), ok),

		prepareStep("select", "SELECT * FROM types WHERE id >= ? ORDER BY id"),
		executeStep("execute select", "select", 0, intParam(1)),
		prepareStep("params", "SELECT ?, ?, ?, ?, ? IS NULL"),
		executeStep("execute params", "params", 0, intParam(-7), strParam("héllo"), doubleParam(2.5), nullParam(), nullParam()),
		prepareStep("insert", "INSERT INTO tt (v, n) VALUES (?, ?)"),
		executeStep("execute insert", "insert", 0, strParam("d"), intParam(4)),
		executeStep("execute insert duplicate", "insert", 0, strParam("d"), intParam(5)),
		prepareStep("long", "SELECT LENGTH(?), MD5(?)"),
		longDataStep("send long data 0a", "long", 0, strings.Repeat("0123456789", 5000)),
		longDataStep("send long data 0b", "long", 0, "tail"),
		longDataStep("send long data 1", "long", 1, "md5 me"),
		executeStep("execute with long data", "long", 0, longDataParam(), longDataParam()),
		stmtStep("COM_STMT_RESET", "long", comStmtReset, ok),
		executeStep("execute after reset", "long", 0, strParam("short"), strParam("x")),
		prepareStep("cursor", "SELECT seq, CONCAT('row-', seq), seq * 1.5 FROM seq_1_to_10"),
		executeStep("execute with cursor", "cursor", 1),
		fetchAllStep("fetch until last row", "cursor", 3),
		stmtStep("fetch past the end", "cursor", comStmtFetch, (*wireConn).readRows, 3, 0, 0, 0),
		executeStep("execute cursor again", "cursor", 1),
		fetchAllStep("fetch all at once", "cursor", 1000),
		prepareStep("call", "CALL two_sets()"),
		executeStep("execute call", "call", 0),
		prepareStep("out params", "CALL out_param(?, ?)"),
		executeStep("execute out params", "out params", 0, intParam(21), nullParam()),
		prepareStep("bad", "SELECT * FROM nope"),
		cmdStep("execute unknown statement", fixed(executePacket(9999, 0, nil)...), func(w *wireConn) (wireResponse, error) { return w.readResults(false) }),
		stmtStep("COM_STMT_CLOSE", "select", comStmtClose, nil),
		executeStep("execute closed statement", "select", 0, intParam(1)),

		cmdStep("COM_SET_OPTION multi-statements off", fixed(comSetOption, 1, 0), ok),
		queryStep("multi-statement refused", "SELECT 1; SELECT 2"),
		cmdStep("COM_SET_OPTION multi-statements on", fixed(comSetOption, 0, 0), ok),
		queryStep("multi-statement allowed", "SELECT 1; SELECT 2"),

		cmdStep("COM_RESET_CONNECTION", fixed(comResetConnection), ok),
		queryStep("variables after reset", "SELECT @x, @y"),
		queryStep("temporary table after reset", "SELECT * FROM tt"),
		executeStep("statement after reset", "params", 0, intParam(1), strParam("x"), doubleParam(1), nullParam(), nullParam()),
		queryStep("set a variable", "SET @x = 'before change user'"),
		changeUserStep("COM_CHANGE_USER", otherUser, otherPassword),
		queryStep("user after change", "SELECT CURRENT_USER(), USER(), DATABASE()"),
		queryStep("variables after change user", "SELECT @x"),
		changeUserStep("COM_CHANGE_USER wrong password", dbserver.AppUser, "wrong"),
		wireStep{"COM_QUIT", func(w *wireConn, _ *wireState) (wireResponse, error) {
			if err := w.send([]byte{comQuit}); err != nil {
				return wireResponse{}, err
			}
			return w.readClosed()
		}},
	}
}

// setupTransparency creates the objects the script reads.
func setupTransparency(t *testing.T, s *dbserver.Server, db string) {
	t.Helper()
	root := dbtest.Open(t, withParam(s.RootDSN(db), "multiStatements=true"))
	mustExec(t, root, `CREATE TABLE types (
		id INT PRIMARY KEY, ti TINYINT, si SMALLINT UNSIGNED, mi MEDIUMINT, bi BIGINT UNSIGNED,
		f FLOAT, d DOUBLE, de DECIMAL(20,6), dt DATE, tm TIME(3), dtm DATETIME(6), ts TIMESTAMP(2) NULL,
		yr YEAR, ch CHAR(5), vc VARCHAR(100), vb VARBINARY(20), bl BLOB, tx TEXT, en ENUM('a','b'),
		st SET('x','y'), bt BIT(10), js JSON, u UUID, ip INET6, g POINT)`)
	mustExec(t, root, `INSERT INTO types VALUES
		(1, -128, 65535, -8388608, 18446744073709551615, 1.5, -2.25e-300, -12345678901234.123456,
		 '2024-02-29', '-838:59:59.000', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.99',
		 2155, 'abc', 'héllo wörld', X'00FF10', X'DEADBEEF', 'text', 'b', 'x,y', b'1010101010',
		 '{"a": [1, 2, null]}', '123e4567-e89b-12d3-a456-426614174000', '::1', POINT(1.5, -2)),
		(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
		 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
		(3, 0, 0, 0, 0, 0, 0, 0, '1000-01-01', '00:00:00', '1000-01-01 00:00:00', '1970-01-01 00:00:01',
		 1901, '', '', '', '', '', 'a', '', b'0', '[]', '00000000-0000-0000-0000-000000000000', '::',
		 POINT(0, 0))`)
	mustExec(t, root, "CREATE PROCEDURE two_sets() BEGIN SELECT 1 AS a, 'one' AS b; SELECT id, vc FROM types ORDER BY id; END")
	mustExec(t, root, "CREATE PROCEDURE out_param(IN a INT, OUT b INT) BEGIN SET b = a * 2; END")
	if err := s.CreateUser(context.Background(), otherUser, otherPassword, "mysql_native_password"); err != nil {
		t.Fatal(err)
	}
}

// TestWireTransparency runs one script of raw protocol commands directly
// and through the proxy, with and without CLIENT_DEPRECATE_EOF and
// CLIENT_MULTI_STATEMENTS, and requires every response packet to be
// identical byte for byte (sequence numbers included), masking only
// connection ids, auth salts and COM_STATISTICS counters.
func TestWireTransparency(t *testing.T) {
	s := dbtest.Shared(t)
	db := dbtest.NewDatabase(t, s)
	setupTransparency(t, s, db)
	tp := startProxy(t, s.Addr, "")
	for _, deprecateEOF := range []bool{false, true} {
		for _, multi := range []bool{false, true} {
			name := fmt.Sprintf("deprecate_eof=%v/multi_statements=%v", deprecateEOF, multi)
			t.Run(name, func(t *testing.T) {
				opts := wireOptions{User: dbserver.AppUser, Password: dbserver.AppPassword, DB: db,
					DeprecateEOF: deprecateEOF, MultiStatements: multi}
				direct := runWireScript(t, s.Addr, opts, db)
				proxied := runWireScript(t, tp.Addr, opts, db)
				compareGreetings(t, direct.conn, proxied.conn)
				if !bytes.Equal(direct.conn.authOK, proxied.conn.authOK) {
					t.Errorf("auth OK differs:\ndirect %x\nproxy  %x", direct.conn.authOK, proxied.conn.authOK)
				}
				for i, step := range transparencyScript() {
					d, p := direct.results[i], proxied.results[i]
					if d.err != "" || p.err != "" {
						t.Errorf("%s: client error: direct %q, proxy %q", step.name, d.err, p.err)
						continue
					}
					if !responsesEqual(d.resp, p.resp) {
						t.Errorf("%s: responses differ\ndirect:\n%sproxy:\n%s", step.name, d.resp, p.resp)
					}
				}
				checkScriptSemantics(t, direct)
			})
		}
	}
}

type stepResult struct {
	resp wireResponse
	err  string
}

type scriptRun struct {
	conn    *wireConn
	results []stepResult
	names   []string
}

// runWireScript runs the script on a new connection to addr.
func runWireScript(t *testing.T, addr string, opts wireOptions, db string) scriptRun {
	t.Helper()
	w, err := dialWire(addr, opts)
	if err != nil {
		t.Fatalf("connect %s: %v", addr, err)
	}
	defer w.Close()
	st := &wireState{db: db, stmts: map[string]uint32{}}
	run := scriptRun{conn: w}
	for _, step := range transparencyScript() {
		r, err := step.run(w, st)
		res := stepResult{resp: maskResponse(w, r)}
		if err != nil {
			res.err = err.Error()
		}
		run.results = append(run.results, res)
		run.names = append(run.names, step.name)
		if err != nil {
			t.Errorf("%s via %s: %v (the rest of the script is skipped)", step.name, addr, err)
			for range transparencyScript()[len(run.results):] {
				run.results = append(run.results, stepResult{err: "skipped"})
			}
			break
		}
	}
	return run
}

func responsesEqual(a, b wireResponse) bool {
	if a.Closed != b.Closed || len(a.Packets) != len(b.Packets) {
		return false
	}
	for i := range a.Packets {
		if a.Packets[i].Seq != b.Packets[i].Seq || !bytes.Equal(a.Packets[i].Payload, b.Packets[i].Payload) {
			return false
		}
	}
	return true
}

// compareGreetings checks that the proxy shows the backend's own greeting:
// version, character set, status and capabilities, except those the proxy
// deliberately does not offer.
func compareGreetings(t *testing.T, direct, proxied *wireConn) {
	t.Helper()
	if direct.version != proxied.version {
		t.Errorf("server version: direct %q, proxy %q", direct.version, proxied.version)
	}
	// docs/protocol.md, Capabilities: what the proxy does not relay.
	const notOffered = capNoSchema | capCompress | 1<<6 | capSSL | 1<<14 | 1<<25 | 1<<26 | 1<<27 | 1<<28 | 1<<29 | 1<<30 | 1<<31
	if diff := (direct.srvCaps ^ proxied.srvCaps) &^ notOffered; diff != 0 {
		t.Errorf("capabilities differ beyond the unoffered ones: direct %#x, proxy %#x (diff %#x)", direct.srvCaps, proxied.srvCaps, diff)
	}
	if proxied.srvCaps&^direct.srvCaps&^capSSL != 0 {
		t.Errorf("proxy offers capabilities the server does not: %#x", proxied.srvCaps&^direct.srvCaps)
	}
	if len(direct.salt) != 20 || len(proxied.salt) != 20 {
		t.Errorf("salt lengths direct %d, proxy %d", len(direct.salt), len(proxied.salt))
	}
}

// checkScriptSemantics checks that the script tested what it claims (on the
// direct run; the proxy's is byte-identical): a cursor fetched in pieces
// until SERVER_STATUS_LAST_ROW_SENT, variables reset by COM_RESET_CONNECTION
// and COM_CHANGE_USER, the user changed.
func checkScriptSemantics(t *testing.T, run scriptRun) {
	t.Helper()
	get := func(name string) wireResponse {
		for i, n := range run.names {
			if n == name {
				return run.results[i].resp
			}
		}
		t.Fatalf("no step %q", name)
		return wireResponse{}
	}
	w := run.conn
	if n := len(get("fetch until last row").Packets); n < 10+4 {
		t.Errorf("cursor fetch returned %d packets, want 10 rows in 4 fetches", n)
	}
	if e := get("fetch past the end").err(); e == nil {
		t.Errorf("fetch past the end: want an error, got %v", get("fetch past the end"))
	}
	if rows := w.textRows(get("variables after reset")); len(rows) != 1 || rows[0][0] != "NULL" {
		t.Errorf("after COM_RESET_CONNECTION @x = %v, want NULL", rows)
	}
	if rows := w.textRows(get("user after change")); len(rows) != 1 || rows[0][0] != otherUser+"@%" {
		t.Errorf("after COM_CHANGE_USER CURRENT_USER() = %v", rows)
	}
	if rows := w.textRows(get("variables after change user")); len(rows) != 1 || rows[0][0] != "NULL" {
		t.Errorf("after COM_CHANGE_USER @x = %v, want NULL", rows)
	}
	if e := get("COM_CHANGE_USER wrong password").err(); e == nil || e.Code != 1045 {
		t.Errorf("COM_CHANGE_USER with a wrong password: %v", get("COM_CHANGE_USER wrong password"))
	}
	if e := get("multi-statement refused").err(); e == nil || e.Code != 1064 {
		t.Errorf("multi-statement with the option off: %v", get("multi-statement refused"))
	}
	if e := get("multi-statement allowed").err(); e != nil {
		t.Errorf("multi-statement with the option on: %v", e)
	}
	if !get("COM_QUIT").Closed {
		t.Errorf("COM_QUIT did not close the connection")
	}
}

// withParam adds a query parameter to a go-sql-driver DSN.
func withParam(dsn, param string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + param
	}
	return dsn + "?" + param
}
