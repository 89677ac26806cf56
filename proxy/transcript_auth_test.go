package proxy

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// writeTestCert writes a self-signed certificate for 127.0.0.1 (cert.pem,
// key.pem) and returns its directory.
func writeTestCert(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// sha2Password is caching_sha2_password's fast answer to scramble.
func sha2Password(password string, scramble []byte) []byte {
	h1 := sha256.Sum256([]byte(password))
	h2 := sha256.Sum256(h1[:])
	h := sha256.New()
	h.Write(h2[:])
	h.Write(scramble)
	out := h.Sum(nil)
	for i := range out {
		out[i] ^= h1[i]
	}
	return out
}

// clientTLS switches the client side to TLS after its SSLRequest.
func (c *hconn) clientTLS() {
	c.h.t.Helper()
	c.waitWrite(&c.clientWrite)
	tc := tls.Client(c.client, &tls.Config{InsecureSkipVerify: true})
	c.client.SetDeadline(time.Now().Add(ioTimeout))
	if err := tc.Handshake(); err != nil {
		c.h.fail("client TLS handshake: %v", err)
	}
	c.client.SetDeadline(time.Time{})
	c.client, c.cr = tc, bufio.NewReaderSize(tc, 1<<16)
	c.h.line(c, "C<>P TLS handshake")
}

// backendTLS switches the backend side to TLS after the proxy's
// SSLRequest; bytes of the proxy's ClientHello already buffered go first.
func (c *hconn) backendTLS(cert tls.Certificate) {
	c.h.t.Helper()
	c.waitWrite(&c.backendWrite)
	var pre []byte
	if n := c.br.Buffered(); n > 0 {
		pre, _ = c.br.Peek(n)
		pre = append([]byte(nil), pre...)
	}
	tc := tls.Server(&prefixedConn{Conn: c.backend, pre: pre}, &tls.Config{Certificates: []tls.Certificate{cert}})
	c.backend.SetDeadline(time.Now().Add(ioTimeout))
	if err := tc.Handshake(); err != nil {
		c.h.fail("backend TLS handshake: %v", err)
	}
	c.backend.SetDeadline(time.Time{})
	c.backend, c.br = tc, bufio.NewReaderSize(tc, 1<<16)
	c.h.line(c, "P<>B TLS handshake")
}

func loadCert(h *harness, dir string) tls.Certificate {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		h.t.Fatal(err)
	}
	return cert
}

// rsaKey is the scripted backend's caching_sha2_password key pair.
func rsaKey(h *harness) (*rsa.PrivateKey, []byte) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		h.t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		h.t.Fatal(err)
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// decryptPassword reads an RSA-encrypted caching_sha2_password answer.
func decryptPassword(h *harness, key *rsa.PrivateKey, enc []byte) string {
	plain, err := rsa.DecryptOAEP(sha1.New(), nil, key, enc, nil)
	if err != nil {
		return "not decryptable with the key: " + err.Error()
	}
	for i := range plain {
		plain[i] ^= harnessScramble[i%len(harnessScramble)]
	}
	return fmt.Sprintf("%q", plain)
}

const sha2Greeting = mysql.AUTH_CACHING_SHA2_PASSWORD

