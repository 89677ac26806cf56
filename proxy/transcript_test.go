package proxy

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// The transcript harness tests the proxy without a database server. A
// case drives a real Proxy (New, Serve on a loopback listener, Close) from
// both ends at once: the test is the client, and it is also the backend,
// a scripted server on a second loopback listener. Each step of a case
// either sends packets (client to proxy, backend to proxy) or reads what
// the proxy sent (to the client, to the backend), and everything is
// written, in the order of the script, to a transcript: one line per
// packet, decoded, with the raw bytes where the decoding does not say
// everything. The transcript is compared with
// testdata/transcripts/NAME.txt; `go test -run TestTranscript ./proxy/
// -update` rewrites the files from what the proxy does now (review the
// diff: a changed file is a changed wire behaviour).
//
// The scripted backend's answers are modelled on what MariaDB 10.11 sent
// in the same exchanges (greeting, status flags, column definitions,
// rows), captured through the proxy with a recording relay.

var updateTranscripts = flag.Bool("update", false, "rewrite testdata/transcripts/*.txt from what the proxy does")

// transcriptCase is one golden transcript.
type transcriptCase struct {
	name    string // testdata/transcripts/NAME.txt
	about   string // what the case shows, the file's first lines
	backend string // YAML lines under backend: (indented by two spaces)
	config  string // more top-level YAML
	run     func(h *harness)
}

// runTranscripts runs each case against its golden file.
func runTranscripts(t *testing.T, cases []transcriptCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc)
			tc.run(h)
			h.finish()
		})
	}
}

// ioTimeout bounds every read of the script: a proxy that sends nothing
// fails the case instead of hanging it. Generous: the machine is shared.
const ioTimeout = 30 * time.Second

// harness is one case: a proxy, its scripted backend, and the transcript.
type harness struct {
	t     *testing.T
	tc    transcriptCase
	p     *Proxy
	addr  string       // the proxy's listener
	ln    net.Listener // the scripted backend's listener
	logs  *lockedBuffer
	out   strings.Builder
	multi bool // lines name their connection
	conns []*hconn

	subst   [][2]string // random values and their stable names, for the transcript
	secrets []string    // what must never appear in a log line or audit record
	audited int         // audit records already written to the transcript
	certs   string      // directory of cert.pem and key.pem, when the config names {{certs}}
	base    string      // the configuration before its tables, for reload
}

