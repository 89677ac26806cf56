package wire

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"testing"
	"time"
)

// pkt frames one physical packet.
func pkt(seq byte, payload []byte) []byte {
	n := len(payload)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}, payload...)
}

// TestReadPacket: a logical packet is joined from its parts; one past the
// limit is consumed whole and refused, leaving the stream in step.
func TestReadPacket(t *testing.T) {
	big := bytes.Repeat([]byte{7}, MaxPayload+10)
	b := stream([][]byte{big, []byte("next")})
	c := NewStreamConn(Backend, bytes.NewReader(b), io.Discard)
	p, seq, err := c.ReadPacket(nil, 2*MaxPayload)
	if err != nil || !bytes.Equal(p, big) || seq != 2 {
		t.Fatalf("ReadPacket: %d bytes, seq %d, %v", len(p), seq, err)
	}
	if n := c.TakeBytesIn(); n != int64(len(big)+2*HeaderLen) {
		t.Fatalf("bytes in %d, want %d", n, len(big)+2*HeaderLen)
	}
	if p, seq, err := c.ReadPacket(nil, 100); err != nil || string(p) != "next" || seq != 3 {
		t.Fatalf("next packet %q %d %v", p, seq, err)
	}

	c = NewStreamConn(Backend, bytes.NewReader(b), io.Discard)
	if _, _, err := c.ReadPacket(nil, 1000); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want too large", err)
	}
	if p, _, err := c.ReadPacket(nil, 100); err != nil || string(p) != "next" {
		t.Fatalf("after a refused packet: %q %v", p, err)
	}

	c = NewStreamConn(Backend, bytes.NewReader(b), io.Discard)
	if seq, err := c.SkipPacket(); err != nil || seq != 2 {
		t.Fatalf("SkipPacket: %d %v", seq, err)
	}
	if payload, n, small, err := c.peekPayload(); err != nil || !small || n != 4 || string(payload) != "next" {
		t.Fatalf("peekPayload after a skip: %q %d %v %v", payload, n, small, err)
	}
	if b, err := c.PeekPrefix(4, 2); err != nil || !bytes.Equal(b, []byte{4, 0, 0, 3, 'n', 'e'}) {
		t.Fatalf("PeekPrefix %x %v", b, err)
	}
	if b := c.PeekStart(3); !bytes.Equal(b, []byte{4, 0, 0}) {
		t.Fatalf("PeekStart %x", b)
	}

	// A truncated stream is the side's error.
	c = NewStreamConn(Client, bytes.NewReader(pkt(0, []byte("abc"))[:5]), io.Discard)
	_, _, err = c.ReadPacket(nil, 100)
	var ce *ConnError
	if !errors.As(err, &ce) || ce.Side != Client || ce.Error() == "" {
		t.Fatalf("truncated: %v", err)
	}
}

// TestReadPacketReserves: a packet of several parts is read into one
// buffer set aside when its first part says more follow (the limit, at
// most bigReserve), not into buffers doubled part by part.
func TestReadPacketReserves(t *testing.T) {
	big := bytes.Repeat([]byte{7}, 2*MaxPayload+10)
	for _, tc := range []struct{ limit, cap int }{
		{3 * MaxPayload, 3 * MaxPayload},
		{1 << 30, bigReserve},
		{2*MaxPayload + 10, 2*MaxPayload + 10},
	} {
		c := NewStreamConn(Backend, bytes.NewReader(stream([][]byte{big})), io.Discard)
		p, _, err := c.ReadPacket(make([]byte, 0, 64), tc.limit)
		if err != nil || !bytes.Equal(p, big) {
			t.Fatalf("limit %d: %d bytes, %v", tc.limit, len(p), err)
		}
		if cap(p) != tc.cap {
			t.Errorf("limit %d: a buffer of %d bytes, want %d", tc.limit, cap(p), tc.cap)
		}
	}
}

// TestPeekPacketLarge: a packet too large for the buffer, or split, is not
// peeked whole.
func TestPeekPacketLarge(t *testing.T) {
	for _, n := range []int{BufSize, MaxPayload} {
		c := NewStreamConn(Backend, bytes.NewReader(stream([][]byte{make([]byte, n)})), io.Discard)
		if _, ok, err := c.PeekPacket(); ok || err != nil {
			t.Fatalf("%d bytes: peeked whole (%v)", n, err)
		}
		if _, m, small, err := c.peekPayload(); small || m != min(n, MaxPayload) || err != nil {
			t.Fatalf("%d bytes: peekPayload %d %v %v", n, m, small, err)
		}
	}
}

