package proxy

import (
	"github.com/fenceproxy/fenceproxy/internal/logging"
)

// peerInfo is where a connection really comes from when its socket's
// address is not it: the client named by a PROXY header (via: the load
// balancer that sent it), or a Unix socket's peer process.
type peerInfo struct {
	addr string
	via  string
}

// setPeer records the client's address for logs, /connections and audit
// records; set once, before the handshake.
func (c *clientConn) setPeer(addr, via string) {
	c.peer.Store(&peerInfo{addr: addr, via: via})
}

// proxiedBy is the load balancer a PROXY header came from, "" if none.
func (c *clientConn) proxiedBy() string {
	if p := c.peer.Load(); p != nil {
		return p.via
	}
	return ""
}

func logKey(event, reason, table string) logging.Key {
	return logging.Key{Event: event, Reason: reason, Table: table}
}
