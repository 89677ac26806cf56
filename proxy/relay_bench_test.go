package proxy

import (
	"bytes"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// These benchmarks measure the proxy's per-command relay path: a client and
// a backend, both scripted and allocation-free, talk through a real Proxy
// over loopback TCP. The backend answers every command with one fixed
// response, so the numbers are the proxy's cost (plus two loopback hops),
// and allocs/op are the proxy's allocations per relayed command. This is a
// benchmark of the relay, not a behaviour test: behaviour is tested without
// a server by the wire transcripts (transcript_test.go, golden files in
// testdata/transcripts) and the unit tests next to the code, and against
// real servers in integration/.

// benchPacket frames payload as one packet with sequence number seq.
func benchPacket(seq byte, payload []byte) []byte {
	n := len(payload)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}, payload...)
}

func benchLenEncStr(b []byte, s string) []byte { return wire.AppendLenEncString(b, s) }

// benchColumn is a column definition packet payload (protocol 4.1).
func benchColumn(name string, typ byte) []byte {
	var b []byte
	for _, s := range []string{"def", "app", "t", "t", name, name} {
		b = benchLenEncStr(b, s)
	}
	b = append(b, 0x0c, 45, 0, 0, 1, 0, 0, typ, 0, 0, 0, 0, 0)
	return b
}

// benchResultSet is a response of 2 columns and 1 row, ended by an OK
// packet with the 0xFE header (CLIENT_DEPRECATE_EOF). binary selects the
// binary row format of COM_STMT_EXECUTE.
func benchResultSet(binaryRow bool) []byte {
	var out []byte
	out = append(out, benchPacket(1, []byte{2})...)
	out = append(out, benchPacket(2, benchColumn("id", mysql.MYSQL_TYPE_LONG))...)
	out = append(out, benchPacket(3, benchColumn("name", mysql.MYSQL_TYPE_VAR_STRING))...)
	var row []byte
	if binaryRow {
		row = append([]byte{0, 0}, 42, 0, 0, 0)
		row = benchLenEncStr(row, "forty-two")
	} else {
		row = benchLenEncStr(benchLenEncStr(nil, "42"), "forty-two")
	}
	out = append(out, benchPacket(4, row)...)
	out = append(out, benchPacket(5, []byte{0xfe, 0, 0, 2, 0, 0, 0})...)
	return out
}

// benchOK is an OK packet answering a write: 1 affected row.
var benchOK = benchPacket(1, []byte{0, 1, 0, 2, 0, 0, 0})

const benchCaps = mysql.CLIENT_LONG_PASSWORD | mysql.CLIENT_LONG_FLAG | mysql.CLIENT_PROTOCOL_41 |
	mysql.CLIENT_TRANSACTIONS | mysql.CLIENT_SECURE_CONNECTION | mysql.CLIENT_MULTI_RESULTS |
	mysql.CLIENT_PS_MULTI_RESULTS | mysql.CLIENT_PLUGIN_AUTH | mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA |
	mysql.CLIENT_DEPRECATE_EOF

// benchGreeting is a protocol 10 handshake offering benchCaps.
func benchGreeting() []byte {
	b := []byte{10}
	b = append(b, "8.0.36-bench"...)
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint32(b, 1)
	b = append(b, "abcdefgh"...)
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint16(b, uint16(benchCaps&0xffff))
	b = append(b, 45)
	b = binary.LittleEndian.AppendUint16(b, mysql.SERVER_STATUS_AUTOCOMMIT)
	b = binary.LittleEndian.AppendUint16(b, uint16(benchCaps>>16))
	b = append(b, 21)
	b = append(b, make([]byte, 10)...)
	b = append(b, "ijklmnopqrst"...)
	b = append(b, 0)
	b = append(b, "mysql_native_password"...)
	return append(b, 0)
}

