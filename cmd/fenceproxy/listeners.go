package main

import (
	"net"
	"strings"

	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy"
)

// listeners are the proxy's MySQL listeners: listen (TCP) and
// listen_socket (Unix), either of which may be off.
type listeners struct {
	tcp, unix net.Listener
}

func openListeners(cfg *policy.Config) (*listeners, error) {
	l := &listeners{}
	var err error
	if cfg.Listen != "" {
		if l.tcp, err = proxy.Listen(cfg.Listen); err != nil {
			return nil, err
		}
	}
	if cfg.ListenSocket != "" {
		if l.unix, err = proxy.ListenUnix(cfg.ListenSocket, cfg.SocketMode()); err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

func (l *listeners) all() []net.Listener {
	var out []net.Listener
	for _, x := range []net.Listener{l.tcp, l.unix} {
		if x != nil {
			out = append(out, x)
		}
	}
	return out
}

// Addr is the TCP listener's address, else the socket's: the default
// instance id names it.
func (l *listeners) Addr() net.Addr { return l.all()[0].Addr() }

func (l *listeners) Close() error {
	for _, x := range l.all() {
		x.Close()
	}
	return nil
}

// tcpAddr and socket are what the log says of each ("" when off).
func (l *listeners) tcpAddr() string {
	if l.tcp == nil {
		return ""
	}
	return l.tcp.Addr().String()
}

func (l *listeners) socket() string {
	if l.unix == nil {
		return ""
	}
	return l.unix.Addr().String()
}

func (l *listeners) String() string {
	var s []string
	for _, x := range l.all() {
		s = append(s, x.Addr().String())
	}
	return strings.Join(s, " and ")
}

// serve runs p.Serve on each listener; each one's end goes to errc, which
// has room for all.
func (l *listeners) serve(p *proxy.Proxy, errc chan<- error) {
	for _, x := range l.all() {
		go func() { errc <- p.Serve(x) }()
	}
}