// TestWriteCommand: a command longer than a packet is split at 16 MiB - 1
// (with an empty last packet when it fills them exactly), its command byte
// in the first.
func TestWriteCommand(t *testing.T) {
	for _, n := range []int{0, 10, MaxPayload - 1, MaxPayload, MaxPayload + 5} {
		body := bytes.Repeat([]byte{'a'}, n)
		var out bytes.Buffer
		c := NewStreamConn(Backend, bytes.NewReader(nil), &out)
		next, err := c.WriteCommand(0, []byte{3}, body)
		if err != nil || c.Flush() != nil {
			t.Fatal(err)
		}
		want := stream([][]byte{append([]byte{3}, body...)})
		r := NewStreamConn(Client, bytes.NewReader(out.Bytes()), io.Discard)
		p, seq, err := r.ReadPacket(nil, 2*MaxPayload)
		if err != nil || !bytes.Equal(p, append([]byte{3}, body...)) {
			t.Fatalf("%d: read back %d bytes, %v", n, len(p), err)
		}
		parts := (n+1)/MaxPayload + 1
		if int(next) != parts || int(seq) != parts-1 || c.LastOut() != seq {
			t.Fatalf("%d: next %d, last seq %d, LastOut %d; want %d parts", n, next, seq, c.LastOut(), parts)
		}
		if out.Len() != len(want) {
			t.Fatalf("%d: %d bytes written, want %d", n, out.Len(), len(want))
		}
	}
}

// TestCopyPacket: one physical packet streams across with its sequence
// number moved by delta; CopyAll moves bytes unframed.
func TestCopyPacket(t *testing.T) {
	in := append(pkt(5, []byte{0xfe, 1, 2}), pkt(6, nil)...)
	src := NewStreamConn(Backend, bytes.NewReader(in), io.Discard)
	var out bytes.Buffer
	dst := NewStreamConn(Client, bytes.NewReader(nil), &out)
	n, first, err := CopyPacket(dst, src, 250)
	if err != nil || n != 3 || first != 0xfe {
		t.Fatalf("CopyPacket %d %x %v", n, first, err)
	}
	if n, first, err = CopyPacket(dst, src, 250); err != nil || n != 0 || first != 0 {
		t.Fatalf("empty packet %d %x %v", n, first, err)
	}
	if !dst.PendingWrite() {
		t.Fatal("nothing pending before the flush")
	}
	dst.Flush()
	if want := append(pkt(255, []byte{0xfe, 1, 2}), pkt(0, nil)...); !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("copied %x, want %x", out.Bytes(), want)
	}

	a, b := tcpPair(t)
	x, y := NewConn(Backend, a), NewConn(Client, b)
	var sink bytes.Buffer
	z := NewStreamConn(Client, bytes.NewReader(nil), &sink)
	done := make(chan error, 1)
	go func() { done <- CopyAll(z, y) }()
	x.WritePacket(0, []byte("binlog event"))
	x.Flush()
	x.Close()
	if err := <-done; !errors.Is(err, io.EOF) {
		t.Fatalf("CopyAll ended with %v", err)
	}
	if !bytes.Equal(sink.Bytes(), pkt(0, []byte("binlog event"))) {
		t.Fatalf("CopyAll moved %x", sink.Bytes())
	}
}

