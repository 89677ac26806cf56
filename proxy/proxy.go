// Package proxy is fenceproxy's MySQL wire-protocol layer: it accepts
// clients, relays their authentication to the backend without knowing any
// password, and relays every command, asking package rewrite what to send
// for statements that may write protected tables.
//
// One backend connection serves one client connection for its whole life:
// user variables, transactions, temporary tables and prepared statements are
// session state, so there is no pooling.
package proxy

import (
	"context"
	"crypto/rsa"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenceproxy/fenceproxy/catalog/infoschema"
	"github.com/fenceproxy/fenceproxy/internal/logging"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// Proxy is a fenceproxy server. Create it with New, feed it listeners with
// Serve, update its configuration with Update, stop it with Shutdown.
type Proxy struct {
	logger  *slog.Logger
	metrics *Metrics
	audit   *audit.Log
	adminDB *sql.DB // the proxy's own backend account (backend.user), nil if none

	ownsAdminDB bool         // opened by New, closed by Shutdown
	auditTable  *audit.Table // nil without adminDB
	instance    string       // instance_id, in audit records
	leaseLabels leaseLabels  // the stale-write metric's lease label values
	// logLimit bounds the log lines of events a client can repeat at will
	// (rejected writes, refusals, failed logins); its summary goroutine
	// ends with stopLog.
	logLimit *logging.Limiter
	stopLog  chan struct{}
	logDone  chan struct{} // closed when the summary goroutine has written its last summary

	rt       atomic.Pointer[runtime]
	updateMu sync.Mutex // serialises Update

	catalog  *catalogWatch // nil: no catalog (see catalog.go)
	health   *healthCheck  // nil: no active backend check (see health.go)
	catState atomic.Pointer[infoschema.State]
	guard    dbGuard // guard triggers (dbguard.go); under updateMu
	// missing: the protected tables the last catalog read did not find
	// (catalog.go), by table key; under updateMu.
	missing map[string]bool

	backendAddr string
	backendTLS  *tls.Config // nil: plain
	backendMode string
	clientTLS   *tls.Config // nil: TLS not offered to clients
	// The certificates behind backendTLS and clientTLS (tls.go).
	backendTLSState *backendTLS
	clientTLSState  *clientTLS

	// noWsrepVar: the backend answered SELECT @@wsrep_on with ERR 1193
	// (no such variable); sendEngineProbe asks with SHOW VARIABLES from then on.
	noWsrepVar atomic.Bool

	pause pauseGate // POST /pause (pause.go)

	rsaOnce sync.Once
	rsaKey  *rsa.PrivateKey
	rsaErr  error

	mu        sync.Mutex
	conns     map[*clientConn]struct{}
	listeners map[net.Listener]struct{}
	draining  atomic.Bool   // Shutdown started: stop accepting
	notReady  atomic.Bool   // Drain or Shutdown started: Ready fails
	done      chan struct{} // closed when draining starts
	nextID    atomic.Uint64
	active    atomic.Int64
	wg        sync.WaitGroup

	panicAt atomic.Pointer[panicHook] // tests only: make a connection panic (panic.go)
}

// runtime is what a configuration reload replaces as one unit.
type runtime struct {
	cfg    *policy.Config
	policy *policy.Policy
	engine *rewrite.Engine // what the proxy asks about every statement

	// gen changes when a reload changes what is fenced (tables, leases,
	// lease table, variables, mode, the catalog's closure): statements
	// prepared under an older generation must be decided again. It is the
	// one record of "fencing changed": policy.Version counts every reload
	// (for logs), changed or not, and knows nothing of the catalog.
	gen         uint64
	fingerprint string
	// unguarded: protected tables whose guard triggers are missing or
	// outdated (fencing.database_guard: triggers), by lower-case
	// schema.table: writes to them are refused (dbguard.go).
	unguarded map[string]string
	// catalog: the catalog state engine decides with (nil: none read, or
	// no catalog).
	catalog *infoschema.State

	trusted []netip.Prefix // proxy_protocol.trusted_cidrs
}

// Options are the proxy's collaborators.
type Options struct {
	Logger  *slog.Logger
	Metrics *Metrics   // nil: unregistered collectors
	Audit   *audit.Log // nil: memory only
	// AdminDB is a pool on the proxy's own backend account: lease
	// functions change leases through it. nil: New opens one itself when
	// backend.user is configured; without it they run in the client's
	// session.
	AdminDB *sql.DB
	// InstanceID overrides instance_id (and its default, the hostname
	// and listen port).
	InstanceID string
	// LogLimit rate-limits repetitive log lines; nil: logging's defaults.
	LogLimit *logging.Limiter
}

// New builds a proxy for cfg. The backend and TLS settings are fixed for the
// proxy's life; Update changes the rest.
func New(cfg *policy.Config, pol *policy.Policy, opts Options) (*Proxy, error) {
	p := &Proxy{
		logger:      opts.Logger,
		metrics:     opts.Metrics,
		audit:       opts.Audit,
		adminDB:     opts.AdminDB,
		logLimit:    opts.LogLimit,
		stopLog:     make(chan struct{}),
		logDone:     make(chan struct{}),
		backendAddr: cfg.Backend.Address,
		backendMode: cfg.Backend.TLS,
		conns:       map[*clientConn]struct{}{},
		listeners:   map[net.Listener]struct{}{},
		done:        make(chan struct{}),
	}
	if p.logger == nil {
		p.logger = slog.Default()
	}
	if p.metrics == nil {
		p.metrics = NewMetrics(nil)
	}
	if p.logLimit == nil {
		p.logLimit = logging.NewLimiter(0, 0)
	}
	if p.audit == nil {
		p.audit, _ = audit.Open(audit.File{}, 256)
	}
	var err error
	if p.backendTLSState, err = newBackendTLS(cfg.Backend, p.metrics); err != nil {
		return nil, err
	}
	if p.clientTLSState, err = newClientTLS(cfg.ClientTLS, p.metrics); err != nil {
		return nil, err
	}
	if p.backendTLSState != nil {
		p.backendTLS = p.backendTLSState.config
	}
	if p.clientTLSState != nil {
		p.clientTLS = p.clientTLSState.config
	}
	if p.adminDB == nil {
		if p.adminDB, err = openAdminDB(cfg.Backend, p.backendTLS); err != nil {
			return nil, fmt.Errorf("backend.user: %w", err)
		}
		p.ownsAdminDB = p.adminDB != nil
	}
	p.instance = instanceID(cfg, opts.InstanceID)
	if err := p.startGuards(cfg, pol); err != nil {
		if p.ownsAdminDB {
			p.adminDB.Close()
		}
		return nil, err
	}
	p.Update(cfg, pol)
	if r := cfg.Catalog.Refresh.D(); r > 0 && p.adminDB != nil {
		p.startCatalog(r)
	}
	p.startAuditTable(cfg)
	p.metrics.state.p.Store(p)
	go func() {
		defer close(p.logDone)
		p.logLimit.Run(p.logger, p.stopLog)
	}()
	p.metrics.catalogSource(p.catalogHealth)
	p.startHealth(cfg)
	return p, nil
}

// Update installs a new configuration for connections and statements from
// now on. Statements already being processed finish under the old one.
func (p *Proxy) Update(cfg *policy.Config, pol *policy.Policy) {
	p.updateMu.Lock()
	defer p.updateMu.Unlock()
	if pol != nil {
		p.reloadGuards(cfg, pol)
	}
	p.install(cfg, pol)
}

// install builds and installs the runtime; the caller holds updateMu.
func (p *Proxy) install(cfg *policy.Config, pol *policy.Policy) {
	if pol == nil {
		pol, _ = policy.NewPolicy(0, policy.Fencing{}, nil)
	}
	// The rewriter runs even with no protected table: the SQL lease
	// functions are the proxy's to answer in every configuration.
	cat, stale, cst := p.catalogOptions(pol)
	unguarded := p.unguarded(pol)
	p.setGuardMetric(pol, unguarded)
	p.checkProtectedTables(pol)
	rt := &runtime{cfg: cfg, policy: pol, fingerprint: fencingFingerprint(pol) + catalogFingerprint(cat, stale) + guardFingerprint(unguarded),
		engine: newRewriter(pol, cfg.Limits, cat, stale), unguarded: unguarded, catalog: cst, trusted: cfg.ProxyProtocol.Prefixes()}
	if old := p.rt.Load(); old != nil {
		rt.gen = old.gen
		if old.fingerprint != rt.fingerprint {
			rt.gen++
		}
	}
	p.rt.Store(rt)
	p.metrics.initSeries(p, pol)
}

// fencingFingerprint is what a prepared statement's fencing depends on.
func fencingFingerprint(pol *policy.Policy) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%s|%s|%s|", pol.LeaseTable, pol.Vars.Lease, pol.Vars.Owner, pol.Vars.Token, pol.Mode)
	names := make([]string, 0, len(pol.Tables))
	for _, t := range pol.Tables {
		name := strings.ToLower(t.Schema+"."+t.Table) + "=" + t.Lease
		if t.Template != nil {
			// What the start-up or reload check read of the table (column
			// types and collations, keys, engine) decides how a write is
			// fenced per row: a pin that was exact may not be after an
			// ALTER.
			if sch := t.Template.Schema(); sch != nil {
				name += fmt.Sprintf("%+v", *sch)
			}
		}
		names = append(names, name)
	}
	sort.Strings(names)
	b.WriteString(strings.Join(names, ","))
	return b.String()
}

