package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/policy"
)

// syncBuffer is a log destination the test reads while serve writes.
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

// TestServeAdminTLSAndToken: serve's admin endpoint speaks HTTPS with
// admin_tls and asks for the token from admin_auth.token_file on /audit,
// not on /healthz.
func TestServeAdminTLSAndToken(t *testing.T) {
	dir := t.TempDir()
	certs, err := dbserver.WriteCerts(filepath.Join(dir, "certs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "admin-token"), []byte("file-Token-42\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "fenceproxy.yaml")
	yml := "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nbackend: {address: \"127.0.0.1:1\"}\n" +
		"admin_auth: {token_file: admin-token}\nadmin_tls: {cert_file: " + certs.ServerCertFile + ", key_file: " + certs.ServerKeyFile + "}\n"
	if err := os.WriteFile(cfgPath, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	reloader, err := policy.NewReloader(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, func() {}, reloader, slog.New(slog.NewTextHandler(&logs, nil)), new(slog.LevelVar))
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("serve did not return")
		}
	}()
	addrRE := regexp.MustCompile(`msg="admin endpoint listening" admin=(\S+) tls=true token=true`)
	var addr string
	deadline := time.Now().Add(10 * time.Second)
	for addr == "" {
		if m := addrRE.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no admin endpoint in the log:\n%s", logs.String())
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	// "fenceproxy listening" is said once both listeners are bound: after
	// the admin endpoint's line, naming it.
	var listening string
	for time.Now().Before(deadline) && listening == "" {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `msg="fenceproxy listening"`) {
				listening = l
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(listening, "admin="+addr) || strings.Index(logs.String(), "fenceproxy listening") < strings.Index(logs.String(), "admin endpoint listening") {
		t.Errorf("'fenceproxy listening' before the admin endpoint, or without its address:\n%s", logs.String())
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: certs.CAPool}}, Timeout: 10 * time.Second}
	get := func(url, token string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	base := "https://" + addr
	for _, tt := range []struct {
		path, token string
		want        int
	}{
		{"/healthz", "", http.StatusOK},
		{"/audit", "", http.StatusUnauthorized},
		{"/audit", "file-Token-4", http.StatusUnauthorized},
		{"/audit", "file-Token-42", http.StatusOK},
		{"/connections", "file-Token-42", http.StatusOK},
	} {
		if got := get(base+tt.path, tt.token); got != tt.want {
			t.Errorf("GET %s with token %q: %d, want %d", tt.path, tt.token, got, tt.want)
		}
	}
	// fenceproxy admin reads the token and admin_tls from the same config:
	// it trusts admin_tls.cert_file, and --ca-file the CA that signed it.
	for _, extra := range [][]string{nil, {"--ca-file", certs.CAFile}} {
		r := cli(t, append([]string{"admin", "--config", cfgPath, "--address", addr, "status"}, extra...)...)
		wantCode(t, r, exitOK, "admin status over admin_tls "+strings.Join(extra, " "))
		if !strings.Contains(r.stdout, "not paused") {
			t.Errorf("admin status over admin_tls: %q", r.stdout)
		}
	}
	// Without admin_tls in its config the CLI speaks plain HTTP, which the
	// endpoint does not serve: 3, unreachable or an error.
	plain := filepath.Join(dir, "plain.yaml")
	if err := os.WriteFile(plain, []byte("admin: "+addr+"\nadmin_auth: {token_file: admin-token}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := cli(t, "admin", "--config", plain, "status"); r.code != exitDB {
		t.Errorf("admin status in plain HTTP to an HTTPS endpoint: exit %d, want %d\n%s", r.code, exitDB, r.stderr)
	}
	// Plain HTTP is not served.
	resp, err := http.Get("http://" + addr + "/healthz")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("the admin endpoint answered plain HTTP")
		}
	}
}
