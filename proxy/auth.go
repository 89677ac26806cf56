package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// handshake connects to the backend and relays authentication: the client
// gets the backend's own challenge, so its answer is valid for the backend
// and the proxy never needs a password. Each hop negotiates TLS on its own.
func (c *clientConn) handshake(rt *runtime) error {
	cfg := rt.cfg
	deadline := time.Now().Add(cfg.Timeouts.Handshake.D())
	c.client.SetDeadline(deadline)

	hs, err := c.connectBackend(cfg, deadline)
	if err != nil {
		return err
	}
	c.backend.SetDeadline(deadline)
	c.connID = hs.connID
	c.scramble = hs.scramble
	c.srv = parseServerVersion(hs.version)
	c.noteStatus(hs.status)
	c.testPanic(panicHandshake)

	useBackendTLS := c.p.backendTLS != nil && hs.caps&mysql.CLIENT_SSL != 0
	if c.p.backendTLS != nil && !useBackendTLS && c.p.backendMode != policy.TLSPreferred {
		c.sendInitialError("fenceproxy: backend.tls is " + c.p.backendMode + " but the backend does not offer TLS")
		return errors.New("backend does not offer TLS")
	}

	offerTLS := c.p.clientTLS != nil
	if _, err := c.client.WritePacket(0, hs.forClient(offerTLS)); err != nil {
		return err
	}
	if err := c.client.Flush(); err != nil {
		return err
	}
	if err := c.refuseStrayProxyHeader(); err != nil {
		return err
	}
	resp, cseq, err := c.client.ReadPacket(nil, wire.MaxWholePacket)
	if err != nil {
		return err
	}
	if err := c.checkHandshakeSeq(cseq, 1); err != nil {
		return err
	}
	ch, err := parseClientHandshake(resp)
	if err != nil {
		c.writeAuthError(cseq+1, erHandshake, "08S01", "Bad handshake")
		return err
	}
	if len(resp) == sslRequestLen {
		if !offerTLS {
			return c.client.Err(wire.Malformed("TLS requested but not offered"))
		}
		tc := tls.Server(c.client.TLSTransport(), c.p.clientTLS)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			return c.client.Err(fmt.Errorf("TLS handshake: %w", err))
		}
		if err := c.client.UpgradeTLS(tc); err != nil {
			return err
		}
		c.clientTLS = true
		if resp, cseq, err = c.client.ReadPacket(nil, wire.MaxWholePacket); err != nil {
			return err
		}
		if err := c.checkHandshakeSeq(cseq, 2); err != nil {
			return err
		}
		if ch, err = parseClientHandshake(resp); err != nil || len(resp) == sslRequestLen {
			c.writeAuthError(cseq+1, erHandshake, "08S01", "Bad handshake")
			return c.client.Err(wire.Malformed("handshake response after TLS"))
		}
	} else if cfg.ClientTLS.Required {
		c.p.metrics.connectionsRejected[rejectTLSRequired].Inc()
		c.writeAuthError(cseq+1, erSecureTransport, "HY000",
			"Connections using insecure transport are prohibited (fenceproxy client_tls.required)")
		return errors.New("client without TLS refused")
	}
	offered := hs.offeredCaps(offerTLS)
	c.caps = ch.caps & offered
	c.deprecateEOF = c.caps&mysql.CLIENT_DEPRECATE_EOF != 0
	c.multiStatements = c.caps&mysql.CLIENT_MULTI_STATEMENTS != 0
	c.user = ch.user
	c.program = ch.program
	c.sess.Schema = ch.db
	c.resetCharsetUnsafe = collationUnsafe(c.srv, uint16(ch.charset))
	c.setCharset(c.resetCharsetUnsafe)
	c.sess.NamesUTF8 = collationUTF8(c.srv, uint16(ch.charset))
	c.sess.ASCIIRemap = collationRemaps(c.srv, uint16(ch.charset))

	bseq := byte(1)
	if useBackendTLS {
		if _, err := c.backend.WritePacket(bseq, ch.forBackend(offered, true, sslRequestLen)); err != nil {
			return err
		}
		if err := c.backend.Flush(); err != nil {
			return err
		}
		tc := tls.Client(c.backend.TLSTransport(), c.p.backendTLS)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			c.p.metrics.backendDialFailed()
			c.writeAuthError(cseq+1, erBackendUnavailable, "HY000", "fenceproxy: TLS to the backend failed: "+err.Error())
			return c.backend.Err(fmt.Errorf("TLS handshake: %w", err))
		}
		if err := c.backend.UpgradeTLS(tc); err != nil {
			return err
		}
		c.backendTLS = true
		bseq = 2
	}
	if _, err := c.backend.WritePacket(bseq, ch.forBackend(offered, useBackendTLS, len(ch.raw))); err != nil {
		return c.backendLostAtLogin(cseq, err)
	}
	if err := c.backend.Flush(); err != nil {
		return c.backendLostAtLogin(cseq, err)
	}
	plugin := hs.plugin
	if ch.plugin != "" {
		plugin = ch.plugin
	}
	ok, err := c.relayAuth(cseq, bseq, plugin)
	if err != nil {
		return err
	}
	if !ok {
		return c.loginRefused()
	}
	if err := c.sendEngineProbe(rt); err != nil {
		return err
	}
	c.client.SetDeadline(time.Time{})
	if c.probe == probeNone {
		c.backend.SetDeadline(time.Time{})
	} else {
		// finishEngineProbe reads the answer under the handshake's deadline.
		c.backend.SetWriteDeadline(time.Time{})
		c.probeDeadline = deadline
	}
	return nil
}

