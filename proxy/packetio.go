package proxy

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// MySQL packets: a 3-byte little-endian payload length, a sequence number,
// then the payload. A payload of exactly maxPayload bytes is continued in the
// next packet; the logical packet ends with a shorter one (possibly empty).
const (
	headerLen  = 4
	maxPayload = 1<<24 - 1

	// bufSize is the read and write buffer of each side of a connection. A
	// typical command and a typical OK packet fit, so the hot path peeks them
	// in place without copying; larger packets stream through.
	bufSize = 16 << 10

	// maxWholePacket bounds a packet the proxy reads whole, for itself,
	// instead of streaming it: a step of the authentication exchange,
	// COM_CHANGE_USER, a packet of the response to one of its own queries,
	// a lease function's COM_STMT_EXECUTE.
	maxWholePacket = 1 << 20
	// maxShortPacket bounds the packets that are short by nature: the
	// backend's greeting, and the steps of caching_sha2_password's full
	// authentication the proxy converts (a public key, an encrypted or
	// cleartext password).
	maxShortPacket = 1 << 16
)

// errMalformed marks input that does not follow the protocol: the
// connection it came from is closed, nothing else.
var errMalformed = errors.New("malformed packet")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errMalformed, fmt.Sprintf(format, args...))
}

// packetConn is one side of a proxied connection: buffered packet reads and
// writes over a net.Conn that may be upgraded to TLS mid-handshake.
type packetConn struct {
	side side // whose connection this is, for errors
	conn net.Conn
	// sock is the connection as accepted or dialled, under any TLS: fixed
	// for the connection's life, so that another goroutine may close it.
	sock net.Conn
	r    *bufio.Reader // nil while parked
	w    *bufio.Writer // nil while parked
	rw   io.ReadWriter // what r and w buffer: conn, or its raw socket
	// waiter waits for the socket to become readable without a buffer
	// (rawio_linux.go); nil where it cannot (TLS, other systems): such a
	// connection keeps its buffers while idle.
	waiter readyWaiter

	// counters for metrics, read by the owning connection only
	bytesIn, bytesOut int64
	lastOut           byte // sequence number of the last packet written

	// hdr is scratch for packet headers written: a local array passed to
	// bufio.Writer.Write would escape, one allocation per packet.
	hdr [headerLen]byte
}

func newPacketConn(s side, c net.Conn) *packetConn {
	rw := socketIO(c)
	p := &packetConn{side: s, conn: c, sock: c, rw: rw}
	p.waiter, _ = rw.(readyWaiter)
	p.unpark()
	return p
}

// readyWaiter is a socket that can wait until it has something to read
// (data, end of stream or an error) without reading it, under the
// connection's read deadline.
type readyWaiter interface {
	waitReadable() error
}

// The buffers of connections that ended, for new ones: each connection has
// four (64 KiB), which were most of what a connection allocated and, at a
// few thousand connections a second, what the garbage collector spent its
// time on (BenchmarkConnect).
var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, bufSize) }}
	writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, bufSize) }}
)

// park returns p's buffers to the pools while its peer is idle, if they
// hold nothing and p can wait without them (waitReadable); unpark takes
// buffers again before p is read or written. An idle connection then
// holds no buffer: measured at 5,000 idle connections, the four buffers'
// pages were about half of the proxy's memory per connection (README).
func (p *packetConn) park() bool {
	if p.waiter == nil || p.r == nil || p.r.Buffered() > 0 || p.w.Buffered() > 0 {
		return false
	}
	p.release()
	return true
}

func (p *packetConn) parked() bool { return p.r == nil }

// unpark gives p buffers again (no-op unless parked).
func (p *packetConn) unpark() {
	if p.r != nil {
		return
	}
	p.r = readerPool.Get().(*bufio.Reader)
	p.r.Reset(p.rw)
	p.w = writerPool.Get().(*bufio.Writer)
	p.w.Reset(p.rw)
}

// waitReadable waits, parked, until the peer sent something or closed;
// it returns the wait's own error (a deadline, the connection closed), and
// leaves what arrived, an end of stream too, to the next read.
func (p *packetConn) waitReadable() error {
	return p.sideErr(p.waiter.waitReadable())
}

// release returns p's buffers to the pools once nothing reads or writes p
// any more, until unpark; p must not be used after it otherwise.
func (p *packetConn) release() {
	if p.r != nil {
		p.r.Reset(nil)
		readerPool.Put(p.r)
	}
	if p.w != nil {
		p.w.Reset(nil)
		writerPool.Put(p.w)
	}
	p.r, p.w = nil, nil
}

