package rewrite

import (
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/policy"
)

// TestRowParamsLease: the lease of a prepared INSERT's rows from bound
// values, with the rules of literals; an empty lease is refused (no lease
// has that name, and a guard without a row lease would accept any).
func TestRowParamsLease(t *testing.T) {
	str := policy.TemplateColumn{Name: "c", Kind: policy.KindString, Length: 8, Padded: true}
	num := policy.TemplateColumn{Name: "n", Kind: policy.KindInteger, Unsigned: true, UMax: 65535}
	one := func(col policy.TemplateColumn, lit string) *RowParams {
		parts := []rowPart{{param: 0, col: col, name: col.Name}}
		if lit != "" {
			parts = append([]rowPart{{text: lit, param: -1}}, parts...)
		}
		return &RowParams{verb: "INSERT", rows: [][]rowPart{parts}}
	}
	for _, c := range []struct {
		rp   *RowParams
		v    BoundValue
		want string // the lease, or "!" + what the refusal says
	}{
		{one(str, "k:"), BoundValue{Text: "ab  "}, "k:ab"},
		{one(str, "k:"), BoundValue{Int: true, Text: "-5"}, "k:-5"},
		{one(str, ""), BoundValue{Text: "   "}, "!empty"},
		{one(str, ""), BoundValue{Text: ""}, "!empty"},
		{one(str, "k:"), BoundValue{Text: "123456789"}, "!longer than the column"},
		{one(str, "k:"), BoundValue{Null: true}, "!NULL"},
		{one(str, "k:"), BoundValue{Other: "DOUBLE"}, "!DOUBLE"},
		{one(str, "k:"), BoundValue{Long: true}, "!COM_STMT_SEND_LONG_DATA"},
		{one(num, "n:"), BoundValue{Int: true, Text: "65535"}, "n:65535"},
		{one(num, "n:"), BoundValue{Text: "65535"}, "n:65535"},
		{one(num, "n:"), BoundValue{Int: true, Text: "65536"}, "!out of the column's range"},
		{one(num, "n:"), BoundValue{Text: "0x10"}, "!plain decimal form"},
		{one(num, "n:"), BoundValue{Text: "\t1"}, "!printable ASCII"},
	} {
		l, why := c.rp.Lease([]BoundValue{c.v})
		got := l
		if why != "" {
			got = "!" + why
		}
		if strings.HasPrefix(c.want, "!") && !strings.Contains(got, c.want[1:]) || !strings.HasPrefix(c.want, "!") && got != c.want {
			t.Errorf("%+v: %q, want %q", c.v, got, c.want)
		}
	}
	// Rows of two leases.
	rp := &RowParams{verb: "INSERT", rows: [][]rowPart{{{param: 0, col: str, name: "c"}}, {{param: 1, col: str, name: "c"}}}}
	if _, why := rp.Lease([]BoundValue{{Text: "a"}, {Text: "b"}}); !strings.Contains(why, "several leases") {
		t.Errorf("two leases: %q", why)
	}
	if l, why := rp.Lease([]BoundValue{{Text: "a"}, {Text: "a "}}); l != "a" || why != "" {
		t.Errorf("one lease: %q %q", l, why)
	}
	if _, why := rp.Lease([]BoundValue{{Text: "a"}}); !strings.Contains(why, "not bound") {
		t.Errorf("one value for two rows: %q", why)
	}
}
