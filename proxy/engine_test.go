package proxy

import (
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/policy"
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
	proxySide, serverSide := net.Pipe()
	defer proxySide.Close()
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
		backend: newPacketConn(backendSide, proxySide), srv: rewrite.Server{Flavor: flavor}}
	rt := &runtime{cfg: &policy.Config{Backend: policy.Backend{Engine: policy.EngineAuto}}}
	if err := c.learnEngine(rt); err != nil {
		t.Fatalf("learnEngine: %v", err)
	}
	proxySide.Close()
	return c.srv, <-got
}

// TestLearnEngine: the probe and what it concludes, for servers with and
// without the wsrep_on variable, and for a probe that fails.
func TestLearnEngine(t *testing.T) {
	const sel, show = "SELECT @@wsrep_on", "SHOW VARIABLES LIKE 'wsrep_on'"
	selHead := engineRows("@@wsrep_on")
	showHead := engineRows("Variable_name", "Value")
	unknown := benchPacket(1, errPayload(erUnknownSystemVariable, "HY000", "Unknown system variable 'wsrep_on'"))
	denied := benchPacket(1, errPayload(1227, "42000", "Access denied"))
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