// side names the peer of a packetConn.
type side uint8

const (
	clientSide side = iota + 1
	backendSide
)

func (s side) String() string {
	if s == clientSide {
		return "client"
	}
	return "backend"
}

// connError is an I/O or protocol failure on one side of a proxied
// connection; which side decides what the other one is told.
type connError struct {
	side side
	err  error
}

func (e *connError) Error() string { return e.side.String() + ": " + e.err.Error() }
func (e *connError) Unwrap() error { return e.err }

// sideErr tags err with p's side (nil stays nil; tagged errors keep their
// tag).
func (p *packetConn) sideErr(err error) error {
	if err == nil {
		return nil
	}
	var ce *connError
	if errors.As(err, &ce) {
		return err
	}
	return &connError{side: p.side, err: err}
}

// peekHeader waits for the next packet and returns its payload length and
// sequence number without consuming anything.
func (p *packetConn) peekHeader() (int, byte, error) {
	h, err := p.r.Peek(headerLen)
	if err != nil {
		return 0, 0, p.sideErr(err)
	}
	return int(h[0]) | int(h[1])<<8 | int(h[2])<<16, h[3], nil
}

// peekPacket returns the next packet (header included) in place, if its
// payload is shorter than maxPayload and it fits the read buffer; ok is false
// otherwise. The bytes are valid until the next read; consume them with
// p.discard(len(pkt)).
func (p *packetConn) peekPacket() (pkt []byte, ok bool, err error) {
	n, _, err := p.peekHeader()
	if err != nil {
		return nil, false, err
	}
	if n == maxPayload || headerLen+n > p.r.Size() {
		return nil, false, nil
	}
	pkt, err = p.r.Peek(headerLen + n)
	if err != nil {
		return nil, false, p.sideErr(err)
	}
	return pkt, true, nil
}

// discard consumes n bytes already peeked.
func (p *packetConn) discard(n int) {
	p.r.Discard(n)
	p.bytesIn += int64(n)
}

// readPacket reads one logical packet (joining continuation packets) into
// buf and returns the payload and the sequence number of its last part.
// limit bounds the payload size; past it the rest of the packet is consumed
// and errTooLarge returned, so the stream stays in sync.
func (p *packetConn) readPacket(buf []byte, limit int) ([]byte, byte, error) {
	payload := buf[:0]
	tooLarge := false
	for {
		n, seq, err := p.peekHeader()
		if err != nil {
			return nil, 0, err
		}
		p.discard(headerLen)
		if tooLarge || len(payload)+n > limit {
			tooLarge = true
			if _, err := p.r.Discard(n); err != nil {
				return nil, 0, p.sideErr(err)
			}
		} else {
			start := len(payload)
			payload = grow(payload, n)
			if _, err := io.ReadFull(p.r, payload[start:start+n]); err != nil {
				return nil, 0, p.sideErr(err)
			}
		}
		p.bytesIn += int64(n)
		if n < maxPayload {
			if tooLarge {
				return nil, seq, errTooLarge
			}
			return payload, seq, nil
		}
	}
}

var errTooLarge = errors.New("packet larger than the configured limit")

// skipPacket consumes the rest of the current logical packet, from the
// header of its next part, and returns the sequence number of its last part.
func (p *packetConn) skipPacket() (byte, error) {
	for {
		n, seq, err := p.peekHeader()
		if err != nil {
			return 0, err
		}
		if _, err := p.r.Discard(headerLen + n); err != nil {
			return 0, p.sideErr(err)
		}
		p.bytesIn += int64(headerLen + n)
		if n < maxPayload {
			return seq, nil
		}
	}
}

func grow(b []byte, n int) []byte {
	need := len(b) + n
	if need <= cap(b) {
		return b[:need]
	}
	nb := make([]byte, need, max(need, 2*cap(b)))
	copy(nb, b)
	return nb
}

// writePacket writes payload as one logical packet starting at sequence
// seq, splitting it at maxPayload, and returns the next sequence number. It
// does not flush.
func (p *packetConn) writePacket(seq byte, payload []byte) (byte, error) {
	return p.writeCommand(seq, nil, payload)
}

