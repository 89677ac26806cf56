package audit

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/policy"
)

// Reasons lists every reason, in the contract's order, then those added
// since: a filter must be able to select every record the proxy writes.
var Reasons = []string{StaleToken, Expired, OwnerMismatch, NoFence, LeaseMissing, Refused, Conflict, RowLeaseMismatch}

// Filter selects audit records; zero fields select everything. The admin
// endpoint's /audit and `fenceproxy audit` take the same filters.
type Filter struct {
	Since, Until time.Time // Since <= time < Until
	Lease        string    // exact lease name
	// Table is schema.table, or a bare table name matching it in any
	// schema; ASCII case is ignored, as the proxy matches protected tables.
	Table  string
	Reason string
}

// Check reports a filter that can match nothing by mistake.
func (f Filter) Check() error {
	if f.Reason != "" && !slices.Contains(Reasons, f.Reason) {
		return fmt.Errorf("reason %q is not one of %s", f.Reason, strings.Join(Reasons, ", "))
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return fmt.Errorf("until (%s) is not after since (%s)", f.Until.UTC().Format(time.RFC3339), f.Since.UTC().Format(time.RFC3339))
	}
	return nil
}

// Match reports whether r passes the filter.
func (f Filter) Match(r Record) bool {
	switch {
	case !f.Since.IsZero() && r.Time.Before(f.Since):
		return false
	case !f.Until.IsZero() && !r.Time.Before(f.Until):
		return false
	case f.Lease != "" && r.Lease != f.Lease:
		return false
	case f.Reason != "" && r.Reason != f.Reason:
		return false
	case f.Table != "" && !tableMatches(r.Table, f.Table):
		return false
	}
	return true
}

func tableMatches(recorded, want string) bool {
	if !strings.Contains(want, ".") {
		if i := strings.LastIndexByte(recorded, '.'); i >= 0 {
			recorded = recorded[i+1:]
		}
	}
	return strings.EqualFold(recorded, want)
}

// ParseTime reads a filter bound: a duration before now ("12h", "30m",
// "7d"), an RFC 3339 time, or a UTC date and time ("2026-11-30 22:00",
// "2026-11-30 22:00:05", "2026-11-30").
func ParseTime(s string, now time.Time) (time.Time, error) {
	if d, err := policy.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%q: a duration before now must not be negative", s)
		}
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999", "2006-01-02 15:04", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is neither a duration before now (12h, 7d) nor a time (2026-11-30T22:00:00Z, \"2026-11-30 22:00\" UTC, 2026-11-30)", s)
}
