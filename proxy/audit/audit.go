// Package audit records rejected stale writes and refused statements: one
// JSON object a line in a file, and the most recent records in memory for
// the admin endpoint.
//
// A record never holds a secret: the presented owner token is reduced to a
// short hash, and statements appear only as digests (literals replaced by ?).
package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"
)

// Reasons (contract).
const (
	StaleToken    = "stale_token"
	Expired       = "expired"
	OwnerMismatch = "owner_mismatch"
	NoFence       = "no_fence"
	LeaseMissing  = "lease_missing"
	Refused       = "refused"
	// Conflict: the engine rolled back the transaction of a fenced write
	// because the lease row changed after it began (TiDB error 9007; on
	// Galera 1213: certification ordered a takeover or another write of
	// the lease first). The write did not commit; the client gets the
	// engine's own error.
	Conflict = "conflict"
	// DatabaseGuard: a guard trigger (fencing.database_guard: triggers)
	// refused the write inside the database; the client got its error.
	DatabaseGuard = "database_guard"
	// RowLeaseMismatch: a write to a table whose lease is a template over
	// its columns would change rows of another lease than the session's.
	RowLeaseMismatch = "row_lease_mismatch"
)

// Record is one audit record. The first fields are the contract of
// DESIGN.md; later ones were added compatibly.
type Record struct {
	Time           time.Time `json:"time"`
	Reason         string    `json:"reason"`
	Mode           string    `json:"mode"`
	Lease          string    `json:"lease"`
	Table          string    `json:"table"`
	PresentedOwner string    `json:"presented_owner"` // short SHA-256 prefix of the owner token, "" if none
	PresentedToken *uint64   `json:"presented_token"`
	CurrentToken   *uint64   `json:"current_token"`
	Client         string    `json:"client"`
	User           string    `json:"user"`
	Schema         string    `json:"schema"`
	Digest         string    `json:"digest"`

	// Outcome is what the client saw: zero_rows, error, refused, or shadow
	// (relayed unchanged in shadow mode).
	Outcome string `json:"outcome"`
	// Detail explains a refusal.
	Detail string `json:"detail,omitempty"`

	// Where the statement came from, for an operator matching records of
	// several proxies with app logs: the proxy (instance_id), its
	// connection id (as in its log and /connections), the backend's
	// CONNECTION_ID() that the client sees, the client's host, and the
	// program_name connection attribute the client sent, if any.
	Instance      string `json:"instance,omitempty"`
	ConnID        uint64 `json:"conn_id,omitempty"`
	BackendConnID uint32 `json:"backend_conn_id,omitempty"`
	ClientHost    string `json:"client_host,omitempty"`
	Program       string `json:"program_name,omitempty"`
}

// File is where and how the audit file is written.
type File struct {
	Path string // "" = no file (memory only)
	// MaxSizeMB rotates the file when a write would take it past this many
	// megabytes (MiB); 0 = never (an external logrotate moves it, then SIGHUP).
	MaxSizeMB int
	// MaxBackups is how many rotated files are kept next to it, named
	// NAME-<UTC time>.EXT; older ones are deleted.
	MaxBackups int
}

// Log appends records to a file (optional) and keeps the last few in memory.
type Log struct {
	table atomic.Pointer[Table] // also queued for the audit table, if set

	mu     sync.Mutex
	file   File
	w      io.WriteCloser // nil: memory only
	recent []Record
	next   int
	full   bool
}

// Open starts a log writing to f (f.Path "" = memory only), keeping the last
// keep records for Recent.
func Open(f File, keep int) (*Log, error) {
	l := &Log{recent: make([]Record, max(keep, 1))}
	if err := l.Reopen(f); err != nil {
		return nil, err
	}
	return l, nil
}

// Reopen closes the file and continues with f: the same settings after an
// external rotation moved the file away (the next record creates it anew),
// or new ones after a reload.
func (l *Log) Reopen(f File) error {
	var plain *os.File
	if f.Path != "" {
		// Opened here, not lazily by the first record, so that an
		// unwritable path fails the start or the reload that names it.
		of, err := os.OpenFile(f.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return fmt.Errorf("audit file: %w", err)
		}
		plain = of
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.w
	switch {
	case f.Path == "":
		l.w = nil
	case f.MaxSizeMB == 0:
		l.w = plain
	default:
		plain.Close()
		if lj, ok := old.(*lumberjack.Logger); ok && l.file == f {
			// A new lumberjack.Logger starts a goroutine that outlives
			// it: keep this one, closed, so that its next write opens
			// the file at f.Path again.
			old = nil
			lj.Close()
		} else {
			// lumberjack appends with O_APPEND too, but it counts the
			// bytes it wrote itself: with rotation, each proxy needs a
			// file of its own.
			l.w = &lumberjack.Logger{Filename: f.Path, MaxSize: f.MaxSizeMB, MaxBackups: f.MaxBackups}
		}
	}
	l.file = f
	if old != nil {
		return old.Close()
	}
	return nil
}

// SetTable makes every record written from now on also go to t (nil:
// none). t's queue never blocks Write.
func (l *Log) SetTable(t *Table) { l.table.Store(t) }

// Write records r. The record is kept in memory (and queued for the audit
// table) even if the file write fails; the error is returned for the caller
// to count and log.
func (l *Log) Write(r Record) error {
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	if t := l.table.Load(); t != nil {
		t.Enqueue(r)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recent[l.next] = r
	l.next = (l.next + 1) % len(l.recent)
	if l.next == 0 {
		l.full = true
	}
	if l.w == nil {
		return nil
	}
	// One write call per line with O_APPEND keeps lines whole even when
	// several processes share an unrotated file.
	_, err = l.w.Write(line)
	return err
}

// Recent returns up to n of the latest records, oldest first.
func (l *Log) Recent(n int) []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var all []Record
	if l.full {
		all = append(all, l.recent[l.next:]...)
	}
	all = append(all, l.recent[:l.next]...)
	if n > 0 && len(all) > n {
		all = all[len(all)-n:]
	}
	return all
}

// Close closes the file.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w == nil {
		return nil
	}
	err := l.w.Close()
	l.w = nil
	return err
}
