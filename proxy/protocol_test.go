package proxy

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// A MariaDB 10.11 greeting: CLIENT_MYSQL (bit 0) clear, extended
// capabilities in the reserved bytes.
func mariaGreeting() []byte {
	p := []byte{10}
	p = append(p, "5.5.5-10.11.19-MariaDB\x00"...)
	p = binary.LittleEndian.AppendUint32(p, 42)
	p = append(p, "abcdefgh"...)
	p = append(p, 0)
	caps := uint32(mysql.CLIENT_PROTOCOL_41 | mysql.CLIENT_SECURE_CONNECTION | mysql.CLIENT_PLUGIN_AUTH |
		mysql.CLIENT_SSL | mysql.CLIENT_COMPRESS | mysql.CLIENT_DEPRECATE_EOF | mysql.CLIENT_MULTI_STATEMENTS)
	p = binary.LittleEndian.AppendUint16(p, uint16(caps))
	p = append(p, 45)
	p = binary.LittleEndian.AppendUint16(p, mysql.SERVER_STATUS_AUTOCOMMIT)
	p = binary.LittleEndian.AppendUint16(p, uint16(caps>>16))
	p = append(p, 21)
	p = append(p, 0, 0, 0, 0, 0, 0, 0x1d, 0, 0, 0) // MariaDB extended capabilities
	p = append(p, "ijklmnopqrst\x00"...)
	return append(p, "mysql_native_password\x00"...)
}

func TestServerHandshake(t *testing.T) {
	h, err := parseServerHandshake(mariaGreeting())
	if err != nil {
		t.Fatal(err)
	}
	if h.version != "5.5.5-10.11.19-MariaDB" || h.connID != 42 || string(h.scramble) != "abcdefghijklmnopqrst" ||
		h.plugin != "mysql_native_password" || h.mariaExtOff < 0 {
		t.Fatalf("parsed %+v", h)
	}
	for _, offer := range []bool{false, true} {
		out, err := parseServerHandshake(h.forClient(offer))
		if err != nil {
			t.Fatal(err)
		}
		if extra := out.caps &^ (relayedCaps | mysql.CLIENT_SSL); extra != 0 {
			t.Errorf("offered capabilities the proxy does not relay: %x", extra)
		}
		if (out.caps&mysql.CLIENT_SSL != 0) != offer {
			t.Errorf("TLS offered %v, want %v", out.caps&mysql.CLIENT_SSL != 0, offer)
		}
		if !bytes.Equal(out.raw[out.mariaExtOff:out.mariaExtOff+4], []byte{0, 0, 0, 0}) {
			t.Error("MariaDB extended capabilities still offered")
		}
		if out.version != h.version || out.connID != h.connID || !bytes.Equal(out.scramble, h.scramble) || out.plugin != h.plugin {
			t.Error("greeting changed beyond capabilities")
		}
	}
	for i := 0; i < len(mariaGreeting())-25; i++ {
		parseServerHandshake(mariaGreeting()[:i]) // must not panic
	}
}

func TestClientHandshake(t *testing.T) {
	caps := uint32(mysql.CLIENT_PROTOCOL_41 | mysql.CLIENT_SECURE_CONNECTION | mysql.CLIENT_PLUGIN_AUTH |
		mysql.CLIENT_CONNECT_WITH_DB | mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA | mysql.CLIENT_SSL | mysql.CLIENT_LONG_PASSWORD)
	p := binary.LittleEndian.AppendUint32(nil, caps)
	p = binary.LittleEndian.AppendUint32(p, 1<<24)
	p = append(p, 45)
	p = append(p, make([]byte, 23)...)
	sslReq := append([]byte(nil), p...)
	p = append(p, "alice\x00"...)
	p = wire.AppendLenEncString(p, "01234567890123456789")
	p = append(p, "app\x00mysql_native_password\x00"...)
	ch, err := parseClientHandshake(p)
	if err != nil {
		t.Fatal(err)
	}
	if ch.user != "alice" || ch.db != "app" || ch.plugin != "mysql_native_password" || string(ch.authResp) != "01234567890123456789" {
		t.Fatalf("parsed %+v", ch)
	}
	for _, tlsOn := range []bool{false, true} {
		out := ch.forBackend(caps, tlsOn, len(ch.raw))
		got := binary.LittleEndian.Uint32(out)
		if (got&mysql.CLIENT_SSL != 0) != tlsOn || !bytes.Equal(out[4:], ch.raw[4:]) {
			t.Errorf("forBackend(tls=%v): caps %x, rest changed: %v", tlsOn, got, !bytes.Equal(out[4:], ch.raw[4:]))
		}
	}
	if r, err := parseClientHandshake(sslReq); err != nil || len(r.raw) != sslRequestLen {
		t.Fatalf("SSLRequest: %v", err)
	}
	if _, err := parseClientHandshake(append(binary.LittleEndian.AppendUint32(nil, 0), make([]byte, 40)...)); err == nil {
		t.Fatal("pre-4.1 client accepted")
	}
	for i := sslRequestLen + 1; i < len(p); i++ {
		parseClientHandshake(p[:i]) // must not panic
	}
}