// reload installs a configuration whose tables are these (YAML list
// items), through the public Update, as a SIGHUP would.
func (h *harness) reload(tables string) {
	h.t.Helper()
	cfg, err := policy.Parse("transcript.yaml", []byte(h.base+"tables:\n"+tables+h.tc.config))
	if err != nil {
		h.t.Fatal(err)
	}
	h.p.Update(cfg, cfg.Policy(2))
	h.note("configuration reloaded: tables now\n# %s", strings.ReplaceAll(strings.TrimRight(tables, "\n"), "\n", "\n# "))
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newHarness(t *testing.T, tc transcriptCase) *harness {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	// health_interval 0s: the scripted backend answers the connections it
	// expects, in order; an active health check would take one.
	yaml := "listen: 127.0.0.1:0\nadmin: \"\"\nbackend:\n  address: " + ln.Addr().String() + "\n  health_interval: 0s\n"
	for _, l := range strings.Split(strings.TrimSpace(tc.backend), "\n") {
		if l != "" {
			yaml += "  " + l + "\n"
		}
	}
	if !strings.Contains(tc.backend, "user:") && !strings.Contains(tc.config, "catalog:") {
		// A scripted backend has no catalog to read; without the
		// proxy's own account the tables need it said (policy's
		// protection rule).
		yaml += "catalog:\n  refresh: 0s\n"
	}
	base := yaml
	yaml += "tables:\n  - name: app.invoices\n  - name: app.runs\n    lease: admin:runs\n" + tc.config
	certs := ""
	if strings.Contains(yaml, "{{certs}}") {
		certs = writeTestCert(t)
		yaml = strings.ReplaceAll(yaml, "{{certs}}", certs)
	}
	cfg, err := policy.Parse("transcript.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, tc: tc, ln: ln, logs: &lockedBuffer{}, certs: certs, base: base}
	log := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := New(cfg, cfg.Policy(1), Options{Logger: log, InstanceID: "harness"})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(pl)
	t.Cleanup(func() { p.Close() })
	h.p, h.addr = p, pl.Addr().String()
	fmt.Fprintf(&h.out, "# %s\n", strings.ReplaceAll(strings.TrimSpace(tc.about), "\n", "\n# "))
	if tc.backend != "" || tc.config != "" {
		fmt.Fprintf(&h.out, "#\n# config (besides listen, backend.address and the tables app.invoices, app.runs under lease admin:runs):\n")
		for _, l := range strings.Split(strings.TrimSpace("backend:\n  "+strings.ReplaceAll(strings.TrimSpace(tc.backend), "\n", "\n  ")+"\n"+tc.config), "\n") {
			if strings.TrimSpace(l) != "" && strings.TrimSpace(l) != "backend:" || tc.backend != "" && l == "backend:" {
				fmt.Fprintf(&h.out, "#   %s\n", l)
			}
		}
	}
	h.out.WriteString("\n")
	return h
}

// note writes a comment line into the transcript: what the next steps do.
func (h *harness) note(format string, args ...any) {
	fmt.Fprintf(&h.out, "\n# %s\n", fmt.Sprintf(format, args...))
}

// rename makes a random value (an owner token, a key) stable in the
// transcript.
func (h *harness) rename(random, name string) {
	if random != "" {
		h.subst = append(h.subst, [2]string{random, name})
	}
}

// secret registers a value no log line or audit record may contain.
func (h *harness) secret(s string) { h.secrets = append(h.secrets, s) }

// line writes one transcript line for a connection.
func (h *harness) line(c *hconn, s string) {
	// The connection's name is decided when the transcript is rendered:
	// shown once a case has more than one connection, on every line.
	h.out.WriteString("\x00" + c.name + "\x00")
	h.out.WriteString(s)
	h.out.WriteString("\n")
}

// audit writes the audit records written since the last call.
func (h *harness) audit() {
	recs := h.p.Audit().Recent(0)
	for _, r := range recs[h.audited:] {
		h.out.WriteString("audit  " + describeAudit(r) + "\n")
	}
	h.audited = len(recs)
}

func describeAudit(r audit.Record) string {
	tok := func(p *uint64) string {
		if p == nil {
			return "null"
		}
		return fmt.Sprint(*p)
	}
	s := fmt.Sprintf("reason=%s outcome=%s mode=%s table=%q lease=%q presented_owner=%q presented_token=%s current_token=%s user=%q schema=%q digest=%q",
		r.Reason, r.Outcome, r.Mode, r.Table, r.Lease, r.PresentedOwner, tok(r.PresentedToken), tok(r.CurrentToken), r.User, r.Schema, r.Digest)
	if r.Detail != "" {
		s += fmt.Sprintf(" detail=%q", r.Detail)
	}
	s += fmt.Sprintf(" instance=%s conn_id=%d backend_conn_id=%d program_name=%q", r.Instance, r.ConnID, r.BackendConnID, r.Program)
	return s
}

// finish ends every connection the case left open (COM_QUIT, which the
// proxy passes on before it closes both sides), checks that nothing else
// was sent, checks the logs and audit records for secrets, and compares
// the transcript with its golden file.
func (h *harness) finish() {
	h.t.Helper()
	for _, c := range h.conns {
		if c.closed {
			continue
		}
		c.waitWrite(&c.clientWrite)
		c.waitWrite(&c.backendWrite)
		h.note("the client quits: the proxy passes COM_QUIT on and closes both connections")
		c.send(0, []byte{mysql.COM_QUIT})
		c.backendGets()
		c.backendClosed()
		c.clientClosed()
	}
	h.audit()
	got := h.text()
	logs := h.logs.String()
	recs := h.p.Audit().Recent(0)
	for _, s := range h.secrets {
		if strings.Contains(logs, s) {
			h.t.Errorf("the proxy's log holds the secret %q:\n%s", s, logs)
		}
		for _, r := range recs {
			if strings.Contains(fmt.Sprintf("%+v", r), s) {
				h.t.Errorf("an audit record holds the secret %q: %+v", s, r)
			}
		}
	}
	path := filepath.Join("testdata", "transcripts", h.tc.name+".txt")
	if *updateTranscripts {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			h.t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			h.t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		h.t.Fatalf("%v (run with -update to create it); transcript:\n%s", err, got)
	}
	if string(want) != got {
		h.t.Errorf("transcript differs from %s (run with -update and review the diff if the change is intended):\n%s", path, lineDiff(string(want), got))
	}
}

// connName marks a line's connection in h.out.
var connName = regexp.MustCompile("\x00([^\x00]*)\x00")

// text is the transcript as the golden file holds it.
func (h *harness) text() string {
	name := ""
	if h.multi {
		name = "$1 "
	}
	got := connName.ReplaceAllString(h.out.String(), name)
	for _, s := range h.subst {
		got = strings.ReplaceAll(got, s[0], s[1])
	}
	return got
}

// lineDiff shows the first lines where want and got part, with context.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	var b strings.Builder
	from := max(0, i-3)
	for k := from; k < i; k++ {
		fmt.Fprintf(&b, "  %s\n", w[k])
	}
	for k := i; k < min(len(w), i+8); k++ {
		fmt.Fprintf(&b, "- %s\n", w[k])
	}
	for k := i; k < min(len(g), i+8); k++ {
		fmt.Fprintf(&b, "+ %s\n", g[k])
	}
	return b.String()
}

// fail stops the case, showing the transcript so far.
func (h *harness) fail(format string, args ...any) {
	h.t.Helper()
	got := h.text()
	h.t.Fatalf("%s\ntranscript so far:\n%s\nproxy log:\n%s", fmt.Sprintf(format, args...), got, h.logs.String())
}

// hconn is one client connection through the proxy and the backend
// connection the proxy opened for it.
type hconn struct {
	h       *harness
	name    string
	client  net.Conn
	cr      *bufio.Reader
	backend net.Conn
	br      *bufio.Reader

	clientWrite, backendWrite chan error // a script's write still in flight

	deprecateEOF bool   // negotiated: result sets end with an OK (0xFE)
	scramble     []byte // the backend's challenge
	closed       bool
}

// dial opens a client connection and accepts the backend connection the
// proxy makes for it (before the greeting: the proxy dials first).
func (h *harness) dial(name string) *hconn {
	h.t.Helper()
	nc, err := net.Dial("tcp", h.addr)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { nc.Close() })
	c := &hconn{h: h, name: name, client: nc, cr: bufio.NewReaderSize(nc, 1<<16)}
	h.conns = append(h.conns, c)
	if len(h.conns) > 1 {
		h.multi = true
	}
	type accepted struct {
		nc  net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() { bc, err := h.ln.Accept(); ch <- accepted{bc, err} }()
	select {
	case a := <-ch:
		if a.err != nil {
			h.t.Fatal(a.err)
		}
		h.t.Cleanup(func() { a.nc.Close() })
		c.backend, c.br = a.nc, bufio.NewReaderSize(a.nc, 1<<16)
	case <-time.After(ioTimeout):
		h.fail("the proxy did not connect to the backend")
	}
	return c
}

// dialOnly opens a client connection the proxy answers without a backend
// connection (max_connections, an unreachable backend).
func (h *harness) dialOnly(name string) *hconn {
	h.t.Helper()
	nc, err := net.Dial("tcp", h.addr)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { nc.Close() })
	c := &hconn{h: h, name: name, client: nc, cr: bufio.NewReaderSize(nc, 1<<16), closed: true}
	h.conns = append(h.conns, c)
	if len(h.conns) > 1 {
		h.multi = true
	}
	return c
}

