package proxy

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/fenceproxy/fenceproxy/proxy/fencing"
)

// TestExchangeBeginResetsEverything: begin leaves nothing of the command
// before, whatever field is added to the exchange later (every field is
// set to a non-zero value by reflection), but the new command's sequence
// number and the scratch buffer's capacity.
func TestExchangeBeginResetsEverything(t *testing.T) {
	var x exchange
	v := reflect.ValueOf(&x).Elem()
	for i := 0; i < v.NumField(); i++ {
		setNonZero(t, v.Field(i), v.Type().Field(i).Name)
	}
	scratch := x.scratch
	x.begin(7)
	want := exchange{cmdSeq: 7, scratch: scratch[:0]}
	if !reflect.DeepEqual(x, want) {
		t.Errorf("after begin(7): %+v, want %+v", x, want)
	}
	if cap(x.scratch) != cap(scratch) {
		t.Errorf("begin dropped the scratch buffer (cap %d, was %d)", cap(x.scratch), cap(scratch))
	}
}

// TestExchangeStatementResets: a statement of a packet run one by one
// starts with no held packet, no own transaction and no deferred conflict
// of the statement before, its own alignment and "more" mark, and keeps
// how far the client's response got.
func TestExchangeStatementResets(t *testing.T) {
	x := exchange{cmdSeq: 0, started: true, lastErr: true, limit: 5, more: true,
		held: heldPacket{p: []byte{0}, seq: 3, eof: true}, own: 1, conflict: &fencing.Txn{}, conflictCode: 1213}
	x.statement(1, 4, false)
	want := exchange{cmdSeq: 0, delta: 3, started: true, lastErr: true, limit: 5, conflictCode: 1213}
	if !reflect.DeepEqual(x, want) {
		t.Errorf("after statement(1, 4, false): %+v, want %+v", x, want)
	}
	x.statement(1, 9, true)
	if !x.more || x.delta != 8 {
		t.Errorf("statement(1, 9, true): more %v delta %d, want true 8", x.more, x.delta)
	}
}

// setNonZero sets f, an unexported field, to a value other than its zero.
func setNonZero(t *testing.T, f reflect.Value, name string) {
	f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
	switch f.Kind() {
	case reflect.Bool:
		f.SetBool(true)
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		f.SetUint(1)
	case reflect.Int, reflect.Int64:
		f.SetInt(1)
	case reflect.Slice:
		f.Set(reflect.MakeSlice(f.Type(), 1, 8))
	case reflect.Pointer:
		f.Set(reflect.New(f.Type().Elem()))
	case reflect.Struct:
		for i := 0; i < f.NumField(); i++ {
			setNonZero(t, f.Field(i), name+"."+f.Type().Field(i).Name)
		}
	default:
		t.Fatalf("exchange.%s: kind %s: teach setNonZero", name, f.Kind())
	}
}