// connectBackend dials the backend and reads its initial handshake. A
// failure reaches the client as an ERR packet in place of a handshake.
func (c *clientConn) connectBackend(cfg *policy.Config, deadline time.Time) (*serverHandshake, error) {
	timeout := cfg.Timeouts.Connect.D()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", c.p.backendAddr)
	if err != nil {
		c.p.metrics.backendDialFailed()
		c.sendInitialError(fmt.Sprintf("fenceproxy: cannot connect to the backend %s: %v", c.p.backendAddr, err))
		return nil, fmt.Errorf("backend dial: %w", err)
	}
	c.backend = wire.NewConn(wire.Backend, nc)
	c.backend.SetDeadline(time.Now().Add(timeout))
	p, _, err := c.backend.ReadPacket(nil, wire.MaxShortPacket)
	if err != nil {
		c.p.metrics.backendDialFailed()
		c.sendInitialError(fmt.Sprintf("fenceproxy: the backend %s sent no handshake: %v", c.p.backendAddr, err))
		return nil, fmt.Errorf("backend handshake: %w", err)
	}
	if wire.IsErr(p) {
		// e.g. the backend's own "Too many connections" or "Host blocked":
		// the client should see it as it is.
		c.p.metrics.backendDialFailed()
		c.client.WritePacket(0, p)
		c.client.Flush()
		return nil, fmt.Errorf("backend refused: %s", wire.ParseErr(p).Msg)
	}
	hs, err := parseServerHandshake(p)
	if err != nil {
		c.p.metrics.backendDialFailed()
		c.sendInitialError("fenceproxy: the backend's handshake is not MySQL protocol 10")
		return nil, c.backend.Err(err)
	}
	c.p.metrics.setBackendUp(true)
	return hs, nil
}

// checkHandshakeSeq answers a handshake response whose sequence number is
// not the one that must follow the greeting as the server does: ERR 1156
// with the sequence number it expected, and the end of the connection (the
// proxy would otherwise renumber it and log the client in).
func (c *clientConn) checkHandshakeSeq(got, want byte) error {
	if got == want {
		return nil
	}
	c.writeAuthError(want, erNetPacketsOutOfOrder, "08S01", "Got packets out of order")
	return c.client.Err(wire.Malformed("handshake response with sequence number %d, want %d", got, want))
}

// sendInitialError answers a client that has not seen a handshake yet.
func (c *clientConn) sendInitialError(msg string) {
	c.client.SetWriteDeadline(time.Now().Add(time.Second))
	c.client.WritePacket(0, wire.InitialErrPayload(erBackendUnavailable, msg))
	c.client.Flush()
}