// Audit returns the proxy's audit log.
func (p *Proxy) Audit() *audit.Log { return p.audit }

// Serve accepts connections on l until l is closed or Shutdown is called.
func (p *Proxy) Serve(l net.Listener) error {
	p.mu.Lock()
	if p.draining.Load() {
		p.mu.Unlock()
		return net.ErrClosed
	}
	p.listeners[l] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.listeners, l)
		p.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if p.draining.Load() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Out of file descriptors and the like: back off and retry,
				// as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				p.logger.Warn("accept failed; retrying", "err", err, "backoff", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		p.awaitAccepting()
		p.startConn(nc)
	}
}

func (p *Proxy) startConn(nc net.Conn) {
	rt := p.rt.Load()
	c := newClientConn(p, nc, p.nextID.Add(1))
	p.metrics.ConnectionsTotal.Inc()
	limit := rt.cfg.MaxConnections
	p.mu.Lock()
	if p.draining.Load() {
		p.mu.Unlock()
		c.client.Close()
		c.client.Release()
		return
	}
	if limit > 0 && len(p.conns) >= limit {
		p.mu.Unlock()
		p.metrics.connectionsRejected[rejectMaxConnections].Inc()
		// A server at max_connections answers with this ERR instead of a
		// handshake; clients know it.
		c.client.SetWriteDeadline(time.Now().Add(time.Second))
		c.client.WritePacket(0, wire.InitialErrPayload(erConCount, "Too many connections"))
		c.client.Flush()
		c.client.Close()
		c.client.Release()
		return
	}
	p.conns[c] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	p.metrics.ConnectionsActive.Inc()
	go func() {
		growStack()
		defer p.wg.Done()
		defer p.metrics.ConnectionsActive.Dec()
		defer func() {
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
		}()
		if c.identifyPeerIsolated(rt, nc) {
			c.serve(rt)
		} else {
			c.close()
		}
		if c.panicked.Load() {
			return // its buffers may be in any state: the collector takes them
		}
		// serve has closed both sides and ended every goroutine of the
		// connection: its buffers can serve another one.
		c.client.Release()
		if c.backend != nil {
			c.backend.Release()
		}
	}()
}

