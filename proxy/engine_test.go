package proxy

import (
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// engineRows is a text result set of one row (CLIENT_DEPRECATE_EOF).
func engineRows(cols ...string) []byte {
	out := benchPacket(1, []byte{byte(len(cols))})
	seq := byte(2)
	for _, c := range cols {
		out = append(out, benchPacket(seq, benchColumn(c, mysql.MYSQL_TYPE_VAR_STRING))...)
		seq++
	}
	return out
}

// withRow appends one row of values and the terminator to a result set
// header made by engineRows; no values: no row.
func withRow(head []byte, seq byte, vals ...string) []byte {
	out := append([]byte(nil), head...)
	if len(vals) > 0 {
		var row []byte
		for _, v := range vals {
			row = benchLenEncStr(row, v)
		}
		out = append(out, benchPacket(seq, row)...)
		seq++
	}
	return append(out, benchPacket(seq, []byte{0xfe, 0, 0, 2, 0, 0, 0})...)
}

// runLearnEngine runs learnEngine on a connection to a scripted backend
// that answers each query from answers (a query not in it fails the test),
// and returns the queries in the order the backend got them.
func runLearnEngine(t *testing.T, p *Proxy, flavor rewrite.Flavor, answers map[string][]byte) (rewrite.Server, []string) {
	t.Helper()
	c, got := engineConn(t, p, flavor, answers)
	rt := &runtime{cfg: &policy.Config{Backend: policy.Backend{Engine: policy.EngineAuto}}}
	if err := c.learnEngine(rt); err != nil {
		t.Fatalf("learnEngine: %v", err)
	}
	c.backend.Close()
	return c.srv, <-got
}

// engineConn is a connection whose backend is scripted as for
// runLearnEngine (over net.Pipe: the backend's answer is read only when the
// proxy reads it); got yields the queries once the connection is closed.
func engineConn(t *testing.T, p *Proxy, flavor rewrite.Flavor, answers map[string][]byte) (*clientConn, chan []string) {
	t.Helper()
	proxySide, serverSide := net.Pipe()
	t.Cleanup(func() { proxySide.Close() })
	got := make(chan []string, 1)
	go func() {
		defer serverSide.Close()
		var queries []string
		defer func() { got <- queries }()
		var hdr [4]byte
		for {
			if _, err := io.ReadFull(serverSide, hdr[:]); err != nil {
				return
			}
			body := make([]byte, int(hdr[0])|int(hdr[1])<<8|int(hdr[2])<<16)
			if _, err := io.ReadFull(serverSide, body); err != nil || len(body) == 0 || body[0] != mysql.COM_QUERY {
				return
			}
			q := string(body[1:])
			queries = append(queries, q)
			a, ok := answers[q]
			if !ok {
				return
			}
			if _, err := serverSide.Write(a); err != nil {
				return
			}
		}
	}()
	c := &clientConn{p: p, lg: slog.New(slog.NewTextHandler(io.Discard, nil)), deprecateEOF: true,
		backend: wire.NewConn(wire.Backend, proxySide), srv: rewrite.Server{Flavor: flavor}}
	return c, got
}

// TestEngineProbeReadAfterHandshakeDeadline: the probe's answer is read
// with the client's first command (or when the proxy starts watching the
// idle backend), under the handshake's deadline as the backend's read
// deadline; a client whose first command comes after that deadline passed
// must still get it relayed, the answer read then (a read under a deadline
// in the past fails at once, waiting answer or not).
func TestEngineProbeReadAfterHandshakeDeadline(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer []byte
		galera bool
	}{
		{"wsrep on", withRow(engineRows("@@wsrep_on"), 2, "1"), true},
		{"wsrep off", withRow(engineRows("@@wsrep_on"), 2, "0"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, got := engineConn(t, &Proxy{}, rewrite.MariaDB, map[string][]byte{"SELECT @@wsrep_on": tc.answer})
			rt := &runtime{cfg: &policy.Config{Backend: policy.Backend{Engine: policy.EngineAuto},
				Timeouts: policy.Timeouts{Handshake: policy.Duration(10 * time.Second)}}}
			if err := c.sendEngineProbe(rt); err != nil {
				t.Fatalf("sendEngineProbe: %v", err)
			}
			if c.probe == probeNone {
				t.Fatal("no probe in flight after sendEngineProbe")
			}
			// As handshake leaves it, with the deadline passed.
			c.probeDeadline = time.Now().Add(-time.Millisecond)
			c.backend.SetReadDeadline(c.probeDeadline)
			if err := c.finishEngineProbe(); err != nil {
				t.Fatalf("finishEngineProbe after the handshake deadline: %v", err)
			}
			if c.srv.Galera != tc.galera {
				t.Errorf("Galera = %v, want %v", c.srv.Galera, tc.galera)
			}
			if c.probe != probeNone {
				t.Error("probe still in flight after finishEngineProbe")
			}
			c.backend.Close()
			if q := <-got; len(q) != 1 {
				t.Errorf("backend got %q, want the one probe", q)
			}
		})
	}
}

