package integration

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
)

// A lease function prepared with COM_STMT_PREPARE is answered by the proxy,
// so the server's max_prepared_stmt_count never counts it: before the
// limit, 2,000,000 such prepares on one connection took the proxy from
// 18 MB to 800 MB. Each connection may hold 16382 of them (the server's
// default limit); past it a prepare gets the server's own error for the
// limit (1461 42000), and COM_STMT_CLOSE makes room again. Against MariaDB,
// through the proxy with its own account (catalog on).
func TestOwnPreparedStatementLimit(t *testing.T) {
	e := newFencedEnv(t, envOptions{account: true})
	w, err := dialWire(e.proxy.Addr, wireOptions{User: dbserver.AppUser, Password: dbserver.AppPassword, DB: e.db,
		DeprecateEOF: true, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	prepare := func() (uint32, []byte) {
		t.Helper()
		if err := w.send(append([]byte{0x16}, "SELECT fence_status()"...)); err != nil {
			t.Fatal(err)
		}
		r, id, _, err := w.readPrepare()
		if err != nil {
			t.Fatal(err)
		}
		if p := r.Packets[0].Payload; p[0] == 0xff {
			return 0, p
		}
		return id, nil
	}
	const limit = 16382
	var ids []uint32
	for i := 0; i < limit; i++ {
		id, e := prepare()
		if e != nil {
			t.Fatalf("prepare %d refused before the limit: %q", i+1, e)
		}
		ids = append(ids, id)
	}
	_, refusal := prepare()
	if refusal == nil {
		t.Fatalf("prepare %d succeeded: the proxy's own statements are not limited", limit+1)
	}
	if code, state := binary.LittleEndian.Uint16(refusal[1:]), string(refusal[4:9]); code != 1461 || state != "42000" {
		t.Fatalf("prepare %d: got %d %s %q, want the server's 1461 42000", limit+1, code, state, refusal[9:])
	}
	t.Logf("prepare %d: %q", limit+1, refusal[9:])
	// COM_STMT_CLOSE (no answer) makes room for one more.
	var cl [5]byte
	cl[0] = 0x19
	binary.LittleEndian.PutUint32(cl[1:], ids[0])
	if err := w.send(cl[:]); err != nil {
		t.Fatal(err)
	}
	if _, e := prepare(); e != nil {
		t.Fatalf("a prepare after COM_STMT_CLOSE: %q", e)
	}
	if _, e := prepare(); e == nil {
		t.Fatalf("two prepares after one COM_STMT_CLOSE succeeded")
	}
	// The connection still serves, and the server's own prepares are the
	// server's business.
	w.mustQuery(t, "SELECT 1")
}
