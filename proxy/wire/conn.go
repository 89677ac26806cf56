package wire

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
// then the payload. A payload of exactly MaxPayload bytes is continued in the
// next packet; the logical packet ends with a shorter one (possibly empty).
const (
	HeaderLen  = 4
	MaxPayload = 1<<24 - 1

	// BufSize is the read and write buffer of each side of a connection. A
	// typical command and a typical OK packet fit, so the hot path peeks them
	// in place without copying; larger packets stream through.
	BufSize = 16 << 10

	// MaxWholePacket bounds a packet the proxy reads whole, for itself,
	// instead of streaming it: a step of the authentication exchange,
	// COM_CHANGE_USER, a packet of the response to one of its own queries,
	// a lease function's COM_STMT_EXECUTE.
	MaxWholePacket = 1 << 20
	// MaxShortPacket bounds the packets that are short by nature: the
	// backend's greeting, and the steps of caching_sha2_password's full
	// authentication the proxy converts (a public key, an encrypted or
	// cleartext password).
	MaxShortPacket = 1 << 16
)

// ErrMalformed marks input that does not follow the protocol: the
// connection it came from is closed, nothing else.
var ErrMalformed = errors.New("malformed packet")

func Malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// Conn is one side of a proxied connection: buffered packet reads and
// writes over a net.Conn that may be upgraded to TLS mid-handshake.
type Conn struct {
	side Side // whose connection this is, for errors
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
	hdr [HeaderLen]byte
}

func NewConn(s Side, c net.Conn) *Conn {
	rw := socketIO(c)
	p := &Conn{side: s, conn: c, sock: c, rw: rw}
	p.waiter, _ = rw.(readyWaiter)
	p.Unpark()
	return p
}

// NewStreamConn is a Conn over a reader and a writer that are no network
// connection (recorded bytes in tests and benchmarks): it has no
// deadlines, closing it does nothing, and it never parks.
func NewStreamConn(s Side, r io.Reader, w io.Writer) *Conn {
	return &Conn{side: s, r: bufio.NewReaderSize(r, BufSize), w: bufio.NewWriterSize(w, BufSize)}
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
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, BufSize) }}
	writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, BufSize) }}
)

// Park returns p's buffers to the pools while its peer is idle, if they
// hold nothing and p can wait without them (waitReadable); unpark takes
// buffers again before p is read or written. An idle connection then
// holds no buffer: measured at 5,000 idle connections, the four buffers'
// pages were about half of the proxy's memory per connection (docs/benchmarks.md).
func (p *Conn) Park() bool {
	if p.waiter == nil || p.r == nil || p.r.Buffered() > 0 || p.w.Buffered() > 0 {
		return false
	}
	p.Release()
	return true
}

func (p *Conn) Parked() bool { return p.r == nil }

// Unpark gives p buffers again (no-op unless parked).
func (p *Conn) Unpark() {
	if p.r != nil {
		return
	}
	p.r = readerPool.Get().(*bufio.Reader)
	p.r.Reset(p.rw)
	p.w = writerPool.Get().(*bufio.Writer)
	p.w.Reset(p.rw)
}

// WaitReadable waits, parked, until the peer sent something or closed;
// it returns the wait's own error (a deadline, the connection closed), and
// leaves what arrived, an end of stream too, to the next read.
func (p *Conn) WaitReadable() error {
	return p.Err(p.waiter.waitReadable())
}

