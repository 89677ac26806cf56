package integration

import (
	"bytes"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// forwarder is a TCP relay between the proxy and the server that the test
// can cut: connection k is closed (both sides) once it has carried limit
// bytes from the server.
type forwarder struct {
	addr   string
	target string
	ln     net.Listener

	mu    sync.Mutex
	conns []*fwdConn
	wg    sync.WaitGroup
}

type fwdConn struct {
	client, server net.Conn
	fromServer     atomic.Int64
	cutAfter       atomic.Int64 // 0: never
	cut            chan struct{}
	once           sync.Once
}

func (c *fwdConn) close() {
	c.once.Do(func() {
		close(c.cut)
		c.client.Close()
		c.server.Close()
	})
}

func startForwarder(t *testing.T, target string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{addr: ln.Addr().String(), target: target, ln: ln}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *forwarder) accept() {
	defer f.wg.Done()
	for {
		cc, err := f.ln.Accept()
		if err != nil {
			return
		}
		sc, err := net.Dial("tcp", f.target)
		if err != nil {
			cc.Close()
			continue
		}
		c := &fwdConn{client: cc, server: sc, cut: make(chan struct{})}
		f.mu.Lock()
		f.conns = append(f.conns, c)
		f.mu.Unlock()
		f.wg.Add(2)
		go func() { defer f.wg.Done(); io.Copy(sc, cc); c.close() }()
		go func() {
			defer f.wg.Done()
			defer c.close()
			buf := make([]byte, 32<<10)
			for {
				n, err := sc.Read(buf)
				if n > 0 {
					if _, err := cc.Write(buf[:n]); err != nil {
						return
					}
					total := c.fromServer.Add(int64(n))
					if lim := c.cutAfter.Load(); lim > 0 && total >= lim {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// conn returns the k-th relayed connection (in accept order).
func (f *forwarder) conn(t *testing.T, k int) *fwdConn {
	t.Helper()
	var c *fwdConn
	eventually(t, 5*time.Second, "forwarded connection", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.conns) > k {
			c = f.conns[k]
			return true
		}
		return false
	})
	return c
}

// closedPort returns a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// processExists tells whether the server has a thread with this id.
func processExists(t *testing.T, root *sql.DB, id uint32) bool {
	t.Helper()
	var n int
	if err := root.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// stillWorks checks that another client of the same proxy is unaffected.
func stillWorks(t *testing.T, w *wireConn) {
	t.Helper()
	if rows := w.textRows(w.mustQuery(t, "SELECT 'still here'")); len(rows) != 1 || rows[0][0] != "still here" {
		t.Fatalf("other connection: %v", rows)
	}
}

// appWire logs in as the app user to addr, into database db ("" = none);
// the connection is closed at the end of the test.
func appWire(t *testing.T, addr string, db string) *wireConn {
	t.Helper()
	w, err := dialWire(addr, wireOptions{User: dbserver.AppUser, Password: dbserver.AppPassword, DB: db, DeprecateEOF: true, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("connect %s: %v", addr, err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// TestBackendUnavailableAtConnect: a backend that refuses connections, or
// accepts TCP but never greets, gets the client a MySQL ERR packet within
// the connect timeout, not a hang or a silent close.
func TestBackendUnavailableAtConnect(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // accepted, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		silent.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	const timeout = 700 * time.Millisecond
	cases := []struct {
		name    string
		addr    string
		code    uint16
		message string
	}{
		{"nothing listening", closedPort(t), 9001, "cannot connect to the backend"},
		{"no handshake", silent.Addr().String(), 9001, "sent no handshake"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tp := startProxy(t, tc.addr, "timeouts:\n  connect: 700ms\n")
			for _, client := range []string{"raw", "go-sql-driver", "mariadb"} {
				start := time.Now()
				var code uint16
				var msg string
				switch client {
				case "mariadb":
					code, msg = mariadbClientError(t, tp.Addr)
				case "raw":
					_, err := dialWire(tp.Addr, wireOptions{User: dbserver.AppUser, Password: dbserver.AppPassword, Timeout: 10 * time.Second})
					var we *wireError
					if !errors.As(err, &we) {
						t.Fatalf("%s: want an ERR packet, got %v", client, err)
					}
					code, msg = we.Code, we.Msg
				default:
					err := connectErr(tp.DSN(dbserver.AppUser, dbserver.AppPassword, "") + "&timeout=10s")
					var me *mysql.MySQLError
					if !errors.As(err, &me) {
						t.Fatalf("%s: want a MySQL error, got %v", client, err)
					}
					code, msg = me.Number, me.Message
				}
				elapsed := time.Since(start)
				if code != tc.code || !strings.Contains(msg, tc.message) || !strings.Contains(msg, tc.addr) {
					t.Errorf("%s: error %d %q, want %d mentioning %q and the address", client, code, msg, tc.code, tc.message)
				}
				if elapsed > timeout+2*time.Second {
					t.Errorf("%s: the error came after %v (connect timeout %v)", client, elapsed, timeout)
				}
			}
			if n := testutilCounter(t, tp.Reg, "fenceproxy_backend_dial_failures_total"); n != 4 {
				t.Errorf("backend_dial_failures_total = %v, want 4 (raw, go-sql-driver, mariadb twice)", n)
			}
		})
	}
}

// mariadbClientError connects with the real mariadb command-line client
// (libmariadb), which must show the proxy's error as a server error: it
// reports an error code of its own range sent by a server as "Received
// malformed packet" (2027). The client's default TLS check wraps an error
// that comes before TLS as "2002 ... cannot be verified: CODE - MESSAGE";
// with --ssl=0 it prints "ERROR CODE (STATE): MESSAGE". Both are checked.
func mariadbClientError(t *testing.T, addr string) (uint16, string) {
	t.Helper()
	bin, err := exec.LookPath("mariadb")
	if err != nil {
		t.Fatalf("the mariadb client is not installed (scripts/test.sh installs it): %v", err)
	}
	host, port, _ := net.SplitHostPort(addr)
	run := func(extra ...string) string {
		args := append([]string{"--no-defaults", "--protocol=TCP", "-h", host, "-P", port, "-u", dbserver.AppUser,
			"-p" + dbserver.AppPassword, "--connect-timeout=10", "-e", "SELECT 1"}, extra...)
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err == nil {
			t.Fatalf("mariadb %v connected: %s", extra, out)
		}
		return strings.TrimSpace(string(out))
	}
	plain := run("--ssl=0")
	m := regexp.MustCompile(`^ERROR (\d+) \(HY000\)(?: at line \d+)?: (.*)$`).FindStringSubmatch(plain)
	if m == nil {
		t.Fatalf("mariadb --ssl=0: %q", plain)
	}
	code, _ := strconv.Atoi(m[1])
	if tls, want := run(), fmt.Sprintf("cannot be verified: %d - fenceproxy: ", code); !strings.Contains(tls, want) {
		t.Errorf("mariadb with its default TLS check: %q, want it to show %q", tls, want)
	}
	return uint16(code), m[2]
}

// TestBackendDiesMidResult: the backend connection breaks in the middle of
// a result: that client sees its connection closed (the response had begun,
// so no ERR can be spliced in), promptly; another client of the same proxy
// is unaffected.
func TestBackendDiesMidResult(t *testing.T) {
	s := dbtest.Shared(t)
	f := startForwarder(t, s.Addr)
	tp := startProxy(t, f.addr, "")
	db := dbtest.NewDatabase(t, s) // seq_1_to_N needs a current database
	victim := appWire(t, tp.Addr, db)
	other := appWire(t, tp.Addr, "")
	fc := f.conn(t, 0) // the victim's backend connection
	fc.cutAfter.Store(fc.fromServer.Load() + 256<<10)
	start := time.Now()
	r, err := victim.query("SELECT seq, REPEAT('x', 500) FROM seq_1_to_100000")
	if err == nil {
		t.Fatalf("the result completed although the backend connection was cut: %d packets", len(r.Packets))
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !isConnReset(err) {
		t.Fatalf("want the connection closed, got %v", err)
	}
	if len(r.Packets) < 10 {
		t.Errorf("only %d packets before the cut: not mid-result", len(r.Packets))
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
	stillWorks(t, other)
	eventually(t, 5*time.Second, "the proxy to drop the broken connection", func() bool {
		return tp.Proxy.ActiveConnections() == 1
	})
}

// TestBackendDiesBetweenCommands: the backend connection is gone before a
// command is sent: the client gets ERR 1053 with SQLSTATE 08S01 (nothing of
// the response was sent yet), then the connection is closed.
func TestBackendDiesBetweenCommands(t *testing.T) {
	s := dbtest.Shared(t)
	f := startForwarder(t, s.Addr)
	tp := startProxy(t, f.addr, "")
	victim := appWire(t, tp.Addr, "")
	other := appWire(t, tp.Addr, "")
	// In a transaction: an idle client outside one has its connection
	// closed as soon as the backend's goes (TestBackendEndsIdleSession).
	victim.mustQuery(t, "BEGIN")
	fc := f.conn(t, 0)
	fc.close()
	<-fc.cut
	r, err := victim.query("SELECT 1")
	if err != nil {
		t.Fatalf("want an ERR packet, got %v", err)
	}
	if e := r.err(); e == nil || e.Code != 1053 || e.State != "08S01" || !strings.Contains(e.Msg, "lost connection to the backend") {
		t.Fatalf("want ERR 1053 (08S01), got %v", r)
	}
	if r, err := victim.readClosed(); err != nil || !r.Closed {
		t.Fatalf("connection not closed after the ERR: %v %v", r, err)
	}
	stillWorks(t, other)
}

// TestKillConnectionMidQuery: KILL CONNECTION from an administrator while
// the client runs SELECT SLEEP: the client promptly gets an error or a
// closed connection, never a hang, and the connection is then unusable, as
// direct; other clients of the proxy go on. (Direct, MariaDB just closes the
// socket; the proxy, which has sent nothing of the response yet, says so
// with ERR 1053 "lost connection", SQLSTATE 08S01, a server-range code that
// every client library displays.)
func TestKillConnectionMidQuery(t *testing.T) {
	s := dbtest.Shared(t)
	tp := startProxy(t, s.Addr, "")
	root := dbtest.Open(t, s.RootDSN(""))
	for _, tc := range []struct {
		name, addr string
		allowed    []string // outcomes of the killed query
	}{
		{"direct", s.Addr, []string{"closed", "ERR 1927"}},
		{"proxy", tp.Addr, []string{"closed", "ERR 1927", "ERR 1053"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			victim := appWire(t, tc.addr, "")
			other := appWire(t, tc.addr, "")
			if err := victim.send(append([]byte{comQuery}, "SELECT SLEEP(30)"...)); err != nil {
				t.Fatal(err)
			}
			eventually(t, 10*time.Second, "SELECT SLEEP(30) running", func() bool {
				var n int
				root.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND INFO LIKE 'SELECT SLEEP%'", victim.connID).Scan(&n)
				return n == 1
			})
			if _, err := root.Exec("KILL CONNECTION ?", victim.connID); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			r, err := victim.readResults(false)
			got := describe(r, err)
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("the killed query took %v", d)
			}
			if !slices.ContainsFunc(tc.allowed, func(a string) bool { return strings.HasPrefix(got, a) }) {
				t.Errorf("killed query: %q, want one of %q", got, tc.allowed)
			}
			if r, err := victim.query("SELECT 1"); err == nil && r.err() == nil {
				t.Fatalf("the killed connection still answers: %v", r)
			}
			stillWorks(t, other)
			t.Logf("killed query: %s", got)
		})
	}
}

// describe summarizes how a response ended.
func describe(r wireResponse, err error) string {
	switch {
	case r.err() != nil:
		return r.err().Error()
	case err != nil:
		return "closed"
	}
	return "ok"
}

// TestClientVanishesMidResult: a client that closes its socket in the middle
// of a large result makes the proxy close the backend connection: the
// server's thread goes away.
func TestClientVanishesMidResult(t *testing.T) {
	s := dbtest.Shared(t)
	tp := startProxy(t, s.Addr, "")
	root := dbtest.Open(t, s.RootDSN(""))
	w := appWire(t, tp.Addr, dbtest.NewDatabase(t, s))
	if !processExists(t, root, w.connID) {
		t.Fatalf("backend thread %d not found", w.connID)
	}
	if err := w.send(append([]byte{comQuery}, "SELECT seq, REPEAT('x', 1000) FROM seq_1_to_2000000"...)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if _, err := w.readPacket(); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	eventually(t, 20*time.Second, "the backend thread to end", func() bool { return !processExists(t, root, w.connID) })
	eventually(t, 5*time.Second, "the proxy to forget the connection", func() bool { return tp.Proxy.ActiveConnections() == 0 })
}

// TestMalformedClientPackets: protocol violations end that connection only,
// after an ERR where the protocol allows one, as the server itself does; the
// backend connection goes too, and other clients go on. A statement longer
// than limits.max_query_bytes gets ERR 1153 and the connection is closed.
func TestMalformedClientPackets(t *testing.T) {
	s := dbtest.Shared(t)
	tp := startProxy(t, s.Addr, "limits:\n  max_query_bytes: 1024\n")
	root := dbtest.Open(t, s.RootDSN(""))
	other := appWire(t, tp.Addr, "")
	cases := []struct {
		name   string
		send   func(w *wireConn) error
		direct bool   // the server directly behaves the same: compare
		code   uint16 // ERR expected
		closed bool   // then the connection is closed
	}{
		{"wrong sequence number", func(w *wireConn) error {
			return w.writePacket(3, append([]byte{comQuery}, "SELECT 1"...))
		}, true, 1156, true},
		{"truncated packet then close", func(w *wireConn) error {
			if _, err := w.nc.Write([]byte{100, 0, 0, 0, comQuery, 'S', 'E', 'L'}); err != nil {
				return err
			}
			return w.nc.(*net.TCPConn).CloseWrite()
		}, true, 0, true},
		{"empty packet", func(w *wireConn) error { return w.writePacket(0, nil) }, true, 1047, false},
		{"query larger than max_query_bytes", func(w *wireConn) error {
			return w.send(append([]byte{comQuery}, "SELECT '"+strings.Repeat("x", 2000)+"'"...))
		}, false, 1153, true},
		{"prepare larger than max_query_bytes", func(w *wireConn) error {
			return w.send(append([]byte{comStmtPrepare}, "SELECT '"+strings.Repeat("x", 2000)+"'"...))
		}, false, 1153, true},
		{"query larger than max_query_bytes over several packets", func(w *wireConn) error {
			return w.send(append([]byte{comQuery}, "SELECT '"+strings.Repeat("y", 17<<20)+"'"...))
		}, false, 1153, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := func(addr string) (wireResponse, *wireConn) {
				w := appWire(t, addr, "")
				if err := tc.send(w); err != nil {
					t.Fatal(err)
				}
				var r wireResponse
				var err error
				if tc.closed {
					r, err = w.readClosed()
				} else {
					r, err = w.readOne()
				}
				if err != nil {
					t.Fatalf("%s: %v (%v)", addr, err, r)
				}
				return r, w
			}
			r, w := run(tp.Addr)
			if tc.code != 0 {
				if e := r.err(); e == nil || e.Code != tc.code {
					t.Errorf("want ERR %d, got %v", tc.code, r)
				}
			} else if len(r.Packets) > 0 {
				t.Errorf("want no response, got %v", r)
			}
			if r.Closed != tc.closed {
				t.Errorf("closed = %v, want %v", r.Closed, tc.closed)
			}
			if tc.direct {
				if d, _ := run(s.Addr); !responsesEqual(d, r) {
					t.Errorf("direct:\n%sproxy:\n%s", d, r)
				}
			}
			if tc.closed {
				eventually(t, 10*time.Second, "the backend thread to end", func() bool { return !processExists(t, root, w.connID) })
			} else {
				stillWorks(t, w)
			}
			stillWorks(t, other)
		})
	}
	t.Run("limit above one packet, statement over it", func(t *testing.T) {
		// The first 16 MiB packet is within the limit and already relayed
		// when the second one passes it.
		big := startProxy(t, s.Addr, "limits:\n  max_query_bytes: 17000000\n")
		w := appWire(t, big.Addr, "")
		if err := w.send(append([]byte{comQuery}, "SELECT '"+strings.Repeat("y", 17<<20)+"'"...)); err != nil {
			t.Fatal(err)
		}
		r, err := w.readClosed()
		if err != nil || !r.Closed {
			t.Fatalf("want ERR then close, got %v %v", r, err)
		}
		if e := r.err(); e == nil || e.Code != 1153 || r.Packets[0].Seq != 2 {
			t.Fatalf("want ERR 1153 with sequence 2 (after the 2 packets of the statement), got %v", r)
		}
		eventually(t, 10*time.Second, "the backend thread to end", func() bool { return !processExists(t, root, w.connID) })
		w2 := appWire(t, big.Addr, "")
		if rows := w2.textRows(w2.mustQuery(t, "SELECT LENGTH('"+strings.Repeat("z", 16<<20)+"')")); rows[0][0] != strconv.Itoa(16<<20) {
			t.Fatalf("a 16 MiB statement within the limit: %v", rows)
		}
	})
	t.Run("query within max_query_bytes", func(t *testing.T) {
		w := appWire(t, tp.Addr, "")
		if rows := w.textRows(w.mustQuery(t, "SELECT '"+strings.Repeat("z", 1000)+"'")); len(rows[0][0]) != 1000 {
			t.Fatalf("rows %v", rows)
		}
	})
}

// TestMaxConnections: past max_connections a client gets ERR 1040 "Too many
// connections" in place of the greeting; a freed slot is usable again.
func TestMaxConnections(t *testing.T) {
	s := dbtest.Shared(t)
	tp := startProxy(t, s.Addr, "max_connections: 2\n")
	a := appWire(t, tp.Addr, "")
	b := appWire(t, tp.Addr, "")
	for _, client := range []string{"raw", "go-sql-driver"} {
		var code uint16
		var msg string
		if client == "raw" {
			_, err := dialWire(tp.Addr, wireOptions{User: dbserver.AppUser, Password: dbserver.AppPassword})
			var we *wireError
			if !errors.As(err, &we) {
				t.Fatalf("raw: want ERR, got %v", err)
			}
			code, msg = we.Code, we.Msg
		} else {
			err := connectErr(tp.DSN(dbserver.AppUser, dbserver.AppPassword, ""))
			var me *mysql.MySQLError
			if !errors.As(err, &me) {
				t.Fatalf("go-sql-driver: want a MySQL error, got %v", err)
			}
			code, msg = me.Number, me.Message
		}
		if code != 1040 || msg != "Too many connections" {
			t.Errorf("%s: %d %q", client, code, msg)
		}
	}
	stillWorks(t, a)
	b.Close()
	eventually(t, 5*time.Second, "a free slot", func() bool { return tp.Proxy.ActiveConnections() < 2 })
	c := appWire(t, tp.Addr, "")
	stillWorks(t, c)
}

// TestHandshakeTimeout: a client that connects and sends nothing is closed
// after timeouts.handshake, and its backend connection with it.
func TestHandshakeTimeout(t *testing.T) {
	s := dbtest.Shared(t)
	tp := startProxy(t, s.Addr, "timeouts:\n  handshake: 300ms\n")
	root := dbtest.Open(t, s.RootDSN(""))
	nc, err := net.Dial("tcp", tp.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	w := &wireConn{nc: nc, r: newReader(nc), opts: wireOptions{Timeout: 10 * time.Second}}
	w.deadline()
	g, err := w.readPacket()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.parseGreeting(g.Payload); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r, err := w.readClosed()
	if err != nil || !r.Closed {
		t.Fatalf("not closed: %v %v", r, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("closed after %v (handshake timeout 300ms)", d)
	}
	eventually(t, 5*time.Second, "the backend connection to end", func() bool { return !processExists(t, root, w.connID) })
	eventually(t, 5*time.Second, "no active connection", func() bool { return tp.Proxy.ActiveConnections() == 0 })
}

// TestIdleTimeout: a client silent for timeouts.idle is closed; one that
// keeps talking is not.
func TestIdleTimeout(t *testing.T) {
	const idleTimeout = time.Second
	s := dbtest.Shared(t)
	tp := startProxy(t, s.Addr, "timeouts:\n  idle: 1s\n")
	root := dbtest.Open(t, s.RootDSN(""))
	busy := appWire(t, tp.Addr, "")
	idle := appWire(t, tp.Addr, "")
	start := time.Now()
	// The busy client pings every 100ms for twice the idle timeout.
	for time.Since(start) < 2*idleTimeout {
		if err := busy.send([]byte{comPing}); err != nil {
			t.Fatal(err)
		}
		if r, err := busy.readOne(); err != nil || r.last()[0] != 0 {
			t.Fatalf("busy client closed after %v: %v %v", time.Since(start), r, err)
		}
		time.Sleep(100 * time.Millisecond) // pacing the pings, not synchronisation
	}
	r, err := idle.readClosed()
	if err != nil || !r.Closed {
		t.Fatalf("idle client not closed: %v %v", r, err)
	}
	if d := time.Since(start); d < idleTimeout {
		t.Errorf("closed after %v, before the idle timeout", d)
	}
	eventually(t, 5*time.Second, "the idle client's backend connection to end", func() bool { return !processExists(t, root, idle.connID) })
	stillWorks(t, busy)
}

// TestMalformedHandshakeResponse: a handshake response with a wrong
// sequence number, or truncated fields, gets at once the ERR the server
// itself sends (same code, same sequence number), then the connection
// closes; never a login, never a wait for the handshake timeout.
func TestMalformedHandshakeResponse(t *testing.T) {
	s := dbtest.Shared(t)
	tp := startProxy(t, s.Addr, "timeouts:\n  handshake: 60s\n")
	// A protocol 4.1 response with plugin auth for the app user, empty
	// auth data: well formed but for what a case changes.
	caps := uint32(0x200 | 0x8000 | 0x80000 | 0x1 | 0x4)
	body := binary.LittleEndian.AppendUint32(nil, caps)
	body = binary.LittleEndian.AppendUint32(body, 1<<24)
	body = append(body, 45)
	body = append(body, make([]byte, 23)...)
	body = append(body, dbserver.AppUser...)
	body = append(body, 0, 0)
	body = append(body, "mysql_native_password\x00"...)
	for _, tc := range []struct {
		name string
		seq  byte
		body []byte
	}{
		{"sequence 5", 5, body},
		{"sequence 0", 0, body},
		{"truncated", 1, body[:10]},
		{"user without terminator", 1, body[:32+len(dbserver.AppUser)]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want wirePacket
			for _, target := range []string{s.Addr, tp.Addr} {
				nc, err := net.Dial("tcp", target)
				if err != nil {
					t.Fatal(err)
				}
				w := &wireConn{nc: nc, r: newReader(nc), opts: wireOptions{Timeout: 10 * time.Second}}
				w.deadline()
				if _, err := w.readPacket(); err != nil {
					t.Fatal(err)
				}
				if err := w.writePacket(tc.seq, tc.body); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				p, err := w.readPacket()
				if err != nil || len(p.Payload) == 0 || p.Payload[0] != 0xff {
					t.Fatalf("%s: want an ERR packet, got %v %v", target, p, err)
				}
				if r, err := w.readClosed(); err != nil || !r.Closed {
					t.Fatalf("%s: not closed after the ERR: %v %v", target, r, err)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("%s: closed %v after the ERR", target, d)
				}
				nc.Close()
				if target == s.Addr {
					want = p
					continue
				}
				if p.Seq != want.Seq || !bytes.Equal(p.Payload, want.Payload) {
					t.Fatalf("through the proxy: seq %d %q, direct: seq %d %q", p.Seq, p.Payload, want.Seq, want.Payload)
				}
			}
		})
	}
}
