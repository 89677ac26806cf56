package main

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// termSafe is how the CLI prints every value that comes from a database,
// an audit record, a connection or a config: control characters (C0, DEL,
// C1), Unicode format characters (bidirectional overrides that reorder
// what follows), line and paragraph separators, invalid UTF-8, and the
// backslash itself are written as Go-style escapes, so that a value shows
// as one piece of text on one line and can neither move the cursor, clear
// the screen, end a table row, nor pose as another value. Printable text
// (including non-ASCII letters) is left alone, so that the common case
// costs one scan and no allocation.
func termSafe(s string) string {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if needsEscape(r, n) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case !needsEscape(r, n):
			b.WriteString(s[i : i+n])
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xFFFF:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += n
	}
	return b.String()
}

// needsEscape: the rune r (n bytes of the input) is not shown as itself.
// The space is; every other space character (no-break, ideographic, ...)
// is escaped, as unicode.IsPrint has it, so that two values never look
// alike when they differ.
func needsEscape(r rune, n int) bool {
	if r < utf8.RuneSelf {
		return r < 0x20 || r == 0x7f || r == '\\'
	}
	if r == utf8.RuneError && n <= 1 {
		return true
	}
	return !unicode.IsPrint(r)
}

// termSafeLines is termSafe for a message of several lines (a config's
// errors, one a line): each line is escaped, the line breaks kept.
func termSafeLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = termSafe(l)
	}
	return strings.Join(lines, "\n")
}