// TestParkAndWait: a connection idle with nothing buffered gives its
// buffers back and waits for data without one; what arrives is read after
// it takes buffers again.
func TestParkAndWait(t *testing.T) {
	a, b := tcpPair(t)
	c := NewConn(Client, a)
	peer := NewConn(Backend, b)
	if c.RemoteAddr() == nil || c.Parked() {
		t.Fatal("a new connection has buffers and an address")
	}
	if !c.Park() || !c.Parked() {
		t.Fatal("an idle TCP connection did not park")
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if err := c.WaitReadable(); err == nil || !isTimeout(err) {
		t.Fatalf("wait without data: %v", err)
	}
	c.SetReadDeadline(time.Time{})
	peer.WritePacket(0, []byte("hello"))
	peer.Flush()
	if err := c.WaitReadable(); err != nil {
		t.Fatal(err)
	}
	if !c.Parked() {
		t.Fatal("waiting took buffers")
	}
	if c.PeekStart(1) != nil {
		t.Fatal("a parked connection peeked")
	}
	c.Unpark()
	if err := c.AwaitData(); err != nil {
		t.Fatal(err)
	}
	if c.Park() {
		t.Fatal("parked with data buffered")
	}
	if p, _, err := c.ReadPacket(nil, 100); err != nil || string(p) != "hello" {
		t.Fatalf("read after unpark: %q %v", p, err)
	}
	c.Release()
	c.Release() // twice is harmless
	if err := peer.CloseSocket(); err != nil {
		t.Fatal(err)
	}
}

// TestPassLast: the bytes a backend sent before it closed reach the client
// as they are.
func TestPassLast(t *testing.T) {
	a, b := tcpPair(t)
	backend := NewConn(Backend, a)
	server := NewConn(Client, b)
	errPkt := pkt(0, ErrPayload(4031, "HY000", "The client was disconnected by the server because of inactivity."))
	backend.Park()
	server.WritePacket(0, errPkt[HeaderLen:])
	server.Flush()
	server.Close()
	var out bytes.Buffer
	client := NewStreamConn(Client, bytes.NewReader(nil), &out)
	PassLast(client, backend, time.Second)
	if !bytes.Equal(out.Bytes(), errPkt) {
		t.Fatalf("passed %x, want %x", out.Bytes(), errPkt)
	}
}

// TestUpgradeTLS: a client's ClientHello already in the read buffer goes
// to the TLS layer first; data past the TLS request is refused.
func TestUpgradeTLS(t *testing.T) {
	cert := selfSigned(t)
	a, b := tcpPair(t)
	server := NewConn(Client, a)
	// The client sends its SSLRequest and starts TLS at once.
	done := make(chan error, 1)
	go func() {
		b.Write(pkt(1, make([]byte, 32)))
		tc := tls.Client(b, &tls.Config{InsecureSkipVerify: true})
		if err := tc.Handshake(); err != nil {
			done <- err
			return
		}
		p := NewConn(Backend, tc)
		p.WritePacket(2, []byte("over TLS"))
		done <- p.Flush()
	}()
	if _, _, err := server.ReadPacket(nil, 100); err != nil {
		t.Fatal(err)
	}
	tc := tls.Server(server.TLSTransport(), &tls.Config{Certificates: []tls.Certificate{cert}})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := server.UpgradeTLS(tc); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if p, seq, err := server.ReadPacket(nil, 100); err != nil || string(p) != "over TLS" || seq != 2 {
		t.Fatalf("after the upgrade: %q %d %v", p, seq, err)
	}
	if server.Park() {
		t.Fatal("a TLS connection parked")
	}

	c := NewStreamConn(Client, bytes.NewReader(append(pkt(1, make([]byte, 32)), 0x16, 3, 1)), io.Discard)
	c.ReadPacket(nil, 100)
	c.PeekStart(1)
	if err := c.UpgradeTLS(nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("data after the TLS request: %v", err)
	}
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "wire test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestStreamConnNoOps: a Conn over recorded bytes has no deadlines and no
// socket to close.
func TestStreamConnNoOps(t *testing.T) {
	c := NewStreamConn(Client, bytes.NewReader(nil), io.Discard)
	for _, err := range []error{c.SetDeadline(time.Now()), c.SetReadDeadline(time.Now()), c.SetWriteDeadline(time.Now()), c.Close(), c.CloseSocket()} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if c.RemoteAddr() != nil || Client.String() != "client" || Backend.String() != "backend" {
		t.Fatal("stream conn")
	}
	if !bytes.Equal(InitialErrPayload(1040, "Too many connections"), append([]byte{0xff, 0x10, 0x04}, "Too many connections"...)) {
		t.Fatal("InitialErrPayload")
	}
	if !bytes.Equal(OKPayload(1, 2), []byte{0, 1, 0, 2, 0, 0, 0}) {
		t.Fatal("OKPayload")
	}
}
