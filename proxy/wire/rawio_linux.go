package wire

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// rawSocket reads and writes a TCP socket with raw system calls inside the
// runtime's poller (syscall.RawConn), instead of net.Conn's Read and Write.
//
// Why: net.Conn wraps every read and write in the runtime's syscall
// bookkeeping. When the machine is CPU-saturated (the proxy shares cores
// with the clients and the server) a thread is often descheduled inside such
// a call; the runtime's monitor thread then takes its P away, hands it to
// another thread and keeps polling every 20 us. Measured on 2 cores under
// sysbench point_select: the monitor thread alone used a fifth of the
// proxy's CPU, with thousands of thread hand-offs per second. A read or
// write on a non-blocking socket never blocks, so it does not need that
// bookkeeping; waiting for readiness (and deadlines, and Close) still goes
// through the poller as before.
type rawSocket struct {
	rc syscall.RawConn

	// One goroutine may read while another writes (the replication pipe),
	// so each direction has its own state. The callbacks take their
	// arguments and leave their results there, and are bound once, so that
	// no closure is allocated per call.
	r, w    rawCall
	readFn  func(fd uintptr) bool
	writeFn func(fd uintptr) bool
	peekFn  func(fd uintptr) bool
	peeked  [1]byte // where peek's MSG_PEEK copies to; never read
}

// rawCall is one direction's system call in progress.
type rawCall struct {
	buf   []byte
	n     int
	errno syscall.Errno
}

// socketIO returns the reader and writer to buffer c with: c itself, or a
// rawSocket when c is a plain TCP or Unix stream connection.
func socketIO(c net.Conn) io.ReadWriter {
	var sc syscall.Conn
	switch c := c.(type) {
	case *net.TCPConn:
		sc = c
	case *net.UnixConn:
		sc = c
	default:
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	s := &rawSocket{rc: rc}
	s.readFn = s.read
	s.writeFn = s.write
	s.peekFn = s.peek
	return s
}

func (s *rawSocket) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	s.r = rawCall{buf: b}
	err := s.rc.Read(s.readFn)
	r := s.r
	s.r.buf = nil
	switch {
	case err != nil: // deadline, or the connection was closed
		return 0, err
	case r.errno != 0:
		return 0, os.NewSyscallError("read", r.errno)
	case r.n == 0:
		return 0, io.EOF
	}
	return r.n, nil
}

func (s *rawSocket) read(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&s.r.buf[0])), uintptr(len(s.r.buf)), 0, 0, 0)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait in the poller
		case 0:
			s.r.n = int(n)
		default:
			s.r.errno = e
		}
		return true
	}
}

func (s *rawSocket) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	s.w = rawCall{buf: b}
	err := s.rc.Write(s.writeFn)
	w := s.w
	s.w.buf = nil
	switch {
	case err != nil:
		return w.n, err
	case w.errno != 0:
		return w.n, os.NewSyscallError("write", w.errno)
	}
	return w.n, nil
}

// write sends all of s.w.buf, returning false to wait for the socket to
// drain. MSG_NOSIGNAL: a peer gone away is an EPIPE error, not a signal.
func (s *rawSocket) write(fd uintptr) bool {
	for s.w.n < len(s.w.buf) {
		rest := s.w.buf[s.w.n:]
		n, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&rest[0])), uintptr(len(rest)), syscall.MSG_NOSIGNAL, 0, 0)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		case 0:
			s.w.n += int(n)
		default:
			s.w.errno = e
			return true
		}
	}
	return true
}

// waitReadable waits in the poller until the socket has data, an end of
// stream or an error pending, and consumes nothing: a parked connection
// (Conn.Park) waits so without holding a read buffer.
func (s *rawSocket) waitReadable() error { return s.rc.Read(s.peekFn) }

func (s *rawSocket) peek(fd uintptr) bool {
	for {
		_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&s.peeked[0])), 1, syscall.MSG_PEEK, 0, 0)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // nothing yet: wait in the poller
		}
		// Data (n > 0), the end of the stream (n == 0) or an error: the
		// next read reports which.
		return true
	}
}
