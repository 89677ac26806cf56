package integration

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
)

// This file is a small MySQL client written for the tests, independent of
// the proxy's code: it speaks the protocol from the documentation, reads
// every response by the framing rules and keeps each packet as it came, so
// that responses direct and through the proxy can be compared byte for byte.

// Capability flags (protocol documentation names).
const (
	capLongPassword     = 1 << 0
	capLongFlag         = 1 << 2
	capConnectWithDB    = 1 << 3
	capProtocol41       = 1 << 9
	capSSL              = 1 << 11
	capTransactions     = 1 << 13
	capSecureConnection = 1 << 15
	capMultiStatements  = 1 << 16
	capMultiResults     = 1 << 17
	capPSMultiResults   = 1 << 18
	capPluginAuth       = 1 << 19
	capConnectAttrs     = 1 << 20
	capPluginAuthLenenc = 1 << 21
	capSessionTrack     = 1 << 23
	capDeprecateEOF     = 1 << 24
	capCompress         = 1 << 5
)

// Server status flags.
const (
	stInTrans       = 0x0001
	stMoreResults   = 0x0008
	stCursorExists  = 0x0040
	stLastRowSent   = 0x0080
	stPSOutParams   = 0x1000
	maxPacketLength = 1<<24 - 1
)

// Commands.
const (
	comQuit             = 0x01
	comInitDB           = 0x02
	comQuery            = 0x03
	comFieldList        = 0x04
	comStatistics       = 0x09
	comProcessKill      = 0x0c
	comPing             = 0x0e
	comChangeUser       = 0x11
	comStmtPrepare      = 0x16
	comStmtExecute      = 0x17
	comStmtSendLongData = 0x18
	comStmtClose        = 0x19
	comStmtReset        = 0x1a
	comSetOption        = 0x1b
	comStmtFetch        = 0x1c
	comResetConnection  = 0x1f
)

// wirePacket is one physical packet as received.
type wirePacket struct {
	Seq     byte
	Payload []byte
}

func (p wirePacket) String() string {
	s := hex.EncodeToString(p.Payload)
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return fmt.Sprintf("seq=%d len=%d %s %q", p.Seq, len(p.Payload), s, printable(p.Payload))
}

func printable(b []byte) string {
	if len(b) > 80 {
		b = b[:80]
	}
	return strings.Map(func(r rune) rune {
		if r < 32 || r > 126 {
			return '.'
		}
		return r
	}, string(b))
}

// wireError is an ERR packet.
type wireError struct {
	Code  uint16
	State string
	Msg   string
}

func (e *wireError) Error() string { return fmt.Sprintf("ERR %d (%s): %s", e.Code, e.State, e.Msg) }

func parseWireError(p []byte) *wireError {
	if len(p) < 3 || p[0] != 0xff {
		return nil
	}
	e := &wireError{Code: binary.LittleEndian.Uint16(p[1:])}
	rest := p[3:]
	if len(rest) >= 6 && rest[0] == '#' {
		e.State, rest = string(rest[1:6]), rest[6:]
	}
	e.Msg = string(rest)
	return e
}

// wireOptions says how a wireConn logs in.
type wireOptions struct {
	User, Password, DB string
	DeprecateEOF       bool
	MultiStatements    bool
	TLS                *tls.Config // nil: plain; else SSLRequest first (even if not offered)
	Timeout            time.Duration
	Collation          byte // handshake character set (collation id); 0: utf8mb4_general_ci
	NoPluginAuth       bool // leave CLIENT_PLUGIN_AUTH out: no plugin names in the handshake or COM_CHANGE_USER
	// ExtraCaps are set and ClearCaps cleared in the capability flags
	// sent, whatever the server offered (attacks on the proxy's
	// capability handling); ExtCaps go into bytes 28-31 of the handshake
	// response, MariaDB's extended capabilities (bits 32-63).
	ExtraCaps, ClearCaps, ExtCaps uint32
}

