package proxy

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/logging"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// ConnInfo describes one client connection for the admin endpoint.
type ConnInfo struct {
	ID     uint64 `json:"id"`
	User   string `json:"user"`
	Client string `json:"client"`
	// ProxiedBy is the load balancer that named Client in a PROXY header.
	ProxiedBy     string    `json:"proxied_by,omitempty"`
	Program       string    `json:"program_name,omitempty"`
	Schema        string    `json:"schema"`
	BackendConnID uint32    `json:"backend_conn_id"`
	InTransaction bool      `json:"in_transaction"`
	ConnectedAt   time.Time `json:"connected_at"`
	// Lease and LeaseToken come from the session's last successful
	// fence_acquire (cleared by fence_release): the proxy does not read
	// fence variables a session sets itself.
	Lease      string `json:"lease,omitempty"`
	LeaseToken uint64 `json:"lease_token,omitempty"`
	// State is handshake, idle, command or held (a pause holds its
	// command); Command names the command in
	// flight (or the last one, when idle); Seconds is how long the
	// connection has been in its state.
	State   string  `json:"state"`
	Command string  `json:"command,omitempty"`
	Seconds float64 `json:"seconds"`
}

// connState is what the admin endpoint may read of a connection; the
// connection's goroutine publishes it under clientConn.mu.
type connState struct {
	ready         bool // handshake done
	busy          bool
	held          bool // a command waits for the end of a pause
	since         time.Time
	cmd           string
	user, schema  string
	inTx          bool
	lease         string
	leaseToken    uint64
	leaseUntil    time.Time
	leaseTTL      time.Duration
	backendConnID uint32
	backend       *wire.Conn
	program       string
}

// noteCommand marks the start of a command.
func (c *clientConn) noteCommand(cmd byte) {
	now := time.Now()
	c.mu.Lock()
	c.pub.busy, c.pub.cmd, c.pub.since = true, commandName(cmd), now
	c.mu.Unlock()
}

// noteHeld marks a command held by a pause (or no longer).
func (c *clientConn) noteHeld(held bool) {
	c.mu.Lock()
	c.pub.held = held
	c.mu.Unlock()
}

// publishLease copies the session's lease for the admin endpoint and
// the lease gauges.
func (c *clientConn) publishLease() {
	c.mu.Lock()
	c.pub.lease, c.pub.leaseToken = c.acquired.Name, c.acquired.Token
	c.pub.leaseUntil, c.pub.leaseTTL = c.acquiredUntil, c.acquiredTTL
	c.mu.Unlock()
}

// publish copies the session's state for the admin endpoint, between
// commands.
func (c *clientConn) publish() {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.pub.ready {
		c.pub.ready = true
		c.pub.backendConnID = c.connID
		c.pub.program = c.program
		if c.backend != nil {
			c.pub.backend = c.backend
		}
	}
	c.pub.busy, c.pub.since = false, now
	c.pub.user, c.pub.schema, c.pub.inTx = c.user, c.sess.Schema, c.inTransaction()
	c.pub.lease, c.pub.leaseToken = c.acquired.Name, c.acquired.Token
	c.pub.leaseUntil, c.pub.leaseTTL = c.acquiredUntil, c.acquiredTTL
}

func (c *clientConn) info(now time.Time) ConnInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	ci := ConnInfo{ID: c.id, Client: c.remote(), ProxiedBy: c.proxiedBy(), ConnectedAt: c.connectedAt, State: "handshake",
		Seconds: logging.Seconds(now.Sub(c.connectedAt))}
	if !c.pub.ready {
		return ci
	}
	ci.User, ci.Schema, ci.InTransaction = c.pub.user, c.pub.schema, c.pub.inTx
	ci.Program, ci.BackendConnID = c.pub.program, c.pub.backendConnID
	ci.Lease, ci.LeaseToken = c.pub.lease, c.pub.leaseToken
	ci.Command, ci.Seconds = c.pub.cmd, logging.Seconds(now.Sub(c.pub.since))
	ci.State = "idle"
	switch {
	case c.pub.held:
		ci.State = "held"
	case c.pub.busy:
		ci.State = "command"
	}
	return ci
}

// kill closes both sides of the connection from outside its goroutine,
// which then ends on its next read or write.
func (c *clientConn) kill() {
	c.client.CloseSocket()
	c.mu.Lock()
	b := c.pub.backend
	c.mu.Unlock()
	if b != nil {
		b.Close()
	}
}

// Connections lists the client connections, by id.
func (p *Proxy) Connections() []ConnInfo {
	now := time.Now()
	p.mu.Lock()
	conns := make([]*clientConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	out := make([]ConnInfo, len(conns))
	for i, c := range conns {
		out[i] = c.info(now)
	}
	slices.SortFunc(out, func(a, b ConnInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// CloseConnection closes client connection id (and its backend
// connection) at once, inside a command or a transaction too: the server
// rolls back what is open. It reports whether there was such a connection.
func (p *Proxy) CloseConnection(id uint64) bool {
	p.mu.Lock()
	var target *clientConn
	for c := range p.conns {
		if c.id == id {
			target = c
			break
		}
	}
	p.mu.Unlock()
	if target == nil {
		return false
	}
	target.newLog().Info("connection closed by the admin endpoint (DELETE /connections)")
	target.kill()
	return true
}

// LeaseInfo is one lease row, as /leases shows it: the owner only as its
// short hash.
type LeaseInfo struct {
	Table     string    `json:"lease_table"`
	Name      string    `json:"lease"`
	OwnerID   string    `json:"owner_id"`
	Token     uint64    `json:"token"`
	Until     time.Time `json:"leased_until"`
	Held      bool      `json:"held"`
	Remaining float64   `json:"remaining_seconds"`
}

// ErrNoAccount is returned by Leases without backend.user.
var ErrNoAccount = errorString("needs the proxy's own account (backend.user)")

type errorString string

func (e errorString) Error() string { return string(e) }

// Leases lists every lease in the lease tables of the protected tables'
// schemas, read through the proxy's own account.
func (p *Proxy) Leases(ctx context.Context) ([]LeaseInfo, error) {
	if p.adminDB == nil {
		return nil, ErrNoAccount
	}
	rt := p.rt.Load()
	var tables []string
	for _, t := range rt.policy.Tables {
		schema, name := rt.policy.LeaseTableFor(t.Schema)
		if q := schema + "." + name; !slices.ContainsFunc(tables, func(s string) bool { return strings.EqualFold(s, q) }) {
			tables = append(tables, q)
		}
	}
	var out []LeaseInfo
	for _, table := range tables {
		store, err := lease.NewStore(p.adminDB, table)
		if err != nil {
			return nil, err
		}
		sts, err := store.List(ctx)
		if err != nil {
			return nil, err
		}
		for _, st := range sts {
			out = append(out, LeaseInfo{Table: table, Name: st.Name, OwnerID: st.OwnerID(), Token: st.Token,
				Until: st.Until.UTC(), Held: st.Held, Remaining: logging.Seconds(st.Remaining)})
		}
	}
	return out, nil
}
