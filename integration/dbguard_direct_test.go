package integration

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
)

// Writes sent directly to the database, bypassing the proxy, by every path
// a statement can reach a table: with a stale fence and with none each
// changes nothing and gets the guard's error; with a valid one it changes
// what it says.

// guardPath is one way to write the guarded tables.
type guardPath struct {
	name  string
	setup []string // run as root before the three fence kinds
	// write runs the write on c (fence context k set); the returned error
	// is what the client got.
	write func(t *testing.T, e *guardEnv, c *sql.Conn, k fenceKind) error
	check string // run as root after the valid write
	want  string
	fixed bool // the fence contexts are guard:fixed's
}

func execPath(q string) func(*testing.T, *guardEnv, *sql.Conn, fenceKind) error {
	return func(t *testing.T, _ *guardEnv, c *sql.Conn, _ fenceKind) error {
		_, err := c.ExecContext(context.Background(), q)
		return err
	}
}

func guardPaths() []guardPath {
	return []guardPath{
		{name: "UPDATE", write: execPath("UPDATE items SET v = 'updated' WHERE id = 1"),
			check: "SELECT v FROM items WHERE id = 1", want: "updated"},
		{name: "UPDATE fixed lease", write: execPath("UPDATE fixed SET v = 'updated' WHERE id = 1"),
			check: "SELECT v FROM fixed WHERE id = 1", want: "updated", fixed: true},
		{name: "INSERT", write: execPath("INSERT INTO items (id, v) VALUES (10, 'inserted')"),
			check: "SELECT v FROM items WHERE id = 10", want: "inserted"},
		{name: "INSERT SELECT", write: execPath("INSERT INTO items (id, v) SELECT id + 100, v FROM other"),
			check: "SELECT COUNT(*) FROM items WHERE id > 100", want: "2"},
		{name: "REPLACE", write: execPath("REPLACE INTO items (id, v) VALUES (1, 'replaced')"),
			check: "SELECT v FROM items WHERE id = 1", want: "replaced"},
		{name: "INSERT ON DUPLICATE KEY UPDATE", write: execPath("INSERT INTO items (id, v) VALUES (1, 'x') ON DUPLICATE KEY UPDATE v = 'odku'"),
			check: "SELECT v FROM items WHERE id = 1", want: "odku"},
		{name: "DELETE", write: execPath("DELETE FROM items WHERE id = 2"),
			check: "SELECT COUNT(*) FROM items WHERE id = 2", want: "0"},
		{name: "LOAD DATA", write: func(t *testing.T, e *guardEnv, c *sql.Conn, k fenceKind) error {
			name := "guard-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + string(k)
			mysql.RegisterReaderHandler(name, func() io.Reader { return strings.NewReader("20\tloaded\n21\tloaded\n") })
			defer mysql.DeregisterReaderHandler(name)
			_, err := c.ExecContext(context.Background(), "LOAD DATA LOCAL INFILE 'Reader::"+name+"' INTO TABLE items (id, v)")
			return err
		}, check: "SELECT COUNT(*) FROM items WHERE v = 'loaded'", want: "2"},
		{name: "LOAD XML", write: func(t *testing.T, e *guardEnv, c *sql.Conn, k fenceKind) error {
			name := "guardxml-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + string(k)
			mysql.RegisterReaderHandler(name, func() io.Reader {
				return strings.NewReader("<rows><row><id>22</id><v>xml</v></row><row><id>23</id><v>xml</v></row></rows>")
			})
			defer mysql.DeregisterReaderHandler(name)
			_, err := c.ExecContext(context.Background(), "LOAD XML LOCAL INFILE 'Reader::"+name+"' INTO TABLE items ROWS IDENTIFIED BY '<row>'")
			return err
		}, check: "SELECT COUNT(*) FROM items WHERE v = 'xml'", want: "2"},
		{name: "multi-table UPDATE", write: execPath("UPDATE items JOIN other ON other.id = items.id SET items.v = CONCAT('m-', other.v)"),
			check: "SELECT GROUP_CONCAT(v ORDER BY id) FROM items", want: "m-o1,m-o2,three"},
		{name: "multi-table DELETE", write: execPath("DELETE items FROM items JOIN other ON other.id = items.id"),
			check: "SELECT COUNT(*) FROM items", want: "1"},
		{name: "view", setup: []string{"CREATE VIEW v_items AS SELECT id, v FROM items"},
			write: execPath("UPDATE v_items SET v = 'via view' WHERE id = 1"),
			check: "SELECT v FROM items WHERE id = 1", want: "via view"},
		{name: "procedure", setup: []string{"CREATE PROCEDURE p_touch() SQL SECURITY DEFINER UPDATE items SET v = 'by procedure' WHERE id = 1"},
			write: execPath("CALL p_touch()"),
			check: "SELECT v FROM items WHERE id = 1", want: "by procedure"},
		{name: "stored function", setup: []string{"CREATE FUNCTION f_touch() RETURNS INT MODIFIES SQL DATA SQL SECURITY DEFINER " +
			"BEGIN UPDATE items SET v = 'by function' WHERE id = 1; RETURN 1; END"},
			write: func(t *testing.T, _ *guardEnv, c *sql.Conn, _ fenceKind) error {
				var n sql.NullInt64
				return c.QueryRowContext(context.Background(), "SELECT f_touch()").Scan(&n)
			},
			check: "SELECT v FROM items WHERE id = 1", want: "by function"},
		{name: "trigger of another table", setup: []string{"CREATE TRIGGER other_touch AFTER INSERT ON other FOR EACH ROW " +
			"UPDATE items SET v = CONCAT('by trigger ', NEW.id) WHERE id = 1"},
			write: execPath("INSERT INTO other VALUES (9, 'o9')"),
			check: "SELECT v FROM items WHERE id = 1", want: "by trigger 9"},
		{name: "event", setup: []string{"CREATE TABLE event_results (kind VARCHAR(10) PRIMARY KEY, errno INT, msg VARCHAR(200))"},
			write: eventWrite, check: "SELECT v FROM items WHERE id = 1", want: "by event"},
		{name: "EXECUTE IMMEDIATE", write: execPath("EXECUTE IMMEDIATE 'UPDATE items SET v = ''immediate'' WHERE id = 1'"),
			check: "SELECT v FROM items WHERE id = 1", want: "immediate"},
		{name: "BEGIN NOT ATOMIC", write: execPath("BEGIN NOT ATOMIC UPDATE other SET v = 'c' WHERE id = 1; " +
			"UPDATE items SET v = 'compound' WHERE id = 1; END"),
			check: "SELECT v FROM items WHERE id = 1", want: "compound"},
		{name: "binary protocol", write: func(t *testing.T, _ *guardEnv, c *sql.Conn, _ fenceKind) error {
			// go-sql-driver sends statements with arguments as
			// COM_STMT_PREPARE + COM_STMT_EXECUTE (interpolateParams off).
			_, err := c.ExecContext(context.Background(), "UPDATE items SET v = ? WHERE id = ?", "binary", 1)
			return err
		}, check: "SELECT v FROM items WHERE id = 1", want: "binary"},
		{name: "COM_STMT_BULK_EXECUTE", write: bulkWrite,
			check: "SELECT GROUP_CONCAT(v ORDER BY id) FROM items WHERE id IN (30, 31)", want: "bulk30,bulk31"},
	}
}

