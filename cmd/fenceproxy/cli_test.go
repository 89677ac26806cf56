package main

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestHelpGoesToStdoutWithExitZero(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"help"}, {}, {"help", "lease"},
		{"serve", "--help"}, {"check-config", "-h"}, {"init", "--help"}, {"demo", "--help"},
		{"version", "--help"}, {"completion", "--help"},
		{"lease", "--help"}, {"lease"}, {"lease", "acquire", "--help"}, {"lease", "renew", "--help"},
		{"lease", "release", "--help"}, {"lease", "show", "--help"}, {"lease", "list", "--help"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := cli(t, args...)
			wantCode(t, r, exitOK, strings.Join(args, " "))
			if !strings.Contains(r.stdout, "Usage:") || r.stderr != "" {
				t.Fatalf("want help on stdout only\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
			}
		})
	}
}

func TestVersionFlagAndCommand(t *testing.T) {
	a, b := cli(t, "--version"), cli(t, "version")
	wantCode(t, a, exitOK, "--version")
	wantCode(t, b, exitOK, "version")
	if !strings.HasPrefix(a.stdout, "fenceproxy "+version+" (go") || a.stdout != b.stdout {
		t.Fatalf("--version %q, version %q", a.stdout, b.stdout)
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		message string // what the one error line must say
	}{
		{"stray argument to serve", []string{"serve", "extra-arg", "--config", "x.yaml"}, `fenceproxy serve: unexpected argument "extra-arg"`},
		{"unknown flag", []string{"serve", "--bogus"}, "fenceproxy serve: unknown flag: --bogus"},
		{"unknown command", []string{"leese"}, `fenceproxy: unknown command "leese" (did you mean lease?)`},
		{"unknown lease command", []string{"lease", "aquire", "x"}, `fenceproxy lease: unknown command "aquire" (did you mean acquire?)`},
		{"check-config without file", []string{"check-config"}, "fenceproxy check-config: want one config FILE, got 0 arguments"},
		{"two files", []string{"check-config", "a", "b"}, "fenceproxy check-config: want one config FILE, got 2 arguments"},
		{"version with argument", []string{"version", "x"}, `fenceproxy version: unexpected argument "x"`},
		{"bad ttl", []string{"lease", "acquire", "x", "--ttl", "soon", "--dsn", "u:p@tcp(127.0.0.1:1)/d"}, `fenceproxy lease acquire: ttl "soon": want a duration like 30s or seconds like 1.5`},
		{"demo bad ttl", []string{"demo", "--ttl", "-1s"}, "fenceproxy demo: --ttl must be positive, got -1s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := cli(t, tc.args...)
			wantCode(t, r, exitUsage, strings.Join(tc.args, " "))
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			if len(lines) != 2 || lines[0] != tc.message || !strings.HasPrefix(lines[1], "run 'fenceproxy") {
				t.Fatalf("stderr:\n%s\nwant:\n%s\nrun '... --help' for usage", r.stderr, tc.message)
			}
			if r.stdout != "" {
				t.Fatalf("stdout: %s", r.stdout)
			}
		})
	}
}

func TestCleanMessage(t *testing.T) {
	for in, want := range map[string]string{
		`lease: acquire "x": lease: invalid argument: ttl`: `acquire "x": invalid argument: ttl`,
		`lease: held: "job" is held and not expired`:       `held: "job" is held and not expired`,
		`Error 1146 (42S02): Table 'd.t' doesn't exist`:    `Error 1146 (42S02): Table 'd.t' doesn't exist`,
	} {
		if got := cleanMessage(in); got != want {
			t.Errorf("cleanMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHumanDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		1500 * time.Millisecond:                         "1.5s",
		30 * time.Second:                                "30s",
		4*time.Minute + 20*time.Second:                  "4m20s",
		3*time.Hour + 5*time.Minute + 10*time.Second:    "3h05m",
		277*time.Hour + 46*time.Minute + 33*time.Second: "11d14h",
		0: "0s",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		r := cli(t, "completion", shell)
		wantCode(t, r, exitOK, "completion "+shell)
		if !strings.Contains(r.stdout, "fenceproxy") {
			t.Fatalf("completion %s printed %q", shell, r.stdout[:min(len(r.stdout), 200)])
		}
	}
	// A shell without a script is a usage error naming the shells there are.
	r := cli(t, "completion", "tcsh")
	wantCode(t, r, exitUsage, "completion tcsh")
	if r.stdout != "" || !strings.Contains(r.stderr, `no completion for shell "tcsh": the shells are bash, fish, powershell, zsh`) {
		t.Fatalf("completion tcsh: stdout %q, stderr %q", r.stdout, r.stderr)
	}
}

func TestPlural(t *testing.T) {
	for n, want := range map[int]string{0: "0 findings", 1: "1 finding", 2: "2 findings"} {
		if got := plural(n, "finding", "findings"); got != want {
			t.Errorf("plural(%d) = %q", n, got)
		}
	}
	path := writeConfig(t, "listen: 127.0.0.1:0\nadmin: \"\"\ntables:\n  - name: app.t\n    lease: x\ncatalog: {refresh: 0s}\n")
	r := cli(t, "check-config", path)
	wantCode(t, r, exitOK, "check-config")
	if !strings.Contains(r.stdout, "ok (1 protected table, mode enforce") {
		t.Errorf("check-config: %q", r.stdout)
	}
	r = cli(t, "check-config", "a", "b", "c")
	if !strings.Contains(r.stderr, "got 3 arguments") {
		t.Errorf("three arguments: %q", r.stderr)
	}
}

// TestServeFatalErrorOnce: a fatal error of serve (here: its port is in
// use) is said once; with log_format json as one JSON log line, nothing
// else on stderr.
func TestServeFatalErrorOnce(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, format := range []string{"text", "json"} {
		path := writeConfig(t, "listen: "+busy.Addr().String()+"\nadmin: \"\"\nlog_format: "+format+"\n")
		r := cli(t, "serve", "--config", path)
		wantCode(t, r, exitRefused, "serve on a busy port")
		if n := strings.Count(r.stderr, "address already in use"); n != 1 {
			t.Errorf("%s: the error said %d times:\n%s", format, n, r.stderr)
		}
		if format == "json" {
			for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
				if !strings.HasPrefix(l, "{") || !strings.HasSuffix(l, "}") {
					t.Errorf("not a JSON line: %q", l)
				}
			}
		}
	}
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fenceproxy.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBuildInfoMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	registerMetrics(reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "fenceproxy_build_info" {
			continue
		}
		m := mf.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if m.GetGauge().GetValue() != 1 || labels["version"] != version || labels["goversion"] != runtime.Version() ||
			labels["revision"] != vcsRevision() || labels["revision"] == "" {
			t.Fatalf("fenceproxy_build_info: %v = %v", labels, m.GetGauge().GetValue())
		}
		return
	}
	t.Fatal("no fenceproxy_build_info")
}