// wireConn is one raw protocol connection.
type wireConn struct {
	nc       net.Conn
	r        *bufio.Reader
	opts     wireOptions
	caps     uint32 // what this client sent
	srvCaps  uint32 // what the server offered
	connID   uint32
	version  string
	salt     []byte
	status   uint16
	greeting []byte
	authOK   []byte
	seq      byte // last sequence number read or written
}

// dialWire connects and logs in. An ERR from the server (instead of the
// greeting, or from authentication) is returned as a *wireError.
func dialWire(addr string, o wireOptions) (*wireConn, error) {
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	nc, err := net.DialTimeout("tcp", addr, o.Timeout)
	if err != nil {
		return nil, err
	}
	w := &wireConn{nc: nc, r: newReader(nc), opts: o}
	if err := w.login(); err != nil {
		nc.Close()
		return nil, err
	}
	return w, nil
}

func (w *wireConn) Close() error { return w.nc.Close() }

func newReader(nc net.Conn) *bufio.Reader { return bufio.NewReaderSize(nc, 64<<10) }

// deadline bounds the next exchange so that a hang fails the test instead
// of stalling it.
func (w *wireConn) deadline() { w.nc.SetDeadline(time.Now().Add(w.opts.Timeout)) }

func (w *wireConn) readPacket() (wirePacket, error) {
	var h [4]byte
	if _, err := io.ReadFull(w.r, h[:]); err != nil {
		return wirePacket{}, err
	}
	n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
	p := wirePacket{Seq: h[3], Payload: make([]byte, n)}
	if _, err := io.ReadFull(w.r, p.Payload); err != nil {
		return wirePacket{}, err
	}
	w.seq = h[3]
	return p, nil
}

// readLogical reads one logical packet, joining continuation packets; pkts
// are the physical packets.
func (w *wireConn) readLogical() (payload []byte, pkts []wirePacket, err error) {
	for {
		p, err := w.readPacket()
		if err != nil {
			return nil, pkts, err
		}
		pkts = append(pkts, p)
		payload = append(payload, p.Payload...)
		if len(p.Payload) < maxPacketLength {
			return payload, pkts, nil
		}
	}
}

func (w *wireConn) writePacket(seq byte, payload []byte) error {
	var buf bytes.Buffer
	for {
		n := min(len(payload), maxPacketLength)
		buf.Write([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq})
		buf.Write(payload[:n])
		payload = payload[n:]
		w.seq = seq
		seq++
		if n < maxPacketLength {
			break
		}
	}
	_, err := w.nc.Write(buf.Bytes())
	return err
}

func (w *wireConn) login() error {
	w.deadline()
	g, err := w.readPacket()
	if err != nil {
		return fmt.Errorf("reading the greeting: %w", err)
	}
	if e := parseWireError(g.Payload); e != nil {
		return e
	}
	w.greeting = g.Payload
	if err := w.parseGreeting(g.Payload); err != nil {
		return err
	}
	caps := uint32(capLongPassword | capLongFlag | capProtocol41 | capTransactions | capSecureConnection |
		capMultiResults | capPSMultiResults | capPluginAuth | capPluginAuthLenenc | capSessionTrack)
	if w.opts.DB != "" {
		caps |= capConnectWithDB
	}
	if w.opts.DeprecateEOF {
		caps |= capDeprecateEOF
	}
	if w.opts.MultiStatements {
		caps |= capMultiStatements
	}
	if w.opts.NoPluginAuth {
		caps &^= capPluginAuth | capPluginAuthLenenc
	}
	caps &= w.srvCaps
	caps |= capLongPassword | capProtocol41 // required, whatever is offered
	if w.opts.TLS != nil {
		caps |= capSSL // asked for even when not offered: the tests check that case
	}
	caps = (caps | w.opts.ExtraCaps) &^ w.opts.ClearCaps
	w.caps = caps
	seq := g.Seq + 1
	fixed := make([]byte, 32)
	binary.LittleEndian.PutUint32(fixed, caps)
	binary.LittleEndian.PutUint32(fixed[4:], 1<<24)
	fixed[8] = 45 // utf8mb4_general_ci
	if w.opts.Collation != 0 {
		fixed[8] = w.opts.Collation
	}
	binary.LittleEndian.PutUint32(fixed[28:], w.opts.ExtCaps)
	if w.opts.TLS != nil {
		if err := w.writePacket(seq, fixed); err != nil {
			return err
		}
		seq++
		tc := tls.Client(w.nc, w.opts.TLS)
		if err := tc.Handshake(); err != nil {
			return fmt.Errorf("TLS handshake: %w", err)
		}
		w.nc = tc
		w.r = bufio.NewReaderSize(tc, 64<<10)
	}
	resp := append([]byte(nil), fixed...)
	resp = append(append(resp, w.opts.User...), 0)
	auth := nativePassword(w.opts.Password, w.salt)
	resp = append(append(resp, byte(len(auth))), auth...)
	if w.opts.DB != "" {
		resp = append(append(resp, w.opts.DB...), 0)
	}
	if caps&capPluginAuth != 0 {
		resp = append(append(resp, "mysql_native_password"...), 0)
	}
	if caps&capConnectAttrs != 0 {
		resp = append(resp, 0) // no attributes
	}
	if err := w.writePacket(seq, resp); err != nil {
		return err
	}
	pkts, err := w.authExchange()
	if err != nil {
		return err
	}
	last := pkts[len(pkts)-1].Payload
	if e := parseWireError(last); e != nil {
		return e
	}
	w.authOK = last
	w.noteOK(last)
	return nil
}

