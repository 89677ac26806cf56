package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/policy"
)

// notifySocket listens where systemd would, at a short path (unix socket
// paths are limited to 108 bytes; t.TempDir can be longer).
func notifySocket(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	if !strings.HasPrefix(name, "@") {
		dir, err := os.MkdirTemp("", "fp-notify")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		name = filepath.Join(dir, name)
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", name)
	return conn
}

// nextNotification waits for the next datagram, as systemd reads them.
func nextNotification(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return string(buf[:n])
}

func TestSdNotify(t *testing.T) {
	for _, name := range []string{"notify.sock", fmt.Sprintf("@fenceproxy-test-%d", os.Getpid())} {
		t.Run(name, func(t *testing.T) {
			conn := notifySocket(t, name)
			if err := sdNotify("READY=1", "STATUS=up"); err != nil {
				t.Fatal(err)
			}
			if got := nextNotification(t, conn); got != "READY=1\nSTATUS=up" {
				t.Errorf("datagram %q", got)
			}
		})
	}
	t.Run("unset", func(t *testing.T) {
		t.Setenv("NOTIFY_SOCKET", "")
		if err := sdNotify("READY=1"); err != nil {
			t.Errorf("without NOTIFY_SOCKET: %v, want nothing done", err)
		}
	})
	t.Run("nobody listening", func(t *testing.T) {
		t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "gone.sock"))
		if err := sdNotify("READY=1"); err == nil {
			t.Error("no error for a socket nobody listens on")
		}
	})
	t.Run("vsock", func(t *testing.T) {
		t.Setenv("NOTIFY_SOCKET", "vsock:2:1234")
		if err := sdNotify("READY=1"); err == nil || !strings.Contains(err.Error(), "only unix socket") {
			t.Errorf("vsock address: %v", err)
		}
	})
}

// TestServeTellsSystemd runs serve as systemd would with Type=notify: READY=1
// comes once the proxy answers clients, each SIGHUP is bracketed by
// RELOADING=1 and READY=1 (a failed reload too: the old config keeps
// running), and STOPPING=1 starts the drain. The reload reopens the audit
// file.
func TestServeTellsSystemd(t *testing.T) {
	conn := notifySocket(t, "notify.sock")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "fenceproxy.yaml")
	// Port 1 on loopback refuses: clients get ERR 9001 from the proxy.
	good := "listen: 127.0.0.1:0\nadmin: \"\"\nbackend: {address: \"127.0.0.1:1\"}\naudit: {file: audit.jsonl}\n"
	if err := os.WriteFile(cfgPath, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	reloader, err := policy.NewReloader(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() { done <- serve(ctx, func() {}, reloader, logger, new(slog.LevelVar)) }()

	ready := nextNotification(t, conn)
	addr, ok := strings.CutPrefix(ready, "READY=1\nSTATUS=listening on ")
	if !ok {
		t.Fatalf("first notification %q, want READY=1 with the listen address", ready)
	}
	// Ready means a client gets an answer: here the proxy's ERR packet.
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	pkt := make([]byte, 7)
	if _, err := io.ReadFull(c, pkt); err != nil || pkt[4] != 0xff || int(pkt[5])|int(pkt[6])<<8 != 9001 {
		t.Fatalf("after READY=1 the proxy answered % x, %v; want ERR 9001", pkt, err)
	}
	c.Close()

	hup := func() {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	// logrotate moves the audit file away; the reload starts a new one.
	auditPath := filepath.Join(dir, "audit.jsonl")
	if err := os.Rename(auditPath, auditPath+".1"); err != nil {
		t.Fatal(err)
	}
	hup()
	if got := nextNotification(t, conn); got != "RELOADING=1" {
		t.Fatalf("on SIGHUP: %q, want RELOADING=1", got)
	}
	if got := nextNotification(t, conn); got != "READY=1\nSTATUS=config reloaded (policy version 2)" {
		t.Fatalf("after the reload: %q", got)
	}
	if _, err := os.Stat(auditPath); err != nil {
		t.Errorf("the reload did not reopen the audit file: %v", err)
	}

	if err := os.WriteFile(cfgPath, []byte("listen: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hup()
	if got := nextNotification(t, conn); got != "RELOADING=1" {
		t.Fatalf("on SIGHUP: %q, want RELOADING=1", got)
	}
	if got := nextNotification(t, conn); got != "READY=1\nSTATUS=config reload failed; running the previous config (see the log)" {
		t.Fatalf("after a failed reload: %q", got)
	}

	cancel()
	if got := nextNotification(t, conn); got != "STOPPING=1" {
		t.Fatalf("on shutdown: %q, want STOPPING=1", got)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return after its context ended")
	}
}