// pkt is one packet a script sends, with how the transcript names it.
type pkt struct {
	seq     byte
	payload []byte
	label   string // "" = decode it
}

// writePkt frames payload (splitting at wire.MaxPayload) onto w.
func writePkt(w io.Writer, seq byte, payload []byte) error {
	for {
		n := min(len(payload), wire.MaxPayload)
		if _, err := w.Write(append([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}, payload[:n]...)); err != nil {
			return err
		}
		payload = payload[n:]
		seq++
		if n < wire.MaxPayload {
			return nil
		}
	}
}

// readPkt reads one physical packet.
func readPkt(c net.Conn, r *bufio.Reader) (seq byte, payload []byte, err error) {
	c.SetReadDeadline(time.Now().Add(ioTimeout))
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, err
	}
	return hdr[3], payload, nil
}

// send writes a client packet to the proxy.
func (c *hconn) send(seq byte, payload []byte) {
	c.sendAs(seq, payload, "")
}

func (c *hconn) sendAs(seq byte, payload []byte, label string) {
	c.h.t.Helper()
	c.h.line(c, "C->P "+render(seq, payload, label, roleCommand))
	c.write(c.client, &c.clientWrite, func(w io.Writer) error { return writePkt(w, seq, payload) })
}

// write runs a script's write. Writes larger than the socket buffers
// would block until the proxy passes them on, which may wait for a read
// the script makes only later: those run in the background, and the next
// write to that connection (or the end of the case) waits for them.
func (c *hconn) write(nc net.Conn, pending *chan error, f func(io.Writer) error) {
	c.h.t.Helper()
	c.waitWrite(pending)
	done := make(chan error, 1)
	*pending = done
	nc.SetWriteDeadline(time.Now().Add(ioTimeout))
	go func() { done <- f(nc) }()
}

func (c *hconn) waitWrite(pending *chan error) {
	c.h.t.Helper()
	if *pending == nil {
		return
	}
	err := <-*pending
	*pending = nil
	if err != nil {
		c.h.fail("write: %v", err)
	}
}

// sendRaw writes bytes to the proxy as they are (malformed input).
func (c *hconn) sendRaw(b []byte, label string) {
	c.h.t.Helper()
	c.h.line(c, fmt.Sprintf("C->P raw %d bytes: %s\n%s", len(b), label, hexLines(b)))
	c.write(c.client, &c.clientWrite, func(w io.Writer) error { _, err := w.Write(b); return err })
}

// query sends a COM_QUERY.
func (c *hconn) query(sql string) {
	c.h.t.Helper()
	c.send(0, append([]byte{mysql.COM_QUERY}, sql...))
}

// relayed is one statement the proxy passes through unchanged: the client
// sends sql, the backend reads it and answers ps, the client reads that.
func (c *hconn) relayed(sql string, ps ...pkt) {
	c.h.t.Helper()
	c.query(sql)
	c.backendGets()
	c.respond(ps...)
	c.response()
}