// connStack is the goroutine stack a connection needs for its handshake
// and a simple command (measured: its stack grew from the runtime's 2 KiB
// start to 16 KiB on every connection, connect, auth, SELECT 1, quit; the
// last growth in the backend dial, whose call chain is deep).
const connStack = 16 << 10

// growStack gives the calling goroutine a stack of connStack bytes at once,
// while it holds only a frame or two. Growing a stack copies it and adjusts
// every frame on it (the pointer maps of each looked up from the program
// counter): grown in the middle of the handshake, three times, that was a
// quarter of the instructions the proxy ran per connection (callgrind,
// integration/bench/connect-instr.sh). 16 KiB is also the largest stack
// the runtime keeps in its per-P caches. The runtime still shrinks the stack
// of an idle connection when the garbage collector finds it mostly unused.
//
//go:noinline
func growStack() {
	var pad [connStack - 2<<10]byte
	touchStack(pad[:])
}

// touchStack keeps growStack's array on its stack (it does not escape) and
// in use (the compiler may not drop it).
//
//go:noinline
func touchStack(b []byte) { b[len(b)-1] = 0 }

// Shutdown stops accepting, lets every connection finish its command in
// flight and any open transaction, closes each one as soon as it is idle,
// and force-closes what remains when ctx ends.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.Drain()
	p.mu.Lock()
	if !p.draining.Swap(true) {
		close(p.done)
		// After the connections end, so that their last lines count: the
		// final summary is written before Shutdown returns.
		defer func() {
			close(p.stopLog)
			<-p.logDone
		}()
	}
	for l := range p.listeners {
		l.Close()
	}
	for c := range p.conns {
		c.wake()
	}
	p.mu.Unlock()
	finished := make(chan struct{})
	go func() { p.wg.Wait(); close(finished) }()
	p.stopHealth()
	p.stopCatalog()
	if p.ownsAdminDB {
		defer p.adminDB.Close()
	}
	defer p.closeAuditTable(ctx)
	select {
	case <-finished:
		return nil
	case <-ctx.Done():
	}
	p.mu.Lock()
	n := len(p.conns)
	for c := range p.conns {
		c.forceClose()
	}
	p.mu.Unlock()
	<-finished
	if n == 1 {
		return errors.New("shutdown deadline: force-closed 1 connection")
	}
	return fmt.Errorf("shutdown deadline: force-closed %d connections", n)
}