// writeCommand writes prefix+body as one logical packet (prefix is a command
// byte, or nil), splitting at maxPayload, and returns the next sequence
// number. It does not flush.
func (p *packetConn) writeCommand(seq byte, prefix, body []byte) (byte, error) {
	total := len(prefix) + len(body)
	for {
		n := min(total, maxPayload)
		p.hdr = [headerLen]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}
		if _, err := p.w.Write(p.hdr[:]); err != nil {
			return seq, p.sideErr(err)
		}
		rest := n
		if len(prefix) > 0 {
			k := min(len(prefix), rest)
			if _, err := p.w.Write(prefix[:k]); err != nil {
				return seq, p.sideErr(err)
			}
			prefix, rest = prefix[k:], rest-k
		}
		if _, err := p.w.Write(body[:rest]); err != nil {
			return seq, p.sideErr(err)
		}
		body = body[rest:]
		p.bytesOut += int64(headerLen + n)
		p.lastOut = seq
		seq++
		total -= n
		if n < maxPayload {
			return seq, nil
		}
	}
}

func (p *packetConn) flush() error { return p.sideErr(p.w.Flush()) }

// copyPacket streams one physical packet from src to dst, rewriting its
// sequence number by delta, without holding more than the read buffer. It
// returns the payload length and the payload's first byte (0 if empty).
func copyPacket(dst, src *packetConn, delta byte) (int, byte, error) {
	n, seq, err := src.peekHeader()
	if err != nil {
		return 0, 0, err
	}
	var first byte
	if n > 0 {
		b, err := src.r.Peek(headerLen + 1)
		if err != nil {
			return 0, 0, src.sideErr(err)
		}
		first = b[headerLen]
	}
	dst.hdr = [headerLen]byte{byte(n), byte(n >> 8), byte(n >> 16), seq + delta}
	if _, err := dst.w.Write(dst.hdr[:]); err != nil {
		return 0, 0, dst.sideErr(err)
	}
	dst.lastOut = seq + delta
	src.discard(headerLen)
	if err := copyN(dst, src, n); err != nil {
		return 0, 0, err
	}
	dst.bytesOut += int64(headerLen + n)
	return n, first, nil
}

// copyN moves n bytes from src to dst through src's buffer, writing whatever
// has arrived: no allocation, no intermediate copy, no waiting for a full
// buffer.
func copyN(dst, src *packetConn, n int) error {
	for n > 0 {
		if src.r.Buffered() == 0 {
			if _, err := src.r.Peek(1); err != nil {
				return src.sideErr(err)
			}
		}
		b, _ := src.r.Peek(min(n, src.r.Buffered()))
		if _, err := dst.w.Write(b); err != nil {
			return dst.sideErr(err)
		}
		src.discard(len(b))
		n -= len(b)
	}
	return nil
}

// tlsTransport returns the connection to run a TLS handshake over. A client
// starts its TLS handshake right after its SSLRequest, without waiting for
// an answer, so the start of its ClientHello may already sit in the read
// buffer: those bytes are handed to the TLS layer first.
func (p *packetConn) tlsTransport() net.Conn {
	n := p.r.Buffered()
	if n == 0 {
		return p.conn
	}
	b, _ := p.r.Peek(n)
	pre := append([]byte(nil), b...)
	p.r.Discard(n)
	return &prefixConn{Conn: p.conn, pre: pre}
}