// benchBackend accepts connections and answers: the greeting, OK to any
// login, then resp[cmd] to every command (COM_QUIT closes).
func benchBackend(b *testing.B, resp map[byte][]byte) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	var table [256][]byte
	for k, v := range resp {
		table[k] = v
	}
	greeting := benchPacket(0, benchGreeting())
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				buf := make([]byte, 64<<10)
				read := func() (byte, bool) {
					if _, err := io.ReadFull(nc, buf[:4]); err != nil {
						return 0, false
					}
					n := int(buf[0]) | int(buf[1])<<8 | int(buf[2])<<16
					if _, err := io.ReadFull(nc, buf[:n]); err != nil || n == 0 {
						return 0, false
					}
					return buf[0], true
				}
				if _, err := nc.Write(greeting); err != nil {
					return
				}
				if _, ok := read(); !ok {
					return
				}
				if _, err := nc.Write(benchPacket(2, []byte{0, 0, 0, 2, 0, 0, 0})); err != nil {
					return
				}
				for {
					cmd, ok := read()
					if !ok || cmd == mysql.COM_QUIT {
						return
					}
					if r := table[cmd]; r != nil {
						if _, err := nc.Write(r); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// benchPolicy protects a table the benchmarked statements do not touch:
// every COM_QUERY then goes through the rewriter before it is relayed.
const benchPolicy = "tables:\n  - name: app.invoices\n"

// benchProxy runs a Proxy in front of backend, with extra YAML, and returns
// its address.
func benchProxy(b *testing.B, backend, extra string) string {
	b.Helper()
	// engine: the backend is scripted and answers no engine probe; a case
	// that names an engine in extra (under backend:) names it once.
	engine := "  engine: mysql\n"
	if strings.Contains(extra, "engine:") {
		engine = ""
	}
	if strings.Contains(extra, "tables:") && !strings.Contains(extra, "catalog:") {
		extra += "catalog:\n  refresh: 0s\n" // a scripted backend has no catalog
	}
	cfg, err := policy.Parse("bench.yaml", []byte("listen: 127.0.0.1:0\nadmin: \"\"\nbackend:\n  address: "+backend+"\n  health_interval: 0s\n"+engine+extra))
	if err != nil {
		b.Fatal(err)
	}
	p, err := New(cfg, cfg.Policy(1), Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go p.Serve(ln)
	b.Cleanup(func() { p.Close() })
	return ln.Addr().String()
}

// benchClient logs in to addr and returns the connection.
func benchClient(b *testing.B, addr string) net.Conn {
	b.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nc.Close() })
	buf := make([]byte, 4096)
	readPacket := func() []byte {
		if _, err := io.ReadFull(nc, buf[:4]); err != nil {
			b.Fatal(err)
		}
		n := int(buf[0]) | int(buf[1])<<8 | int(buf[2])<<16
		if _, err := io.ReadFull(nc, buf[:n]); err != nil {
			b.Fatal(err)
		}
		return buf[:n]
	}
	readPacket() // greeting
	resp := binary.LittleEndian.AppendUint32(nil, benchCaps)
	resp = binary.LittleEndian.AppendUint32(resp, 1<<24)
	resp = append(resp, 45)
	resp = append(resp, make([]byte, 23)...)
	resp = append(resp, "bench\x00"...)
	resp = append(resp, 20)
	resp = append(resp, make([]byte, 20)...)
	resp = append(resp, "mysql_native_password\x00"...)
	if _, err := nc.Write(benchPacket(1, resp)); err != nil {
		b.Fatal(err)
	}
	if ok := readPacket(); len(ok) == 0 || ok[0] != 0 {
		b.Fatalf("login: %x", ok)
	}
	return nc
}

// benchForwarder is a plain TCP relay (two io.Copy), the baseline the
// proxy's numbers compare with.
func benchForwarder(b *testing.B, backend, _ string) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", backend)
			if err != nil {
				c.Close()
				continue
			}
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// Relays runRelayBench can measure.
const (
	viaProxy       = iota // no protected table: pure relay
	viaProxyPolicy        // a protected table: statements go through the rewriter
	viaTCPRelay           // a plain TCP relay, the baseline
)

// runRelayBench sends cmd b.N times through the relay and reads the
// expected response each time (checked byte for byte once).
func runRelayBench(b *testing.B, via int, cmd, want []byte, cmdByte byte) {
	backend := benchBackend(b, map[byte][]byte{cmdByte: want})
	var addr string
	switch via {
	case viaProxy:
		addr = benchProxy(b, backend, "")
	case viaProxyPolicy:
		addr = benchProxy(b, backend, benchPolicy)
	default:
		addr = benchForwarder(b, backend, "")
	}
	nc := benchClient(b, addr)
	req := benchPacket(0, cmd)
	got := make([]byte, len(want))
	roundTrip := func() {
		if _, err := nc.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(nc, got); err != nil {
			b.Fatal(err)
		}
	}
	for range 100 { // warm up: buffers, metrics children, scheduler
		roundTrip()
	}
	if !bytes.Equal(got, want) {
		b.Fatalf("response changed in the relay:\ngot  %x\nwant %x", got, want)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		roundTrip()
	}
}

var benchVias = []struct {
	name string
	via  int
}{{"proxy", viaProxy}, {"proxy-with-policy", viaProxyPolicy}, {"tcp-relay-baseline", viaTCPRelay}}

// BenchmarkRelayQuery: COM_QUERY answered by an OK packet (a write) or by a
// small result set (a point select), through the proxy without and with a
// protected table (the rewriter inspects every statement), and through a
// plain TCP relay for comparison.
func BenchmarkRelayQuery(b *testing.B) {
	update := append([]byte{mysql.COM_QUERY}, "UPDATE t SET v = v + 1 WHERE id = 42"...)
	sel := append([]byte{mysql.COM_QUERY}, "SELECT id, name FROM t WHERE id = 42"...)
	for _, v := range benchVias {
		b.Run("ok/"+v.name, func(b *testing.B) { runRelayBench(b, v.via, update, benchOK, mysql.COM_QUERY) })
		b.Run("resultset/"+v.name, func(b *testing.B) { runRelayBench(b, v.via, sel, benchResultSet(false), mysql.COM_QUERY) })
	}
}

// BenchmarkRelayExecute: COM_STMT_EXECUTE of a statement with one integer
// parameter, answered by a small binary result set.
func BenchmarkRelayExecute(b *testing.B) {
	exec := []byte{mysql.COM_STMT_EXECUTE, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, mysql.MYSQL_TYPE_LONGLONG, 0}
	exec = binary.LittleEndian.AppendUint64(exec, 42)
	for _, v := range benchVias {
		b.Run(v.name, func(b *testing.B) { runRelayBench(b, v.via, exec, benchResultSet(true), mysql.COM_STMT_EXECUTE) })
	}
}