// Close closes everything at once.
func (p *Proxy) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.Shutdown(ctx)
	return nil
}

// ActiveConnections is the number of client connections open.
func (p *Proxy) ActiveConnections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Ready tells whether the backend can be used: a real login with the
// proxy's own account when it has one, else CheckBackend.
func (p *Proxy) Ready(ctx context.Context) error {
	if p.Draining() {
		return ErrDraining
	}
	var err error
	if p.adminDB != nil {
		err = p.adminDB.PingContext(ctx)
	} else {
		err = p.CheckBackend(ctx)
	}
	p.metrics.setBackendUp(err == nil)
	if err != nil {
		return err
	}
	return p.catalogReady()
}

// ErrDraining is what Ready reports once the proxy is shutting down.
var ErrDraining = errors.New("draining: fenceproxy is shutting down")

// Drain marks the proxy as going away, ahead of Shutdown: Ready fails from
// now on, so that load balancers stop sending new clients, while Serve
// still accepts and serves them.
func (p *Proxy) Drain() {
	p.notReady.Store(true)
	p.metrics.Draining.Set(1)
}

// Draining reports whether Drain (or Shutdown) has been called.
func (p *Proxy) Draining() bool { return p.notReady.Load() }

// CheckBackend tells whether the backend accepts connections: it dials and
// reads the server's greeting. Over a non-loopback address every such probe
// counts as an aborted connect toward the server's max_connect_errors, so
// prefer a real login (backend.user) for frequent readiness checks.
func (p *Proxy) CheckBackend(ctx context.Context) error {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", p.backendAddr)
	if err != nil {
		return err
	}
	pc := wire.NewConn(wire.Backend, nc)
	defer pc.Close()
	if dl, ok := ctx.Deadline(); ok {
		pc.SetDeadline(dl)
	}
	pkt, _, err := pc.ReadPacket(nil, wire.MaxShortPacket)
	if err != nil {
		return fmt.Errorf("no greeting from %s: %w", p.backendAddr, err)
	}
	if wire.IsErr(pkt) {
		return fmt.Errorf("backend %s refuses connections: %s", p.backendAddr, wire.ParseErr(pkt).Msg)
	}
	return nil
}
