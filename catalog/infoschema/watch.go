package infoschema

import (
	"context"
	"database/sql"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/catalog"
)

// State is what a Watcher knows of the catalog.
type State struct {
	// Snapshot is the last snapshot read in full; nil until one is.
	Snapshot *catalog.Snapshot
	// Err is the last refresh's error, nil when Snapshot is current. While
	// it is set, writes to objects Snapshot did not classify are to be
	// refused: they may have been created since.
	Err error
	// Checked: when the catalog was last found current (zero if never).
	Checked time.Time
}

// fullReload bounds how long a change that the digest misses (a CRC32
// collision) can go unseen.
const fullReload = 5 * time.Minute

// Watcher keeps a catalog fresh: a digest every interval, a full Load when
// it changed (or after fullReload), and at once after Poke.
type Watcher struct {
	db       *sql.DB
	every    time.Duration
	onChange func(State)
	log      *slog.Logger
	poke     chan struct{}

	// refreshing: one refresh at a time (Run's and RefreshSince's), so a
	// caller can wait for one that began after its moment.
	refreshing sync.Mutex
	// OnCheck, when set before Run, is called after every refresh that
	// completed (changed or not), from the refreshing goroutine.
	OnCheck func()

	mu        sync.Mutex
	lastBegan time.Time // when the last completed refresh began
	state     State
	digest    string
	loadedAt  time.Time
	checks    uint64 // completed refreshes, successful or not
	loads     uint64 // snapshots read in full
	cond      *sync.Cond

	beforeLoad func() // tests: runs between the digest and Load
}

// NewWatcher returns a Watcher over db (the catalog account's pool).
// onChange is called, from the Watcher's goroutine, with every state whose
// snapshot or error differs from the previous one.
func NewWatcher(db *sql.DB, every time.Duration, onChange func(State), log *slog.Logger) *Watcher {
	if log == nil {
		log = slog.Default()
	}
	w := &Watcher{db: db, every: every, onChange: onChange, log: log, poke: make(chan struct{}, 1)}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// State returns the current state.
func (w *Watcher) State() State {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state
}

// Poke asks for a refresh now (after DDL passed through the proxy). It
// never blocks.
func (w *Watcher) Poke() {
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

// Checks returns the number of refreshes completed so far.
func (w *Watcher) Checks() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.checks
}

// WaitChecks blocks until more than n refreshes have completed or ctx ends.
func (w *Watcher) WaitChecks(ctx context.Context, n uint64) error {
	stop := context.AfterFunc(ctx, func() {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.checks <= n {
		if err := ctx.Err(); err != nil {
			return err
		}
		w.cond.Wait()
	}
	return nil
}

// Run refreshes at once, then every interval and on Poke, until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		w.Refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.poke:
		}
	}
}

// RefreshSince makes sure a refresh that began after t has completed:
// it returns at once if one has, else waits for the one running and runs
// one more if need be. ctx bounds the wait. It reports whether a refresh
// that began after t completed without error: false when ctx ended first
// or the refresh failed, and then nothing may be concluded from the
// current state about the moment t (an object it does not have may exist).
func (w *Watcher) RefreshSince(ctx context.Context, t time.Time) bool {
	locked := make(chan struct{})
	go func() {
		w.refreshing.Lock()
		close(locked)
	}()
	select {
	case <-locked:
	case <-ctx.Done():
		go func() { <-locked; w.refreshing.Unlock() }()
		return false
	}
	defer w.refreshing.Unlock()
	if w.readSince(t) {
		return true
	}
	w.refresh(ctx)
	return w.readSince(t)
}

// readSince reports whether the last refresh that completed without error
// began after t.
func (w *Watcher) readSince(t time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastBegan.After(t)
}

// Refresh checks the catalog once and reloads it if it changed.
func (w *Watcher) Refresh(ctx context.Context) {
	w.refreshing.Lock()
	defer w.refreshing.Unlock()
	w.refresh(ctx)
}

func (w *Watcher) refresh(ctx context.Context) {
	began := time.Now()
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, counts, err := digest(qctx, w.db)
	var snap *catalog.Snapshot
	w.mu.Lock()
	same := err == nil && d == w.digest && w.state.Snapshot != nil && time.Since(w.loadedAt) < fullReload
	w.mu.Unlock()
	if err == nil && !same {
		if w.beforeLoad != nil {
			w.beforeLoad()
		}
		snap, err = Load(qctx, w.db)
		if err == nil && !counts.covers(snap) {
			// Not the catalog the digest saw: a later digest equal to this
			// one must not pass for this snapshot.
			d = ""
		}
	}
	if ctx.Err() != nil {
		return // stopping: not a failure of the catalog
	}
	w.mu.Lock()
	prev := w.state
	now := time.Now()
	switch {
	case err != nil:
		w.state.Err = err
	case same:
		w.state.Err = nil
		w.state.Checked = now
	default:
		if prev.Snapshot != nil && reflect.DeepEqual(prev.Snapshot, snap) {
			snap = prev.Snapshot // the periodic full reload found nothing new
		}
		w.state = State{Snapshot: snap, Checked: now}
		w.digest, w.loadedAt = d, now
		w.loads++
	}
	next := w.state
	if err == nil {
		w.lastBegan = began
	}
	w.checks++
	w.cond.Broadcast()
	w.mu.Unlock()

	if err != nil && (prev.Err == nil || prev.Err.Error() != err.Error()) {
		w.log.Warn("catalog refresh failed: writes to objects the last good catalog did not classify are refused", "err", err)
	} else if err == nil && prev.Err != nil {
		w.log.Info("catalog readable again")
	}
	changed := next.Snapshot != prev.Snapshot || (next.Err == nil) != (prev.Err == nil)
	if changed && w.onChange != nil {
		w.onChange(next)
	}
	if w.OnCheck != nil {
		w.OnCheck()
	}
}
