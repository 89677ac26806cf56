//go:build !linux

package proxy

import "net"

// Listen opens the listener for clients (see listen_linux.go).
func Listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
