package rewrite

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/fenceproxy/fenceproxy/lease"
)

// A statement with its own fence comment is decided through a cache of its
// own (Engine.stmtCache) without any cache holding its values. The packet's
// three fence values are replaced, byte for byte, by placeholders of the
// same shape (every plain byte a 'Q', every %XX escape %51, 'Q'; a token's
// bytes '1' and %31): the probe text. The probe text is decided by the full
// path and that decision is kept under the probe text; the decision of the
// packet is the probe's with the placeholder fence values in the sent text
// replaced by the packet's own and Fence.Presented set to them. Two
// packets that differ only in their fence values share one entry; neither
// one's values are in it.
//
// Why the probe's decision is the packet's: the two texts differ only in
// the bytes of the three values, each of them only letters, digits and
// - . _ ~ : % (probeText takes no other packet), which no reading of the
// text treats differently from another such byte (none ends a comment or
// a string, escapes, quotes, or is a trail byte, a '"' or '\\' that makes
// a lexing flag matter); the values are checked here exactly as the full
// path checks them (urlDecode, parseFenceToken, ValidateName,
// ValidateOwner), and the placeholders decode to values of the same
// lengths, so both pass or neither; every mention of a fence key in the
// packet (any case, as a name too) is one of the three keys, so the
// comment holding them is the one the full path reads. What remains is
// where the decision uses the values: Fence.Presented, and the fence's
// text (lease.WriteFence: the lease as a hex literal, the owner's SHA-256,
// the token), which is replaced. A decision that could use them otherwise
// is not kept: anything but one protected write sent with the comment's
// fence, a table whose lease is a template over its columns (the rows'
// leases are compared with the comment's), placeholder forms in the text
// other than the fence's own. TestStmtFenceCacheMatchesFullPath compares
// the two over the statement fence tests' statements and random values.

// stmtProbe is a packet's fence values found in its text.
type stmtProbe struct {
	probe     []byte          // the text with placeholder values
	real      lease.Presented // the packet's values, decoded
	presented lease.Presented // the placeholders', decoded
}

// inertValueByte: a byte of a fence value that means nothing to any
// reading of the text but the comment's.
func inertValueByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~' || c == ':' || c == '%'
}

// probeText finds the packet's fence values and builds its probe text; ok
// is false when the packet is not of the form the cache takes.
func probeText(sql []byte) (p stmtProbe, ok bool) {
	// Every mention of a fence key, in any case, is one of the three
	// keys' key=' in lower case, in order, each once.
	var at [3]int
	n := 0
	for i := 0; i+len("fence_lease") <= len(sql); i++ {
		if sql[i]|0x20 != 'f' {
			continue
		}
		k := fenceKeyAt(sql, i)
		if k < 0 {
			continue
		}
		if n >= 3 || k != n {
			return p, false
		}
		key := stmtFenceKeys[k]
		j := i + len(key)
		if string(sql[i:j]) != key || j+1 >= len(sql) || sql[j] != '=' || sql[j+1] != '\'' {
			return p, false
		}
		at[n] = j + 2
		n++
	}
	if n != 3 {
		return p, false
	}
	p.probe = append([]byte(nil), sql...)
	var raw, dec [3]string
	for k, v := range at {
		e := bytes.IndexByte(sql[v:], '\'')
		if e < 0 {
			return p, false
		}
		raw[k] = string(sql[v : v+e])
		for i := 0; i < e; i++ {
			c := sql[v+i]
			if !inertValueByte(c) {
				return p, false
			}
			fill := byte('Q')
			if k == 2 {
				fill = '1'
			}
			if c == '%' {
				if i+2 >= e {
					return p, false
				}
				hi := byte('5')
				if k == 2 {
					hi = '3'
				}
				p.probe[v+i], p.probe[v+i+1], p.probe[v+i+2] = '%', hi, '1'
				i += 2
				continue
			}
			p.probe[v+i] = fill
		}
		d, why := urlDecode(raw[k])
		if why != "" {
			return p, false
		}
		dec[k] = d
	}
	tok, why := parseFenceToken(dec[2])
	if why != "" {
		return p, false
	}
	p.real = lease.Presented{Lease: dec[0], Owner: dec[1], Token: tok}
	if lease.ValidateName(p.real.Lease) != nil || lease.ValidateOwner(p.real.Owner) != nil {
		return p, false
	}
	// The placeholders, decoded.
	for k, v := range at {
		e := bytes.IndexByte(p.probe[v:], '\'')
		d, why := urlDecode(string(p.probe[v : v+e]))
		if why != "" {
			return p, false
		}
		dec[k] = d
	}
	ptok, why := parseFenceToken(dec[2])
	if why != "" {
		return p, false
	}
	p.presented = lease.Presented{Lease: dec[0], Owner: dec[1], Token: ptok}
	if lease.ValidateName(p.presented.Lease) != nil || lease.ValidateOwner(p.presented.Owner) != nil {
		return p, false
	}
	return p, true
}