func (c *clientConn) writeAuthError(seq byte, code uint16, state, msg string) {
	c.client.WritePacket(seq, wire.ErrPayload(code, state, msg))
	c.client.Flush()
}

// relayAuth relays the authentication exchange after the client's response
// went to the backend, until the backend's OK (true) or ERR (false). cseq
// and bseq are the last sequence numbers used on each hop.
func (c *clientConn) relayAuth(cseq, bseq byte, plugin string) (bool, error) {
	for {
		p, s, err := c.backend.ReadPacket(nil, wire.MaxWholePacket)
		if err != nil {
			return false, c.backendLostAtLogin(cseq, err)
		}
		bseq = s
		a, err := wire.ParseAuth(p)
		if err != nil {
			return false, c.backend.Err(err)
		}
		switch a.Kind {
		case wire.AuthOK:
			if a.OKValid {
				c.noteStatus(a.OK.Status)
			}
			cseq++
			if _, err := c.client.WritePacket(cseq, p); err != nil {
				return false, err
			}
			return true, c.client.Flush()
		case wire.AuthErr:
			cseq++
			c.client.WritePacket(cseq, p) // the backend's own words: wrong password, unknown database...
			c.authErr = a.Err
			return false, c.client.Flush()
		case wire.AuthSwitch:
			plugin = a.Plugin
			c.scramble = a.Challenge
		}
		cseq++
		if _, err := c.client.WritePacket(cseq, p); err != nil {
			return false, err
		}
		if err := c.client.Flush(); err != nil {
			return false, err
		}
		isSHA2 := plugin == mysql.AUTH_CACHING_SHA2_PASSWORD
		if isSHA2 && a.SHA2FastAuth() {
			continue // fast authentication succeeded: the backend's OK follows unasked
		}
		resp, s2, err := c.client.ReadPacket(nil, wire.MaxWholePacket)
		if err != nil {
			return false, err
		}
		cseq = s2
		if isSHA2 && a.SHA2FullAuth() && c.clientTLS != c.backendTLS {
			if resp, cseq, bseq, err = c.bridgeFullAuth(resp, cseq, bseq); err != nil {
				return false, err
			}
			if resp == nil {
				return false, nil
			}
		}
		bseq++
		if _, err := c.backend.WritePacket(bseq, resp); err != nil {
			return false, c.backendLostAtLogin(cseq, err)
		}
		if err := c.backend.Flush(); err != nil {
			return false, c.backendLostAtLogin(cseq, err)
		}
	}
}

// backendLostAtLogin answers the client, whose last packet had sequence
// number cseq, with ERR 9001 when the backend connection fails during the
// login (closed, reset, timed out): the client would otherwise see its
// connection closed with no reason. Over TLS this is how a server refuses the proxy's client
// certificate (with TLS 1.3 the proxy's side of the handshake is done
// before the server has checked it), so it counts as a failed connection
// to the backend. err is returned as it is.
func (c *clientConn) backendLostAtLogin(cseq byte, err error) error {
	c.p.metrics.backendDialFailed() // no login gets through: as a failed TLS handshake
	msg := "fenceproxy: the connection to the backend failed during the login: " + err.Error()
	if c.backendTLS {
		msg += " (over TLS a server ends the connection here when it does not accept the proxy's client certificate, backend.cert_file)"
	}
	c.writeAuthError(cseq+1, erBackendUnavailable, "HY000", msg)
	return err
}

