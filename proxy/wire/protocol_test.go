package wire

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

func TestLenEnc(t *testing.T) {
	for _, v := range []uint64{0, 1, 250, 251, 0xffff, 0x10000, 0xffffff, 0x1000000, math.MaxUint64} {
		b := mysql.AppendLengthEncodedInteger(nil, v)
		got, n, null := LenEnc(b)
		if got != v || n != len(b) || null {
			t.Errorf("%d: encoded %x, decoded %d (n=%d null=%v)", v, b, got, n, null)
		}
		if _, n, _ := LenEnc(b[:len(b)-1]); len(b) > 1 && n != 0 {
			t.Errorf("%d: truncated encoding decoded", v)
		}
	}
	if _, n, null := LenEnc([]byte{0xfb}); !null || n != 1 {
		t.Error("0xFB is NULL")
	}
	if _, n, _ := LenEnc([]byte{0xff}); n != 0 {
		t.Error("0xFF is not a length")
	}
}

func okPayload(affected, insertID uint64, status, warnings uint16, rest []byte) []byte {
	p := []byte{0}
	p = mysql.AppendLengthEncodedInteger(p, affected)
	p = mysql.AppendLengthEncodedInteger(p, insertID)
	p = binary.LittleEndian.AppendUint16(p, status)
	p = binary.LittleEndian.AppendUint16(p, warnings)
	return append(p, rest...)
}

func TestParseOK(t *testing.T) {
	p := okPayload(300, 70000, mysql.SERVER_STATUS_IN_TRANS|mysql.SERVER_MORE_RESULTS_EXISTS, 2, []byte("Rows matched: 1"))
	ok, valid := ParseOK(p)
	if !valid || ok.AffectedRows != 300 || ok.LastInsertID != 70000 || ok.Warnings != 2 ||
		ok.Status != mysql.SERVER_STATUS_IN_TRANS|mysql.SERVER_MORE_RESULTS_EXISTS || string(p[ok.InfoOff:]) != "Rows matched: 1" {
		t.Fatalf("parseOK: %+v %v", ok, valid)
	}
	for i := 1; i < ok.InfoOff; i++ {
		if _, valid := ParseOK(p[:i]); valid {
			t.Fatalf("truncated OK of %d bytes accepted", i)
		}
	}
}

func TestEOFStatusAndTerminator(t *testing.T) {
	eof := []byte{0xfe, 1, 0, byte(mysql.SERVER_STATUS_AUTOCOMMIT), 0}
	if st, ok := EOFStatus(eof, false); !ok || st != mysql.SERVER_STATUS_AUTOCOMMIT {
		t.Fatalf("EOF status %x %v", st, ok)
	}
	okEOF := okPayload(0, 0, mysql.SERVER_MORE_RESULTS_EXISTS, 0, nil)
	okEOF[0] = 0xfe
	if st, ok := EOFStatus(okEOF, true); !ok || st != mysql.SERVER_MORE_RESULTS_EXISTS {
		t.Fatalf("OK-as-EOF status %x %v", st, ok)
	}
	if !IsTerminator(0xfe, 7) || IsTerminator(0xfe, MaxPayload) || IsTerminator(0x00, 7) {
		t.Fatal("isTerminator")
	}
}
