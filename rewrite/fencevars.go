package rewrite

import (
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
)

// The fence reads the session's fence variables while the write runs. A
// write that assigns one of them itself (`@fence_token := (SELECT
// fence_token FROM fenced_job_leases ...)` in its WHERE, evaluated before
// the fence) would check the lease against values it just read from the
// lease row: it would pass with a stale fence. So a protected write may not
// assign a fence variable; setting them in a statement of their own (SET,
// SELECT ... INTO, fence_acquire) is how the contract works.
//
// Measured on MariaDB 10.11: user variable names compare ASCII
// case-insensitively (@FENCE_TOKEN is @fence_token) and the quoted forms
// @'x', @"x", @`x` name the same variable, with backslash escapes applied
// (@'fence_t\oken' is @fence_token); a trailing space, an accent or a
// Kelvin sign makes another name; "@ x" is a syntax error. A variable is
// assigned by `:=` (in any expression, whatever the spacing or comments
// before it) and by SELECT ... INTO @x; SET STATEMENT takes only system
// variables, and SELECT ... INTO is a syntax error inside a subquery.

// assignsFenceVar reports whether the statement assigns a fence variable
// (or a user variable fenceproxy cannot tell from one), and says which.
func (in *stmtIn) assignsFenceVar() (string, bool) {
	for i := range in.toks {
		switch {
		case in.op(i, ":="):
			if i == 0 {
				return unclear, true
			}
			switch in.toks[i-1].Kind {
			case sqlread.UserVar:
				if name, fence := in.fenceVarAt(i - 1); fence {
					return name, true
				}
			case sqlread.Word, sqlread.QuotedIdent:
				// A column: UPDATE t SET c := 1, INSERT ... SET c := 1.
			default:
				return unclear, true
			}
		case in.kw(i, "into"):
			for j := i + 1; j < len(in.toks); j++ {
				if in.op(j, ",") {
					continue
				}
				if in.toks[j].Kind != sqlread.UserVar {
					break
				}
				if name, fence := in.fenceVarAt(j); fence {
					return name, true
				}
			}
		}
	}
	return "", false
}

// fenceVarAt reads the user variable token i: its name as the server
// reads it, and whether it is (or may be) a fence variable.
func (in *stmtIn) fenceVarAt(i int) (string, bool) {
	b := in.text(i)[1:] // without the '@'
	var name string
	switch {
	case len(b) == 0:
		return unclear, true
	case b[0] == '\'':
		name = sqlread.UnquoteString(b, in.st.mode.noBackslash)
	case b[0] == '"' && !in.st.mode.ansiQuotes:
		name = sqlread.UnquoteString(b, in.st.mode.noBackslash)
	case b[0] == '"', b[0] == '`':
		name = sqlread.UnquoteIdent(b)
	default:
		name = string(b)
	}
	for k := 0; k < len(name); k++ {
		if name[k] >= 0x80 {
			return "a user variable whose name is not ASCII", true
		}
	}
	v := in.pc.e.pol.Vars
	for _, f := range []string{v.Lease, v.Owner, v.Token} {
		if f != "" && strings.EqualFold(name, f) {
			return "the fence variable @" + f, true
		}
	}
	return "", false
}

const unclear = "a variable fenceproxy cannot tell from a fence variable"
