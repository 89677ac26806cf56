//go:build !linux

package wire

import (
	"io"
	"net"
)

// socketIO returns the reader and writer to buffer c with (see
// rawio_linux.go; elsewhere the connection itself).
func socketIO(c net.Conn) io.ReadWriter { return c }
