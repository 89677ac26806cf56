package proxy

import (
	"bytes"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// TestBuildExecute: the trapped variant's execution from the client's:
// its id, the client's flags and iteration count, the client's values,
// then the last k again (NULL bits and types with them), every type bound,
// also when the client sent none.
func TestBuildExecute(t *testing.T) {
	tLong, tStr, tNull := uint16(mysql.MYSQL_TYPE_LONGLONG), uint16(mysql.MYSQL_TYPE_VAR_STRING), uint16(mysql.MYSQL_TYPE_NULL)
	eight := func(b byte) []byte { return []byte{b, 0, 0, 0, 0, 0, 0, 0} }
	cases := []struct {
		name  string
		p     []byte
		n, k  int
		prev  []uint16
		types []uint16 // of the built execution
		nulls []byte
		vals  [][]byte
	}{
		{name: "SET and WHERE values, types sent", n: 3, k: 2,
			p:     execPacket([]byte{0}, 1, []uint16{tLong, tStr, tLong}, eight(5), lenencStr("acme"), eight(7)),
			types: []uint16{tLong, tStr, tLong, tStr, tLong}, nulls: []byte{0},
			vals: [][]byte{eight(5), lenencStr("acme"), eight(7), lenencStr("acme"), eight(7)}},
		{name: "a NULL in the WHERE, by the bitmap", n: 2, k: 2,
			p:     execPacket([]byte{1 << 1}, 1, []uint16{tLong, tLong}, eight(1)),
			types: []uint16{tLong, tLong, tLong, tLong}, nulls: []byte{1<<1 | 1<<3},
			vals: [][]byte{eight(1), eight(1)}},
		{name: "a NULL by type", n: 2, k: 1,
			p:     execPacket([]byte{0}, 1, []uint16{tLong, tNull}, eight(3)),
			types: []uint16{tLong, tNull, tNull}, nulls: []byte{0},
			vals: [][]byte{eight(3)}},
		{name: "no types sent: the last ones bound", n: 2, k: 1, prev: []uint16{tStr, tLong},
			p:     execPacket([]byte{0}, 0, nil, lenencStr("x"), eight(9)),
			types: []uint16{tStr, tLong, tLong}, nulls: []byte{0},
			vals: [][]byte{lenencStr("x"), eight(9), eight(9)}},
		{name: "no WHERE placeholder", n: 1, k: 0,
			p:     execPacket([]byte{0}, 1, []uint16{tLong}, eight(4)),
			types: []uint16{tLong}, nulls: []byte{0}, vals: [][]byte{eight(4)}},
	}
	for _, c := range cases {
		_, types, raw, err := decodeParams(c.p, c.n, c.prev, func(int) bool { return false })
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := buildExecute(c.p, 77, c.n, c.k, types, raw)
		want := []byte{mysql.COM_STMT_EXECUTE, 77, 0, 0, 0}
		want = append(want, c.p[5:10]...)
		want = append(want, c.nulls...)
		want = append(want, 1)
		for _, ty := range c.types {
			want = append(want, byte(ty), byte(ty>>8))
		}
		for _, v := range c.vals {
			want = append(want, v...)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got  %x\n want %x", c.name, got, want)
		}
	}
}

// TestPlainExecute: the client's execution as the client's statement gets
// it: as sent, but for one that binds no types after an execution of the
// trapped variant (typesStale), which gets the types the client last
// bound; one that binds types is noted.
func TestPlainExecute(t *testing.T) {
	tLong, tStr := uint16(mysql.MYSQL_TYPE_LONGLONG), uint16(mysql.MYSQL_TYPE_VAR_STRING)
	eight := func(b byte) []byte { return []byte{b, 0, 0, 0, 0, 0, 0, 0} }
	untyped := execPacket([]byte{0}, 0, nil, lenencStr("x"), eight(9))
	typed := execPacket([]byte{0}, 1, []uint16{tStr, tLong}, lenencStr("x"), eight(9))
	cases := []struct {
		name  string
		stale bool
		p     []byte
		want  []byte
	}{
		{name: "untyped, the server holds the types", p: untyped, want: untyped},
		{name: "untyped after the variant's execution", stale: true, p: untyped, want: typed},
		{name: "typed", stale: true, p: typed, want: typed},
	}
	for _, c := range cases {
		ps := &preparedStmt{params: 2, types: []uint16{tStr, tLong}, typesStale: c.stale}
		if got := (&clientConn{}).plainExecute(ps, c.p); !bytes.Equal(got, c.want) {
			t.Errorf("%s:\n got  %x\n want %x", c.name, got, c.want)
		}
	}
	ps := &preparedStmt{params: 2}
	(&clientConn{}).plainExecute(ps, typed)
	if len(ps.types) != 2 || ps.types[0] != tStr || ps.types[1] != tLong {
		t.Fatalf("types noted from a typed execution: %v", ps.types)
	}
}
