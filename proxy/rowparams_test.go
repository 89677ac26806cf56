package proxy

import (
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/rewrite"
)

// execPacket builds a COM_STMT_EXECUTE payload: statement 1, no cursor,
// one iteration, then nulls, the new-params-bound flag, types (when the
// flag is 1) and the values' bytes.
func execPacket(nulls []byte, bound byte, types []uint16, values ...[]byte) []byte {
	p := []byte{mysql.COM_STMT_EXECUTE, 1, 0, 0, 0, 0, 1, 0, 0, 0}
	p = append(p, nulls...)
	p = append(p, bound)
	if bound == 1 {
		for _, t := range types {
			p = append(p, byte(t), byte(t>>8))
		}
	}
	for _, v := range values {
		p = append(p, v...)
	}
	return p
}

func lenencStr(s string) []byte { return append([]byte{byte(len(s))}, s...) }

// TestDecodeExecute: the bound values as the server reads them: types
// sent or remembered, NULL by bitmap or type, temporal and other values
// read past, signedness, and what cannot be read refused.
func TestDecodeExecute(t *testing.T) {
	all := func(int) bool { return true }
	tLongLong, tUnsigned := uint16(mysql.MYSQL_TYPE_LONGLONG), uint16(0x8000)
	types := []uint16{uint16(mysql.MYSQL_TYPE_DATETIME), tLongLong | tUnsigned, uint16(mysql.MYSQL_TYPE_VAR_STRING),
		uint16(mysql.MYSQL_TYPE_TINY), uint16(mysql.MYSQL_TYPE_DOUBLE), uint16(mysql.MYSQL_TYPE_VAR_STRING)}
	datetime := []byte{4, 0xea, 0x07, 12, 2} // 2026-12-02
	maxU := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	// Parameter 6 is NULL by the bitmap (bit 5): no value follows.
	p := execPacket([]byte{1 << 5}, 1, types, datetime, maxU, lenencStr("acme"), []byte{0xff}, make([]byte, 8))
	vals, got, err := decodeExecute(p, 6, nil, all)
	if err != nil {
		t.Fatal(err)
	}
	want := []rewrite.BoundValue{{Other: "DATE or TIME"}, {Int: true, Text: "18446744073709551615"}, {Text: "acme"},
		{Int: true, Text: "-1"}, {Other: "DOUBLE"}, {Null: true}}
	for i := range want {
		if vals[i] != want[i] {
			t.Errorf("value %d: %+v, want %+v", i+1, vals[i], want[i])
		}
	}
	// The next execution sends no types: the server uses these.
	p = execPacket([]byte{0}, 0, nil, datetime, maxU, lenencStr("beta"), []byte{1}, make([]byte, 8), lenencStr("x"))
	vals, _, err = decodeExecute(p, 6, got, all)
	if err != nil || vals[2].Text != "beta" || vals[3].Text != "1" || vals[5].Text != "x" {
		t.Fatalf("with remembered types: %+v, %v", vals, err)
	}
	// Only wanted values are kept.
	vals, _, err = decodeExecute(p, 6, got, func(i int) bool { return i == 2 })
	if err != nil || vals[1] != (rewrite.BoundValue{}) || vals[2].Text != "beta" {
		t.Fatalf("wanting one: %+v, %v", vals, err)
	}
	for _, c := range []struct {
		name string
		p    []byte
		prev []uint16
		why  string
	}{
		{"no types ever sent", execPacket([]byte{0}, 0, nil, lenencStr("a")), nil, "no execution sent"},
		{"flag 2", execPacket([]byte{0}, 2, nil, lenencStr("a")), []uint16{uint16(mysql.MYSQL_TYPE_VAR_STRING)}, "not 0 or 1"},
		{"unknown type", execPacket([]byte{0}, 1, []uint16{0x20}, []byte{1}), nil, "does not decode"},
		{"short string", execPacket([]byte{0}, 1, []uint16{uint16(mysql.MYSQL_TYPE_VAR_STRING)}, []byte{5, 'a'}), nil, "ends in a string"},
		{"short number", execPacket([]byte{0}, 1, []uint16{tLongLong}, []byte{1, 2}), nil, "ends in its value"},
		{"short header", []byte{mysql.COM_STMT_EXECUTE, 1, 0}, nil, "shorter"},
	} {
		if _, _, err := decodeExecute(c.p, 1, c.prev, all); err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.why)
		}
	}
}
