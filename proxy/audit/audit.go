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
	"os"
	"sync"
	"time"
)

// Reasons (contract).
const (
	StaleToken    = "stale_token"
	Expired       = "expired"
	OwnerMismatch = "owner_mismatch"
	NoFence       = "no_fence"
	LeaseMissing  = "lease_missing"
	Refused       = "refused"
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
}

// Log appends records to a file (optional) and keeps the last few in memory.
type Log struct {
	mu     sync.Mutex
	path   string
	f      *os.File
	recent []Record
	next   int
	full   bool
}

// Open starts a log writing to path ("" = memory only), keeping the last
// keep records for Recent.
func Open(path string, keep int) (*Log, error) {
	l := &Log{path: path, recent: make([]Record, max(keep, 1))}
	if path != "" {
		if err := l.Reopen(); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// Reopen reopens the file (after log rotation moved it away).
func (l *Log) Reopen() error {
	if l.path == "" {
		return nil
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("audit file: %w", err)
	}
	l.mu.Lock()
	old := l.f
	l.f = f
	l.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return nil
}

// Write records r. The record is kept in memory even if the file write
// fails; the error is returned for the caller to count and log.
func (l *Log) Write(r Record) error {
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recent[l.next] = r
	l.next = (l.next + 1) % len(l.recent)
	if l.next == 0 {
		l.full = true
	}
	if l.f == nil {
		return nil
	}
	// One write call per line with O_APPEND keeps lines whole even when
	// several processes share the file.
	_, err = l.f.Write(line)
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
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
