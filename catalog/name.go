package catalog

import "unicode/utf8"

// SameName reports whether the server may take the names a and b for the
// same object. Measured on MariaDB 10.11: routine names compare
// accent-insensitively (mysql.proc.name is utf8mb3_general_ci: SELECT
// bÜmp() calls the function bump, a combining accent makes another name),
// and under lower_case_table_names=1 table names are lower-cased with
// Unicode rules. Rather than carry the collation's tables, two letters
// match when both are the same ASCII letter in any case, or when either is
// not ASCII (a byte that is not UTF-8 counts as one letter): a false match
// only fences or refuses more.
func SameName(a, b string) bool {
	for len(a) > 0 && len(b) > 0 {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		a, b = a[na:], b[nb:]
		if ra >= utf8.RuneSelf || rb >= utf8.RuneSelf {
			continue
		}
		if lowerByte(byte(ra)) != lowerByte(byte(rb)) {
			return false
		}
	}
	return len(a) == 0 && len(b) == 0
}

func lowerByte(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
