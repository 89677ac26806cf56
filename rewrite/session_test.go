package rewrite

import "testing"

// TestSessionApply: one function applies a statement's session effect, in a
// packet and after the server's result; the two differ exactly in
// NO_BACKSLASH_ESCAPES (the statement's, or left to the status flags) and
// in whether a safe character set replaces an unsafe one.
func TestSessionApply(t *testing.T) {
	start := Session{Schema: "app", ANSIQuotes: Off, NoBackslashEscapes: Off, UnsafeCharset: false}
	unsafe := start
	unsafe.UnsafeCharset = true
	for _, tc := range []struct {
		name string
		from Session
		st   Stmt
		at   EffectAt
		want Session
		eff  Effect
	}{
		{"use", start, Stmt{Kind: Use, Schema: "other"}, InPacket,
			Session{Schema: "other", ANSIQuotes: Off, NoBackslashEscapes: Off}, Effect{}},
		{"use after result", start, Stmt{Kind: Use, Schema: ""}, AfterResult,
			Session{Schema: "", ANSIQuotes: Off, NoBackslashEscapes: Off}, Effect{}},
		{"sql_mode in packet", start, Stmt{Kind: SetSQLMode, ANSIQuotes: On, NoBackslashEscapes: On}, InPacket,
			Session{Schema: "app", ANSIQuotes: On, NoBackslashEscapes: On}, Effect{}},
		{"sql_mode after result leaves nbe to the status flags", start, Stmt{Kind: SetSQLMode, ANSIQuotes: On, NoBackslashEscapes: On}, AfterResult,
			Session{Schema: "app", ANSIQuotes: On, NoBackslashEscapes: Off}, Effect{}},
		{"unknown sql_mode in packet", start, Stmt{Kind: SetSQLMode, ANSIQuotes: Unknown, NoBackslashEscapes: Unknown}, InPacket,
			Session{Schema: "app", ANSIQuotes: Unknown, NoBackslashEscapes: Unknown}, Effect{ModeUnknown: true}},
		{"unknown sql_mode after result", start, Stmt{Kind: SetSQLMode, ANSIQuotes: Unknown, NoBackslashEscapes: Unknown}, AfterResult,
			Session{Schema: "app", ANSIQuotes: Unknown, NoBackslashEscapes: Off}, Effect{ModeUnknown: true}},
		{"half known sql_mode", start, Stmt{Kind: SetSQLMode, ANSIQuotes: On, NoBackslashEscapes: Unknown}, InPacket,
			Session{Schema: "app", ANSIQuotes: On, NoBackslashEscapes: Unknown}, Effect{ModeUnknown: true}},
		{"unsafe charset", start, Stmt{Kind: SetCharset, UnsafeCharset: true}, InPacket, unsafe, Effect{Charset: true}},
		{"unsafe charset after result", start, Stmt{Kind: SetCharset, UnsafeCharset: true}, AfterResult, unsafe, Effect{Charset: true}},
		{"safe charset stays unsafe in packet", unsafe, Stmt{Kind: SetCharset}, InPacket, unsafe, Effect{Charset: true}},
		{"safe charset after result", unsafe, Stmt{Kind: SetCharset}, AfterResult, start, Effect{Charset: true}},
		{"sql_mode and names", start, Stmt{Kind: SetSQLMode, ANSIQuotes: Unknown, NoBackslashEscapes: Unknown, SetsCharset: true, UnsafeCharset: true}, InPacket,
			Session{Schema: "app", ANSIQuotes: Unknown, NoBackslashEscapes: Unknown, UnsafeCharset: true}, Effect{ModeUnknown: true, Charset: true}},
		{"sql_mode without names keeps the charset", unsafe, Stmt{Kind: SetSQLMode, ANSIQuotes: Off, NoBackslashEscapes: Off}, AfterResult,
			unsafe, Effect{}},
		{"a write changes nothing", unsafe, Stmt{Kind: Write, Schema: "x", UnsafeCharset: false}, AfterResult, unsafe, Effect{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.from
			if eff := s.Apply(&tc.st, tc.at); eff != tc.eff {
				t.Errorf("effect %+v, want %+v", eff, tc.eff)
			}
			if s != tc.want {
				t.Errorf("session %+v, want %+v", s, tc.want)
			}
		})
	}
}
