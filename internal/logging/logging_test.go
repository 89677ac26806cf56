package logging

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// jsonLines parses every line of out as a JSON object.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Errorf("not a JSON line: %q (%v)", sc.Text(), err)
			continue
		}
		lines = append(lines, m)
	}
	return lines
}

// TestInstalledLoggersWriteJSON: go-sql-driver's logger, the standard log
// package and an http.Server's ErrorLog all come out as JSON lines of the
// proxy's logger.
func TestInstalledLoggersWriteJSON(t *testing.T) {
	var out syncBuffer
	logger := New(&out, FormatJSON, slog.LevelInfo)
	prevDefault := slog.Default()
	Install(logger)
	t.Cleanup(func() {
		slog.SetDefault(prevDefault)
		mysql.SetLogger(log.New(&bytes.Buffer{}, "", 0))
	})

	// go-sql-driver: what a pooled connection to a restarted server prints.
	// A connector made after Install logs through it; its Logger field is
	// the driver's default at NewConfig.
	cfg := mysql.NewConfig()
	cfg.Logger.Print("closing bad idle connection: ", errors.New("EOF"))
	cfg.Logger.Print("closing connection:", errors.New("unexpected EOF"))
	log.Printf("from the standard log package")

	// net/http: a TLS handshake error on an HTTPS server.
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ErrorLog = HTTPErrorLog(logger, "admin_http")
	srv.StartTLS()
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("this is not a TLS client hello\r\n\r\n"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	c.Read(make([]byte, 100))
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "TLS handshake error") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}

	lines := jsonLines(t, out.String())
	want := map[string]string{
		"closing bad idle connection: EOF":   "go-sql-driver",
		"closing connection: unexpected EOF": "go-sql-driver",
		"from the standard log package":      "",
		"http: TLS handshake error from":     "admin_http",
	}
	for msg, component := range want {
		found := false
		for _, l := range lines {
			if m, _ := l["msg"].(string); strings.HasPrefix(m, msg) {
				found = true
				if got, _ := l["component"].(string); got != component {
					t.Errorf("%q: component %q, want %q", msg, got, component)
				}
			}
		}
		if !found {
			t.Errorf("no JSON line %q in:\n%s", msg, out.String())
		}
	}
}

// TestDurationsOneWay: a duration is a Go duration string in both formats.
func TestDurationsOneWay(t *testing.T) {
	for _, format := range []string{FormatText, FormatJSON} {
		var out bytes.Buffer
		New(&out, format, slog.LevelInfo).Info("shutting down", "deadline", 5*time.Second,
			slog.Group("g", "wait", 1500*time.Millisecond))
		s := out.String()
		for _, want := range []string{"5s", "1.5s"} {
			if format == FormatJSON {
				want = fmt.Sprintf("%q", want)
			}
			if !strings.Contains(s, want) {
				t.Errorf("%s: %q lacks %s", format, s, want)
			}
		}
		if strings.Contains(s, "5000000000") {
			t.Errorf("%s: nanoseconds in %q", format, s)
		}
	}
}

func TestSeconds(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{-23701999999 * time.Nanosecond, "-23.702"},
		{1500 * time.Millisecond, "1.5"},
		{0, "0"},
		{29999600 * time.Microsecond, "30"},
	} {
		if b, _ := json.Marshal(Seconds(tt.d)); string(b) != tt.want {
			t.Errorf("Seconds(%v) = %s, want %s", tt.d, b, tt.want)
		}
	}
}

func TestLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := NewLimiter(3, 10*time.Second)
	l.now = func() time.Time { return now }
	a := Key{Event: "fenced write rejected", Reason: "stale_token", Table: "app.t"}
	b := Key{Event: "fenced write rejected", Reason: "expired", Table: "app.t"}
	allowed := 0
	for range 100 {
		if l.Allow(a) {
			allowed++
		}
	}
	if allowed != 3 {
		t.Errorf("allowed %d of 100 in one window, want 3", allowed)
	}
	if !l.Allow(b) {
		t.Error("another key is limited by the first")
	}
	got := l.Flush()
	if len(got) != 1 || got[0].Key != a || got[0].Suppressed != 97 {
		t.Errorf("flush: %+v", got)
	}
	if got := l.Flush(); len(got) != 0 {
		t.Errorf("second flush: %+v", got)
	}
	now = now.Add(10 * time.Second)
	if !l.Allow(a) {
		t.Error("a new window does not let lines through")
	}
	// Keys are bounded: past the limit new ones share "_other".
	for i := range maxLimiterKeys + 50 {
		l.Allow(Key{Event: "e", Reason: "r", Table: fmt.Sprint(i)})
	}
	if n := len(l.keys); n > maxLimiterKeys+1 {
		t.Errorf("%d keys kept", n)
	}
}

func TestSummarize(t *testing.T) {
	var out bytes.Buffer
	l := NewLimiter(1, time.Minute)
	k := Key{Event: "fenced write rejected", Reason: "stale_token", Table: "app.t"}
	for range 5 {
		l.Allow(k)
	}
	l.Summarize(New(&out, FormatJSON, slog.LevelInfo))
	lines := jsonLines(t, out.String())
	if len(lines) != 1 || lines[0]["msg"] != "log lines suppressed" || lines[0]["suppressed"] != float64(4) ||
		lines[0]["table"] != "app.t" || lines[0]["interval"] != "1m0s" || lines[0]["event"] != k.Event {
		t.Errorf("summary: %s", out.String())
	}
}
