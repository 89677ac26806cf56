package policy

import (
	"errors"
	"fmt"
	"sort"
)

// Error is one problem in a config file, at the key or value it is about.
// Load and Parse return all of a file's Errors at once, joined with
// errors.Join in file order; Errors splits them again.
type Error struct {
	File   string
	Line   int // 1-based
	Column int // 1-based
	Reason string
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %s", e.File, e.Reason) // a config assembled in code, or a key it lacks
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Reason)
}

// ErrorAt is a problem about the key at path ("backend.password_file",
// "tables[2].name") found after the file was parsed (a file that does not
// open, a table the backend does not have): at the key's value if the file
// has it, else at the nearest enclosing key that it has, else with no
// position. The reason is prefixed with the key, as for the file's own
// problems.
func (c *Config) ErrorAt(path, reason string) *Error {
	e := &Error{File: c.Path, Reason: path + ": " + reason}
	if c.dec != nil {
		if tk := c.dec.pos(path); tk != nil && tk.Position != nil {
			e.Line, e.Column = tk.Position.Line, tk.Position.Column
		}
	}
	return e
}

// Reported tells whether the file's own checks already reported a problem
// at the key at path or at a key enclosing it (only for a config from
// Check that had problems): later checks skip such a key rather than say
// the same thing twice about a value that is not what the file meant.
func (c *Config) Reported(path string) bool {
	return c.dec != nil && c.dec.reported(path)
}

// SortErrors orders problems by their position in the file (those without
// one first); other errors keep their place after them.
func SortErrors(errs []error) []error {
	var pos []*Error
	var other []error
	for _, err := range errs {
		var e *Error
		if errors.As(err, &e) {
			pos = append(pos, e)
		} else {
			other = append(other, err)
		}
	}
	sort.SliceStable(pos, func(i, j int) bool {
		if pos[i].Line != pos[j].Line {
			return pos[i].Line < pos[j].Line
		}
		return pos[i].Column < pos[j].Column
	})
	out := make([]error, 0, len(errs))
	for _, e := range pos {
		out = append(out, e)
	}
	return append(out, other...)
}

// Errors returns the *Error values inside err (as returned by Load or
// Parse), or nil.
func Errors(err error) []*Error {
	var list []error
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		list = joined.Unwrap()
	} else if err != nil {
		list = []error{err}
	}
	var out []*Error
	for _, x := range list {
		var e *Error
		if errors.As(x, &e) {
			out = append(out, e)
		}
	}
	return out
}

// joinSorted joins errs in file order (stable for equal positions).
func joinSorted(errs []*Error) error {
	if len(errs) == 0 {
		return nil
	}
	sort.SliceStable(errs, func(i, j int) bool {
		if errs[i].Line != errs[j].Line {
			return errs[i].Line < errs[j].Line
		}
		return errs[i].Column < errs[j].Column
	})
	list := make([]error, len(errs))
	for i, e := range errs {
		list[i] = e
	}
	return errors.Join(list...)
}

// Sets reports whether the file itself sets the key at path (a key left
// out has its default, which may mean something else than the same value
// written down: fenceproxy init removes guard triggers only for an explicit
// database_guard: off).
func (c *Config) Sets(path string) bool {
	return c.dec != nil && c.dec.has(path)
}