// fenceValueTexts are the forms the values take in a fence's text
// (lease.WriteFence): the lease's literal, the owner's digest, the token.
func fenceValueTexts(p lease.Presented) [3][]byte {
	sum := sha256.Sum256([]byte(p.Owner))
	return [3][]byte{
		[]byte("_utf8mb4 X'" + hex.EncodeToString([]byte(p.Lease)) + "' COLLATE utf8mb4_bin"),
		[]byte("X'" + hex.EncodeToString(sum[:]) + "'"),
		[]byte("fence_l.fence_token = " + strconv.FormatUint(p.Token, 10) + " AND fence_l.leased_until"),
	}
}

// keepable reports whether d, the probe text's decision, is one the cache
// may keep (see above).
func keepable(d *Decision, pr *stmtProbe) bool {
	if d.Action != Send || d.Refusal != nil || d.Call != nil || d.ChangesSchema || len(d.Stmts) != 1 {
		return false
	}
	st := &d.Stmts[0]
	if st.Kind != Write || st.Fence == nil || st.Fence.Presented == nil || *st.Fence.Presented != pr.presented ||
		st.Prepared != nil {
		return false
	}
	for _, t := range st.Fence.Targets {
		if t.Template != nil || t.RowLease != "" || t.RowParams != nil {
			return false
		}
	}
	// The placeholder values' forms occur in the sent text only in the
	// fence: not in the client's text, not in the stripped text, not as
	// their plain bytes.
	for _, v := range fenceValueTexts(pr.presented) {
		if bytes.Contains(pr.probe, v) || bytes.Contains(d.Stripped, v) {
			return false
		}
	}
	// The placeholders' plain forms never reach the sent text or the
	// digest.
	lit := [2]string{pr.presented.Lease, pr.presented.Owner}
	for _, v := range lit {
		if bytes.Contains(d.SQL, []byte(v)) || bytes.Contains(d.Stripped, []byte(v)) || bytes.Contains([]byte(st.Fence.Digest), []byte(v)) {
			return false
		}
	}
	return true
}

// stmtFenceCached decides a packet with its own fence comment through the
// statement fence cache; ok is false when the packet is not one it takes
// (the caller takes the full path).
func (e *Engine) stmtFenceCached(sql []byte, srv Server, s Session) (Decision, bool) {
	if e.stmtCache == nil {
		return Decision{}, false
	}
	pr, ok := probeText(sql)
	if !ok {
		return Decision{}, false
	}
	ctx := ctxOf(srv, &s, false)
	ctx.absent = e.absentGen()
	cd, hit := e.stmtCache.get(pr.probe, &ctx)
	if !hit {
		d := e.slow(pr.probe, srv, s, false, nil)
		if !keepable(&d, &pr) {
			return Decision{}, false
		}
		kept := d
		cd = &kept
		e.stmtCache.put(pr.probe, &ctx, cd)
	}
	return instantiate(cd, &pr), true
}

// instantiate is the probe's decision d with the packet's values. The
// statement's Span is in the sent text's coordinates: it moves with the
// values' lengths.
func instantiate(d *Decision, pr *stmtProbe) Decision {
	out := *d
	from, to := fenceValueTexts(pr.presented), fenceValueTexts(pr.real)
	src := d.SQL
	sql := make([]byte, 0, len(src)+64)
	out.Stmts = append([]Stmt(nil), d.Stmts...)
	span := &out.Stmts[0].Span
	old := d.Stmts[0].Span
	for i := 0; ; {
		k, at := -1, len(src)
		for j := range from {
			if p := bytes.Index(src[i:], from[j]); p >= 0 && i+p < at {
				k, at = j, i+p
			}
		}
		if k < 0 {
			sql = append(sql, src[i:]...)
			break
		}
		end := at + len(from[k])
		delta := len(to[k]) - len(from[k])
		if old[0] >= end {
			span[0] += delta
		}
		if old[1] >= end {
			span[1] += delta
		}
		sql = append(sql, src[i:at]...)
		sql = append(sql, to[k]...)
		i = end
	}
	out.SQL = sql
	f := *d.Stmts[0].Fence
	real := pr.real
	f.Presented = &real
	out.Stmts[0].Fence = &f
	return out
}