// reply writes backend packets to the proxy, numbered from seq.
func (c *hconn) reply(seq byte, ps ...pkt) {
	c.h.t.Helper()
	var buf bytes.Buffer
	for _, p := range ps {
		c.h.line(c, "B->P "+render(seq, p.payload, p.label, roleResponse))
		writePkt(&buf, seq, p.payload)
		seq += byte((len(p.payload) / wire.MaxPayload) + 1)
	}
	c.write(c.backend, &c.backendWrite, func(w io.Writer) error { _, err := w.Write(buf.Bytes()); return err })
}

// respond answers the command the backend just read (sequence from 1).
func (c *hconn) respond(ps ...pkt) {
	c.h.t.Helper()
	c.reply(1, ps...)
}

// backendGets reads one packet the proxy sent to the backend.
func (c *hconn) backendGets() (byte, []byte) {
	c.h.t.Helper()
	return c.backendGetsAs("")
}

func (c *hconn) backendGetsAs(label string) (byte, []byte) {
	c.h.t.Helper()
	seq, p, err := readPkt(c.backend, c.br)
	if err != nil {
		c.h.fail("reading what the proxy sent the backend: %v", err)
	}
	c.h.line(c, "P->B "+render(seq, p, label, roleCommand))
	return seq, p
}

// clientGets reads one packet the proxy sent to the client.
func (c *hconn) clientGets() (byte, []byte) {
	c.h.t.Helper()
	return c.clientGetsAs("")
}

func (c *hconn) clientGetsAs(label string) (byte, []byte) {
	c.h.t.Helper()
	seq, p, err := readPkt(c.client, c.cr)
	if err != nil {
		c.h.fail("reading what the proxy sent the client: %v", err)
	}
	c.h.line(c, "P->C "+render(seq, p, label, roleResponse))
	return seq, p
}

// response reads one complete response the proxy sent to the client: an
// OK, ERR or EOF, or result sets, following "more results" flags.
func (c *hconn) response() {
	c.h.t.Helper()
	for {
		_, p := c.clientGets()
		if len(p) == 0 {
			return
		}
		switch {
		case p[0] == mysql.OK_HEADER:
			if ok, valid := wire.ParseOK(p); !valid || ok.Status&mysql.SERVER_MORE_RESULTS_EXISTS == 0 {
				return
			}
			continue
		case p[0] == mysql.ERR_HEADER, p[0] == mysql.EOF_HEADER && len(p) < 9, p[0] == mysql.LocalInFile_HEADER:
			return
		}
		cols, _, _ := wire.LenEnc(p)
		for range cols {
			c.clientGetsAs("column definition")
		}
		if !c.deprecateEOF {
			c.clientGets()
		}
		var st uint16
		for {
			_, r := c.clientGetsAs("row")
			if len(r) > 0 && r[0] == mysql.ERR_HEADER {
				return
			}
			if len(r) > 0 && r[0] == mysql.EOF_HEADER && len(r) < 9 {
				st, _ = wire.EOFStatus(r, c.deprecateEOF)
				break
			}
		}
		if st&mysql.SERVER_MORE_RESULTS_EXISTS == 0 {
			return
		}
	}
}

// clientGetsNothingYet checks, as far as a short wait can, that the proxy
// has sent the client nothing more at this point of the script. It cannot
// prove absence: on a slow machine it may pass where the proxy would have
// sent something a moment later, but it never fails a proxy that behaves.
func (c *hconn) clientGetsNothingYet(why string) {
	c.h.t.Helper()
	c.client.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := c.cr.Peek(1)
	c.client.SetReadDeadline(time.Time{})
	if err == nil {
		c.h.line(c, "P->C sent something early, but "+why)
		return
	}
	if !isTimeout(err) {
		c.h.fail("client connection: %v", err)
	}
	c.h.line(c, "P->C nothing yet: "+why)
}

