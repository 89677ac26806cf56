package proxy

import (
	"bytes"
	"io"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// repeatReader yields b over and over.
type repeatReader struct {
	b   []byte
	off int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k := copy(p[n:], r.b[r.off:])
		n += k
		r.off = (r.off + k) % len(r.b)
	}
	return n, nil
}

// BenchmarkWalkResultSet: the response walker relaying a 4-column result
// set of 10 rows (CLIENT_DEPRECATE_EOF) from memory to nowhere: the
// relay's own cost, without sockets or scheduling.
func BenchmarkWalkResultSet(b *testing.B) {
	var resp bytes.Buffer
	seq := byte(1)
	put := func(p []byte) {
		writePkt(&resp, seq, p)
		seq++
	}
	put([]byte{4})
	for _, name := range []string{"id", "name", "amount", "period"} {
		put(colDef(col{name, mysql.MYSQL_TYPE_VAR_STRING}).payload)
	}
	for range 10 {
		put(wire.AppendLenEncString(wire.AppendLenEncString(wire.AppendLenEncString(wire.AppendLenEncString(nil, "42"), "acme"), "10.00"), "2026-10"))
	}
	put([]byte{mysql.EOF_HEADER, 0, 0, 2, 0, 0, 0})
	c := &clientConn{p: &Proxy{}, deprecateEOF: true}
	c.fence = newFencing(c)
	c.backend = wire.NewStreamConn(wire.Backend, &repeatReader{b: resp.Bytes()}, io.Discard)
	c.client = wire.NewStreamConn(wire.Client, bytes.NewReader(nil), io.Discard)
	b.ReportAllocs()
	b.SetBytes(int64(resp.Len()))
	for range b.N {
		c.x.begin(0)
		if err := c.relayResults(nil); err != nil {
			b.Fatal(err)
		}
		if err := c.client.Flush(); err != nil {
			b.Fatal(err)
		}
	}
}
