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
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Reason)
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
