package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrStopped is the cause of a job context canceled by Keeper.Stop.
var ErrStopped = errors.New("lease: keeper stopped")

// DefaultKeepFraction is the part of the TTL between two renewals.
const DefaultKeepFraction = 1.0 / 3

// KeeperOption changes a Keeper.
type KeeperOption func(*keeperConfig)

type keeperConfig struct {
	interval     time.Duration
	fraction     float64
	renewTimeout time.Duration
	metrics      *Metrics
}

// WithInterval sets the time between two renewals (default ttl *
// DefaultKeepFraction). It must be shorter than the TTL.
func WithInterval(d time.Duration) KeeperOption {
	return func(c *keeperConfig) { c.interval = d }
}

// WithFraction sets the time between two renewals as a fraction of the TTL,
// in (0, 1). WithInterval wins over it.
func WithFraction(f float64) KeeperOption {
	return func(c *keeperConfig) { c.fraction = f }
}

// WithRenewTimeout bounds each renewal (default: the interval). A renewal
// is also never allowed to run past the moment the last confirmed renewal
// could expire (its send time + ttl, by the local clock), so a slow database
// cannot keep the job running on an expired lease.
func WithRenewTimeout(d time.Duration) KeeperOption {
	return func(c *keeperConfig) { c.renewTimeout = d }
}

// WithMetrics makes the Keeper count its renewals and losses in m.
func WithMetrics(m *Metrics) KeeperOption {
	return func(c *keeperConfig) { c.metrics = m }
}

// Keeper renews a lease in the background for as long as a job runs, and
// cancels the job's context on the first failed renewal. Create it with
// Store.Keep.
type Keeper struct {
	store     *Store
	ttl       time.Duration
	cfg       keeperConfig
	cancelJob context.CancelCauseFunc
	runCancel context.CancelFunc
	done      chan struct{}

	mu    sync.Mutex
	lease Lease
	err   error
}

// Keep starts a Keeper for l, which the caller holds. It returns the context
// the job must run under and the Keeper. The Keeper renews l for ttl once at
// once (which also checks that l is still held before the job starts) and
// then every interval (ttl/3 by default), each renewal bounded by a timeout.
// On the first renewal that fails — the lease lost (ErrLost), an error, a
// timeout — it cancels the job context with a cause wrapping that error
// (context.Cause(jobCtx)) and stops: a job that cannot prove it still holds
// its lease must stop writing (its fenced writes would fail anyway).
// Canceling ctx stops the Keeper and the job too (not as a failure).
//
// Invalid arguments are reported the same way: the job context is returned
// already canceled and Err returns the error.
//
// Stop the Keeper when the job ends, then Release the lease it returns.
func (s *Store) Keep(ctx context.Context, l Lease, ttl time.Duration, opts ...KeeperOption) (context.Context, *Keeper) {
	cfg := keeperConfig{fraction: DefaultKeepFraction}
	for _, o := range opts {
		o(&cfg)
	}
	jobCtx, cancelJob := context.WithCancelCause(ctx)
	runCtx, runCancel := context.WithCancel(ctx)
	k := &Keeper{store: s, ttl: ttl, cfg: cfg, cancelJob: cancelJob, runCancel: runCancel,
		done: make(chan struct{}), lease: l}
	if err := k.configure(); err != nil {
		k.err = err
		cancelJob(err)
		runCancel()
		close(k.done)
		return jobCtx, k
	}
	if m := k.cfg.metrics; m != nil {
		m.active.Inc()
	}
	go k.run(runCtx)
	return jobCtx, k
}

func (k *Keeper) configure() error {
	if err := ValidateTTL(k.ttl); err != nil {
		return err
	}
	if k.cfg.interval == 0 {
		if !(k.cfg.fraction > 0 && k.cfg.fraction < 1) {
			return invalidf("keeper fraction %v is not in (0, 1)", k.cfg.fraction)
		}
		k.cfg.interval = time.Duration(float64(k.ttl) * k.cfg.fraction)
	}
	if k.cfg.interval <= 0 || k.cfg.interval >= k.ttl {
		return invalidf("keeper interval %v must be in (0, ttl %v)", k.cfg.interval, k.ttl)
	}
	if k.cfg.renewTimeout == 0 {
		k.cfg.renewTimeout = k.cfg.interval
	}
	if k.cfg.renewTimeout < 0 {
		return invalidf("keeper renew timeout %v is negative", k.cfg.renewTimeout)
	}
	return nil
}

func (k *Keeper) run(ctx context.Context) {
	defer close(k.done)
	if m := k.cfg.metrics; m != nil {
		defer m.active.Dec()
	}
	var confirmed time.Time // send time of the last successful renewal
	next := time.Now()
	for {
		if wait := time.Until(next); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		} else if ctx.Err() != nil {
			return
		}
		sent := time.Now()
		deadline := sent.Add(k.cfg.renewTimeout)
		if !confirmed.IsZero() {
			if d := confirmed.Add(k.ttl); d.Before(deadline) {
				deadline = d
			}
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		nl, err := k.store.Renew(rctx, k.Lease(), k.ttl)
		cancel()
		if ctx.Err() != nil {
			// Stopped or parent canceled: not a renewal failure, whatever
			// the interrupted renewal returned.
			return
		}
		k.observe(time.Since(sent), err)
		if err != nil {
			k.fail(err)
			return
		}
		k.mu.Lock()
		k.lease = nl
		k.mu.Unlock()
		confirmed = sent
		next = sent.Add(k.cfg.interval)
	}
}

func (k *Keeper) observe(d time.Duration, err error) {
	m := k.cfg.metrics
	if m == nil {
		return
	}
	m.duration.Observe(d.Seconds())
	switch {
	case err == nil:
		m.renewals.WithLabelValues("ok").Inc()
	case errors.Is(err, ErrLost):
		m.renewals.WithLabelValues("lost").Inc()
	default:
		m.renewals.WithLabelValues("error").Inc()
	}
}

func (k *Keeper) fail(err error) {
	k.mu.Lock()
	k.err = err
	name := k.lease.Name
	k.mu.Unlock()
	if m := k.cfg.metrics; m != nil {
		m.lost.Inc()
	}
	k.cancelJob(fmt.Errorf("lease %q: renewal failed, job canceled: %w", name, err))
	k.runCancel()
}

// Lease returns the lease as last renewed (its Until moves with each
// renewal; owner and token never change).
func (k *Keeper) Lease() Lease {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lease
}

// Err returns the renewal failure that stopped the Keeper (wrapping ErrLost
// if the lease was lost), or nil.
func (k *Keeper) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// Done is closed when the Keeper has stopped renewing.
func (k *Keeper) Done() <-chan struct{} { return k.done }

// Stop stops renewing, waits for an in-flight renewal to end, cancels the job
// context (cause ErrStopped, unless a failure canceled it first) and returns
// the last renewed lease and Err. It does not release the lease: call
// Store.Release with the returned lease (a renewal interrupted by Stop may
// have extended the lease without the Keeper seeing it; owner and token are
// what Release checks, so this does not matter). Stop may be called more
// than once.
func (k *Keeper) Stop() (Lease, error) {
	k.runCancel()
	<-k.done
	k.cancelJob(ErrStopped)
	return k.Lease(), k.Err()
}
