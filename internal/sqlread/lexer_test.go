package sqlread

import (
	"strings"
	"testing"
)

// lexAll returns the token texts and the normalized text.
func lexAll(t testing.TB, sql string, mode Mode) ([]string, string, string) {
	t.Helper()
	norm := []byte(sql)
	lx := NewLexer([]byte(sql), 0, mode, norm)
	var out []string
	for {
		tk, ok := lx.Next()
		if !ok {
			break
		}
		out = append(out, sql[tk.Start:tk.End])
	}
	return out, string(norm), lx.Issue()
}

func TestTokenize(t *testing.T) {
	m := Mode{Flavor: MariaDB, Version: 101119}
	my := Mode{Flavor: MySQL, Version: 80036}
	tests := []struct {
		name  string
		sql   string
		mode  Mode
		toks  string // tokens joined by "|"
		norm  string // "" = do not check
		issue bool
	}{
		{"words and operators", "SELECT a<=>b, c->>'$.x' FROM t", m, "SELECT|a|<=>|b|,|c|->>|'$.x'|FROM|t", "", false},
		{"dash dash space comment", "SELECT 1 -- x\n, 2", m, "SELECT|1|,|2", "SELECT 1     \n, 2", false},
		{"dash dash no space is minus", "SELECT 1--2", m, "SELECT|1|-|-|2", "", false},
		{"dash dash at end", "SELECT 1 --", m, "SELECT|1", "SELECT 1   ", false},
		{"dash dash control char", "SELECT 1 --\x01x\n", m, "SELECT|1", "", false},
		{"dash dash high byte is uncertain", "SELECT 1 --\xc2\xa0x", m, "SELECT|1|-|-|\xc2\xa0x", "", true},
		{"hash comment", "SELECT 1 # x\n+2", m, "SELECT|1|+|2", "SELECT 1    \n+2", false},
		{"block comment", "SELECT /* a */ 1", m, "SELECT|1", "SELECT         1", false},
		{"block comment not nested", "SELECT /* a /* b */ 1 */", m, "SELECT|1|*|/", "", false},
		{"hint is a comment", "SELECT /*+ BKA(t) */ 1", m, "SELECT|1", "", false},
		{"live exec comment markers blanked", "SELECT /*!40000 1 */", m, "SELECT|1", "SELECT          1   ", false},
		{"exec without version", "SELECT /*!1*/", m, "SELECT|1", "SELECT    1  ", false},
		{"mariadb ignores mysql 5.7+ versions", "SELECT 1 /*!50700 +1 */", m, "SELECT|1", "", false},
		{"mariadb M comment", "SELECT 1 /*M!50700 +1 */", m, "SELECT|1|+|1", "", false},
		{"mariadb six digit version", "SELECT 1 /*!1000001 */", m, "SELECT|1|1", "", false},
		{"mariadb dead six digit", "SELECT 1 /*!101120 +1 */", m, "SELECT|1", "", false},
		{"dead comment nests once", "SELECT 1 /*!99999 /* x */ +1 */ +2", m, "SELECT|1|+|2", "", false},
		{"mysql exec live", "SELECT 1 /*!80036 +1 */", my, "SELECT|1|+|1", "", false},
		{"mysql exec dead", "SELECT 1 /*!80037 +1 */", my, "SELECT|1", "", false},
		{"mysql M is plain comment", "SELECT 1 /*M! +1 */", my, "SELECT|1", "", false},
		{"mysql 8.0 six digits uncertain", "SELECT 1 /*!100000 +1 */", my, "SELECT|1|0|+|1", "", true},
		{"string in exec comment holds */", "SELECT /*!40000 '*/' */", m, "SELECT|'*/'", "", false},
		{"nested comment in live exec uncertain", "SELECT /*!40000 /* x */ 1 */", m, "SELECT|1", "", true},
		{"semicolon in exec uncertain", "SELECT /*!40000 1; */", m, "SELECT|1|;", "", true},
		{"unterminated comment", "SELECT 1 /* x", m, "SELECT|1", "", true},
		{"unterminated string", "SELECT 'x", m, "SELECT|'x", "", true},
		{"string escapes", `SELECT 'a\'b''c', "d\"e""f"`, m, `SELECT|'a\'b''c'|,|"d\"e""f"`, "", false},
		{"no backslash escapes", `SELECT 'a\', 'b'`, Mode{NoBackslash: true, Flavor: MariaDB, Version: 101119}, `SELECT|'a\'|,|'b'`, "", false},
		{"ansi quotes", `SELECT "a\" FROM t`, Mode{ANSIQuotes: true, Flavor: MariaDB, Version: 101119}, `SELECT|"a\"|FROM|t`, "", false},
		{"backquotes", "SELECT `a``b`.`c`", m, "SELECT|`a``b`|.|`c`", "", false},
		{"introducers and literals", "SELECT _utf8mb4'x', N'y', X'41', B'01', 0x41, 0b01, x'", m, "SELECT|_utf8mb4|'x'|,|N'y'|,|X'41'|,|B'01'|,|0x41|,|0b01|,|x'", "", true},
		{"numbers", "SELECT 1, 1.5, .5, 1e5, 1.5e-3, 1e, 12abc, 0xg", m, "SELECT|1|,|1.5|,|.5|,|1e5|,|1.5e-3|,|1e|,|12abc|,|0xg", "", false},
		{"keyword after dot is an identifier", "SELECT t.order, t.5x FROM t", m, "SELECT|t|.|order|,|t|.|5x|FROM|t", "", false},
		{"variables", "SELECT @a, @'b', @`c`, @@x, @@session.sql_mode, @a.b", m, "SELECT|@a|,|@'b'|,|@`c`|,|@@x|,|@@session.sql_mode|,|@a.b", "", false},
		{"placeholders", "SELECT ?, ?x", m, "SELECT|?|,|?|x", "", false},
		{"null shortcut", `SELECT \N`, m, `SELECT|\N`, "", false},
		{"dash dash then comment is uncertain", "SELECT 1--/**/1", m, "SELECT|1|-|-|1", "", true},
		{"dash dash then exec marker is uncertain", "SELECT 1--/*!1*/", m, "SELECT|1|-|-|1", "", true},
		{"nul byte uncertain", "SELECT 1\x00", m, "SELECT|1|\x00", "", true},
		{"tidb bang always live", "SELECT 1 /*!99999 +1 */", Mode{Flavor: TiDB, Version: 80400}, "SELECT|1|+|1", "", false},
		{"unknown version uncertain", "SELECT 1 /*!40000 +1 */", Mode{Flavor: MariaDB}, "SELECT|1", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			toks, norm, issue := lexAll(t, tt.sql, tt.mode)
			if got := strings.Join(toks, "|"); got != tt.toks {
				t.Errorf("tokens\n got %q\nwant %q", got, tt.toks)
			}
			if tt.norm != "" && norm != tt.norm {
				t.Errorf("normalized\n got %q\nwant %q", norm, tt.norm)
			}
			if (issue != "") != tt.issue {
				t.Errorf("issue = %q, want issue: %v", issue, tt.issue)
			}
		})
	}
}

