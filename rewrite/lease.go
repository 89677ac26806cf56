package rewrite

import (
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
)

// The SQL lease functions are answered by the proxy, so they may only
// appear in the one shape the proxy can answer on its own:
//
//	SELECT fence_acquire('name', ttl) [[AS] alias]
//	SELECT fence_renew(ttl) | fence_release() | fence_status()
//
// alone in their query. Any other mention as a function call is refused:
// the server does not know these functions, and a statement that combines
// them with anything else cannot be answered.

var leaseFuncs = [...]struct {
	name  string
	f     LeaseFunc
	args  string // one letter per argument: s = string, n = number
	usage string
}{
	{"fence_acquire", FenceAcquire, "sn", "SELECT fence_acquire('lease name', ttl_seconds)"},
	{"fence_renew", FenceRenew, "n", "SELECT fence_renew(ttl_seconds)"},
	{"fence_release", FenceRelease, "", "SELECT fence_release()"},
	{"fence_status", FenceStatus, "", "SELECT fence_status()"},
}

// leaseMention returns the index of the first token that calls a lease
// function (its name followed by '('), or -1.
func (in *stmtIn) leaseMention() int {
	for i, t := range in.toks {
		if t.Kind != sqlread.Word || !in.op(i+1, "(") {
			continue
		}
		if leaseFuncIndex(in.pc.src[t.Start:t.End]) >= 0 {
			return i
		}
	}
	return -1
}

func leaseFuncIndex(w []byte) int {
	if len(w) < 11 || len(w) > 13 {
		return -1
	}
	for k, f := range leaseFuncs {
		if eqFold(w, f.name) {
			return k
		}
	}
	return -1
}

// leaseCall checks the exact shape and reads the call.
func (in *stmtIn) leaseCall(i int) stmtRes {
	k := leaseFuncIndex(in.text(i))
	f := leaseFuncs[k]
	bad := in.refuse("", "call "+f.name+" alone, as "+f.usage+" (optionally AS alias), one statement per query")
	if i != 1 || !in.kw(0, "select") || in.toks[i].AfterDot {
		return bad
	}
	closeIdx := in.closeParen(i + 1)
	if closeIdx < 0 {
		return bad
	}
	// Arguments: single literals or placeholders, separated by commas.
	var args []Arg
	j := i + 2
	for j < closeIdx {
		a, next, ok := in.leaseArg(j, closeIdx)
		if !ok {
			return bad
		}
		args = append(args, a)
		j = next
		if j < closeIdx {
			if !in.op(j, ",") {
				return bad
			}
			j++
			if j == closeIdx {
				return bad
			}
		}
	}
	if len(args) != len(f.args) {
		return bad
	}
	for n, a := range args {
		if a.Null || a.Placeholder {
			continue
		}
		if (f.args[n] == 's') != !a.IsNumber {
			return bad
		}
	}
	call := &LeaseCall{Func: f.f, Args: args, Column: in.columnText(i, closeIdx)}
	// Optional alias.
	j = closeIdx + 1
	if in.kw(j, "as") {
		j++
		if j >= len(in.toks) {
			return bad
		}
	}
	if j < len(in.toks) {
		t := in.toks[j]
		switch t.Kind {
		case sqlread.Word:
			call.Column = string(in.text(j))
		case sqlread.QuotedIdent:
			call.Column = sqlread.UnquoteIdent(in.text(j))
		case sqlread.String:
			call.Column = sqlread.UnquoteString(in.text(j), in.st.mode.noBackslash)
		default:
			return bad
		}
		if j+1 != len(in.toks) {
			return bad
		}
	}
	return stmtRes{call: call, stmt: Stmt{Kind: Other}}
}

// leaseArg reads one argument at token j.
func (in *stmtIn) leaseArg(j, limit int) (Arg, int, bool) {
	t := in.toks[j]
	switch t.Kind {
	case sqlread.Param:
		if !in.pc.prepare {
			return Arg{}, 0, false
		}
		return Arg{Placeholder: true}, j + 1, true
	case sqlread.String:
		var b strings.Builder
		for j < limit && in.toks[j].Kind == sqlread.String {
			b.WriteString(sqlread.UnquoteString(in.text(j), in.st.mode.noBackslash))
			j++
		}
		return Arg{String: b.String()}, j, true
	case sqlread.Number:
		return Arg{String: string(in.text(j)), IsNumber: true}, j + 1, true
	case sqlread.Word:
		if eqFold(in.text(j), "null") {
			return Arg{Null: true}, j + 1, true
		}
	case sqlread.Op:
		if (in.op(j, "-") || in.op(j, "+")) && j+1 < limit && in.toks[j+1].Kind == sqlread.Number {
			return Arg{String: string(in.text(j)) + string(in.text(j+1)), IsNumber: true}, j + 2, true
		}
	}
	return Arg{}, 0, false
}

// columnText is the name the server gives an unaliased expression column:
// its text as written, with comments removed; a removed comment leaves one
// space unless a space is already next to it.
func (in *stmtIn) columnText(from, to int) string {
	src := in.pc.src
	var b strings.Builder
	for k := from; k <= to; k++ {
		t := in.toks[k]
		if k > from {
			writeGap(&b, src[in.toks[k-1].End:t.Start])
		}
		b.Write(src[t.Start:t.End])
	}
	return b.String()
}

// writeGap copies the bytes between two tokens without their comments.
func writeGap(b *strings.Builder, gap []byte) {
	lastSpace := func() bool {
		s := b.String()
		return len(s) > 0 && sqlread.IsSpace(s[len(s)-1])
	}
	for p := 0; p < len(gap); {
		var end int
		switch {
		case gap[p] == '/' && p+1 < len(gap) && gap[p+1] == '*':
			end = p + 2
			for end+1 < len(gap) && !(gap[end] == '*' && gap[end+1] == '/') {
				end++
			}
			end += 2
		case gap[p] == '*' && p+1 < len(gap) && gap[p+1] == '/':
			end = p + 2
		case gap[p] == '#' || gap[p] == '-' && p+1 < len(gap) && gap[p+1] == '-':
			end = p
			for end < len(gap) && gap[end] != '\n' {
				end++
			}
		default:
			b.WriteByte(gap[p])
			p++
			continue
		}
		if end > len(gap) {
			end = len(gap)
		}
		if !lastSpace() && !(end < len(gap) && sqlread.IsSpace(gap[end])) {
			b.WriteByte(' ')
		}
		p = end
	}
}