// Release returns p's buffers to the pools once nothing reads or writes p
// any more, until unpark; p must not be used after it otherwise.
func (p *Conn) Release() {
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

// Side names the peer of a Conn.
type Side uint8

const (
	Client Side = iota + 1
	Backend
)

func (s Side) String() string {
	if s == Client {
		return "client"
	}
	return "backend"
}

// ConnError is an I/O or protocol failure on one side of a proxied
// connection; which side decides what the other one is told.
type ConnError struct {
	Side Side
	Err  error
}

func (e *ConnError) Error() string { return e.Side.String() + ": " + e.Err.Error() }
func (e *ConnError) Unwrap() error { return e.Err }

// Err tags err with p's side (nil stays nil; tagged errors keep their
// tag).
func (p *Conn) Err(err error) error {
	if err == nil {
		return nil
	}
	var ce *ConnError
	if errors.As(err, &ce) {
		return err
	}
	return &ConnError{Side: p.side, Err: err}
}

// PeekHeader waits for the next packet and returns its payload length and
// sequence number without consuming anything.
func (p *Conn) PeekHeader() (int, byte, error) {
	h, err := p.r.Peek(HeaderLen)
	if err != nil {
		return 0, 0, p.Err(err)
	}
	return int(h[0]) | int(h[1])<<8 | int(h[2])<<16, h[3], nil
}

// PeekPacket returns the next packet (header included) in place, if its
// payload is shorter than MaxPayload and it fits the read buffer; ok is false
// otherwise. The bytes are valid until the next read; consume them with
// p.Discard(len(pkt)).
func (p *Conn) PeekPacket() (pkt []byte, ok bool, err error) {
	n, _, err := p.PeekHeader()
	if err != nil {
		return nil, false, err
	}
	if n == MaxPayload || HeaderLen+n > p.r.Size() {
		return nil, false, nil
	}
	pkt, err = p.r.Peek(HeaderLen + n)
	if err != nil {
		return nil, false, p.Err(err)
	}
	return pkt, true, nil
}

// peekPayload returns the next packet's payload in place when it is small
// (not split, and fits the read buffer), else just its length: a large
// packet is streamed (CopyPacket) or read (ReadPacket) instead.
func (p *Conn) peekPayload() (payload []byte, n int, small bool, err error) {
	pkt, ok, err := p.PeekPacket()
	if err != nil {
		return nil, 0, false, err
	}
	if !ok {
		n, _, err := p.PeekHeader()
		return nil, n, false, err
	}
	return pkt[HeaderLen:], len(pkt) - HeaderLen, true, nil
}

// DiscardPacket consumes the packet just peeked, of a payload of n bytes.
func (p *Conn) DiscardPacket(n int) { p.Discard(HeaderLen + n) }

// Discard consumes n bytes already peeked.
func (p *Conn) Discard(n int) {
	p.r.Discard(n)
	p.bytesIn += int64(n)
}

// ReadPacket reads one logical packet (joining continuation packets) into
// buf and returns the payload and the sequence number of its last part.
// limit bounds the payload size; past it the rest of the packet is consumed
// and errTooLarge returned, so the stream stays in sync.
func (p *Conn) ReadPacket(buf []byte, limit int) ([]byte, byte, error) {
	payload := buf[:0]
	tooLarge := false
	for {
		n, seq, err := p.PeekHeader()
		if err != nil {
			return nil, 0, err
		}
		p.Discard(HeaderLen)
		if tooLarge || len(payload)+n > limit {
			tooLarge = true
			if _, err := p.r.Discard(n); err != nil {
				return nil, 0, p.Err(err)
			}
		} else {
			start := len(payload)
			if n == MaxPayload && start+n > cap(payload) {
				payload = reserve(payload, start+n, limit)
			}
			payload = grow(payload, n)
			if _, err := io.ReadFull(p.r, payload[start:start+n]); err != nil {
				return nil, 0, p.Err(err)
			}
		}
		p.bytesIn += int64(n)
		if n < MaxPayload {
			if tooLarge {
				return nil, seq, ErrTooLarge
			}
			return payload, seq, nil
		}
	}
}

var ErrTooLarge = errors.New("packet larger than the configured limit")

// SkipPacket consumes the rest of the current logical packet, from the
// header of its next part, and returns the sequence number of its last part.
func (p *Conn) SkipPacket() (byte, error) {
	for {
		n, seq, err := p.PeekHeader()
		if err != nil {
			return 0, err
		}
		if _, err := p.r.Discard(HeaderLen + n); err != nil {
			return 0, p.Err(err)
		}
		p.bytesIn += int64(HeaderLen + n)
		if n < MaxPayload {
			return seq, nil
		}
	}
}

// bigReserve is how much ReadPacket sets aside at once for a packet of
// several parts.
const bigReserve = 64 << 20

// reserve makes room for a packet of several parts (a part of MaxPayload
// bytes says another follows) up to limit, at most bigReserve, in one
// allocation: growing by doubling as the parts came kept every smaller
// buffer resident until the collector returned it, and a 64 MiB query took
// the proxy's peak memory up by 113 MiB (16 + 32 + 64); a fresh allocation
// is resident only as far as it is written. need is what the next part
// needs.
func reserve(b []byte, need, limit int) []byte {
	r := min(limit, bigReserve)
	if r <= need {
		return b
	}
	nb := make([]byte, len(b), r)
	copy(nb, b)
	return nb
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

// WritePacket writes payload as one logical packet starting at sequence
// seq, splitting it at MaxPayload, and returns the next sequence number. It
// does not flush.
func (p *Conn) WritePacket(seq byte, payload []byte) (byte, error) {
	return p.WriteCommand(seq, nil, payload)
}

// WriteCommand writes prefix+body as one logical packet (prefix is a command
// byte, or nil), splitting at MaxPayload, and returns the next sequence
// number. It does not flush.
func (p *Conn) WriteCommand(seq byte, prefix, body []byte) (byte, error) {
	total := len(prefix) + len(body)
	for {
		n := min(total, MaxPayload)
		p.hdr = [HeaderLen]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}
		if _, err := p.w.Write(p.hdr[:]); err != nil {
			return seq, p.Err(err)
		}
		rest := n
		if len(prefix) > 0 {
			k := min(len(prefix), rest)
			if _, err := p.w.Write(prefix[:k]); err != nil {
				return seq, p.Err(err)
			}
			prefix, rest = prefix[k:], rest-k
		}
		if _, err := p.w.Write(body[:rest]); err != nil {
			return seq, p.Err(err)
		}
		body = body[rest:]
		p.bytesOut += int64(HeaderLen + n)
		p.lastOut = seq
		seq++
		total -= n
		if n < MaxPayload {
			return seq, nil
		}
	}
}

func (p *Conn) Flush() error { return p.Err(p.w.Flush()) }

// LastOut is the sequence number of the last packet written.
func (p *Conn) LastOut() byte { return p.lastOut }

// TakeBytesIn returns the bytes read since the last call, for the
// metrics, and starts counting again (both directions).
func (p *Conn) TakeBytesIn() int64 {
	n := p.bytesIn
	p.bytesIn, p.bytesOut = 0, 0
	return n
}

// CopyPacket streams one physical packet from src to dst, rewriting its
// sequence number by delta, without holding more than the read buffer. It
// returns the payload length and the payload's first byte (0 if empty).
func CopyPacket(dst, src *Conn, delta byte) (int, byte, error) {
	n, seq, err := src.PeekHeader()
	if err != nil {
		return 0, 0, err
	}
	var first byte
	if n > 0 {
		b, err := src.r.Peek(HeaderLen + 1)
		if err != nil {
			return 0, 0, src.Err(err)
		}
		first = b[HeaderLen]
	}
	dst.hdr = [HeaderLen]byte{byte(n), byte(n >> 8), byte(n >> 16), seq + delta}
	if _, err := dst.w.Write(dst.hdr[:]); err != nil {
		return 0, 0, dst.Err(err)
	}
	dst.lastOut = seq + delta
	src.Discard(HeaderLen)
	if err := copyN(dst, src, n); err != nil {
		return 0, 0, err
	}
	dst.bytesOut += int64(HeaderLen + n)
	return n, first, nil
}

// copyN moves n bytes from src to dst through src's buffer, writing whatever
// has arrived: no allocation, no intermediate copy, no waiting for a full
// buffer.
func copyN(dst, src *Conn, n int) error {
	for n > 0 {
		if src.r.Buffered() == 0 {
			if _, err := src.r.Peek(1); err != nil {
				return src.Err(err)
			}
		}
		b, _ := src.r.Peek(min(n, src.r.Buffered()))
		if _, err := dst.w.Write(b); err != nil {
			return dst.Err(err)
		}
		src.Discard(len(b))
		n -= len(b)
	}
	return nil
}

// TLSTransport returns the connection to run a TLS handshake over. A client
// starts its TLS handshake right after its SSLRequest, without waiting for
// an answer, so the start of its ClientHello may already sit in the read
// buffer: those bytes are handed to the TLS layer first.
func (p *Conn) TLSTransport() net.Conn {
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

// UpgradeTLS replaces the connection with a TLS one after the handshake
// packets that negotiated it; tc runs over tlsTransport's connection, so
// nothing is left unread in the buffer.
func (p *Conn) UpgradeTLS(tc *tls.Conn) error {
	if p.r.Buffered() > 0 {
		return p.Err(Malformed("data after the TLS request"))
	}
	if err := p.Flush(); err != nil {
		return err
	}
	p.conn, p.rw, p.waiter = tc, tc, nil
	p.r.Reset(tc)
	p.w.Reset(tc)
	return nil
}

// Deadlines and closing act on the connection as it is now (TLS once
// upgraded), from the goroutine that owns it or, for closing, any other.
func (p *Conn) SetDeadline(t time.Time) error {
	if p.conn == nil {
		return nil
	}
	return p.conn.SetDeadline(t)
}

func (p *Conn) SetReadDeadline(t time.Time) error {
	if p.conn == nil {
		return nil
	}
	return p.conn.SetReadDeadline(t)
}

func (p *Conn) SetWriteDeadline(t time.Time) error {
	if p.conn == nil {
		return nil
	}
	return p.conn.SetWriteDeadline(t)
}

func (p *Conn) Close() error {
	if p.conn == nil {
		return nil
	}
	return p.conn.Close()
}

// CloseSocket closes the socket under any TLS layer: safe from any
// goroutine at any time (the admin endpoint's kill).
func (p *Conn) CloseSocket() error {
	if p.sock == nil {
		return nil
	}
	return p.sock.Close()
}

// RemoteAddr is the peer's address as the socket has it (nil without one).
func (p *Conn) RemoteAddr() net.Addr {
	if p.sock == nil {
		return nil
	}
	return p.sock.RemoteAddr()
}

// PeekPrefix returns the next packet's header and up to k bytes of its
// payload of n bytes (as PeekHeader told), in place (valid until the next
// read).
func (p *Conn) PeekPrefix(n, k int) ([]byte, error) {
	b, err := p.r.Peek(HeaderLen + min(n, k))
	if err != nil {
		return nil, p.Err(err)
	}
	return b, nil
}

// PeekStart returns the next n bytes that arrive, framed or not, in
// place; nil when fewer arrive, or at once when p is parked.
func (p *Conn) PeekStart(n int) []byte {
	if p.r == nil {
		return nil
	}
	b, err := p.r.Peek(n)
	if err != nil {
		return nil
	}
	return b
}

// Packet returns the next Packet, header included, whose payload of n
// bytes the caller has seen fits the read buffer (PeekPacket, the walker):
// valid until the next read; consume it with DiscardPacket(n).
func (p *Conn) Packet(n int) ([]byte, error) {
	b, err := p.r.Peek(HeaderLen + n)
	if err != nil {
		return nil, p.Err(err)
	}
	return b, nil
}

// checkColumnDef fails unless the next packet starts as every column
// definition does, with the catalog "def": a response whose definitions
// are missing or fewer than its column count said fails here at once.
func (p *Conn) checkColumnDef() error {
	if p.r.Buffered() >= HeaderLen+4 {
		// The usual case, with no wait: the header and the catalog's
		// length and name are in the buffer already.
		b, _ := p.r.Peek(HeaderLen + 4)
		n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
		if n >= 4 && n < MaxPayload && binary.LittleEndian.Uint32(b[HeaderLen:]) == columnDefStart {
			return nil
		}
		return p.Err(Malformed("column definition"))
	}
	n, _, err := p.PeekHeader()
	if err != nil {
		return err
	}
	if n < 4 || n >= MaxPayload {
		return p.Err(Malformed("column definition of %d bytes", n))
	}
	b, err := p.r.Peek(HeaderLen + 4)
	if err != nil {
		return p.Err(err)
	}
	if binary.LittleEndian.Uint32(b[HeaderLen:]) != columnDefStart {
		return p.Err(Malformed("column definition"))
	}
	return nil
}

// columnDefStart is how every column definition starts: the catalog
// "def" as a length-encoded string, read as a little-endian word.
const columnDefStart = 3 | 'd'<<8 | 'e'<<16 | 'f'<<24

// PendingWrite reports whether p holds written bytes not yet flushed.
func (p *Conn) PendingWrite() bool { return p.w != nil && p.w.Buffered() > 0 }

// AwaitData waits until something can be read, reading it into the buffer
// (a parked connection waits with waitReadable instead), and returns the
// read's error: a deadline, the end of the stream, a closed connection.
func (p *Conn) AwaitData() error {
	_, err := p.r.Peek(1)
	return err
}

// CopyAll copies bytes from src to dst as they arrive, unframed, until
// either side fails (the replication stream).
func CopyAll(dst, src *Conn) error {
	for {
		if src.r.Buffered() == 0 {
			if _, err := src.r.Peek(1); err != nil {
				return src.Err(err)
			}
		}
		if err := copyN(dst, src, src.r.Buffered()); err != nil {
			return err
		}
		if err := dst.Flush(); err != nil {
			return err
		}
	}
}

// PassLast writes to dst, as they are, the bytes src sent before it
// closed (an ERR a server sends as it ends an idle session), waiting up to
// wait for them when src was parked and read none, and up to wait for dst
// to take them.
func PassLast(dst, src *Conn, wait time.Duration) {
	dst.Unpark()
	if src.Parked() {
		src.Unpark()
		src.SetReadDeadline(time.Now().Add(wait))
		src.r.Peek(1)
	}
	if n := src.r.Buffered(); n > 0 {
		b, _ := src.r.Peek(n)
		dst.SetWriteDeadline(time.Now().Add(wait))
		if _, err := dst.w.Write(b); err == nil {
			dst.w.Flush()
		}
	}
}