// FuzzScanString: the string and quoted-identifier scans (IndexByte) end
// where a byte-by-byte reading of the server's rules ends, and report the
// same unterminated texts.
func FuzzScanString(f *testing.F) {
	for _, s := range []string{`'a\'b'c`, `'a''b'`, `"x\\"`, "`a``b`c", `'\`, `'abc`, `''`, `'\''`, `'a\\'b'`} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(2))
	}
	f.Fuzz(func(t *testing.T, s string, flags uint8) {
		if s == "" || s[0] != '\'' && s[0] != '"' && s[0] != '`' {
			return
		}
		mode := Mode{NoBackslash: flags&2 != 0}
		q := s[0]
		lx := NewLexer([]byte(s), 0, mode, nil)
		if q == '`' {
			lx.scanQuoted(q)
		} else {
			lx.scanString(q)
		}
		pos, issue := refScan(s, q, q != '`' && !mode.NoBackslash)
		if lx.pos != pos || (lx.Issue() != "") != issue {
			t.Fatalf("%q (flags %d): end %d issue %q, byte-by-byte end %d unterminated %v", s, flags, lx.pos, lx.issue, pos, issue)
		}
	})
}

func refScan(s string, q byte, backslash bool) (int, bool) {
	for p := 1; p < len(s); p++ {
		switch {
		case backslash && s[p] == '\\':
			p++
		case s[p] == q && p+1 < len(s) && s[p+1] == q:
			p++
		case s[p] == q:
			return p + 1, false
		}
	}
	return len(s), true
}

// FuzzCatalogFastPath: a statement the fast path passes with the catalog
// (catalog_test.go's testSnapshot) is one whose full decision the catalog
// does not change: the slow path decides it with the catalog exactly as
