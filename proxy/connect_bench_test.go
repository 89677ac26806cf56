package proxy

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// BenchmarkConnect measures the proxy's connect path: one op is a whole
// connection's life as a short-lived client lives it (TCP connect, greeting,
// login, SELECT 1, COM_QUIT, close), through a real Proxy in front of a
// scripted backend over loopback, and through a plain TCP relay for
// comparison. allocs/op and B/op are the proxy's (and the scripted peers',
// which allocate the same in both cases) per connection.
//
//	go test -run '^$' -bench Connect -benchmem ./proxy/
func BenchmarkConnect(b *testing.B) {
	for _, v := range []struct {
		name  string
		start func(b *testing.B, backend, extra string) string
		extra string
	}{
		{"proxy", benchProxy, ""},
		{"proxy-engine-mariadb", benchProxy, "  engine: mariadb\n"},
		{"tcp-relay-baseline", benchForwarder, ""},
	} {
		b.Run(v.name, func(b *testing.B) {
			backend := connectBackend(b)
			addr := v.start(b, backend, v.extra)
			cl := newConnectClient()
			for range 50 { // warm up: pools, metrics children, scheduler
				cl.run(b, addr)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				cl.run(b, addr)
			}
		})
	}
}

// connectSelectOne is SELECT 1's text result set (CLIENT_DEPRECATE_EOF).
func connectSelectOne() []byte {
	col := benchColumn("1", mysql.MYSQL_TYPE_LONGLONG)
	var out []byte
	out = append(out, benchPacket(1, []byte{1})...)
	out = append(out, benchPacket(2, col)...)
	out = append(out, benchPacket(3, benchLenEncStr(nil, "1"))...)
	return append(out, benchPacket(4, []byte{0xfe, 0, 0, 2, 0, 0, 0})...)
}

// connectNoRows is SHOW VARIABLES LIKE 'wsrep_on' on a server without
// wsrep: two columns, no row.
func connectNoRows() []byte {
	var out []byte
	out = append(out, benchPacket(1, []byte{2})...)
	out = append(out, benchPacket(2, benchColumn("Variable_name", mysql.MYSQL_TYPE_VAR_STRING))...)
	out = append(out, benchPacket(3, benchColumn("Value", mysql.MYSQL_TYPE_VAR_STRING))...)
	return append(out, benchPacket(4, []byte{0xfe, 0, 0, 2, 0, 0, 0})...)
}

// connectBackend is a scripted server for the connect loop: greeting, OK to
// any login, SELECT 1's result to SELECT 1, an empty two-column result to
// any other query (the engine probe), and close on COM_QUIT.
func connectBackend(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	greeting := benchPacket(0, benchGreeting())
	loginOK := benchPacket(2, []byte{0, 0, 0, 2, 0, 0, 0})
	one, noRows := connectSelectOne(), connectNoRows()
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				var buf [512]byte
				read := func() ([]byte, bool) {
					if _, err := io.ReadFull(nc, buf[:4]); err != nil {
						return nil, false
					}
					n := int(buf[0]) | int(buf[1])<<8 | int(buf[2])<<16
					if n == 0 || n > len(buf) {
						return nil, false
					}
					if _, err := io.ReadFull(nc, buf[:n]); err != nil {
						return nil, false
					}
					return buf[:n], true
				}
				if _, err := nc.Write(greeting); err != nil {
					return
				}
				if _, ok := read(); !ok {
					return
				}
				if _, err := nc.Write(loginOK); err != nil {
					return
				}
				for {
					p, ok := read()
					if !ok || p[0] == mysql.COM_QUIT {
						return
					}
					r := noRows
					if string(p[1:]) == "SELECT 1" {
						r = one
					}
					if _, err := nc.Write(r); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// connectClient is a scripted client that reuses its buffers, so that what
// a connection allocates is the relay's.
type connectClient struct {
	buf   [4096]byte
	login []byte
	query []byte
	quit  []byte
	want  []byte
}

func newConnectClient() *connectClient {
	resp := binary.LittleEndian.AppendUint32(nil, benchCaps)
	resp = binary.LittleEndian.AppendUint32(resp, 1<<24)
	resp = append(resp, 45)
	resp = append(resp, make([]byte, 23)...)
	resp = append(resp, "bench\x00"...)
	resp = append(resp, 20)
	resp = append(resp, make([]byte, 20)...)
	resp = append(resp, "mysql_native_password\x00"...)
	return &connectClient{
		login: benchPacket(1, resp),
		query: benchPacket(0, append([]byte{mysql.COM_QUERY}, "SELECT 1"...)),
		quit:  benchPacket(0, []byte{mysql.COM_QUIT}),
		want:  connectSelectOne(),
	}
}

func (cl *connectClient) readPacket(b *testing.B, nc net.Conn) []byte {
	b.Helper()
	if _, err := io.ReadFull(nc, cl.buf[:4]); err != nil {
		b.Fatal(err)
	}
	n := int(cl.buf[0]) | int(cl.buf[1])<<8 | int(cl.buf[2])<<16
	if _, err := io.ReadFull(nc, cl.buf[:n]); err != nil {
		b.Fatal(err)
	}
	return cl.buf[:n]
}

// run is one connection: connect, login, SELECT 1 (its result checked byte
// for byte), quit, and wait for the far side to close.
func (cl *connectClient) run(b *testing.B, addr string) {
	b.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	if g := cl.readPacket(b, nc); len(g) == 0 || g[0] != 10 {
		b.Fatalf("greeting: %x", g)
	}
	if _, err := nc.Write(cl.login); err != nil {
		b.Fatal(err)
	}
	if ok := cl.readPacket(b, nc); len(ok) == 0 || ok[0] != 0 {
		b.Fatalf("login: %x", ok)
	}
	if _, err := nc.Write(cl.query); err != nil {
		b.Fatal(err)
	}
	got := cl.buf[:len(cl.want)]
	if _, err := io.ReadFull(nc, got); err != nil {
		b.Fatal(err)
	}
	if !bytes.Equal(got, cl.want) {
		b.Fatalf("SELECT 1 changed in the relay:\ngot  %x\nwant %x", got, cl.want)
	}
	if _, err := nc.Write(cl.quit); err != nil {
		b.Fatal(err)
	}
	// The server side closes after COM_QUIT; waiting for it keeps the
	// connections of one op from piling up into the next.
	if n, err := nc.Read(cl.buf[:1]); n != 0 || err == nil {
		b.Fatalf("after COM_QUIT: read %d bytes, %v", n, err)
	}
}
