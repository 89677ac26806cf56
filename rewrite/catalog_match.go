package rewrite

// pairMatcher is matcher for the catalog's names, which may be hundreds:
// trying every needle that starts with a statement's byte (what matcher
// does) would cost microseconds per statement. A bit per folded two-byte
// prefix rules out nearly every position first; only where some needle
// starts with that pair are its needles compared. Folding is matcher's
// (foldAt, matchFoldAt): the same text matches the same needles.
type pairMatcher struct {
	any    bool
	start  [256]bool // bytes that may begin a needle (either case, fold lead bytes)
	single [256]bool // one-byte needles
	pairs  [256 * 256 / 64]uint64
	// triples: a bit per hash of the first three folded bytes of needles
	// that long, so that many names sharing two letters ("order_items",
	// "order_lines") are not all compared where only the two match.
	triples [1 << 16 / 64]uint64
	byPair  map[uint16][][]byte
}

func tripleHash(a, b, c byte) uint16 {
	return uint16(a)*31*31 + uint16(b)*31 + uint16(c)
}

func newPairMatcher(words []string) *pairMatcher {
	m := &pairMatcher{byPair: map[uint16][][]byte{}}
	seen := map[string]bool{}
	for _, w := range words {
		w = foldName(w)
		if w == "" || seen[w] {
			continue
		}
		seen[w] = true
		m.any = true
		m.start[w[0]] = true
		if c := w[0]; c >= 'a' && c <= 'z' {
			m.start[c-'a'+'A'] = true
		}
		switch w[0] {
		case 'i':
			m.start[0xC4], m.start[0xDD], m.start[0xFD] = true, true, true
		case 's':
			m.start[0xC5] = true
		case 'k':
			m.start[0xE2] = true
		}
		if len(w) == 1 {
			m.single[w[0]] = true
			continue
		}
		k := uint16(w[0])<<8 | uint16(w[1])
		m.pairs[k/64] |= 1 << (k % 64)
		if len(w) == 2 {
			// A two-byte needle matches whatever follows: every triple.
			for c := 0; c < 256; c++ {
				h := tripleHash(w[0], w[1], byte(c))
				m.triples[h/64] |= 1 << (h % 64)
			}
		} else {
			h := tripleHash(w[0], w[1], w[2])
			m.triples[h/64] |= 1 << (h % 64)
		}
		m.byPair[k] = append(m.byPair[k], []byte(w))
	}
	return m
}

// fold1 is foldAt's letter for text[i], with the ASCII case inline.
func fold1(text []byte, i int) (byte, int) {
	if c := text[i]; c < 0x80 {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		return c, 1
	}
	return foldAt(text, i)
}

// find reports whether any needle occurs in text.
func (m *pairMatcher) find(text []byte) bool {
	if m == nil || !m.any {
		return false
	}
	// Every byte may start a name, a multibyte character's later bytes
	// too, as matcher tries them.
	for i := 0; i < len(text); i++ {
		if !m.start[text[i]] {
			continue
		}
		c1, n1 := fold1(text, i)
		if m.single[c1] {
			return true
		}
		j := i + n1
		if j >= len(text) {
			continue
		}
		c2, n2 := fold1(text, j)
		k := uint16(c1)<<8 | uint16(c2)
		if m.pairs[k/64]&(1<<(k%64)) == 0 {
			continue
		}
		var c3 byte
		if j+n2 < len(text) {
			c3, _ = fold1(text, j+n2)
		}
		h := tripleHash(c1, c2, c3)
		if j+n2 < len(text) && m.triples[h/64]&(1<<(h%64)) == 0 {
			continue
		}
		for _, n := range m.byPair[k] {
			if matchFoldAt(text, i, n) {
				return true
			}
		}
	}
	return false
}