func TestGuardTriggersDirectWrites(t *testing.T) {
	s := dbtest.Shared(t)
	if s.Flavor != dbserver.FlavorMariaDB {
		t.Skip("these paths are MariaDB's (EXECUTE IMMEDIATE, BEGIN NOT ATOMIC, COM_STMT_BULK_EXECUTE)")
	}
	root := dbtest.Open(t, s.RootDSN(""))
	mustExec(t, root, "SET GLOBAL event_scheduler = ON")
	for _, p := range guardPaths() {
		t.Run(p.name, func(t *testing.T) {
			e := newGuardEnv(t, s, lease.InnoDB)
			e.fixed = p.fixed
			for _, q := range p.setup {
				mustExec(t, e.root, q)
			}
			before := e.dump(t)
			for _, k := range fenceKinds {
				c := e.direct(t, k)
				err := p.write(t, e, c, k)
				if k != fenceValid {
					guardErr(t, err, wantReason(k), e.stale.Owner, e.valid.Owner)
					if got := e.dump(t); got != before {
						t.Fatalf("%s fence: the refused write changed the tables:\n%s\nwant\n%s", k, got, before)
					}
					continue
				}
				if err != nil {
					t.Fatalf("valid fence: %v", err)
				}
				if got := queryString(t, e.root, p.check); got != p.want {
					t.Fatalf("valid fence: %s = %q, want %q", p.check, got, p.want)
				}
			}
		})
	}
}