func (w *wireConn) parseGreeting(p []byte) error {
	if len(p) < 1 || p[0] != 10 {
		return fmt.Errorf("greeting: protocol %v", p[:min(len(p), 1)])
	}
	i := 1
	end := bytes.IndexByte(p[i:], 0)
	if end < 0 {
		return errors.New("greeting: version")
	}
	w.version = string(p[i : i+end])
	i += end + 1
	w.connID = binary.LittleEndian.Uint32(p[i:])
	i += 4
	w.salt = append([]byte(nil), p[i:i+8]...)
	i += 9
	w.srvCaps = uint32(binary.LittleEndian.Uint16(p[i:]))
	i += 2
	w.status = binary.LittleEndian.Uint16(p[i+1:])
	w.srvCaps |= uint32(binary.LittleEndian.Uint16(p[i+3:])) << 16
	authLen := int(p[i+5])
	i += 16
	n := max(13, authLen-8)
	w.salt = append(w.salt, bytes.TrimRight(p[i:i+n], "\x00")...)
	return nil
}

// authExchange answers auth switch requests (mysql_native_password only)
// until OK or ERR and returns every packet the server sent.
func (w *wireConn) authExchange() ([]wirePacket, error) {
	var pkts []wirePacket
	for {
		p, err := w.readPacket()
		if err != nil {
			return pkts, fmt.Errorf("authentication: %w", err)
		}
		pkts = append(pkts, p)
		switch {
		case len(p.Payload) > 0 && (p.Payload[0] == 0x00 || p.Payload[0] == 0xff):
			return pkts, nil
		case len(p.Payload) > 0 && p.Payload[0] == 0xfe:
			name, data, _ := bytes.Cut(p.Payload[1:], []byte{0})
			if string(name) != "mysql_native_password" {
				return pkts, fmt.Errorf("auth switch to unsupported plugin %q", name)
			}
			w.salt = bytes.TrimRight(data, "\x00")
			if err := w.writePacket(p.Seq+1, nativePassword(w.opts.Password, w.salt)); err != nil {
				return pkts, err
			}
		default:
			return pkts, fmt.Errorf("unexpected authentication packet %v", p)
		}
	}
}

// nativePassword is mysql_native_password's scramble:
// SHA1(pw) XOR SHA1(salt + SHA1(SHA1(pw))).
func nativePassword(pw string, salt []byte) []byte {
	if pw == "" {
		return nil
	}
	h1 := sha1.Sum([]byte(pw))
	h2 := sha1.Sum(h1[:])
	h := sha1.New()
	h.Write(salt[:20])
	h.Write(h2[:])
	h3 := h.Sum(nil)
	for i := range h3 {
		h3[i] ^= h1[i]
	}
	return h3
}