func TestXORScrambleRoundTrip(t *testing.T) {
	scramble := []byte("abcdefghijklmnopqrst")
	x := xorScramble([]byte("secret"), scramble)
	if len(x) != 7 {
		t.Fatalf("want the password and its NUL, got %d bytes", len(x))
	}
	for i := range x {
		x[i] ^= scramble[i%len(scramble)]
	}
	if string(x) != "secret\x00" {
		t.Fatalf("round trip %q", x)
	}
}

func TestParseExecuteParams(t *testing.T) {
	p := []byte{mysql.COM_STMT_EXECUTE, 1, 0, 0, 0, 0, 1, 0, 0, 0}
	p = append(p, 0b100) // third parameter NULL
	p = append(p, 1)     // types follow
	p = binary.LittleEndian.AppendUint16(p, uint16(mysql.MYSQL_TYPE_VAR_STRING))
	p = binary.LittleEndian.AppendUint16(p, uint16(mysql.MYSQL_TYPE_LONGLONG)|0x8000)
	p = binary.LittleEndian.AppendUint16(p, uint16(mysql.MYSQL_TYPE_LONG))
	p = binary.LittleEndian.AppendUint16(p, uint16(mysql.MYSQL_TYPE_TINY))
	p = wire.AppendLenEncString(p, "job")
	p = binary.LittleEndian.AppendUint64(p, math.MaxUint64)
	p = append(p, 0xff) // TINY -1
	vals, types, err := parseExecuteParams(p, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.Value{{S: "job"}, {S: "18446744073709551615"}, {Null: true}, {S: "-1"}}
	for i := range want {
		if vals[i] != want[i] {
			t.Errorf("param %d: %+v, want %+v", i, vals[i], want[i])
		}
	}
	// A later execution may leave the types out.
	again := append(append([]byte(nil), p[:10]...), 0, 0)
	again = wire.AppendLenEncString(again, "x")
	again = binary.LittleEndian.AppendUint64(again, 7)
	again = binary.LittleEndian.AppendUint32(again, 9)
	again = append(again, 1)
	if vals, _, err := parseExecuteParams(again, 4, types); err != nil || vals[0].S != "x" || vals[2].S != "9" {
		t.Fatalf("without types: %+v %v", vals, err)
	}
	if _, _, err := parseExecuteParams(p[:20], 4, nil); err == nil {
		t.Fatal("truncated parameters accepted")
	}
}

// TestClientHandshakeConnectAttrs: program_name is read from the
// connection attributes when the client sends them; a malformed block is
// ignored, and the response is relayed unchanged either way.
func TestClientHandshakeConnectAttrs(t *testing.T) {
	attrs := func(kv ...string) []byte {
		var block []byte
		for _, s := range kv {
			block = wire.AppendLenEncString(block, s)
		}
		return wire.AppendLenEncString(nil, string(block))
	}
	tests := []struct {
		name  string
		attrs []byte
		want  string
	}{
		{"program_name among others", attrs("_os", "linux", "program_name", "invoicer", "_pid", "42"), "invoicer"},
		{"no program_name", attrs("_client_name", "libmariadb"), ""},
		{"block longer than the packet", append([]byte{0x20}, attrs("program_name", "x")[1:]...), ""},
		{"value cut short", []byte{0x0e, 0x0c, 'p', 'r', 'o', 'g', 'r', 'a', 'm', '_', 'n', 'a', 'm', 'e', 0x05}, ""},
		{"long name bounded", attrs("program_name", strings.Repeat("p", 300)), strings.Repeat("p", maxProgramName)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			caps := uint32(mysql.CLIENT_PROTOCOL_41 | mysql.CLIENT_SECURE_CONNECTION | mysql.CLIENT_PLUGIN_AUTH |
				mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA | mysql.CLIENT_CONNECT_ATTRS)
			p := binary.LittleEndian.AppendUint32(nil, caps)
			p = binary.LittleEndian.AppendUint32(p, 1<<24)
			p = append(p, 45)
			p = append(p, make([]byte, 23)...)
			p = append(p, "alice\x00"...)
			p = wire.AppendLenEncString(p, "01234567890123456789")
			p = append(p, "mysql_native_password\x00"...)
			p = append(p, tt.attrs...)
			ch, err := parseClientHandshake(p)
			if err != nil {
				t.Fatal(err)
			}
			if ch.program != tt.want || ch.plugin != "mysql_native_password" {
				t.Fatalf("program %q plugin %q, want %q", ch.program, ch.plugin, tt.want)
			}
			if out := ch.forBackend(caps, false, len(ch.raw)); !bytes.Equal(out, p) {
				t.Fatal("the response relayed to the backend changed")
			}
		})
	}
}