// eventWrite runs the write in an event (its own session, as the event's
// definer) that sets fence context k itself, and returns the error the
// event's statement got, read from the table its handler writes.
func eventWrite(t *testing.T, e *guardEnv, _ *sql.Conn, k fenceKind) error {
	t.Helper()
	name := "ev_" + string(k)
	mustExec(t, e.root, "CREATE EVENT "+name+" ON SCHEDULE AT CURRENT_TIMESTAMP ON COMPLETION NOT PRESERVE DO BEGIN "+
		"DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN "+
		"GET DIAGNOSTICS CONDITION 1 @ev_errno = MYSQL_ERRNO, @ev_msg = MESSAGE_TEXT; "+
		"INSERT INTO event_results VALUES ('"+string(k)+"', @ev_errno, @ev_msg); END; "+
		e.setSQL(k)+"; UPDATE items SET v = 'by event' WHERE id = 1; "+
		"INSERT INTO event_results VALUES ('"+string(k)+"', 0, ''); END")
	var errno int
	var msg string
	eventually(t, 20*time.Second, "event "+name+" to run", func() bool {
		return e.root.QueryRow("SELECT errno, msg FROM event_results WHERE kind = ?", string(k)).Scan(&errno, &msg) == nil
	})
	if errno == 0 {
		return nil
	}
	return &mysql.MySQLError{Number: uint16(errno), SQLState: [5]byte{'4', '5', '0', '0', '0'}, Message: msg}
}

// MariaDB's extended capability for COM_STMT_BULK_EXECUTE (bit 34 of the
// capabilities, sent in the handshake response's last 4 filler bytes by a
// client that leaves CLIENT_MYSQL out).
const (
	comStmtBulkExecute        = 0xfa
	extCapBulkOperations      = 1 << 2
	bulkFlagSendTypes         = 128
	bulkIndicatorNone    byte = 0
)

// bulkWrite inserts two rows with COM_STMT_BULK_EXECUTE on a raw
// connection of its own (go-sql-driver never sends the command; the
// packet is written here from MariaDB's protocol documentation).
func bulkWrite(t *testing.T, e *guardEnv, _ *sql.Conn, k fenceKind) error {
	t.Helper()
	w := dialBulk(t, e.srv.Addr, dbserver.AppUser, dbserver.AppPassword, e.app)
	defer w.Close()
	if r, err := w.query(e.setSQL(k)); err != nil || r.err() != nil {
		t.Fatalf("SET: %v %v", err, r.err())
	}
	if err := w.send(append([]byte{comStmtPrepare}, "INSERT INTO items (id, v) VALUES (?, ?)"...)); err != nil {
		t.Fatal(err)
	}
	r, id, params, err := w.readPrepare()
	if err != nil || r.err() != nil || params != 2 {
		t.Fatalf("prepare: %v %v (%d params)", err, r.err(), params)
	}
	b := binary.LittleEndian.AppendUint32([]byte{comStmtBulkExecute}, id)
	b = binary.LittleEndian.AppendUint16(b, bulkFlagSendTypes)
	b = append(b, gomysql.MYSQL_TYPE_LONGLONG, 0, gomysql.MYSQL_TYPE_VAR_STRING, 0)
	for _, row := range []int64{30, 31} {
		b = append(b, bulkIndicatorNone)
		b = binary.LittleEndian.AppendUint64(b, uint64(row))
		v := fmt.Sprintf("bulk%d", row)
		b = append(b, bulkIndicatorNone)
		b = append(gomysql.AppendLengthEncodedInteger(b, uint64(len(v))), v...)
	}
	if err := w.send(b); err != nil {
		t.Fatal(err)
	}
	resp, err := w.readOne()
	if err != nil {
		t.Fatalf("bulk execute: %v", err)
	}
	if we := resp.err(); we != nil {
		me := &mysql.MySQLError{Number: we.Code, Message: we.Msg}
		copy(me.SQLState[:], we.State)
		return me
	}
	if p := resp.last(); len(p) == 0 || p[0] != 0 {
		t.Fatalf("bulk execute answered %v, want OK", resp)
	}
	return nil
}

