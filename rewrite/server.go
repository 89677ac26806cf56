package rewrite

import (
	"strings"
	"unicode/utf8"

	"github.com/pingcap/tidb/pkg/parser"
)

// ParseServerVersion reads the server's handshake version string:
//
//	"5.5.5-10.11.19-MariaDB-0+deb12u1" -> {MariaDB, 101119} (MariaDB 10+ prefixes "5.5.5-")
//	"11.4.2-MariaDB"                   -> {MariaDB, 110402}
//	"8.0.36"                           -> {MySQL, 80036}
//	"8.0.11-TiDB-v8.4.0"               -> {TiDB, 80400} (TiDB's own version)
//
// An unreadable version gives Version 0: versioned comments are then
// treated as uncertain.
func ParseServerVersion(v string) Server {
	switch {
	case strings.Contains(v, "-TiDB-"):
		i := strings.Index(v, "-TiDB-")
		rest := strings.TrimPrefix(v[i+len("-TiDB-"):], "v")
		return Server{Flavor: TiDB, Version: versionNumber(rest)}
	case strings.Contains(strings.ToLower(v), "mariadb"):
		v = strings.TrimPrefix(v, "5.5.5-")
		return Server{Flavor: MariaDB, Version: versionNumber(v)}
	}
	return Server{Flavor: MySQL, Version: versionNumber(v)}
}

// versionNumber reads "X.Y.Z..." as X*10000 + Y*100 + Z.
func versionNumber(s string) uint32 {
	var parts [3]uint32
	k := 0
	digits := false
	for i := 0; i < len(s) && k < 3; i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			parts[k] = parts[k]*10 + uint32(c-'0')
			digits = true
			if parts[k] > 99 && k > 0 || parts[k] > 999 {
				return 0
			}
		case c == '.' && digits:
			k++
			digits = false
		default:
			if k < 2 || !digits {
				return 0
			}
			k = 3
		}
	}
	if k < 2 || k == 2 && !digits {
		return 0
	}
	return parts[0]*10000 + parts[1]*100 + parts[2]
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
