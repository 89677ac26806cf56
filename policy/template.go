package policy

import (
	"fmt"
	"strings"
	"sync/atomic"
)

// A table's lease may be a template over the table's own columns,
// "invoice:{customer_id}": literal text plus {column} parts. Each row is
// then fenced under its own lease, the template's text with each part
// replaced by the row's value of that column (as CONCAT computes it).

// Template is a parsed lease template.
type Template struct {
	Text  string
	Parts []TemplatePart // in order; at least one column part

	schema atomic.Pointer[TemplateSchema] // what the backend says, once checked
}

// TemplatePart is literal text or a column.
type TemplatePart struct {
	Lit    string // literal text ("" for a column part)
	Column string // column name ("" for a literal part)
}

// Columns returns the template's column names, in order of first use.
func (t *Template) Columns() []string {
	var cs []string
	for _, p := range t.Parts {
		if p.Column == "" {
			continue
		}
		dup := false
		for _, c := range cs {
			if strings.EqualFold(c, p.Column) {
				dup = true
			}
		}
		if !dup {
			cs = append(cs, p.Column)
		}
	}
	return cs
}

// HasColumn reports whether name (ASCII case-insensitive, as the server
// compares column names) is one of the template's columns.
func (t *Template) HasColumn(name string) bool {
	for _, p := range t.Parts {
		if p.Column != "" && strings.EqualFold(p.Column, name) {
			return true
		}
	}
	return false
}

// ColumnKind is how the proxy may read an inserted value of a template
// column.
type ColumnKind uint8

const (
	// KindInteger: TINYINT .. BIGINT (Min..Max, or 0..UMax unsigned).
	KindInteger ColumnKind = iota + 1
	// KindString: CHAR/VARCHAR of Length characters; Padded for CHAR
	// (trailing spaces are not stored).
	KindString
)

// TemplateColumn is what the backend says about one template column.
type TemplateColumn struct {
	Name     string
	Kind     ColumnKind
	Unsigned bool
	Min, Max int64  // integer range (signed)
	UMax     uint64 // integer range (unsigned)
	Length   int64  // characters (strings)
	Padded   bool   // CHAR: trailing spaces are removed on store
	// Exact: the column compares as the lease table's utf8mb4_bin does
	// (an integer, or a string under a binary collation), so a WHERE that
	// pins it to a value meets rows of that value's lease only. Under a
	// _ci collation `customer_id = 'acme'` also meets 'ACME', another
	// lease.
	Exact bool
}

// TemplateSchema is what the start-up and reload checks learned about a
// template table: its template columns, and whether every unique key of
// the table holds every template column compared byte for byte (then a
// duplicate key found by INSERT ... ON DUPLICATE KEY UPDATE or REPLACE is
// a row of the same lease as the inserted one).
type TemplateSchema struct {
	Columns     []TemplateColumn
	KeysCovered bool
	// Transactional: the table's engine is InnoDB (every TiDB table
	// reads so), so a statement that fails changes none of its rows. The
	// rewriter's row-lease trap needs it: an error on a MyISAM or Aria
	// table keeps the rows changed before it.
	Transactional bool
}

// Column returns the checked column name, if any.
func (s *TemplateSchema) Column(name string) (TemplateColumn, bool) {
	for _, c := range s.Columns {
		if strings.EqualFold(c.Name, name) {
			return c, true
		}
	}
	return TemplateColumn{}, false
}

// Schema returns what the backend check found, or nil before it ran.
func (t *Template) Schema() *TemplateSchema { return t.schema.Load() }

// SetSchema records what the backend check found (CheckSchema).
func (t *Template) SetSchema(s *TemplateSchema) { t.schema.Store(s) }

// IsTemplate reports whether a lease value is a template (it has a brace).
func IsTemplate(lease string) bool { return strings.ContainsAny(lease, "{}") }

// ParseTemplate parses a lease template. The literal parts are inlined in
// SQL as plain single-quoted literals, under the same rules as a fixed
// lease name; column names are plain identifiers.
func ParseTemplate(s string) (*Template, string) {
	if len(s) > maxLeaseName {
		return nil, fmt.Sprintf("a lease template has at most %d bytes", maxLeaseName)
	}
	t := &Template{Text: s}
	var lit strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '{':
			j := strings.IndexByte(s[i+1:], '}')
			if j < 0 {
				return nil, fmt.Sprintf("%q: unbalanced braces: '{' at byte %d has no '}'", s, i)
			}
			col := s[i+1 : i+1+j]
			if col == "" {
				return nil, fmt.Sprintf("%q: empty column name {} at byte %d", s, i)
			}
			if strings.ContainsAny(col, "{") {
				return nil, fmt.Sprintf("%q: unbalanced braces: '{' inside {...} at byte %d", s, i)
			}
			if !identChars(col) || len(col) > maxIdentLen {
				return nil, fmt.Sprintf("%q: column {%s}: a template column is 1 to %d characters of A-Z a-z 0-9 _ $", s, col, maxIdentLen)
			}
			if lit.Len() > 0 {
				t.Parts = append(t.Parts, TemplatePart{Lit: lit.String()})
				lit.Reset()
			}
			t.Parts = append(t.Parts, TemplatePart{Column: col})
			i += j + 1
		case '}':
			return nil, fmt.Sprintf("%q: unbalanced braces: '}' at byte %d has no '{'", s, i)
		default:
			if c < 0x20 || c > 0x7e || c == '\'' || c == '"' || c == '\\' || c == '`' || c == '?' {
				return nil, fmt.Sprintf("%q: the literal text of a lease template may contain only printable ASCII without ' \" \\ ` or ?", s)
			}
			lit.WriteByte(c)
		}
	}
	if lit.Len() > 0 {
		t.Parts = append(t.Parts, TemplatePart{Lit: lit.String()})
	}
	return t, ""
}

// checkLeaseValue checks a table's lease: a fixed name or a template.
// It returns the parsed template (nil for a fixed name).
func checkLeaseValue(lease string) (*Template, string) {
	if IsTemplate(lease) {
		return ParseTemplate(lease)
	}
	return nil, checkLease(lease)
}

// validateTemplate checks a template table against the rest of the file:
// its columns are checked against the backend with the proxy's own
// account, and the guard triggers know fixed leases only.
func (c *Config) validateTemplate(d *decoder, key string) {
	if c.Backend.User == "" && !d.reported("backend") {
		d.fail(key, "a lease template needs backend.user: serve checks with the proxy's own account that its columns "+
			"exist in the table and reads their types")
	}
	if c.Fencing.DatabaseGuard == GuardTriggers {
		d.fail(key, "the guard triggers (fencing.database_guard: triggers) check fixed leases and the session's lease only, "+
			"not a lease template; use database_guard: off for a table with a lease template")
	}
}
