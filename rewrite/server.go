package rewrite

import (
	"unicode/utf8"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
	"github.com/pingcap/tidb/pkg/parser"
)

// ParseServerVersion reads the server's handshake version string (see
// sqlread.ParseVersion).
func ParseServerVersion(v string) Server {
	f, n := sqlread.ParseVersion(v)
	return Server{Flavor: f, Version: n}
}

// Digest returns the statement with every literal replaced by '?', for
// audit records: never the literals themselves. Of a text longer than
// maxDigestBytes only the first maxDigestBytes are digested, and " …"
// marks the cut: the digester's memory grows with the text (measured: a
// 10 MB statement took it 840 MB), and a longer digest helps nobody who
// reads an audit record. A literal the cut leaves unterminated is dropped,
// not copied.
func Digest(sql string) string {
	if len(sql) <= maxDigestBytes {
		return parser.Normalize(sql, "ON")
	}
	cut := maxDigestBytes
	for cut > 0 && !utf8.RuneStart(sql[cut]) {
		cut--
	}
	return parser.Normalize(sql[:cut], "ON") + " …"
}

// DigestInput is as much of text as Digest reads, as a string: a refused
// statement may be as long as limits.max_query_bytes, its digest's input
// is not.
func DigestInput(text []byte) string {
	if len(text) > maxDigestBytes {
		text = text[:min(len(text), maxDigestBytes+utf8.UTFMax)]
	}
	return string(text)
}

// digest is the statement's Digest, from its normalized text, of which no
// more is copied than Digest reads.
func (in *stmtIn) digest() string { return Digest(DigestInput(in.norm[in.start:in.end])) }

// maxDigestBytes is the longest text Digest reads whole: the shape cache's
// longest statement (maxCachedLen), so that its digests are never cut.
const maxDigestBytes = maxCachedLen