var authCases = []transcriptCase{{
	name: "auth_native_and_engine",
	about: `mysql_native_password through the proxy: the greeting goes to the client with the capabilities the
proxy cannot relay removed (compression, MariaDB's extended capabilities), the client's answer goes
to the backend unchanged, and the backend's OK ends the login; then the proxy learns the engine
(backend.engine auto). A second client with a wrong password gets the backend's ERR 1045 and
both of its connections close; the first one is untouched.`,
	run: func(h *harness) {
		a := h.login("A", loginOpts{db: "app", password: "secret", engineQuery: true})
		b := h.dial("B")
		b.reply(0, pkt{payload: greeting(mariaCaps, mysql.AUTH_NATIVE_PASSWORD), label: "greeting"})
		b.clientGetsAs("greeting")
		h.secret("wrong")
		b.sendAs(1, handshakeResponse(goDriverCaps, "app", "", mysql.AUTH_NATIVE_PASSWORD, nativePassword("wrong", harnessScramble)), "handshake response")
		b.backendGetsAs("handshake response")
		b.reply(2, errPkt(1045, "28000", "Access denied for user 'app'@'localhost' (using password: YES)"))
		b.clientGets()
		b.backendClosed()
		b.clientClosed()
		h.note("the first connection still works")
		a.send(0, []byte{mysql.COM_PING})
		a.backendGets()
		a.respond(okPkt(0, 0, stAuto, 0, ""))
		a.response()
	},
}, {
	name: "engine_probe",
	about: `backend.engine auto: after the login the proxy asks SELECT @@wsrep_on; a server without that
variable (MySQL) answers ERR 1193, and the proxy asks SHOW VARIABLES LIKE 'wsrep_on' instead, then
and on every later connection. A Galera node (1) gets the Galera guard.`,
	run: func(h *harness) {
		a := h.dial("A")
		a.reply(0, pkt{payload: greeting(mariaCaps, mysql.AUTH_NATIVE_PASSWORD), label: "greeting"})
		a.clientGetsAs("greeting")
		a.sendAs(1, handshakeResponse(goDriverCaps, "app", "app", mysql.AUTH_NATIVE_PASSWORD, nil), "handshake response")
		a.backendGetsAs("handshake response")
		a.deprecateEOF = true
		a.reply(2, okPkt(0, 0, stAuto, 0, ""))
		a.clientGets()
		a.engineProbe(false, true)
		h.note("a second connection asks SHOW VARIABLES at once")
		b := h.dial("B")
		b.reply(0, pkt{payload: greeting(mariaCaps, mysql.AUTH_NATIVE_PASSWORD), label: "greeting"})
		b.clientGetsAs("greeting")
		b.sendAs(1, handshakeResponse(goDriverCaps, "app", "app", mysql.AUTH_NATIVE_PASSWORD, nil), "handshake response")
		b.backendGetsAs("handshake response")
		b.deprecateEOF = true
		b.reply(2, okPkt(0, 0, stAuto, 0, ""))
		b.clientGets()
		b.engineProbe(true, false)
		h.note("B's backend said wsrep_on ON: its INSERT gets the Galera guard (the write-counter UPDATE)")
		b.query("INSERT INTO invoices (v) VALUES (1)")
		galeraGuardRound(b, "1", guardHolds)
		b.backendGets()
		b.backendGets()
		b.respond(okPkt(1, 3, stInTrans, 0, ""))
		recheck(b, stInTrans, "1")
		b.backendGets()
		b.respond(okPkt(0, 0, stAuto, 0, ""))
		b.response()
	},
}, {
	name: "auth_caching_sha2_fast",
	about: `caching_sha2_password, fast authentication: the backend's AuthMoreData 0x03 is relayed and the
proxy waits for the backend's OK, which follows unasked; the client sends nothing in between.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		h.secret("secret")
		c := h.dial("A")
		c.reply(0, pkt{payload: greeting(mariaCaps, sha2Greeting), label: "greeting"})
		c.clientGetsAs("greeting")
		c.sendAs(1, handshakeResponse(goDriverCaps, "app", "app", sha2Greeting, sha2Password("secret", harnessScramble)), "handshake response")
		c.backendGetsAs("handshake response")
		c.deprecateEOF = true
		c.reply(2, pkt{payload: []byte{mysql.MORE_DATE_HEADER, mysql.CACHE_SHA2_FAST_AUTH}, label: "auth"}, okPkt(0, 0, stAuto, 0, ""))
		c.clientGetsAs("auth")
		c.clientGets()
	},
}, {
	name: "auth_caching_sha2_full_plain",
	about: `caching_sha2_password, full authentication with no TLS on either hop: the client asks for the
public key and encrypts its password with it; the proxy relays every packet, it has nothing to
convert. (The key and the ciphertext are random: the transcript names them.)`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		h.secret("secret")
		key, pub := rsaKey(h)
		h.rename(string(pub), "<backend public key>")
		c := h.dial("A")
		c.reply(0, pkt{payload: greeting(mariaCaps, sha2Greeting), label: "greeting"})
		c.clientGetsAs("greeting")
		c.sendAs(1, handshakeResponse(goDriverCaps, "app", "app", sha2Greeting, sha2Password("secret", harnessScramble)), "handshake response")
		c.backendGetsAs("handshake response")
		c.reply(2, pkt{payload: []byte{mysql.MORE_DATE_HEADER, mysql.CACHE_SHA2_FULL_AUTH}, label: "auth"})
		c.clientGetsAs("auth")
		c.sendAs(3, []byte{2}, "auth: request public key")
		c.backendGetsAs("auth: request public key")
		c.reply(4, pkt{payload: append([]byte{mysql.MORE_DATE_HEADER}, pub...), label: "=AuthMoreData: the backend's public key"})
		_, got := c.clientGetsAs("=AuthMoreData: a public key")
		if !bytes.Equal(got[1:], pub) {
			h.fail("the client got another key than the backend's")
		}
		enc, err := rsa.EncryptOAEP(sha1.New(), rand.Reader, &key.PublicKey, xorScramble([]byte("secret"), harnessScramble), nil)
		if err != nil {
			h.t.Fatal(err)
		}
		c.sendAs(5, enc, "=RSA-encrypted password")
		_, fwd := c.backendGetsAs("=RSA-encrypted password")
		h.line(c, "     the backend decrypts it to "+decryptPassword(h, key, fwd)+" (XOR the scramble undone)")
		c.reply(6, okPkt(0, 0, stAuto, 0, ""))
		c.clientGets()
	},
}, {
	name: "auth_caching_sha2_bridge_tls_client",
	about: `caching_sha2_password full authentication with TLS from the client and none to the backend: the
client sends its password in clear over TLS; the proxy asks the backend for its public key and
sends the password RSA-encrypted (XORed with the challenge), as the plain hop requires.`,
	backend: "engine: mariadb",
	config:  "client_tls:\n  cert_file: {{certs}}/cert.pem\n  key_file: {{certs}}/key.pem\n",
	run: func(h *harness) {
		h.secret("secret")
		key, pub := rsaKey(h)
		h.rename(string(pub), "<backend public key>")
		c := h.dial("A")
		c.reply(0, pkt{payload: greeting(mariaCaps, sha2Greeting), label: "greeting"})
		c.clientGetsAs("greeting")
		c.sendAs(1, handshakeResponse(goDriverCaps|mysql.CLIENT_SSL, "", "", "", nil)[:sslRequestLen], "handshake response")
		c.clientTLS()
		c.sendAs(2, handshakeResponse(goDriverCaps|mysql.CLIENT_SSL, "app", "app", sha2Greeting, sha2Password("secret", harnessScramble)), "handshake response")
		c.backendGetsAs("handshake response")
		c.reply(2, pkt{payload: []byte{mysql.MORE_DATE_HEADER, mysql.CACHE_SHA2_FULL_AUTH}, label: "auth"})
		c.clientGetsAs("auth")
		c.sendAs(4, []byte("secret\x00"), "auth: the password in clear (over TLS)")
		c.backendGetsAs("auth: request public key")
		c.reply(4, pkt{payload: append([]byte{mysql.MORE_DATE_HEADER}, pub...), label: "=AuthMoreData: the backend's public key"})
		_, fwd := c.backendGetsAs("=RSA-encrypted password")
		h.line(c, "     the backend decrypts it to "+decryptPassword(h, key, fwd)+" (XOR the scramble undone)")
		c.reply(6, okPkt(0, 0, stAuto, 0, ""))
		c.clientGets()
	},
}, {
	name: "auth_caching_sha2_bridge_tls_backend",
	about: `caching_sha2_password full authentication with TLS to the backend and none from the client: the
proxy sends an SSLRequest to the backend and switches to TLS before it relays the client's answer;
the client asks for a public key and gets the proxy's own (random), encrypts its password with it,
and the proxy sends it in clear over TLS, as the TLS hop allows.`,
	backend: "engine: mariadb\ntls: required",
	config:  "# {{certs}}\n",
	run: func(h *harness) {
		h.secret("secret")
		cert := loadCert(h, h.certDir())
		c := h.dial("A")
		c.reply(0, pkt{payload: greeting(mariaCaps|mysql.CLIENT_SSL, sha2Greeting), label: "greeting"})
		c.clientGetsAs("greeting")
		c.sendAs(1, handshakeResponse(goDriverCaps, "app", "app", sha2Greeting, sha2Password("secret", harnessScramble)), "handshake response")
		c.backendGetsAs("handshake response")
		c.backendTLS(cert)
		c.backendGetsAs("handshake response")
		c.reply(3, pkt{payload: []byte{mysql.MORE_DATE_HEADER, mysql.CACHE_SHA2_FULL_AUTH}, label: "auth"})
		c.clientGetsAs("auth")
		c.sendAs(3, []byte{2}, "auth: request public key")
		_, pk := c.clientGetsAs("=AuthMoreData: the proxy's public key")
		h.rename(string(pk[1:]), "<the proxy's public key>")
		block, _ := pem.Decode(pk[1:])
		if block == nil {
			h.fail("no PEM key from the proxy")
		}
		pubAny, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			h.fail("proxy key: %v", err)
		}
		enc, err := rsa.EncryptOAEP(sha1.New(), rand.Reader, pubAny.(*rsa.PublicKey), xorScramble([]byte("secret"), harnessScramble), nil)
		if err != nil {
			h.t.Fatal(err)
		}
		c.sendAs(5, enc, "=RSA-encrypted password")
		c.backendGetsAs("auth: the password in clear (over TLS)")
		c.reply(5, okPkt(0, 0, stAuto, 0, ""))
		c.clientGets()
	},
}, {
	name: "auth_switch",
	about: `An AuthSwitchRequest (0xFE) from the backend: relayed, the proxy takes the new plugin and
challenge, and the client's answer to it goes back to the backend.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		h.secret("secret")
		c := h.dial("A")
		c.reply(0, pkt{payload: greeting(mariaCaps, sha2Greeting), label: "greeting"})
		c.clientGetsAs("greeting")
		c.sendAs(1, handshakeResponse(goDriverCaps, "app", "app", sha2Greeting, sha2Password("secret", harnessScramble)), "handshake response")
		c.backendGetsAs("handshake response")
		challenge := []byte("0123456789abcdefghij")
		sw := append(append([]byte{mysql.EOF_HEADER}, mysql.AUTH_NATIVE_PASSWORD+"\x00"...), challenge...)
		c.reply(2, pkt{payload: append(sw, 0), label: "auth"})
		c.clientGetsAs("auth")
		c.sendAs(3, nativePassword("secret", challenge), "auth")
		c.backendGetsAs("auth")
		c.reply(4, okPkt(0, 0, stAuto, 0, ""))
		c.clientGets()
	},
}, {
	name: "change_user_and_reset",
	about: `COM_CHANGE_USER is relayed like a login (here the backend accepts at once), a refused one gets
the backend's ERR and the connection goes on; COM_RESET_CONNECTION is relayed and its OK ends the
session's proxy-side state (prepared statements, table locks).`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		cu := append([]byte{mysql.COM_CHANGE_USER}, "report\x00"...)
		cu = append(cu, 20)
		cu = append(cu, nativePassword("pw2", harnessScramble)...)
		cu = append(cu, "app\x00"...)
		cu = append(cu, 45, 0)
		cu = append(cu, mysql.AUTH_NATIVE_PASSWORD+"\x00"...)
		h.secret("pw2")
		c.sendAs(0, cu, "COM_CHANGE_USER user=report db=app")
		c.backendGetsAs("COM_CHANGE_USER user=report db=app")
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.clientGets()
		h.note("a refused change of user")
		c.sendAs(0, cu, "COM_CHANGE_USER user=report db=app")
		c.backendGetsAs("COM_CHANGE_USER user=report db=app")
		c.respond(errPkt(1045, "28000", "Access denied for user 'report'@'localhost' (using password: YES)"))
		c.clientGets()
		h.note("reset connection")
		c.send(0, []byte{mysql.COM_RESET_CONNECTION})
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
	},
}, {
	name: "change_user_auth_switch",
	about: `COM_CHANGE_USER whose account uses another plugin: the backend answers with an AuthSwitchRequest,
relayed with the command's sequence numbers (the response to COM_CHANGE_USER starts at 1), the
client's answer goes back, and the backend's OK ends it; the session then runs as the new user
(the next audit record names it).`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		cu := append([]byte{mysql.COM_CHANGE_USER}, "report\x00"...)
		cu = append(cu, 32)
		cu = append(cu, sha2Password("pw2", harnessScramble)...)
		cu = append(cu, "app\x00"...)
		cu = append(cu, 45, 0)
		cu = append(cu, sha2Greeting+"\x00"...)
		h.secret("pw2")
		c.sendAs(0, cu, "COM_CHANGE_USER user=report db=app plugin=caching_sha2_password")
		c.backendGetsAs("COM_CHANGE_USER user=report db=app plugin=caching_sha2_password")
		challenge := []byte("abcdefghij0123456789")
		sw := append(append([]byte{mysql.EOF_HEADER}, mysql.AUTH_NATIVE_PASSWORD+"\x00"...), challenge...)
		c.respond(pkt{payload: append(sw, 0), label: "auth"})
		c.clientGetsAs("auth")
		c.sendAs(2, nativePassword("pw2", challenge), "auth")
		c.backendGetsAs("auth")
		c.reply(3, okPkt(0, 0, stAuto, 0, ""))
		c.clientGets()
		c.query("TRUNCATE TABLE invoices")
		c.response()
		h.audit()
	},
}, {
	name: "auth_tls_required",
	about: `client_tls.required: a client that answers the greeting without switching to TLS gets ERR 3159
and the connection ends; nothing of its answer reaches the backend.`,
	backend: "engine: mariadb",
	config:  "client_tls:\n  cert_file: {{certs}}/cert.pem\n  key_file: {{certs}}/key.pem\n  required: true\n",
	run: func(h *harness) {
		c := h.dial("A")
		c.reply(0, pkt{payload: greeting(mariaCaps, mysql.AUTH_NATIVE_PASSWORD), label: "greeting"})
		c.clientGetsAs("greeting")
		c.sendAs(1, handshakeResponse(goDriverCaps, "app", "app", mysql.AUTH_NATIVE_PASSWORD, nativePassword("secret", harnessScramble)), "handshake response")
		c.clientGets()
		c.backendClosed()
		c.clientClosed()
	},
}, {
	name: "backend_refuses_connection",
	about: `A backend that answers the connection with an ERR instead of a greeting (here: too many
connections): the client gets that ERR as it is, and both connections close.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.dial("A")
		c.reply(0, pkt{payload: wire.InitialErrPayload(1040, "Too many connections")})
		c.clientGets()
		c.backendClosed()
		c.clientClosed()
	},
}}

// certDir returns the certificate directory the case's config names.
func (h *harness) certDir() string { return h.certs }

func TestTranscriptAuth(t *testing.T) { runTranscripts(t, authCases) }

// prefixedConn reads pre before the connection's own data.
type prefixedConn struct {
	net.Conn
	pre []byte
}

func (c *prefixedConn) Read(b []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(b, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}
