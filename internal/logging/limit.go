package logging

import (
	"log/slog"
	"sort"
	"sync"
	"time"
)

// Defaults of a Limiter: five lines per key every ten seconds. A storm of
// stale writers wrote 2,600 lines in 2 s unlimited; limited, one key
// writes at most 5 lines and a summary line per 10 s.
const (
	DefaultBurst    = 5
	DefaultInterval = 10 * time.Second
	maxLimiterKeys  = 1000
)

// Key is what a Limiter counts lines by: the event (the log message), a
// reason, and the table or user it concerns.
type Key struct {
	Event, Reason, Table, User string
}

// Count is how many lines of one key a Limiter held back.
type Count struct {
	Key
	Suppressed int
}

// Limiter lets at most Burst lines of each key through per Interval and
// counts the rest; Run writes a summary line with those counts once per
// Interval. It bounds the lines of events a client can repeat at will
// (rejected writes, refused statements, failed logins); the audit trail
// keeps every record whatever the log shows.
type Limiter struct {
	Burst    int
	Interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	keys map[Key]*window
}

type window struct {
	start      time.Time
	n          int // lines let through in this window
	suppressed int // held back since the last Flush
}

// NewLimiter returns a limiter with burst lines per interval (0: the
// defaults).
func NewLimiter(burst int, interval time.Duration) *Limiter {
	if burst <= 0 {
		burst = DefaultBurst
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Limiter{Burst: burst, Interval: interval, now: time.Now, keys: map[Key]*window{}}
}

// Allow tells whether a line of key k may be written now, and counts it as
// suppressed if not. Past maxLimiterKeys distinct keys, new ones share one
// key per event with Reason "_other".
func (l *Limiter) Allow(k Key) bool {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.keys[k]
	if !ok {
		if len(l.keys) >= maxLimiterKeys {
			k = Key{Event: k.Event, Reason: "_other"}
			w, ok = l.keys[k]
		}
		if !ok {
			w = &window{start: now}
			l.keys[k] = w
		}
	}
	if now.Sub(w.start) >= l.Interval {
		w.start, w.n = now, 0
	}
	if w.n < l.Burst {
		w.n++
		return true
	}
	w.suppressed++
	return false
}

// Flush returns the lines held back since the last Flush, by key (sorted),
// and forgets keys whose window has ended with nothing held back.
func (l *Limiter) Flush() []Count {
	now := l.now()
	l.mu.Lock()
	var out []Count
	for k, w := range l.keys {
		if w.suppressed > 0 {
			out = append(out, Count{Key: k, Suppressed: w.suppressed})
			w.suppressed = 0
		} else if now.Sub(w.start) >= l.Interval {
			delete(l.keys, k)
		}
	}
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Key, out[j].Key
		if a.Event != b.Event {
			return a.Event < b.Event
		}
		if a.Reason != b.Reason {
			return a.Reason < b.Reason
		}
		if a.Table != b.Table {
			return a.Table < b.Table
		}
		return a.User < b.User
	})
	return out
}

// Summarize writes one line per key with lines held back since the last
// call.
func (l *Limiter) Summarize(logger *slog.Logger) {
	for _, c := range l.Flush() {
		args := []any{"event", c.Event, "reason", c.Reason}
		if c.Table != "" {
			args = append(args, "table", c.Table)
		}
		if c.User != "" {
			args = append(args, "user", c.User)
		}
		args = append(args, "suppressed", c.Suppressed, "interval", l.Interval)
		logger.Warn("log lines suppressed", args...)
	}
}

// Run writes the summary every Interval until stop is closed, and once
// more then.
func (l *Limiter) Run(logger *slog.Logger, stop <-chan struct{}) {
	t := time.NewTicker(l.Interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			l.Summarize(logger)
		case <-stop:
			l.Summarize(logger)
			return
		}
	}
}
