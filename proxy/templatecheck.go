package proxy

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/fenceproxy/fenceproxy/policy"
)

// checkTemplate checks a table's lease template against the backend: each
// template column exists, is stored as written (not generated, no ON
// UPDATE), and is an integer, CHAR or VARCHAR column, whose inserted values
// the rewriter can read exactly as the server stores them. What it finds
// is kept on the template (policy.Template.SetSchema) for the rewriter:
// the columns' types, and whether every unique key holds every template
// column compared byte for byte (REPLACE and ON DUPLICATE KEY UPDATE then
// meet only rows of the inserted row's own lease).
func checkTemplate(ctx context.Context, db *sql.DB, cfg *policy.Config, i int, o *object) ([]error, error) {
	t := cfg.Tables[i]
	key := fmt.Sprintf("tables[%d].lease", i)
	rows, err := db.QueryContext(ctx, "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_MAXIMUM_LENGTH, "+
		"COALESCE(COLLATION_NAME, ''), COALESCE(EXTRA, '') FROM information_schema.COLUMNS "+
		"WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", o.schema, o.name)
	if err != nil {
		return nil, fmt.Errorf("reading information_schema.COLUMNS: %w", err)
	}
	type col struct {
		name, dataType, colType, collation, extra string
		length                                    sql.NullInt64
	}
	var cols []col
	for rows.Next() {
		var c col
		if err := rows.Scan(&c.name, &c.dataType, &c.colType, &c.length, &c.collation, &c.extra); err != nil {
			rows.Close()
			return nil, err
		}
		cols = append(cols, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var errs []error
	fail := func(format string, a ...any) {
		errs = append(errs, cfg.ErrorAt(key, fmt.Sprintf(format, a...)))
	}
	schema := &policy.TemplateSchema{}
	exact := true // every template column compares byte for byte
	for _, name := range t.Template.Columns() {
		var c *col
		for j := range cols {
			if strings.EqualFold(cols[j].name, name) {
				c = &cols[j]
			}
		}
		if c == nil {
			var names []string
			for _, x := range cols {
				names = append(names, x.name)
			}
			fail("%q: %s has no column %s (its columns: %s)", t.Lease, t.Name, name, strings.Join(names, ", "))
			continue
		}
		extra := strings.ToLower(c.extra)
		if strings.Contains(extra, "generated") || strings.Contains(extra, "on update") {
			fail("%q: column %s of %s is %s: a template column must hold what the writes store in it, "+
				"or a write to another column would move the row to another lease", t.Lease, c.name, t.Name, c.extra)
			continue
		}
		if strings.Contains(strings.ToLower(c.colType), "zerofill") {
			// CONCAT writes such a value with its leading zeros ('0000000007'),
			// an inserted literal without them: two names for one row.
			fail("%q: column %s of %s is %s: ZEROFILL writes a value with leading zeros, so a row's lease would not read "+
				"as the value written; drop ZEROFILL", t.Lease, c.name, t.Name, c.colType)
			continue
		}
		tc := policy.TemplateColumn{Name: c.name, Unsigned: strings.Contains(strings.ToLower(c.colType), "unsigned")}
		switch strings.ToLower(c.dataType) {
		case "tinyint", "smallint", "mediumint", "int", "integer", "bigint":
			tc.Kind, tc.Exact = policy.KindInteger, true
			bits := map[string]uint{"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32, "bigint": 64}[strings.ToLower(c.dataType)]
			if tc.Unsigned {
				tc.UMax = ^uint64(0) >> (64 - bits)
			} else {
				tc.Max = int64(^uint64(0) >> (65 - bits))
				tc.Min = -tc.Max - 1
			}
		case "char", "varchar":
			if !c.length.Valid || c.length.Int64 <= 0 {
				fail("%q: column %s of %s has no length the proxy can read", t.Lease, c.name, t.Name)
				continue
			}
			tc.Kind, tc.Length, tc.Padded = policy.KindString, c.length.Int64, strings.EqualFold(c.dataType, "char")
			coll := strings.ToLower(c.collation)
			// A binary collation but a NO PAD one ignores trailing spaces
			// in comparisons and unique keys ('eu' = 'eu '). At the
			// template's end that is the lease table's own reading (its
			// utf8mb4_bin ignores them too), but before it a VARCHAR's
			// trailing space is inside the lease name: region 'eu ' is
			// lease 'r:eu :acme', not 'r:eu:acme', and a pin region = 'eu'
			// or the unique key of the row ('eu', 'acme') meets it
			// (measured: TestRowLeasePinAttacks "middle column pinned",
			// TestRowLeaseTrailingSpaceKeyAttacks). A CHAR stores no
			// trailing spaces.
			padSpace := !strings.HasSuffix(coll, "_nopad_bin")
			inner := !tc.Padded && padSpace && columnBeforeEnd(t.Template, c.name)
			if !strings.HasSuffix(coll, "_bin") && coll != "binary" || inner {
				exact = false
			} else {
				tc.Exact = true
			}
		default:
			fail("%q: column %s of %s is %s: a template column must be an integer, CHAR or VARCHAR column "+
				"(the proxy reads an inserted value exactly as the server stores it only for those)", t.Lease, c.name, t.Name, c.colType)
			continue
		}
		schema.Columns = append(schema.Columns, tc)
	}
	if len(errs) > 0 {
		return errs, nil
	}
	covered, err := uniqueKeysCover(ctx, db, o, t.Template.Columns())
	if err != nil {
		return nil, err
	}
	schema.KeysCovered = covered && exact
	var engine sql.NullString
	err = db.QueryRowContext(ctx, "SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
		o.schema, o.name).Scan(&engine)
	if err != nil && err != sql.ErrNoRows {
		return nil, fmt.Errorf("reading information_schema.TABLES: %w", err)
	}
	schema.Transactional = strings.EqualFold(engine.String, "InnoDB")
	t.Template.SetSchema(schema)
	return nil, nil
}

// columnBeforeEnd reports whether column name has a part of tpl that is
// not its last.
func columnBeforeEnd(tpl *policy.Template, name string) bool {
	for i, p := range tpl.Parts {
		if i < len(tpl.Parts)-1 && strings.EqualFold(p.Column, name) {
			return true
		}
	}
	return false
}

// uniqueKeysCover reports whether every unique key of the table holds all
// of cols, whole (no prefix).
func uniqueKeysCover(ctx context.Context, db *sql.DB, o *object, cols []string) (bool, error) {
	rows, err := db.QueryContext(ctx, "SELECT INDEX_NAME, COLUMN_NAME, SUB_PART FROM information_schema.STATISTICS "+
		"WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0", o.schema, o.name)
	if err != nil {
		return false, fmt.Errorf("reading information_schema.STATISTICS: %w", err)
	}
	defer rows.Close()
	keys := map[string][]string{}
	for rows.Next() {
		var idx, col string
		var sub sql.NullInt64
		if err := rows.Scan(&idx, &col, &sub); err != nil {
			return false, err
		}
		if sub.Valid {
			col = "" // a prefix compares less than the whole value
		}
		keys[idx] = append(keys[idx], col)
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	for _, kc := range keys {
		for _, c := range cols {
			found := false
			for _, x := range kc {
				if strings.EqualFold(x, c) {
					found = true
				}
			}
			if !found {
				return false, nil
			}
		}
	}
	return true, nil
}