func (w *wireConn) deprecateEOF() bool { return w.caps&capDeprecateEOF != 0 }

// okStatus reads an OK packet's (or an OK-form terminator's) status.
func okStatus(p []byte) (uint16, bool) {
	i := 1
	for k := 0; k < 2; k++ {
		if i >= len(p) {
			return 0, false
		}
		switch p[i] {
		case 0xfc:
			i += 3
		case 0xfd:
			i += 4
		case 0xfe:
			i += 9
		default:
			i++
		}
	}
	if i+2 > len(p) {
		return 0, false
	}
	return binary.LittleEndian.Uint16(p[i:]), true
}

func (w *wireConn) noteOK(p []byte) {
	if st, ok := okStatus(p); ok {
		w.status = st
	}
}

// isTerminator tells whether p ends a row sequence: an EOF packet, or under
// CLIENT_DEPRECATE_EOF an OK packet with the 0xFE header.
func (w *wireConn) isTerminator(p []byte) bool {
	if len(p) == 0 || p[0] != 0xfe {
		return false
	}
	if w.deprecateEOF() {
		return len(p) < maxPacketLength
	}
	return len(p) < 9
}

// terminatorStatus is the status flags of a terminator.
func (w *wireConn) terminatorStatus(p []byte) uint16 {
	if len(p) == 5 {
		return binary.LittleEndian.Uint16(p[3:])
	}
	st, _ := okStatus(p)
	return st
}

// send writes a command packet (sequence 0).
func (w *wireConn) send(payload []byte) error {
	w.deadline()
	return w.writePacket(0, payload)
}

// wireResponse is a whole response: its packets, and, if the server closed
// the connection, how.
type wireResponse struct {
	Packets []wirePacket
	Closed  bool
}

func (r wireResponse) String() string {
	var b strings.Builder
	for _, p := range r.Packets {
		b.WriteString("  " + p.String() + "\n")
	}
	if r.Closed {
		b.WriteString("  <connection closed>\n")
	}
	return b.String()
}

// last is the last packet's payload (nil if none).
func (r wireResponse) last() []byte {
	if len(r.Packets) == 0 {
		return nil
	}
	return r.Packets[len(r.Packets)-1].Payload
}

// err is the ERR packet ending the response, if any.
func (r wireResponse) err() *wireError { return parseWireError(r.last()) }

// responseReader accumulates a response's packets.
type responseReader struct {
	w    *wireConn
	resp wireResponse
}

func (rr *responseReader) next() ([]byte, error) {
	payload, pkts, err := rr.w.readLogical()
	rr.resp.Packets = append(rr.resp.Packets, pkts...)
	return payload, err
}

// readResults reads the response to COM_QUERY or COM_STMT_EXECUTE: results
// chained by SERVER_MORE_RESULTS_EXISTS. cursor: the execute asked for a
// cursor, so a result set may end right after its metadata.
func (w *wireConn) readResults(cursor bool) (wireResponse, error) {
	rr := &responseReader{w: w}
	for {
		p, err := rr.next()
		if err != nil {
			return rr.resp, err
		}
		if len(p) == 0 {
			return rr.resp, errors.New("empty packet")
		}
		switch p[0] {
		case 0x00:
			w.noteOK(p)
			if w.status&stMoreResults == 0 {
				return rr.resp, nil
			}
			continue
		case 0xff:
			return rr.resp, nil
		case 0xfb:
			return rr.resp, errors.New("LOCAL INFILE request: not supported by this test client")
		}
		cols, _, _ := gomysql.LengthEncodedInt(p)
		for i := uint64(0); i < cols; i++ {
			if _, err := rr.next(); err != nil {
				return rr.resp, err
			}
		}
		if !w.deprecateEOF() {
			eof, err := rr.next()
			if err != nil {
				return rr.resp, err
			}
			if !w.isTerminator(eof) {
				return rr.resp, fmt.Errorf("expected EOF after column definitions, got %x", eof)
			}
			if st := w.terminatorStatus(eof); cursor && st&stCursorExists != 0 {
				w.status = st
				return rr.resp, nil
			}
		}
		for {
			row, err := rr.next()
			if err != nil {
				return rr.resp, err
			}
			if len(row) > 0 && row[0] == 0xff {
				return rr.resp, nil
			}
			if w.isTerminator(row) {
				w.status = w.terminatorStatus(row)
				break
			}
		}
		if w.status&stMoreResults == 0 {
			return rr.resp, nil
		}
	}
}

