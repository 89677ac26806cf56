package policy

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// UnmarshalText reads a Go duration string ("5s", "1m30s", "0s"), with
// whole days in front allowed ("30d", "1d12h"). It is what YAML (and JSON)
// decoders use; a bare YAML number is refused, since "idle: 30" could mean
// seconds or nanoseconds.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"5s\", \"1m30s\", \"30d\" or \"0s\"", b)
	}
	*d = Duration(v)
	return nil
}

// ParseDuration is time.ParseDuration with an optional leading count of
// days ("30d", "1d12h"): retention periods are written in days.
func ParseDuration(s string) (time.Duration, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || i == len(s) || s[i] != 'd' {
		return time.ParseDuration(s)
	}
	days, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil || days > math.MaxInt64/int64(24*time.Hour) {
		return 0, fmt.Errorf("duration %q: too many days", s)
	}
	v := time.Duration(days) * 24 * time.Hour
	if rest := s[i+1:]; rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil || r < 0 || r > math.MaxInt64-v {
			return 0, fmt.Errorf("duration %q: bad part after the days", s)
		}
		v += r
	}
	return v, nil
}

// MarshalText writes d as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d Duration) String() string { return time.Duration(d).String() }
