package rewrite

import (
	"encoding/binary"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
)

// nameSet holds the catalog's names for the fast path, which checks the
// identifiers the lexer reads (it lexes every statement anyway) instead of
// searching the raw text for each of possibly hundreds of names: a look-up
// by first letter and length per identifier, and a hash and a probe for the
// few that pass, whatever the catalog's size. Comments and
// strings hold no names the server resolves, and the lexer is the one the
// fast path already trusts with statement boundaries.
//
// Folding: ASCII case only. An identifier with a byte >= 0x80 never takes
// the fast path while the set is not empty: the server compares routine
// names accent-insensitively (mysql.proc.name is utf8mb3_general_ci:
// measured on MariaDB 10.11, SELECT bÜmp() calls bump), and table names
// under lower_case_table_names=1 with Unicode lower-casing; the slow path
// compares such names rune by rune (catalog.SameName). Catalog names with
// such bytes are kept apart (wild) and compared the same way.
type nameSet struct {
	any   bool
	mask  uint64
	slots []nameSlot
	wild  []string // names with a byte >= 0x80
	// byFirst[c]: bit n set when some name starts with the ASCII letter c
	// (folded) and is n bytes long (n < 64; bit 63 stands for every
	// longer name): most identifiers are rejected before they are hashed.
	byFirst [256]uint64
}

type nameSlot struct {
	hash uint64
	name string // "" = empty slot
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func lenBit(n int) uint64 {
	if n > 63 {
		n = 63
	}
	return 1 << uint(n)
}

func newNameSet(words []string) *nameSet {
	s := &nameSet{}
	seen := map[string]bool{}
	var ascii []string
	for _, w := range words {
		w = lowerASCII(w)
		if w == "" || seen[w] {
			continue
		}
		seen[w] = true
		s.any = true
		if !isASCII(w) {
			s.wild = append(s.wild, w)
			continue
		}
		ascii = append(ascii, w)
		s.byFirst[w[0]] |= lenBit(len(w))
	}
	n := 8
	for n < 2*len(ascii) {
		n *= 2
	}
	s.slots = make([]nameSlot, n)
	s.mask = uint64(n - 1)
	for _, w := range ascii {
		h := uint64(fnvOffset)
		for i := 0; i < len(w); i++ {
			h = (h ^ uint64(w[i])) * fnvPrime
		}
		for i := h & s.mask; ; i = (i + 1) & s.mask {
			if s.slots[i].name == "" {
				s.slots[i] = nameSlot{h, w}
				break
			}
		}
	}
	return s
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// identMatters reports whether the identifier token t of sql may name one
// of the set's names, or cannot be judged here (a byte >= 0x80). high: sql
// has a byte >= 0x80 somewhere (hasHigh); without one, no identifier needs
// to be searched for such bytes.
func (s *nameSet) identMatters(sql []byte, t sqlread.Token, high bool) bool {
	b := sql[t.Start:t.End]
	var q byte
	if t.Kind == sqlread.QuotedIdent {
		if len(b) < 2 {
			return true
		}
		q, b = b[0], b[1:len(b)-1]
	}
	if len(b) == 0 {
		return false
	}
	if high || len(s.wild) > 0 {
		for _, c := range b {
			if c >= 0x80 {
				return true
			}
		}
	}
	// The name's length: a doubled quote is one byte of it.
	n := len(b)
	if q != 0 {
		for i := 0; i+1 < len(b); i++ {
			if b[i] == q {
				n--
				i++
			}
		}
	}
	c0 := b[0]
	if c0 >= 'A' && c0 <= 'Z' {
		c0 += 'a' - 'A'
	}
	if s.byFirst[c0]&lenBit(n) != 0 {
		h := uint64(fnvOffset)
		for i := 0; i < len(b); i++ {
			c := b[i]
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			if q != 0 && c == q && i+1 < len(b) {
				i++
			}
			h = (h ^ uint64(c)) * fnvPrime
		}
		for i := h & s.mask; ; i = (i + 1) & s.mask {
			sl := &s.slots[i]
			if sl.name == "" {
				break
			}
			if sl.hash == h && identEq(b, q, sl.name) {
				return true
			}
		}
	}
	for _, w := range s.wild {
		if wildEq(b, q, w) {
			return true
		}
	}
	return false
}

// hasHigh reports whether text has a byte >= 0x80, 32 bytes at a time.
func hasHigh(text []byte) bool {
	for len(text) >= 32 {
		a := binary.LittleEndian.Uint64(text) | binary.LittleEndian.Uint64(text[8:]) |
			binary.LittleEndian.Uint64(text[16:]) | binary.LittleEndian.Uint64(text[24:])
		if a&0x8080808080808080 != 0 {
			return true
		}
		text = text[32:]
	}
	for len(text) >= 8 {
		if binary.LittleEndian.Uint64(text)&0x8080808080808080 != 0 {
			return true
		}
		text = text[8:]
	}
	for _, c := range text {
		if c >= 0x80 {
			return true
		}
	}
	return false
}

// identEq compares an identifier's bytes (quote q doubled inside, or 0)
// with a lower-case ASCII name.
func identEq(b []byte, q byte, name string) bool {
	k := 0
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if q != 0 && c == q && i+1 < len(b) {
			i++
		}
		if k >= len(name) || name[k] != c {
			return false
		}
		k++
	}
	return k == len(name)
}

// wildEq compares an ASCII identifier (quote q doubled inside, or 0) with
// a name that has non-ASCII letters the way catalog.SameName does: letter
// by letter, a non-ASCII letter of the name standing for any letter.
func wildEq(b []byte, q byte, name string) bool {
	k := 0
	for _, r := range name {
		if k >= len(b) {
			return false
		}
		c := b[k]
		if q != 0 && c == q && k+1 < len(b) {
			k++
		}
		k++
		if r >= 0x80 {
			continue
		}
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if byte(r) != c {
			return false
		}
	}
	return k == len(b)
}
