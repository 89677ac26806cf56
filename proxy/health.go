package proxy

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/policy"
)

// The backend's health, checked by the proxy on its own every
// backend.health_interval, so that fenceproxy_backend_up and
// fenceproxy_backend_dial_failures_total follow the backend while no
// client connects and nobody asks /readyz (a nightly batch's proxy is idle
// all day). With backend.user a check is a fresh login with that account
// and a ping: it proves that a session can be had, as a client's would.
// Without it, a read of the server's greeting, and only when the backend
// is on a loopback address: elsewhere a connection closed before
// authenticating counts toward the server's max_connect_errors, and the
// proxy's host would be blocked after enough idle checks.

// healthCheck is the running check loop.
type healthCheck struct {
	every   time.Duration
	timeout time.Duration
	check   func(ctx context.Context) error
	cancel  context.CancelFunc
	done    chan struct{}

	mu       sync.Mutex
	denied   bool // the last check's login was refused (logged once)
	checks   uint64
	lastErr  error
	checkedC *sync.Cond
}

// startHealth starts the check loop for cfg, or nothing when it is off or
// cannot be done safely; the first check runs at once.
func (p *Proxy) startHealth(cfg *policy.Config) {
	every := cfg.Backend.HealthInterval.D()
	if every <= 0 {
		return
	}
	timeout := cfg.Timeouts.Connect.D()
	if timeout <= 0 || timeout > every {
		timeout = every
	}
	h := &healthCheck{every: every, timeout: timeout, done: make(chan struct{})}
	h.checkedC = sync.NewCond(&h.mu)
	switch {
	case cfg.Backend.User != "":
		conn, err := adminConnector(cfg.Backend, p.backendTLS)
		if err != nil {
			p.logger.Warn("no active backend health check: the proxy's account cannot be used", "err", err)
			return
		}
		h.check = func(ctx context.Context) error { return loginAndPing(ctx, conn) }
	case loopback(p.backendAddr):
		h.check = p.CheckBackend
	default:
		p.logger.Info("no active backend health check without backend.user: a greeting-only probe of a remote server " +
			"counts toward its max_connect_errors; backend_up follows client connections and /readyz only")
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	p.health = h
	go h.run(ctx, p)
}

func (p *Proxy) stopHealth() {
	if p.health != nil {
		p.health.cancel()
		<-p.health.done
	}
}

func (h *healthCheck) run(ctx context.Context, p *Proxy) {
	defer close(h.done)
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, h.timeout)
		err := h.check(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		h.record(p, err)
		if err == nil {
			p.recheckGuards()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// record sets the metrics from one check's outcome. A login the server
// refused (access denied for the proxy's account) means the server is up:
// clients still log in with their own accounts; it is logged, and the
// catalog's health shows what it costs.
func (h *healthCheck) record(p *Proxy, err error) {
	denied := accessDenied(err)
	switch {
	case err == nil || denied:
		p.metrics.setBackendUp(true)
	default:
		p.metrics.backendDialFailed()
	}
	h.mu.Lock()
	prev, wasDenied := h.lastErr, h.denied
	h.lastErr, h.denied = err, denied
	h.checks++
	h.checkedC.Broadcast()
	h.mu.Unlock()
	switch {
	case denied && !wasDenied:
		p.logger.Error("backend health check: the server refuses the proxy's own account (backend.user)", "err", err)
	case err != nil && !denied && (prev == nil || wasDenied):
		p.logger.Warn("backend health check failed: fenceproxy_backend_up is 0", "backend", p.backendAddr, "err", err)
	case err == nil && prev != nil:
		p.logger.Info("backend health check succeeds again", "backend", p.backendAddr)
	}
}

// HealthChecks is the number of active backend checks completed, and
// WaitHealth waits until more than n have: tests await a check by
// condition. Both are 0 / an error without an active check.
func (p *Proxy) HealthChecks() uint64 {
	if p.health == nil {
		return 0
	}
	p.health.mu.Lock()
	defer p.health.mu.Unlock()
	return p.health.checks
}

func (p *Proxy) WaitHealth(ctx context.Context, n uint64) error {
	h := p.health
	if h == nil {
		return errors.New("no active backend health check")
	}
	stop := context.AfterFunc(ctx, func() {
		h.mu.Lock()
		h.checkedC.Broadcast()
		h.mu.Unlock()
	})
	defer stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.checks <= n {
		if err := ctx.Err(); err != nil {
			return err
		}
		h.checkedC.Wait()
	}
	return nil
}

// loginAndPing opens one new session with the proxy's account, pings it
// and closes it (COM_QUIT): a fresh login each time, not a pooled
// connection that may outlive a server that no longer accepts logins.
func loginAndPing(ctx context.Context, c driver.Connector) error {
	conn, err := c.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if p, ok := conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

// accessDenied: the server refused the login of the proxy's account.
func accessDenied(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1045 || me.Number == 1044 || me.Number == 1698)
}

// loopback: addr's host is localhost or a loopback IP.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// catalogHealth is what the catalog metrics export: whether the proxy
// keeps a catalog, whether its last refresh read it, and when a refresh
// last found it current (zero: never).
func (p *Proxy) catalogHealth() (enabled, readable bool, last time.Time) {
	if p.catalog == nil {
		return false, false, time.Time{}
	}
	st := p.catalog.w.State()
	return true, st.Err == nil && st.Snapshot != nil, st.Checked
}

// catalogReady is /readyz's share of the catalog: a proxy that keeps one
// is not ready until it has read it once (every write to a table the
// catalog does not know would be refused). Once read, a catalog that
// cannot be refreshed keeps the proxy ready: it fences with the last good
// catalog and refuses writes to what that does not know, and the
// fenceproxy_catalog_readable metric and its alert say so; taking every
// proxy out of rotation for it would stop reads too.
func (p *Proxy) catalogReady() error {
	if p.catalog == nil {
		return nil
	}
	if st := p.catalog.w.State(); st.Snapshot == nil {
		reason := "not read yet"
		if st.Err != nil {
			reason = st.Err.Error()
		}
		return fmt.Errorf("the schema catalog has not been read (%s): writes to tables it does not know are refused", reason)
	}
	return nil
}