// bridgeFullAuth completes caching_sha2_password's full authentication when
// only one hop has TLS. The client sends its password in the form its own hop
// allows (cleartext under TLS, RSA-encrypted otherwise); the backend expects
// the form for its hop. The proxy converts, holding the password only in
// memory for that moment. It returns what to send to the backend, or nil
// when it answered the client with an error itself.
func (c *clientConn) bridgeFullAuth(resp []byte, cseq, bseq byte) ([]byte, byte, byte, error) {
	const requestPublicKey = 2
	if c.clientTLS {
		// Client over TLS sent its password in clear; the plain backend hop
		// needs it encrypted with the backend's public key.
		if len(resp) == 1 && resp[0] == requestPublicKey {
			return resp, cseq, bseq, nil
		}
		password := bytes.TrimRight(resp, "\x00")
		bseq++
		if _, err := c.backend.WritePacket(bseq, []byte{requestPublicKey}); err != nil {
			return nil, cseq, bseq, err
		}
		if err := c.backend.Flush(); err != nil {
			return nil, cseq, bseq, err
		}
		p, s, err := c.backend.ReadPacket(nil, wire.MaxShortPacket)
		if err != nil {
			return nil, cseq, bseq, err
		}
		bseq = s
		a, err := wire.ParseAuth(p)
		if err != nil || a.Kind != wire.AuthMoreData || len(a.More) == 0 {
			return nil, cseq, bseq, c.backend.Err(wire.Malformed("expected the backend's public key"))
		}
		pub, err := parsePublicKey(a.More)
		if err != nil {
			return nil, cseq, bseq, c.backend.Err(err)
		}
		enc, err := rsa.EncryptOAEP(sha1.New(), rand.Reader, pub, xorScramble(password, c.scramble), nil)
		if err != nil {
			return nil, cseq, bseq, c.backend.Err(err)
		}
		return enc, cseq, bseq, nil
	}
	// Plain client, TLS backend: the client encrypts its password with the
	// proxy's public key; the backend takes it in clear over TLS.
	key, err := c.p.authKey()
	if err != nil {
		return nil, cseq, bseq, err
	}
	if len(resp) == 1 && resp[0] == requestPublicKey {
		der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
		if err != nil {
			return nil, cseq, bseq, err
		}
		pemKey := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
		cseq++
		if _, err := c.client.WritePacket(cseq, wire.MoreDataPayload(pemKey)); err != nil {
			return nil, cseq, bseq, err
		}
		if err := c.client.Flush(); err != nil {
			return nil, cseq, bseq, err
		}
		if resp, cseq, err = c.client.ReadPacket(nil, wire.MaxShortPacket); err != nil {
			return nil, cseq, bseq, err
		}
	}
	plain, err := rsa.DecryptOAEP(sha1.New(), nil, key, resp, nil)
	if err != nil {
		c.writeAuthError(cseq+1, erAccessDenied, "28000",
			"fenceproxy: cannot complete caching_sha2_password authentication: the password was encrypted with a key other than the proxy's (do not pin the server's public key when connecting through fenceproxy, or use TLS to the proxy)")
		return nil, cseq, bseq, nil
	}
	// plain is the NUL-terminated password XORed with the challenge: undo
	// the XOR only (xorScramble would append a second terminator).
	for i := range plain {
		plain[i] ^= c.scramble[i%len(c.scramble)]
	}
	return plain, cseq, bseq, nil
}

// xorScramble is caching_sha2_password's obfuscation of the NUL-terminated
// password with the challenge before RSA; applied twice it undoes itself.
func xorScramble(pw, scramble []byte) []byte {
	out := make([]byte, len(pw), len(pw)+1)
	copy(out, pw)
	if len(out) == 0 || out[len(out)-1] != 0 {
		out = append(out, 0)
	}
	for i := range out {
		out[i] ^= scramble[i%len(scramble)]
	}
	return out
}

func parsePublicKey(b []byte) (*rsa.PublicKey, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("backend public key: no PEM block")
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		if rk, err2 := x509.ParsePKCS1PublicKey(block.Bytes); err2 == nil {
			return rk, nil
		}
		return nil, fmt.Errorf("backend public key: %w", err)
	}
	rk, ok := k.(*rsa.PublicKey)
	if !ok {
		return nil, errors.New("backend public key is not RSA")
	}
	return rk, nil
}

// authKey is the proxy's RSA key for clients that encrypt their password
// (caching_sha2_password without TLS), made on first use.
func (p *Proxy) authKey() (*rsa.PrivateKey, error) {
	p.rsaOnce.Do(func() { p.rsaKey, p.rsaErr = rsa.GenerateKey(rand.Reader, 2048) })
	return p.rsaKey, p.rsaErr
}