// TestLearnEngine: the probe and what it concludes, for servers with and
// without the wsrep_on variable, and for a probe that fails.
func TestLearnEngine(t *testing.T) {
	const sel, show = "SELECT @@wsrep_on", "SHOW VARIABLES LIKE 'wsrep_on'"
	selHead := engineRows("@@wsrep_on")
	showHead := engineRows("Variable_name", "Value")
	unknown := benchPacket(1, wire.ErrPayload(erUnknownSystemVariable, "HY000", "Unknown system variable 'wsrep_on'"))
	denied := benchPacket(1, wire.ErrPayload(1227, "42000", "Access denied"))
	for _, tc := range []struct {
		name    string
		answers map[string][]byte
		galera  bool
		queries []string
	}{
		{"wsrep on", map[string][]byte{sel: withRow(selHead, 2, "1")}, true, []string{sel}},
		{"wsrep off", map[string][]byte{sel: withRow(selHead, 2, "0")}, false, []string{sel}},
		{"no wsrep variable", map[string][]byte{sel: unknown, show: withRow(showHead, 3)}, false, []string{sel, show}},
		{"no wsrep variable, SHOW says ON", map[string][]byte{sel: unknown, show: withRow(showHead, 3, "wsrep_on", "ON")}, true, []string{sel, show}},
		{"probe refused: fenced as Galera", map[string][]byte{sel: denied}, true, []string{sel}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, queries := runLearnEngine(t, &Proxy{}, rewrite.MariaDB, tc.answers)
			if srv.Galera != tc.galera {
				t.Errorf("Galera = %v, want %v", srv.Galera, tc.galera)
			}
			if len(queries) != len(tc.queries) {
				t.Fatalf("backend got %q, want %q", queries, tc.queries)
			}
			for i := range queries {
				if queries[i] != tc.queries[i] {
					t.Errorf("backend got %q, want %q", queries, tc.queries)
				}
			}
		})
	}
	t.Run("after ERR 1193 later connections ask SHOW VARIABLES only", func(t *testing.T) {
		p := &Proxy{}
		runLearnEngine(t, p, rewrite.MySQL, map[string][]byte{sel: unknown, show: withRow(showHead, 3)})
		srv, queries := runLearnEngine(t, p, rewrite.MySQL, map[string][]byte{show: withRow(showHead, 3, "wsrep_on", "ON")})
		if len(queries) != 1 || queries[0] != show {
			t.Errorf("second connection asked %q, want only %q", queries, show)
		}
		if !srv.Galera {
			t.Error("Galera = false after SHOW VARIABLES said ON")
		}
	})
	t.Run("TiDB is not asked", func(t *testing.T) {
		srv, queries := runLearnEngine(t, &Proxy{}, rewrite.TiDB, nil)
		if len(queries) != 0 || srv.Galera {
			t.Errorf("TiDB: asked %q, Galera %v", queries, srv.Galera)
		}
	})
}
