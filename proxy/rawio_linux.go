package proxy

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

	// The callbacks read their arguments and leave their results here, and
	// are bound once, so that no closure is allocated per call.
	buf     []byte
	n       int
	errno   syscall.Errno
	readFn  func(fd uintptr) bool
	writeFn func(fd uintptr) bool
}

// socketIO returns the reader and writer to buffer c with: c itself, or a
// rawSocket when c is a plain TCP connection.
func socketIO(c net.Conn) io.ReadWriter {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	s := &rawSocket{rc: rc}
	s.readFn = s.read
	s.writeFn = s.write
	return s
}

func (s *rawSocket) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	s.buf, s.n, s.errno = b, 0, 0
	err := s.rc.Read(s.readFn)
	s.buf = nil
	switch {
	case err != nil: // deadline, or the connection was closed
		return 0, err
	case s.errno != 0:
		return 0, os.NewSyscallError("read", s.errno)
	case s.n == 0:
		return 0, io.EOF
	}
	return s.n, nil
}

func (s *rawSocket) read(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&s.buf[0])), uintptr(len(s.buf)), 0, 0, 0)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait in the poller
		case 0:
			s.n = int(n)
		default:
			s.errno = e
		}
		return true
	}
}

func (s *rawSocket) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	s.buf, s.n, s.errno = b, 0, 0
	err := s.rc.Write(s.writeFn)
	s.buf = nil
	switch {
	case err != nil:
		return s.n, err
	case s.errno != 0:
		return s.n, os.NewSyscallError("write", s.errno)
	}
	return s.n, nil
}

// write sends all of s.buf, returning false to wait for the socket to drain.
// MSG_NOSIGNAL: a peer gone away is an EPIPE error, not a signal.
func (s *rawSocket) write(fd uintptr) bool {
	for s.n < len(s.buf) {
		rest := s.buf[s.n:]
		n, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&rest[0])), uintptr(len(rest)), syscall.MSG_NOSIGNAL, 0, 0)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		case 0:
			s.n += int(n)
		default:
			s.errno = e
			return true
		}
	}
	return true
}