// dialBulk logs in like dialWire, as a MariaDB client that announces
// MARIADB_CLIENT_STMT_BULK_OPERATIONS (the server refuses the command
// otherwise).
func dialBulk(t *testing.T, addr, user, password, db string) *wireConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	w := &wireConn{nc: nc, r: newReader(nc), opts: wireOptions{User: user, Password: password, DB: db, Timeout: 30 * time.Second}}
	w.deadline()
	g, err := w.readPacket()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.parseGreeting(g.Payload); err != nil {
		t.Fatal(err)
	}
	caps := uint32(capProtocol41 | capSecureConnection | capPluginAuth | capTransactions | capMultiResults | capConnectWithDB)
	w.caps = caps
	fixed := make([]byte, 32)
	binary.LittleEndian.PutUint32(fixed, caps)
	binary.LittleEndian.PutUint32(fixed[4:], 1<<24)
	fixed[8] = 45
	binary.LittleEndian.PutUint32(fixed[28:], extCapBulkOperations)
	resp := append(append(fixed, user...), 0)
	auth := nativePassword(password, w.salt)
	resp = append(append(resp, byte(len(auth))), auth...)
	resp = append(append(resp, db...), 0)
	resp = append(append(resp, "mysql_native_password"...), 0)
	if err := w.writePacket(g.Seq+1, resp); err != nil {
		t.Fatal(err)
	}
	pkts, err := w.authExchange()
	if err != nil {
		t.Fatal(err)
	}
	if e := parseWireError(pkts[len(pkts)-1].Payload); e != nil {
		t.Fatal(e)
	}
	return w
}