// waitFor polls cond, which a proxy goroutine makes true soon, until it
// holds (or fails the case after ioTimeout).
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(ioTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			h.fail("waited %v for %s", ioTimeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// clientClosed reads what else the proxy sends the client, until it closes
// the connection: anything before the end is in the transcript too.
func (c *hconn) clientClosed() {
	c.h.t.Helper()
	c.untilClosed("P->C", c.client, c.cr)
	c.closed = true
}

// backendClosed reads what else the proxy sends the backend, until it
// closes the connection.
func (c *hconn) backendClosed() {
	c.h.t.Helper()
	c.untilClosed("P->B", c.backend, c.br)
}

func (c *hconn) untilClosed(dir string, nc net.Conn, r *bufio.Reader) {
	c.h.t.Helper()
	for range 16 {
		seq, p, err := readPkt(nc, r)
		if err != nil {
			if errors.Is(err, io.EOF) || isReset(err) {
				c.h.line(c, dir+" closed")
				return
			}
			c.h.fail("%s: %v, want the connection closed", dir, err)
		}
		role := roleResponse
		if dir == "P->B" {
			role = roleCommand
		}
		c.h.line(c, dir+" "+render(seq, p, "", role))
	}
	c.h.fail("%s: the proxy keeps sending instead of closing", dir)
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// Packet roles, for decoding.
const (
	roleCommand  = iota // a command or handshake response: first byte is the command
	roleResponse        // a response packet
)

var harnessCommandNames = map[byte]string{
	mysql.COM_QUIT: "COM_QUIT", mysql.COM_INIT_DB: "COM_INIT_DB", mysql.COM_QUERY: "COM_QUERY", mysql.COM_FIELD_LIST: "COM_FIELD_LIST",
	mysql.COM_STATISTICS: "COM_STATISTICS", mysql.COM_PING: "COM_PING", mysql.COM_CHANGE_USER: "COM_CHANGE_USER",
	mysql.COM_STMT_PREPARE: "COM_STMT_PREPARE", mysql.COM_STMT_EXECUTE: "COM_STMT_EXECUTE", mysql.COM_STMT_CLOSE: "COM_STMT_CLOSE",
	mysql.COM_STMT_RESET: "COM_STMT_RESET", mysql.COM_SET_OPTION: "COM_SET_OPTION", mysql.COM_STMT_FETCH: "COM_STMT_FETCH",
	mysql.COM_RESET_CONNECTION: "COM_RESET_CONNECTION", mysql.COM_STMT_SEND_LONG_DATA: "COM_STMT_SEND_LONG_DATA",
}

// render is one packet's transcript text: sequence number, length, what it
// is, and its bytes in hex unless the decoding is lossless.
func render(seq byte, p []byte, label string, role int) string {
	head := fmt.Sprintf("#%d len=%d", seq, len(p))
	if len(p) > wire.MaxPayload {
		head += fmt.Sprintf(" (as %d packets)", len(p)/wire.MaxPayload+1)
	} else if len(p) == wire.MaxPayload {
		head += " (continued in the next packet)"
	}
	desc, complete := describe(p, label, role)
	s := head + " " + desc
	if !complete {
		s += "\n" + hexLines(p)
	}
	return s
}

func describe(p []byte, label string, role int) (string, bool) {
	if len(p) == 0 {
		return "empty", true
	}
	switch label {
	case "greeting", "handshake response", "auth", "binary row", "column definition", "prepare OK", "raw":
		switch label {
		case "column definition":
			return "column definition " + columnName(p), false
		case "greeting":
			if h, err := parseServerHandshake(p); err == nil {
				return fmt.Sprintf("greeting version=%q conn_id=%d caps=0x%08x status=%s plugin=%q", h.version, h.connID, h.caps,
					statusNames(h.status), h.plugin), false
			}
		case "handshake response":
			if ch, err := parseClientHandshake(p); err == nil {
				if len(p) == sslRequestLen {
					return fmt.Sprintf("SSLRequest caps=0x%08x", ch.caps), false
				}
				return fmt.Sprintf("handshake response caps=0x%08x user=%q db=%q plugin=%q auth=%d bytes program_name=%q", ch.caps, ch.user,
					ch.db, ch.plugin, len(ch.authResp), ch.program), false
			}
		}
		return label, false
	case "row":
		if p[0] == mysql.ERR_HEADER || p[0] == mysql.EOF_HEADER && len(p) < 9 {
			break
		}
		if vals, ok := textRow(p); ok {
			return "row " + vals, true
		}
		return "row", false
	case "":
	default:
		if strings.HasPrefix(label, "=") { // a description that says everything (or bytes that are random)
			return label[1:], true
		}
		return label, false
	}
	if role == roleCommand {
		name, ok := harnessCommandNames[p[0]]
		if !ok {
			return fmt.Sprintf("command 0x%02x", p[0]), false
		}
		switch p[0] {
		case mysql.COM_QUERY, mysql.COM_STMT_PREPARE, mysql.COM_INIT_DB:
			if len(p) > maxShownText {
				return fmt.Sprintf("%s %q... (%d bytes of text, sha256 %s)", name, p[1:maxShownText/2], len(p)-1, digestOf(p)), true
			}
			return fmt.Sprintf("%s %q", name, p[1:]), true
		case mysql.COM_QUIT, mysql.COM_PING, mysql.COM_STATISTICS, mysql.COM_RESET_CONNECTION:
			if len(p) == 1 {
				return name, true
			}
		}
		return name, false
	}
	switch p[0] {
	case mysql.OK_HEADER:
		if ok, valid := wire.ParseOK(p); valid {
			return "OK " + describeOK(p, ok), true
		}
	case mysql.ERR_HEADER:
		if e := wire.ParseErr(p); len(p) > 9 && p[3] == '#' {
			return fmt.Sprintf("ERR %d #%s %q", e.Code, e.State, e.Msg), true
		} else if len(p) >= 3 {
			// Before the handshake: no SQLSTATE marker.
			return fmt.Sprintf("ERR %d (no SQLSTATE) %q", e.Code, e.Msg), true
		}
	case mysql.EOF_HEADER:
		if len(p) == 5 {
			return fmt.Sprintf("EOF warnings=%d status=%s", binary.LittleEndian.Uint16(p[1:]), statusNames(binary.LittleEndian.Uint16(p[3:]))), true
		}
		if len(p) < 9 {
			if ok, valid := wire.ParseOK(p); valid {
				return "OK(0xFE, ends rows) " + describeOK(p, ok), true
			}
		}
	}
	if v, n, _ := wire.LenEnc(p); n == len(p) {
		return fmt.Sprintf("column count %d", v), true
	}
	return "packet", false
}

func describeOK(p []byte, ok wire.OKPacket) string {
	s := fmt.Sprintf("affected=%d insert_id=%d status=%s warnings=%d", ok.AffectedRows, ok.LastInsertID, statusNames(ok.Status), ok.Warnings)
	if rest := p[ok.InfoOff:]; len(rest) > 0 {
		// MariaDB sends the info length-encoded.
		if v, n, _ := wire.LenEnc(rest); n > 0 && uint64(len(rest)-n) == v {
			s += fmt.Sprintf(" info=%q", rest[n:])
		} else {
			s += fmt.Sprintf(" info(raw)=%q", rest)
		}
	}
	return s
}

var statusBits = []struct {
	bit  uint16
	name string
}{
	{mysql.SERVER_STATUS_IN_TRANS, "IN_TRANS"}, {mysql.SERVER_STATUS_AUTOCOMMIT, "AUTOCOMMIT"},
	{mysql.SERVER_MORE_RESULTS_EXISTS, "MORE_RESULTS"}, {mysql.SERVER_STATUS_NO_GOOD_INDEX_USED, "NO_GOOD_INDEX_USED"},
	{mysql.SERVER_STATUS_NO_INDEX_USED, "NO_INDEX_USED"}, {mysql.SERVER_STATUS_CURSOR_EXISTS, "CURSOR_EXISTS"},
	{mysql.SERVER_STATUS_LAST_ROW_SEND, "LAST_ROW_SENT"}, {mysql.SERVER_STATUS_DB_DROPPED, "DB_DROPPED"},
	{mysql.SERVER_STATUS_NO_BACKSLASH_ESCAPED, "NO_BACKSLASH_ESCAPES"}, {mysql.SERVER_STATUS_METADATA_CHANGED, "METADATA_CHANGED"},
	{mysql.SERVER_QUERY_WAS_SLOW, "QUERY_WAS_SLOW"}, {mysql.SERVER_PS_OUT_PARAMS, "PS_OUT_PARAMS"},
	{mysql.SERVER_STATUS_IN_TRANS_READONLY, "IN_TRANS_READONLY"}, {mysql.SERVER_SESSION_STATE_CHANGED, "SESSION_STATE_CHANGED"},
}

func statusNames(st uint16) string {
	var names []string
	for _, b := range statusBits {
		if st&b.bit != 0 {
			names = append(names, b.name)
			st &^= b.bit
		}
	}
	if st != 0 || len(names) == 0 {
		names = append(names, fmt.Sprintf("0x%04x", st))
	}
	return strings.Join(names, "|")
}

// textRow decodes a text-protocol row, if p is exactly one.
func textRow(p []byte) (string, bool) {
	var vals []string
	for len(p) > 0 {
		if p[0] == 0xfb {
			vals = append(vals, "NULL")
			p = p[1:]
			continue
		}
		v, n, _ := wire.LenEnc(p)
		if n == 0 || uint64(len(p)-n) < v {
			return "", false
		}
		vals = append(vals, fmt.Sprintf("%q", p[n:n+int(v)]))
		p = p[n+int(v):]
	}
	return "[" + strings.Join(vals, " ") + "]", true
}

// columnName reads the name of a column definition.
func columnName(p []byte) string {
	for i := 0; i < 4; i++ {
		v, n, _ := wire.LenEnc(p)
		if n == 0 || uint64(len(p)-n) < v {
			return "?"
		}
		p = p[n+int(v):]
	}
	v, n, _ := wire.LenEnc(p)
	if n == 0 || uint64(len(p)-n) < v {
		return "?"
	}
	return fmt.Sprintf("%q", p[n:n+int(v)])
}

// hexLines dumps b, 32 bytes a line, indented; long packets are cut.
func hexLines(b []byte) string {
	const maxShown = 256
	var out strings.Builder
	shown := b
	if len(shown) > maxShown {
		shown = shown[:maxShown]
	}
	for i := 0; i < len(shown); i += 32 {
		row := shown[i:min(i+32, len(shown))]
		out.WriteString("       ")
		for j, x := range row {
			if j > 0 && j%8 == 0 {
				out.WriteString(" ")
			}
			fmt.Fprintf(&out, " %02x", x)
		}
		if i+32 < len(shown) || len(b) > maxShown {
			out.WriteString("\n")
		}
	}
	if len(b) > maxShown {
		fmt.Fprintf(&out, "        ... %d more bytes (sha256 of all %s)", len(b)-maxShown, digestOf(b))
	}
	return out.String()
}

// maxShownText bounds the statement text a line shows; longer texts are
// cut and identified by their digest.
const maxShownText = 1024

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// Packets of the scripted backend, shaped as MariaDB 10.11 sends them.

const (
	// mariaCaps are the capabilities a MariaDB 10.11.19 server without TLS
	// offered (captured): no CLIENT_MYSQL bit, so MariaDB's extended
	// capabilities sit in the reserved bytes.
	mariaCaps uint32 = 0x81fff7fe
	// goDriverCaps are what go-sql-driver/mysql 1.10 answers with
	// (captured), CLIENT_DEPRECATE_EOF included.
	goDriverCaps  uint32 = 0x013ba284
	harnessConnID        = 21
)

var harnessScramble = []byte("HYgxF5uo@Nv+nhAL9wm=")

// greeting is the backend's initial handshake.
func greeting(caps uint32, plugin string) []byte {
	b := []byte{10}
	b = append(b, "5.5.5-10.11.19-MariaDB-0+deb12u1\x00"...)
	b = binary.LittleEndian.AppendUint32(b, harnessConnID)
	b = append(b, harnessScramble[:8]...)
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint16(b, uint16(caps))
	b = append(b, 45) // utf8mb4_general_ci
	b = binary.LittleEndian.AppendUint16(b, mysql.SERVER_STATUS_AUTOCOMMIT)
	b = binary.LittleEndian.AppendUint16(b, uint16(caps>>16))
	b = append(b, 21)
	b = append(b, 0, 0, 0, 0, 0, 0)
	b = append(b, 0x1d, 0, 0, 0) // MariaDB extended capabilities
	b = append(b, harnessScramble[8:]...)
	b = append(b, 0)
	return append(append(b, plugin...), 0)
}

// nativePassword is mysql_native_password's answer to scramble.
func nativePassword(password string, scramble []byte) []byte {
	if password == "" {
		return nil
	}
	h1 := sha1.Sum([]byte(password))
	h2 := sha1.Sum(h1[:])
	h := sha1.New()
	h.Write(scramble)
	h.Write(h2[:])
	out := h.Sum(nil)
	for i := range out {
		out[i] ^= h1[i]
	}
	return out
}

// handshakeResponse is a client's HandshakeResponse41.
func handshakeResponse(caps uint32, user, db, plugin string, auth []byte) []byte {
	if db != "" {
		caps |= mysql.CLIENT_CONNECT_WITH_DB
	}
	b := binary.LittleEndian.AppendUint32(nil, caps)
	b = binary.LittleEndian.AppendUint32(b, 1<<24)
	b = append(b, 45)
	b = append(b, make([]byte, 23)...)
	b = append(append(b, user...), 0)
	if caps&mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
		b = wire.AppendLenEncString(b, string(auth))
	} else {
		b = append(append(b, byte(len(auth))), auth...)
	}
	if db != "" {
		b = append(append(b, db...), 0)
	}
	b = append(append(b, plugin...), 0)
	if caps&mysql.CLIENT_CONNECT_ATTRS != 0 {
		attrs := wire.AppendLenEncString(wire.AppendLenEncString(nil, "_client_name"), "harness")
		attrs = wire.AppendLenEncString(wire.AppendLenEncString(attrs, "program_name"), "invoicer")
		b = wire.AppendLenEncString(b, string(attrs))
	}
	return b
}

func okPkt(affected, insertID uint64, status, warnings uint16, info string) pkt {
	p := []byte{mysql.OK_HEADER}
	p = mysql.AppendLengthEncodedInteger(p, affected)
	p = mysql.AppendLengthEncodedInteger(p, insertID)
	p = binary.LittleEndian.AppendUint16(p, status)
	p = binary.LittleEndian.AppendUint16(p, warnings)
	if info != "" {
		p = wire.AppendLenEncString(p, info)
	}
	return pkt{payload: p}
}

func errPkt(code uint16, state, msg string) pkt {
	return pkt{payload: wire.ErrPayload(code, state, msg)}
}

// eofPkt ends column definitions or rows without CLIENT_DEPRECATE_EOF.
func eofPkt(status uint16) pkt {
	return pkt{payload: binary.LittleEndian.AppendUint16([]byte{mysql.EOF_HEADER, 0, 0}, status)}
}

// endRows ends a result set's rows: the OK with 0xFE header under
// CLIENT_DEPRECATE_EOF, else an EOF.
func (c *hconn) endRows(status uint16) pkt {
	if !c.deprecateEOF {
		return eofPkt(status)
	}
	return pkt{payload: binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint16([]byte{mysql.EOF_HEADER, 0, 0}, status), 0)}
}

// col is a result column of the scripted backend.
type col struct {
	name string
	typ  byte
}

func colDef(cl col) pkt {
	b := wire.AppendLenEncString(nil, "def")
	for _, s := range []string{"", "", "", cl.name, ""} {
		b = wire.AppendLenEncString(b, s)
	}
	charset, length := uint16(45), uint32(0x20)
	if cl.typ != mysql.MYSQL_TYPE_VAR_STRING {
		charset, length = 63, 21
	}
	b = append(b, 0x0c)
	b = binary.LittleEndian.AppendUint16(b, charset)
	b = binary.LittleEndian.AppendUint32(b, length)
	b = append(b, cl.typ, 0, 0, 0, 0, 0)
	return pkt{payload: b, label: "column definition"}
}

// null is a NULL value of a scripted row.
const null = "\x00NULL"

// resultSet is a complete text result set (sequence numbers from 1).
func (c *hconn) resultSet(status uint16, cols []col, rows ...[]string) []pkt {
	out := []pkt{{payload: mysql.AppendLengthEncodedInteger(nil, uint64(len(cols)))}}
	for _, cl := range cols {
		out = append(out, colDef(cl))
	}
	if !c.deprecateEOF {
		out = append(out, eofPkt(status))
	}
	for _, r := range rows {
		var p []byte
		for _, v := range r {
			if v == null {
				p = append(p, 0xfb)
			} else {
				p = wire.AppendLenEncString(p, v)
			}
		}
		out = append(out, pkt{payload: p, label: "row"})
	}
	return append(out, c.endRows(status))
}

func strCols(names ...string) []col {
	out := make([]col, len(names))
	for i, n := range names {
		out[i] = col{name: n, typ: mysql.MYSQL_TYPE_VAR_STRING}
	}
	return out
}

// Status flags the scripted backend answers with.
const (
	stAuto    = mysql.SERVER_STATUS_AUTOCOMMIT
	stInTrans = mysql.SERVER_STATUS_AUTOCOMMIT | mysql.SERVER_STATUS_IN_TRANS
)

// engineProbe answers the proxy's question whether the backend is a Galera
// node as MariaDB 10.11 does: SELECT @@wsrep_on gives 0 or 1;
// SHOW VARIABLES LIKE 'wsrep_on' gives the variable's row (a server without
// wsrep has no such variable: noVar answers the SELECT with ERR 1193, as
// MySQL does, and the SHOW with no row).
func (c *hconn) engineProbe(galera, noVar bool) {
	c.h.t.Helper()
	for {
		_, q := c.backendGets()
		switch {
		case strings.Contains(string(q), "SELECT @@wsrep_on") && noVar:
			c.respond(errPkt(1193, "HY000", "Unknown system variable 'wsrep_on'"))
			continue
		case strings.Contains(string(q), "SELECT @@wsrep_on"):
			on := "0"
			if galera {
				on = "1"
			}
			c.respond(c.resultSet(stAuto, []col{{"@@wsrep_on", mysql.MYSQL_TYPE_LONGLONG}}, []string{on})...)
		case noVar:
			c.respond(c.resultSet(stAuto, strCols("Variable_name", "Value"))...)
		default:
			on := "OFF"
			if galera {
				on = "ON"
			}
			c.respond(c.resultSet(stAuto, strCols("Variable_name", "Value"), []string{"wsrep_on", on})...)
		}
		return
	}
}

// loginOpts is how a client logs in through the proxy.
type loginOpts struct {
	user, db, password string
	caps               uint32 // client capabilities; 0 = goDriverCaps
	charset            byte   // collation id of the handshake; 0 = 45, utf8mb4_general_ci
	engineQuery        bool   // backend.engine is auto: the proxy asks for wsrep_on
	galera             bool   // and the answer is ON
}

// login runs the whole connection setup with mysql_native_password: the
// backend's greeting, the client's response relayed, the backend's OK,
// and (when the engine is learned) the proxy's SELECT @@wsrep_on.
func (h *harness) login(name string, o loginOpts) *hconn {
	h.t.Helper()
	if o.user == "" {
		o.user = "app"
	}
	if o.caps == 0 {
		o.caps = goDriverCaps
	}
	if o.password != "" {
		h.secret(o.password)
	}
	c := h.dial(name)
	c.reply(0, pkt{payload: greeting(mariaCaps, mysql.AUTH_NATIVE_PASSWORD), label: "greeting"})
	c.clientGetsAs("greeting")
	resp := handshakeResponse(o.caps, o.user, o.db, mysql.AUTH_NATIVE_PASSWORD, nativePassword(o.password, harnessScramble))
	if o.charset != 0 {
		resp[8] = o.charset
	}
	c.sendAs(1, resp, "handshake response")
	c.backendGetsAs("handshake response")
	c.deprecateEOF = o.caps&mariaCaps&mysql.CLIENT_DEPRECATE_EOF != 0
	c.scramble = harnessScramble
	c.reply(2, okPkt(0, 0, stAuto, 0, ""))
	c.clientGets()
	if o.engineQuery {
		c.engineProbe(o.galera, false)
	}
	return c
}
