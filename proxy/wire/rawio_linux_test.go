package wire

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-accepted
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

func TestRawSocket(t *testing.T) {
	t.Run("is used for TCP", func(t *testing.T) {
		a, _ := tcpPair(t)
		if _, ok := socketIO(a).(*rawSocket); !ok {
			t.Fatalf("socketIO(*net.TCPConn) = %T, want *rawSocket", socketIO(a))
		}
	})

	t.Run("large write to a slow reader arrives whole", func(t *testing.T) {
		// Bigger than the socket buffers: the write waits for the peer to
		// drain (EAGAIN, then the poller) and resumes where it stopped.
		a, b := tcpPair(t)
		want := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
		got := make(chan []byte, 1)
		go func() {
			buf, _ := io.ReadAll(socketIO(b))
			got <- buf
		}()
		n, err := socketIO(a).Write(want)
		if err != nil || n != len(want) {
			t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(want))
		}
		a.CloseWrite()
		if g := <-got; !bytes.Equal(g, want) {
			t.Fatalf("peer read %d bytes, not the %d written", len(g), len(want))
		}
	})

	t.Run("reads and writes at once stay apart", func(t *testing.T) {
		// The replication pipe reads a socket in one goroutine while
		// another writes it: each side must see only its own bytes.
		a, b := tcpPair(t)
		sa, sb := socketIO(a), socketIO(b)
		fromA := bytes.Repeat([]byte("a"), 1<<20)
		fromB := bytes.Repeat([]byte("b"), 1<<20)
		type result struct {
			got []byte
			err error
		}
		readAll := func(r io.Reader, n int, out chan<- result) {
			buf := make([]byte, n)
			_, err := io.ReadFull(r, buf)
			out <- result{buf, err}
		}
		atA, atB := make(chan result, 1), make(chan result, 1)
		go readAll(sa, len(fromB), atA)
		go readAll(sb, len(fromA), atB)
		werr := make(chan error, 2)
		go func() { _, err := sa.Write(fromA); werr <- err }()
		go func() { _, err := sb.Write(fromB); werr <- err }()
		for range 2 {
			if err := <-werr; err != nil {
				t.Fatal(err)
			}
		}
		if r := <-atA; r.err != nil || !bytes.Equal(r.got, fromB) {
			t.Fatalf("a read %v (err %v), want b's bytes", bytes.Count(r.got, []byte("b")), r.err)
		}
		if r := <-atB; r.err != nil || !bytes.Equal(r.got, fromA) {
			t.Fatalf("b read %v (err %v), want a's bytes", bytes.Count(r.got, []byte("a")), r.err)
		}
	})

	t.Run("peer close is EOF", func(t *testing.T) {
		a, b := tcpPair(t)
		b.Close()
		if n, err := socketIO(a).Read(make([]byte, 10)); n != 0 || err != io.EOF {
			t.Fatalf("Read = %d, %v; want 0, EOF", n, err)
		}
	})

	t.Run("read deadline is a timeout", func(t *testing.T) {
		a, _ := tcpPair(t)
		a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, err := socketIO(a).Read(make([]byte, 10))
		if !isTimeout(err) || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Read after deadline = %v, want a timeout", err)
		}
	})

	t.Run("deadline set while waiting wakes the reader", func(t *testing.T) {
		// How a graceful drain interrupts an idle connection.
		a, _ := tcpPair(t)
		errc := make(chan error, 1)
		go func() {
			_, err := socketIO(a).Read(make([]byte, 10))
			errc <- err
		}()
		// Whether the reader is already parked or not, the deadline in the
		// past ends its Read.
		a.SetReadDeadline(time.Now())
		if err := <-errc; !isTimeout(err) {
			t.Fatalf("Read = %v, want a timeout", err)
		}
	})

	t.Run("write to a reset peer is an error, not a signal", func(t *testing.T) {
		a, b := tcpPair(t)
		b.SetLinger(0) // close with RST
		b.Close()
		w := socketIO(a)
		var err error
		for i := 0; i < 100 && err == nil; i++ {
			_, err = w.Write(make([]byte, 64<<10))
		}
		if err == nil {
			t.Fatal("writes to a reset connection kept succeeding")
		}
	})

	t.Run("closed connection", func(t *testing.T) {
		a, _ := tcpPair(t)
		s := socketIO(a)
		a.Close()
		if _, err := s.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read after Close = %v, want net.ErrClosed", err)
		}
		if _, err := s.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Write after Close = %v, want net.ErrClosed", err)
		}
	})

	t.Run("waitReadable returns when data arrives and consumes none of it", func(t *testing.T) {
		a, b := tcpPair(t)
		s := socketIO(a).(*rawSocket)
		errc := make(chan error, 1)
		go func() { errc <- s.waitReadable() }()
		select {
		case err := <-errc:
			t.Fatalf("waitReadable returned %v before anything was sent", err)
		case <-time.After(50 * time.Millisecond):
		}
		b.Write([]byte("hello"))
		if err := <-errc; err != nil {
			t.Fatalf("waitReadable = %v, want nil", err)
		}
		buf := make([]byte, 10)
		if n, err := s.Read(buf); err != nil || string(buf[:n]) != "hello" {
			t.Fatalf("Read after waitReadable = %q, %v; want all of \"hello\"", buf[:n], err)
		}
	})

	t.Run("waitReadable returns at the peer's close, which the next read reports", func(t *testing.T) {
		a, b := tcpPair(t)
		s := socketIO(a).(*rawSocket)
		b.Close()
		if err := s.waitReadable(); err != nil {
			t.Fatalf("waitReadable = %v, want nil", err)
		}
		if n, err := s.Read(make([]byte, 10)); n != 0 || err != io.EOF {
			t.Fatalf("Read = %d, %v; want 0, EOF", n, err)
		}
	})

	t.Run("waitReadable ends at the read deadline", func(t *testing.T) {
		a, _ := tcpPair(t)
		s := socketIO(a).(*rawSocket)
		errc := make(chan error, 1)
		go func() { errc <- s.waitReadable() }()
		a.SetReadDeadline(time.Now())
		if err := <-errc; !isTimeout(err) {
			t.Fatalf("waitReadable = %v, want a timeout", err)
		}
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)
}