// TestGuardTriggersSessionTricks: what a direct session can change about
// itself does not get a stale write past the guard: its sql_mode (the
// trigger keeps its own), its clock and time zone (SYSDATE(3) against a
// TIMESTAMP column), its character set, and spellings of the lease, owner
// and token that compare equal under a loose collation or a conversion.
// Each attempt changes nothing and is refused.
func TestGuardTriggersSessionTricks(t *testing.T) {
	s := dbtest.Shared(t)
	e := newGuardEnv(t, s, lease.InnoDB)
	ctx := context.Background()
	// A lease held until a moment ago: its holder's fence has expired.
	expired, err := e.store.Acquire(ctx, "guard:expired", 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "guard:expired to expire", func() bool {
		st, err := e.store.Get(ctx, "guard:expired")
		return err == nil && !st.Held
	})
	before := e.dump(t)
	v := e.valid
	hexOf := func(s string) string { return fmt.Sprintf("X'%x'", s) }
	attempts := []struct {
		name   string
		setup  []string
		write  string
		reason lease.Reason
	}{
		{"sql_mode ORACLE", []string{e.setSQL(fenceStale), "SET SESSION sql_mode = 'ORACLE'"},
			"UPDATE items SET v = 'x' WHERE id = 1", lease.StaleToken},
		{"sql_mode ANSI, NO_BACKSLASH_ESCAPES, PAD_CHAR_TO_FULL_LENGTH, EMPTY_STRING_IS_NULL",
			[]string{e.setSQL(fenceStale), "SET SESSION sql_mode = 'ANSI,NO_BACKSLASH_ESCAPES,PAD_CHAR_TO_FULL_LENGTH,EMPTY_STRING_IS_NULL,HIGH_NOT_PRECEDENCE'"},
			`UPDATE items SET v = 'x' WHERE id = 1`, lease.StaleToken},
		{"no fence, sql_mode ''", []string{e.setSQL(fenceNone), "SET SESSION sql_mode = ''"}, "DELETE FROM items", lease.NoFence},
		{"clock moved back over an expired lease", []string{lease.SetVarsSQL(guardVars, expired),
			"SET @@timestamp = UNIX_TIMESTAMP() - 3600"}, "UPDATE items SET v = 'x' WHERE id = 1", lease.Expired},
		{"time zone moved over an expired lease", []string{lease.SetVarsSQL(guardVars, expired),
			"SET time_zone = '-12:00'"}, "INSERT INTO items (v) VALUES ('x')", lease.Expired},
		{"SET STATEMENT timestamp", []string{lease.SetVarsSQL(guardVars, expired)},
			"SET STATEMENT timestamp = UNIX_TIMESTAMP() - 3600 FOR UPDATE items SET v = 'x'", lease.Expired},
		{"lease name in another case", []string{"SET @fence_lease = 'GUARD:ITEMS', @fence_owner = " + hexOf(v.Owner) +
			", @fence_token = " + fmt.Sprint(v.Token)}, "UPDATE items SET v = 'x' WHERE id = 1", lease.LeaseMissing},
		{"lease name with a trailing space", []string{"SET @fence_lease = 'guard:items ', @fence_owner = " + hexOf(strings.ToUpper(v.Owner)) +
			", @fence_token = " + fmt.Sprint(v.Token)}, "UPDATE items SET v = 'x' WHERE id = 1", lease.OwnerMismatch},
		{"owner in another case, latin1_general_ci", []string{"SET NAMES latin1 COLLATE latin1_general_ci",
			"SET @fence_lease = 'guard:items', @fence_owner = _latin1 '" + strings.ToUpper(v.Owner) + "' COLLATE latin1_general_ci, @fence_token = " + fmt.Sprint(v.Token)},
			"UPDATE items SET v = 'x' WHERE id = 1", lease.OwnerMismatch},
		{"owner with trailing spaces", []string{"SET @fence_lease = 'guard:items', @fence_owner = '" + v.Owner + "   ', @fence_token = " + fmt.Sprint(v.Token)},
			"UPDATE items SET v = 'x' WHERE id = 1", lease.OwnerMismatch},
		{"stale token as a string", []string{"SET @fence_lease = 'guard:items', @fence_owner = " + hexOf(v.Owner) +
			", @fence_token = '" + fmt.Sprint(v.Token-1) + ".9999999'"}, "UPDATE items SET v = 'x' WHERE id = 1", lease.StaleToken},
		{"token NULL", []string{"SET @fence_lease = 'guard:items', @fence_owner = " + hexOf(v.Owner) + ", @fence_token = NULL"},
			"UPDATE items SET v = 'x' WHERE id = 1", lease.NoFence},
		{"SQL PREPARE and EXECUTE", []string{e.setSQL(fenceStale), "PREPARE s FROM 'UPDATE items SET v = ? WHERE id = 1'", "SET @v = 'x'"},
			"EXECUTE s USING @v", lease.StaleToken},
		{"XA transaction", []string{e.setSQL(fenceStale), "XA START 'guard-xa'"}, "UPDATE items SET v = 'x' WHERE id = 1", lease.StaleToken},
		{"INSERT IGNORE", []string{e.setSQL(fenceStale)}, "INSERT IGNORE INTO items (v) VALUES ('x')", lease.StaleToken},
		{"UPDATE IGNORE", []string{e.setSQL(fenceStale)}, "UPDATE IGNORE items SET v = 'x'", lease.StaleToken},
		{"REPLACE ... SELECT", []string{e.setSQL(fenceNone)}, "REPLACE INTO items (id, v) SELECT id, v FROM other", lease.NoFence},
		{"DELETE ... ORDER BY LIMIT", []string{e.setSQL(fenceStale)}, "DELETE FROM items ORDER BY id LIMIT 1", lease.StaleToken},
		{"multi-statement text", []string{e.setSQL(fenceStale)}, "UPDATE other SET v = 'o' WHERE id = 1; UPDATE items SET v = 'x' WHERE id = 1", lease.StaleToken},
	}
	for _, a := range attempts {
		t.Run(a.name, func(t *testing.T) {
			c := e.direct(t, fenceNone, "multiStatements=true")
			for _, q := range a.setup {
				mustExec(t, c, q)
			}
			_, err := c.ExecContext(ctx, a.write)
			guardErr(t, err, a.reason, v.Owner, e.stale.Owner)
			if got := e.dump(t); got != before {
				t.Fatalf("changed the tables:\n%s", got)
			}
		})
	}
}
