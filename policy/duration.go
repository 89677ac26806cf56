package policy

import (
	"fmt"
	"time"
)

// UnmarshalText reads a Go duration string ("5s", "1m30s", "0s"). It is
// what YAML (and JSON) decoders use; a bare YAML number is refused, since
// "idle: 30" could mean seconds or nanoseconds.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"5s\", \"1m30s\" or \"0s\"", b)
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes d as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d Duration) String() string { return time.Duration(d).String() }
