package rewrite

// Raw, case-insensitive search for words anywhere in a statement's bytes
// (comments and strings included): the cheap first filter of the fast path,
// and the "does it mention a protected table" test for statements the
// parser cannot read.
//
// The comparison folds ASCII case and also the few non-ASCII characters
// that a server may fold onto ASCII letters when it compares table names
// case-insensitively (lower_case_table_names=1 or 2): U+0130 and U+0131
// (dotted and dotless I), U+017F (long s), U+212A (Kelvin sign), and the
// Latin-5 bytes 0xDD / 0xFD (I with dot, dotless i) when they stand alone.
// A false match only costs a parse; a missed one could let a write through.

// matcher finds any of a fixed set of lower-case ASCII needles.
type matcher struct {
	any bool
	// byFirst[c]: the needles that may start at a byte c: their first letter
	// in either case, and the lead bytes of the non-ASCII characters that
	// fold to it. Most bytes of a statement start no needle at all, and the
	// others are tried only against the needles they can begin.
	byFirst [256][][]byte
}

func newMatcher(words []string) matcher {
	var m matcher
	seen := map[string]bool{}
	for _, w := range words {
		w = lowerASCII(w)
		if w == "" || seen[w] {
			continue
		}
		seen[w] = true
		m.any = true
		n := []byte(w)
		starts := []byte{w[0]}
		c := w[0]
		if c >= 'a' && c <= 'z' {
			starts = append(starts, c-'a'+'A')
		}
		switch c {
		case 'i':
			starts = append(starts, 0xC4, 0xDD, 0xFD)
		case 's':
			starts = append(starts, 0xC5)
		case 'k':
			starts = append(starts, 0xE2)
		}
		for _, b := range starts {
			m.byFirst[b] = append(m.byFirst[b], n)
		}
	}
	return m
}

// find reports whether any needle occurs in text.
func (m *matcher) find(text []byte) bool {
	if !m.any {
		return false
	}
	for i := 0; i < len(text); i++ {
		ns := m.byFirst[text[i]]
		if len(ns) == 0 {
			continue
		}
		// Needle letters are common letters: rule most out by the next
		// byte when both are ASCII (a one-byte letter, folded in place).
		next := byte(0x80)
		if text[i] < 0x80 && i+1 < len(text) {
			next = text[i+1]
			if next >= 'A' && next <= 'Z' {
				next += 'a' - 'A'
			}
		}
		for _, n := range ns {
			if next < 0x80 && len(n) > 1 && n[1] != next {
				continue
			}
			if matchFoldAt(text, i, n) {
				return true
			}
		}
	}
	return false
}

// containsFold reports whether needle (lower-case ASCII) occurs in text.
func containsFold(text []byte, needle string) bool {
	if needle == "" {
		return false
	}
	for i := 0; i < len(text); i++ {
		if matchFoldAt(text, i, needle) {
			return true
		}
	}
	return false
}

// foldAt returns the ASCII letter the character at text[i] may fold to,
// and its length in bytes.
func foldAt(text []byte, i int) (byte, int) {
	c := text[i]
	if c < 0x80 {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		return c, 1
	}
	next := func(k int) byte {
		if i+k < len(text) {
			return text[i+k]
		}
		return 0
	}
	switch c {
	case 0xC4: // U+0130 İ, U+0131 ı
		if n := next(1); n == 0xB0 || n == 0xB1 {
			return 'i', 2
		}
	case 0xC5: // U+017F ſ
		if next(1) == 0xBF {
			return 's', 2
		}
	case 0xE2: // U+212A Kelvin sign
		if next(1) == 0x84 && next(2) == 0xAA {
			return 'k', 3
		}
	case 0xDD, 0xFD: // Latin-5 İ / ı, when not a UTF-8 lead byte
		if n := next(1); n < 0x80 || n > 0xBF {
			return 'i', 1
		}
	}
	return c, 1
}

func matchFoldAt[S ~string | ~[]byte](text []byte, i int, needle S) bool {
	for k := 0; k < len(needle); k++ {
		if i >= len(text) {
			return false
		}
		c, n := foldAt(text, i)
		if c != needle[k] {
			return false
		}
		i += n
	}
	return true
}

func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// foldName returns name with the non-ASCII characters above folded onto
// ASCII, lower-cased, for policy lookups of names read from the parser.
func foldName(name string) string {
	ascii := true
	for i := 0; i < len(name); i++ {
		if name[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		return lowerASCII(name)
	}
	b := []byte(name)
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		c, n := foldAt(b, i)
		if n == 1 && c >= 0x80 {
			out = append(out, b[i])
		} else {
			out = append(out, c)
		}
		i += n
	}
	return string(out)
}

// eqFold compares a token's bytes with a lower-case ASCII keyword.
func eqFold(b []byte, kw string) bool {
	if len(b) != len(kw) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != kw[i] {
			return false
		}
	}
	return true
}
