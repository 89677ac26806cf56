package proxy

import (
	"sync"
	"sync/atomic"
	"time"
)

// Pausing is the proxy's maintenance mode (pgbouncer's PAUSE, haproxy's
// disable frontend), for a backend switch-over or a restart of the server
// behind it: the proxy stops accepting connections (they wait in the
// kernel's accept queue, the greeting unsent and no backend dialled, and
// are served on resume), /readyz answers 503 so that load balancers send
// new clients elsewhere and, with Hold, every statement a client sends
// outside a transaction waits until resume. Transactions under way run
// to their end, so that a held proxy has no transaction open on the
// backend: what pgbouncer's PAUSE waits for. A pause ends with Resume, or
// by itself at its deadline, so that a forgotten pause does not keep the
// proxy shut.

// PauseOptions say how to pause.
type PauseOptions struct {
	Hold    bool          // also hold statements at transaction boundaries
	Timeout time.Duration // resume by itself after this long (0: only Resume ends it)
}

// PauseState is the pause, as /pause, /resume and /status answer it.
type PauseState struct {
	Paused bool       `json:"paused"`
	Hold   bool       `json:"hold_statements"`
	Since  *time.Time `json:"since,omitempty"`
	Until  *time.Time `json:"until,omitempty"` // when the pause ends by itself
	// Held is the number of client commands waiting; InTransaction the
	// connections still inside a transaction (with Hold, the pause is
	// complete when it is 0).
	Held          int `json:"held_commands"`
	InTransaction int `json:"in_transaction"`
}

type pauseGate struct {
	// holding mirrors release != nil, so that a command checks it
	// without the lock (every command of every connection does).
	holding atomic.Bool
	mu      sync.Mutex
	resumed chan struct{} // nil: not paused; closed by resume
	hold    bool
	release chan struct{} // with hold: closed when held commands may go (resume, or a pause without hold)
	since   time.Time
	until   time.Time
	timer   *time.Timer
	held    int
}

// Pause pauses the proxy, or changes the running pause's options (its
// deadline counts from now).
func (p *Proxy) Pause(o PauseOptions) PauseState {
	g := &p.pause
	g.mu.Lock()
	now := time.Now()
	if g.resumed == nil {
		g.resumed = make(chan struct{})
		g.since = now
	}
	switch {
	case o.Hold && !g.hold:
		g.release = make(chan struct{})
		g.holding.Store(true)
	case !o.Hold && g.hold:
		close(g.release)
		g.release = nil
		g.holding.Store(false)
	}
	g.hold = o.Hold
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
	g.until = time.Time{}
	if o.Timeout > 0 {
		g.until = now.Add(o.Timeout)
		ch := g.resumed
		g.timer = time.AfterFunc(o.Timeout, func() {
			if p.resume(ch) {
				p.logger.Warn("pause deadline reached: resuming", "timeout", o.Timeout)
			}
		})
	}
	g.mu.Unlock()
	st := p.PauseState()
	p.logger.Warn("paused (POST /pause): not accepting connections", "hold_statements", o.Hold, "timeout", o.Timeout,
		"in_transaction", st.InTransaction)
	return st
}

// Resume ends the pause: held connections and statements go on.
func (p *Proxy) Resume() PauseState {
	p.pause.mu.Lock()
	ch := p.pause.resumed
	p.pause.mu.Unlock()
	if ch != nil && p.resume(ch) {
		p.logger.Info("resumed (POST /resume)")
	}
	return p.PauseState()
}

// resume ends the pause whose channel is ch, if it still runs.
func (p *Proxy) resume(ch chan struct{}) bool {
	g := &p.pause
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.resumed == nil || g.resumed != ch {
		return false
	}
	close(g.resumed)
	g.resumed = nil
	if g.hold {
		close(g.release)
		g.release, g.hold = nil, false
		g.holding.Store(false)
	}
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
	return true
}

// Paused reports whether the proxy is paused (for /readyz).
func (p *Proxy) Paused() bool {
	p.pause.mu.Lock()
	defer p.pause.mu.Unlock()
	return p.pause.resumed != nil
}

// PauseState describes the pause.
func (p *Proxy) PauseState() PauseState {
	inTx := 0
	for _, ci := range p.Connections() {
		if ci.InTransaction {
			inTx++
		}
	}
	g := &p.pause
	g.mu.Lock()
	defer g.mu.Unlock()
	st := PauseState{Paused: g.resumed != nil, InTransaction: inTx}
	if st.Paused {
		since := g.since
		st.Hold, st.Since, st.Held = g.hold, &since, g.held
		if !g.until.IsZero() {
			until := g.until
			st.Until = &until
		}
	}
	return st
}

// awaitAccepting waits while the proxy is paused, before a connection just
// accepted is served (the listener is not read meanwhile: later ones wait
// in the kernel's queue), or until it shuts down.
func (p *Proxy) awaitAccepting() {
	p.pause.mu.Lock()
	ch := p.pause.resumed
	p.pause.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-p.done:
	}
}

// holdCommand makes a command that arrived outside a transaction wait
// while the proxy is paused with Hold (or until it shuts down).
func (c *clientConn) holdCommand() {
	g := &c.p.pause
	if !g.holding.Load() {
		return
	}
	g.mu.Lock()
	ch := g.release
	if ch == nil || c.inTransaction() {
		g.mu.Unlock()
		return
	}
	g.held++
	g.mu.Unlock()
	c.noteHeld(true)
	select {
	case <-ch:
	case <-c.p.done:
	}
	c.noteHeld(false)
	g.mu.Lock()
	g.held--
	g.mu.Unlock()
}