// prefixConn reads pre before the connection's own data.
type prefixConn struct {
	net.Conn
	pre []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(b, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// upgradeTLS replaces the connection with a TLS one after the handshake
// packets that negotiated it; tc runs over tlsTransport's connection, so
// nothing is left unread in the buffer.
func (p *packetConn) upgradeTLS(tc *tls.Conn) error {
	if p.r.Buffered() > 0 {
		return p.sideErr(malformed("data after the TLS request"))
	}
	if err := p.flush(); err != nil {
		return err
	}
	p.conn, p.rw, p.waiter = tc, tc, nil
	p.r.Reset(tc)
	p.w.Reset(tc)
	return nil
}

// Deadlines and closing act on the connection as it is now (TLS once
// upgraded), from the goroutine that owns it or, for closing, any other.
func (p *packetConn) setDeadline(t time.Time) error      { return p.conn.SetDeadline(t) }
func (p *packetConn) setReadDeadline(t time.Time) error  { return p.conn.SetReadDeadline(t) }
func (p *packetConn) setWriteDeadline(t time.Time) error { return p.conn.SetWriteDeadline(t) }
func (p *packetConn) close() error                       { return p.conn.Close() }

// closeSocket closes the socket under any TLS layer: safe from any
// goroutine at any time (the admin endpoint's kill).
func (p *packetConn) closeSocket() error { return p.sock.Close() }

// remoteAddr is the peer's address as the socket has it (nil without one).
func (p *packetConn) remoteAddr() net.Addr {
	if p.sock == nil {
		return nil
	}
	return p.sock.RemoteAddr()
}

// peekPrefix returns the next packet's header and up to k bytes of its
// payload of n bytes (as peekHeader told), in place (valid until the next
// read).
func (p *packetConn) peekPrefix(n, k int) ([]byte, error) {
	b, err := p.r.Peek(headerLen + min(n, k))
	if err != nil {
		return nil, p.sideErr(err)
	}
	return b, nil
}

// peekStart returns the next n bytes that arrive, framed or not, in
// place; nil when fewer arrive, or at once when p is parked.
func (p *packetConn) peekStart(n int) []byte {
	if p.r == nil {
		return nil
	}
	b, err := p.r.Peek(n)
	if err != nil {
		return nil
	}
	return b
}

// packet returns the next packet, header included, whose payload of n
// bytes the caller has seen fits the read buffer (peekPacket, peekKind):
// valid until the next read; consume it with discard(headerLen+n).
func (p *packetConn) packet(n int) ([]byte, error) {
	b, err := p.r.Peek(headerLen + n)
	if err != nil {
		return nil, p.sideErr(err)
	}
	return b, nil
}

// peekKind waits for the next packet's header and first payload byte and
// returns its payload length; first and small are set when the payload is
// not empty, shorter than maxPayload and fits the read buffer, so that
// packet(n) returns it whole. Nothing is consumed, and a large packet
// (a row) is not waited for beyond its first byte.
func (p *packetConn) peekKind() (n int, first byte, small bool, err error) {
	n, _, err = p.peekHeader()
	if err != nil {
		return 0, 0, false, err
	}
	if n == 0 || n >= maxPayload || headerLen+n > p.r.Size() {
		return n, 0, false, nil
	}
	b, err := p.r.Peek(headerLen + 1)
	if err != nil {
		return 0, 0, false, p.sideErr(err)
	}
	return n, b[headerLen], true, nil
}

// checkColumnDef fails unless the next packet starts as every column
// definition does, with the catalog "def": a response whose definitions
// are missing or fewer than its column count said fails here at once.
func (p *packetConn) checkColumnDef() error {
	if p.r.Buffered() >= headerLen+4 {
		// The usual case, with no wait: the header and the catalog's
		// length and name are in the buffer already.
		b, _ := p.r.Peek(headerLen + 4)
		n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
		if n >= 4 && n < maxPayload && binary.LittleEndian.Uint32(b[headerLen:]) == columnDefStart {
			return nil
		}
		return p.sideErr(malformed("column definition"))
	}
	n, _, err := p.peekHeader()
	if err != nil {
		return err
	}
	if n < 4 || n >= maxPayload {
		return p.sideErr(malformed("column definition of %d bytes", n))
	}
	b, err := p.r.Peek(headerLen + 4)
	if err != nil {
		return p.sideErr(err)
	}
	if binary.LittleEndian.Uint32(b[headerLen:]) != columnDefStart {
		return p.sideErr(malformed("column definition"))
	}
	return nil
}

// columnDefStart is how every column definition starts: the catalog
// "def" as a length-encoded string, read as a little-endian word.
const columnDefStart = 3 | 'd'<<8 | 'e'<<16 | 'f'<<24

// pendingWrite reports whether p holds written bytes not yet flushed.
func (p *packetConn) pendingWrite() bool { return p.w != nil && p.w.Buffered() > 0 }

// awaitData waits until something can be read, reading it into the buffer
// (a parked connection waits with waitReadable instead), and returns the
// read's error: a deadline, the end of the stream, a closed connection.
func (p *packetConn) awaitData() error {
	_, err := p.r.Peek(1)
	return err
}

// copyAll copies bytes from src to dst as they arrive, unframed, until
// either side fails (the replication stream).
func copyAll(dst, src *packetConn) error {
	for {
		if src.r.Buffered() == 0 {
			if _, err := src.r.Peek(1); err != nil {
				return src.sideErr(err)
			}
		}
		if err := copyN(dst, src, src.r.Buffered()); err != nil {
			return err
		}
		if err := dst.flush(); err != nil {
			return err
		}
	}
}

// passLast writes to dst, as they are, the bytes src sent before it
// closed (an ERR a server sends as it ends an idle session), waiting up to
// wait for them when src was parked and read none, and up to wait for dst
// to take them.
func passLast(dst, src *packetConn, wait time.Duration) {
	dst.unpark()
	if src.parked() {
		src.unpark()
		src.conn.SetReadDeadline(time.Now().Add(wait))
		src.r.Peek(1)
	}
	if n := src.r.Buffered(); n > 0 {
		b, _ := src.r.Peek(n)
		dst.conn.SetWriteDeadline(time.Now().Add(wait))
		if _, err := dst.w.Write(b); err == nil {
			dst.w.Flush()
		}
	}
}