// readPrepare reads the response to COM_STMT_PREPARE and returns the
// statement id and parameter count.
func (w *wireConn) readPrepare() (wireResponse, uint32, int, error) {
	rr := &responseReader{w: w}
	p, err := rr.next()
	if err != nil || len(p) == 0 || p[0] == 0xff {
		return rr.resp, 0, 0, err
	}
	if p[0] != 0 || len(p) < 12 {
		return rr.resp, 0, 0, fmt.Errorf("prepare: unexpected %x", p)
	}
	id := binary.LittleEndian.Uint32(p[1:])
	cols := int(binary.LittleEndian.Uint16(p[5:]))
	params := int(binary.LittleEndian.Uint16(p[7:]))
	for _, n := range []int{params, cols} {
		if n == 0 {
			continue
		}
		for i := 0; i < n; i++ {
			if _, err := rr.next(); err != nil {
				return rr.resp, 0, 0, err
			}
		}
		if !w.deprecateEOF() {
			if _, err := rr.next(); err != nil {
				return rr.resp, 0, 0, err
			}
		}
	}
	return rr.resp, id, params, nil
}

// readRows reads rows (or COM_FIELD_LIST's column definitions) until a
// terminator or an ERR.
func (w *wireConn) readRows() (wireResponse, error) {
	rr := &responseReader{w: w}
	for {
		p, err := rr.next()
		if err != nil {
			return rr.resp, err
		}
		if len(p) > 0 && p[0] == 0xff {
			return rr.resp, nil
		}
		if w.isTerminator(p) {
			w.status = w.terminatorStatus(p)
			return rr.resp, nil
		}
	}
}

// readOne reads a one-packet response.
func (w *wireConn) readOne() (wireResponse, error) {
	rr := &responseReader{w: w}
	p, err := rr.next()
	if err == nil && len(p) > 0 && p[0] == 0 {
		w.noteOK(p)
	}
	return rr.resp, err
}

// readClosed expects the server to close the connection (after COM_QUIT or
// a fatal error), recording anything it sent first.
func (w *wireConn) readClosed() (wireResponse, error) {
	rr := &responseReader{w: w}
	for {
		_, err := rr.next()
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isConnReset(err) {
			rr.resp.Closed = true
			return rr.resp, nil
		}
		if err != nil {
			return rr.resp, err
		}
	}
}

func isConnReset(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe"))
}

// query sends COM_QUERY and reads its results.
func (w *wireConn) query(sql string) (wireResponse, error) {
	if err := w.send(append([]byte{comQuery}, sql...)); err != nil {
		return wireResponse{}, err
	}
	return w.readResults(false)
}

// mustQuery runs sql and fails the test on an I/O error or an ERR.
func (w *wireConn) mustQuery(t testing.TB, sql string) wireResponse {
	t.Helper()
	r, err := w.query(sql)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if e := r.err(); e != nil {
		t.Fatalf("%s: %v", sql, e)
	}
	return r
}

// textRows decodes a text-protocol response's rows (first result set) as
// strings ("NULL" for NULL).
func (w *wireConn) textRows(r wireResponse) [][]string {
	pk := r.Packets
	if len(pk) == 0 || pk[0].Payload[0] == 0 || pk[0].Payload[0] == 0xff {
		return nil
	}
	cols, _, _ := gomysql.LengthEncodedInt(pk[0].Payload)
	i := 1 + int(cols)
	if !w.deprecateEOF() {
		i++
	}
	var rows [][]string
	for ; i < len(pk); i++ {
		p := pk[i].Payload
		if w.isTerminator(p) || (len(p) > 0 && p[0] == 0xff) {
			break
		}
		var row []string
		for j := 0; j < len(p); {
			if p[j] == 0xfb {
				row = append(row, "NULL")
				j++
				continue
			}
			n, _, k := gomysql.LengthEncodedInt(p[j:])
			row = append(row, string(p[j+k:j+k+int(n)]))
			j += k + int(n)
		}
		rows = append(rows, row)
	}
	return rows
}

