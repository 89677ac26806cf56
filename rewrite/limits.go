package rewrite

import (
	"strconv"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
)

// Limits on what the slow path reads, checked before anything is kept per
// token and before the parser runs. Checking a statement costs memory per
// byte, token and open parenthesis of it: the TiDB parser builds a value
// stack entry for each open construct and an AST node for each token, and
// the statement is read twice (decided, then verified), its string
// literals copied each time. Measured through the proxy: 1 M nested
// parentheses (2 MB) took 960 MB, so without limits one statement under
// limits.max_query_bytes could take the process past its memory and every
// client with it. Statements the fast path relays (they name nothing
// protected) are never counted.
//
//   - limits.max_parse_bytes: the length of a packet the slow path reads
//     (a PREPARE / EXECUTE IMMEDIATE literal is shorter than its packet).
//   - limits.max_parse_tokens: the live tokens (words, literals,
//     operators; comments and dead executable comments are none) of the
//     packet's statements together, every reading of an unknown sql_mode
//     counted again. The text inside a PREPARE / EXECUTE IMMEDIATE literal
//     is a packet of its own with a budget of its own (at most maxNesting
//     deep).
//   - limits.max_parse_nesting: how deep one statement's parentheses nest.
//     MariaDB 10.11 (measured, default thread_stack 292 KiB) refuses more
//     than 31,991 redundant parentheses ("memory exhausted", 1064, 42000),
//     593 nested functions or operators (1436 "Thread stack overrun",
//     HY000) and 63 nested subqueries (1473, HY000).
//
// Past a limit the packet is refused while any table is protected: the
// proxy cannot check it, and a statement it cannot read is refused unless
// it provably cannot touch a protected table. With nothing protected it is
// relayed unread.

// maxForks bounds the nested readings of a packet whose statements set
// sql_mode to values the proxy cannot read (packetCtx.fork).
const maxForks = 2

// overLimit counts a statement of count tokens whose parentheses nest
// depth deep against the packet's limits; nil if it is within them.
func (pc *packetCtx) overLimit(count, depth int) *Refusal {
	pc.tokens += count
	if depth > pc.e.maxNesting {
		return pc.e.nestingRefusal(depth)
	}
	if pc.tokens > pc.e.maxTokens {
		return pc.e.tokensRefusal()
	}
	return nil
}

// wholeOverLimit counts, before a compound statement or stored program
// definition is lexed whole (to the end of the packet: the block structure
// says where it ends), the tokens past its first ';' and the nesting of all
// of it against the packet's limits. Past one it is refused, or with
// nothing protected relayed unread to the end of the packet.
func (in *stmtIn) wholeOverLimit() (stmtRes, bool) {
	count, depth := sqlread.ScanRest(in.pc.src, in.start, in.st.mode.lex())
	r := in.pc.overLimit(count-len(in.toks), depth)
	if r == nil {
		return stmtRes{}, false
	}
	if !in.pc.e.mustRead() {
		return stmtRes{stmt: Stmt{Kind: Call}, endAt: len(in.pc.src)}, true
	}
	return stmtRes{refusal: r}, true
}

func (e *Engine) bytesRefusal(n int) *Refusal {
	return &Refusal{Reason: "this query is " + strconv.Itoa(n) + " bytes long, longer than limits.max_parse_bytes (" +
		strconv.Itoa(e.maxBytes) + ") for a query fenceproxy must parse, so it cannot check it; " +
		"send large values as parameters of a prepared statement (the binary protocol: fenceproxy does not parse " +
		"them), split the query, or raise limits.max_parse_bytes (checking costs up to about 15 bytes of memory per byte)"}
}

func (e *Engine) tokensRefusal() *Refusal {
	return &Refusal{Reason: "this query has more than limits.max_parse_tokens (" + strconv.Itoa(e.maxTokens) +
		") tokens (words, literals, operators) in statements fenceproxy must parse, so it cannot check them; " +
		"split it (fewer rows per INSERT, shorter IN lists, fewer statements per query), or raise " +
		"limits.max_parse_tokens (checking costs up to about 1 KiB of memory per token)"}
}

func (e *Engine) nestingRefusal(depth int) *Refusal {
	return &Refusal{Reason: "a statement of this query nests parentheses " + strconv.Itoa(depth) + " deep, deeper than " +
		"limits.max_parse_nesting (" + strconv.Itoa(e.maxNesting) + "), so fenceproxy cannot check it " +
		"(MariaDB itself refuses expressions nested about 600 deep, error 1436, and subqueries 64 deep, 1473); " +
		"remove redundant parentheses, or raise limits.max_parse_nesting"}
}
