package rewrite

import (
	"crypto/sha256"
	"encoding/hex"
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
//
// The digester (the TiDB parser's) has a lexer of its own, which reads
// backslashes and quotes by its defaults, not by the session's sql_mode:
// under NO_BACKSLASH_ESCAPES, 'x\', b = 'secret' gave it a string, then
// the word secret. So the literals are found with the one tokenizer first,
// under every reading the session's sql_mode allows (Digest: any), and
// every byte inside a literal under any of them reaches the digester as an
// empty string.
func Digest(sql string) string { return DigestFor(sql, Server{Flavor: MariaDB}, nil) }

// DigestFor is Digest of a statement of a session on srv: the sql_mode
// flags the session knows decide the readings.
func DigestFor(sql string, srv Server, sess *Session) string {
	var s Session
	if sess != nil {
		s = *sess
	}
	src := []byte(DigestInput([]byte(sql)))
	d := digestReadings(src, srv, readings(s.ANSIQuotes, src, '"'), readings(s.NoBackslashEscapes, src, '\\'))
	if hasFenceKey(src) && (s.UnsafeCharset || s.ASCIIRemap || hasFenceKey([]byte(d))) {
		return fenceKeyDigest(src)
	}
	return d
}

// fenceKeyDigest stands for the digest of a text that mentions a fence key
// (a statement's fence comment) where the digest cannot be trusted to have
// dropped the comment: a client character set that may hide quotes (under
// SET NAMES gbk the owner's words reached the digest of a refused
// statement), or a fence key left in the digest itself (a comment the
// digester did not read as one). The owner may be anywhere in the text, so
// only a hash of it is kept. A column named like a fence key
// (fence_token) gives such a digest too.
func fenceKeyDigest(src []byte) string {
	sum := sha256.Sum256(src)
	return "/* a statement with a fence key, sha256:" + hex.EncodeToString(sum[:8]) + " */"
}

func digestReadings(src []byte, srv Server, ansi, nbe []bool) string {
	cut := len(src) > maxDigestBytes
	if cut {
		n := maxDigestBytes
		for n > 0 && !utf8.RuneStart(src[n]) {
			n--
		}
		src = src[:n]
	}
	d := parser.Normalize(maskLiterals(src, srv, ansi, nbe), "ON")
	if cut {
		d += " …"
	}
	return d
}

// maskLiterals returns src with every byte that is inside a string, hex or
// bit literal under any of the readings replaced by an empty string
// literal (a run of them by one; a national string keeps its N), and every
// comment blanked as the server skips it under any of them.
func maskLiterals(src []byte, srv Server, ansi, nbe []bool) string {
	const lit, skipped, national = 1, 2, 4
	marks := make([]byte, len(src))
	norm := make([]byte, len(src))
	for _, a := range ansi {
		for _, b := range nbe {
			copy(norm, src)
			lx := newLexer(src, lexMode{ansiQuotes: a, noBackslash: b, server: srv}, norm)
			for {
				t, ok := lx.Next()
				if !ok {
					break
				}
				switch t.Kind {
				case sqlread.NString:
					marks[t.Start] |= national
					fallthrough
				case sqlread.String, sqlread.HexString, sqlread.BitString:
					for i := t.Start; i < t.End; i++ {
						marks[i] |= lit
					}
				}
			}
			for i := range norm {
				if norm[i] != src[i] {
					marks[i] |= skipped
				}
			}
		}
	}
	out := make([]byte, 0, len(src))
	for i := 0; i < len(src); i++ {
		switch {
		case marks[i]&lit != 0:
			if marks[i]&national != 0 {
				out = append(out, 'N') // the digest keeps N'...' apart
			}
			for i+1 < len(src) && marks[i+1]&lit != 0 {
				i++
			}
			out = append(out, "''"...)
		case marks[i]&skipped != 0:
			out = append(out, ' ')
		default:
			out = append(out, src[i])
		}
	}
	return string(out)
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

// digest is the statement's Digest, read as the statement is.
func (in *stmtIn) digest() string {
	src := in.pc.src[in.start:in.end]
	if len(src) > maxDigestBytes+utf8.UTFMax {
		src = src[:maxDigestBytes+utf8.UTFMax]
	}
	return digestReadings(src, in.st.mode.server, []bool{in.st.mode.ansiQuotes}, []bool{in.st.mode.noBackslash})
}

// maxDigestBytes is the longest text Digest reads whole: the shape cache's
// longest statement (maxCachedLen), so that its digests are never cut.
const maxDigestBytes = maxCachedLen