// stmtParam is one COM_STMT_EXECUTE parameter.
type stmtParam struct {
	typ   byte // MYSQL_TYPE_*
	null  bool
	value []byte // binary encoding; nil with long data
}

func intParam(v int64) stmtParam {
	return stmtParam{typ: 0x08, value: binary.LittleEndian.AppendUint64(nil, uint64(v))}
}
func strParam(s string) stmtParam {
	return stmtParam{typ: 0xfd, value: append(gomysql.AppendLengthEncodedInteger(nil, uint64(len(s))), s...)}
}
func doubleParam(f float64) stmtParam {
	return stmtParam{typ: 0x05, value: binary.LittleEndian.AppendUint64(nil, math.Float64bits(f))}
}
func nullParam() stmtParam       { return stmtParam{typ: 0x06, null: true} }
func longDataParam() stmtParam   { return stmtParam{typ: 0xfc} } // BLOB whose value came by COM_STMT_SEND_LONG_DATA
func (p stmtParam) isLong() bool { return p.value == nil && !p.null }

// executePacket builds COM_STMT_EXECUTE.
func executePacket(id uint32, flags byte, params []stmtParam) []byte {
	b := []byte{comStmtExecute}
	b = binary.LittleEndian.AppendUint32(b, id)
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint32(b, 1)
	if len(params) == 0 {
		return b
	}
	bitmap := make([]byte, (len(params)+7)/8)
	for i, p := range params {
		if p.null {
			bitmap[i/8] |= 1 << (i % 8)
		}
	}
	b = append(b, bitmap...)
	b = append(b, 1)
	for _, p := range params {
		b = append(b, p.typ, 0)
	}
	for _, p := range params {
		b = append(b, p.value...)
	}
	return b
}

func stmtCmd(cmd byte, id uint32, extra ...byte) []byte {
	return append(binary.LittleEndian.AppendUint32([]byte{cmd}, id), extra...)
}

// changeUser sends COM_CHANGE_USER with utf8mb4_general_ci and answers the
// authentication; the response is every packet the server sent.
func (w *wireConn) changeUser(user, password, db string) (wireResponse, error) {
	return w.changeUserCharset(user, password, db, 45)
}

// noCharset asks changeUserCharset for a packet that ends after the schema:
// no character set and no plugin name (the oldest form, which servers still
// accept).
const noCharset = -1

// changeUserCharset is changeUser with the character set field set to
// collation id cs, or left out with noCharset.
func (w *wireConn) changeUserCharset(user, password, db string, cs int) (wireResponse, error) {
	w.opts.Password = password
	b := append([]byte{comChangeUser}, user...)
	b = append(b, 0)
	auth := nativePassword(password, w.salt)
	b = append(append(b, byte(len(auth))), auth...)
	b = append(append(b, db...), 0)
	if cs != noCharset {
		b = binary.LittleEndian.AppendUint16(b, uint16(cs))
		if w.caps&capPluginAuth != 0 {
			b = append(append(b, "mysql_native_password"...), 0)
		}
	}
	if err := w.send(b); err != nil {
		return wireResponse{}, err
	}
	pkts, err := w.authExchange()
	if err == nil {
		if last := pkts[len(pkts)-1].Payload; last[0] == 0 {
			w.noteOK(last)
		}
	}
	return wireResponse{Packets: pkts}, err
}

// resetConnection sends COM_RESET_CONNECTION and reads its OK or ERR.
func (w *wireConn) resetConnection() (wireResponse, error) {
	if err := w.send([]byte{comResetConnection}); err != nil {
		return wireResponse{}, err
	}
	return w.readOne()
}
