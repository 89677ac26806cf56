package rewrite

import (
	"sort"
	"strings"
	"unicode/utf8"
)

// SQL-level prepared statement names. The server keeps them in a hash
// whose keys compare with utf8mb3_general_ci after a length check
// (sql_prepare.cc, mysys hash.c: equal byte length, then my_strnncoll):
// measured on MariaDB 10.11, `é` and `è` name the same statement, and so
// do `Ü` and `ü`, `Σ` and `ς`; `é` and `e`, `ß` and `s` or `ss`, `a` and
// `a ` do not (their byte lengths differ). A name is converted to utf8mb3
// from the client character set first, and one outside the BMP is an
// error. StmtName folds a name to a key that is equal for two names
// exactly when the server takes them for the same statement.

// StmtName returns the key of a prepared statement name as the client
// sent it (unquoted). utf8: the client character set is utf8mb3 or
// utf8mb4; a name with bytes >= 0x80 has no key otherwise (ok false), nor
// one that is not valid UTF-8 or has a character outside the BMP.
func StmtName(name string, utf8Client bool) (key string, ok bool) {
	ascii := true
	for i := 0; i < len(name); i++ {
		if name[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		// general_ci on ASCII folds case only, and lengths are equal
		// exactly when the names' are.
		return lowerASCII(name), true
	}
	if !utf8Client || !utf8.ValidString(name) {
		return "", false
	}
	var b strings.Builder
	// 0xff never occurs in ASCII or UTF-8: no ASCII name has this key.
	b.WriteByte(0xff)
	b.WriteString(itoa(len(name)))
	b.WriteByte(':')
	for _, r := range name {
		if r > 0xffff {
			return "", false
		}
		w := generalCIWeight(uint16(r))
		b.WriteByte(byte(w >> 8))
		b.WriteByte(byte(w))
	}
	return b.String(), true
}

// generalCIWeight is a BMP character's utf8mb3_general_ci weight.
func generalCIWeight(c uint16) uint16 {
	i := sort.Search(len(generalCI), func(i int) bool { return generalCI[i][0] >= c })
	if i < len(generalCI) && generalCI[i][0] == c {
		return generalCI[i][1]
	}
	return c
}
