package proxy

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// ListenUnix opens the Unix socket listener at path with file mode mode.
// A socket file left by a process that is gone is replaced; one another
// process still accepts on is an error, as is any other file there. The
// socket is bound under a temporary name, given its mode, then renamed
// into place: it never exists at path with the umask's mode. Close
// removes it.
func ListenUnix(path string, mode os.FileMode) (net.Listener, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("listen_socket %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen_socket %s: another process accepts connections on it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("listen_socket %s: removing the stale socket: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("listen_socket: %w", err)
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"."+strconv.Itoa(os.Getpid()))
	os.Remove(tmp)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen_socket: %w", err)
	}
	l.SetUnlinkOnClose(false) // the name it knows is the temporary one
	if err := os.Chmod(tmp, mode); err != nil {
		l.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("listen_socket: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		l.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("listen_socket: %w", err)
	}
	return &unixListener{UnixListener: l, path: path}, nil
}

// unixListener removes its socket file when closed.
type unixListener struct {
	*net.UnixListener
	path string
}

func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	if rerr := os.Remove(l.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}

func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

// unixPeer names the process at the other end of a Unix socket connection
// ("unix:pid=1234,uid=1000" where the system tells), the client address a
// socket connection's records carry; "" for other connections.
func unixPeer(nc net.Conn) string {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return ""
	}
	if cred := peerCred(uc); cred != "" {
		return "unix:" + cred
	}
	return "unix"
}

// checkSocketPath reports why listen_socket could not be created: its
// directory is missing or not writable, or a file that is not a socket is
// in the way.
func checkSocketPath(path string) error {
	if path == "" {
		return nil
	}
	if st, err := os.Lstat(path); err == nil && st.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("listen_socket %s: exists and is not a socket", path)
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("listen_socket %s: directory %s: %w", path, dir, errors.Unwrap(err))
	}
	if !st.IsDir() {
		return fmt.Errorf("listen_socket %s: %s is not a directory", path, dir)
	}
	return nil
}
