package main

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnitVerifies runs `systemd-analyze verify` over
// configs/fenceproxy.service, as shipped and with its commented-out
// password options enabled. verify exits 0 on unknown keys and bad values
// (it ignores them, as systemd would), so any output is a failure.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed: the unit is not verified")
	}
	unit := string(readConfig(t, "fenceproxy.service"))
	for _, want := range []string{"\nType=notify\n", "\nExecReload=/bin/kill -HUP $MAINPID\n", "\nDynamicUser=yes\n",
		"\nProtectSystem=strict\n", "\nNoNewPrivileges=yes\n", "\nLogsDirectory=fenceproxy\n"} {
		if !strings.Contains(unit, want) {
			t.Errorf("the unit lacks %q", strings.TrimSpace(want))
		}
	}
	// verify insists that ExecStart's binary exists: any executable will do.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	variants := map[string]string{
		"as shipped": unit,
		"with LoadCredential and EnvironmentFile": strings.NewReplacer(
			"\n#LoadCredential=", "\nLoadCredential=", "\n#EnvironmentFile=", "\nEnvironmentFile=").Replace(unit),
		"broken, to show verify catches it": strings.Replace(unit, "\nType=notify\n", "\nType=notifyy\nProtectSytem=strict\n", 1),
	}
	for name, text := range variants {
		t.Run(name, func(t *testing.T) {
			if name != "as shipped" && text == unit {
				t.Fatal("the variant changed nothing")
			}
			text = strings.ReplaceAll(text, "/usr/local/bin/fenceproxy", self)
			path := filepath.Join(t.TempDir(), "fenceproxy.service")
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(analyze, "verify", path).CombinedOutput()
			bad := err != nil || len(strings.TrimSpace(string(out))) > 0
			if strings.HasPrefix(name, "broken") {
				if !bad || !strings.Contains(string(out), "notifyy") || !strings.Contains(string(out), "ProtectSytem") {
					t.Errorf("verify passed a broken unit: %v\n%s", err, out)
				}
				return
			}
			if bad {
				t.Errorf("systemd-analyze verify: %v\n%s", err, out)
			}
		})
	}
}

// TestShippedCommandLines parses the serve command lines of the systemd unit
// and the Dockerfile with the binary's own command tree: a single-dash
// -config, say, would read as -c onfig and serve a file named "onfig".
func TestShippedCommandLines(t *testing.T) {
	unit := string(readConfig(t, "fenceproxy.service"))
	dockerfile, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var execStart, cmdLine []string
	for _, line := range strings.Split(unit, "\n") {
		if rest, ok := strings.CutPrefix(line, "ExecStart=/usr/local/bin/fenceproxy "); ok {
			execStart = strings.Fields(rest)
		}
	}
	for _, line := range strings.Split(string(dockerfile), "\n") {
		if rest, ok := strings.CutPrefix(line, "CMD "); ok {
			if err := json.Unmarshal([]byte(rest), &cmdLine); err != nil {
				t.Fatalf("Dockerfile CMD %s: %v", rest, err)
			}
		}
	}
	if !strings.Contains(string(dockerfile), `ENTRYPOINT ["/usr/local/bin/fenceproxy"]`) {
		t.Error("the Dockerfile's ENTRYPOINT is not the binary")
	}
	for name, args := range map[string][]string{"fenceproxy.service ExecStart": execStart, "Dockerfile CMD": cmdLine} {
		t.Run(name, func(t *testing.T) {
			if len(args) == 0 {
				t.Fatal("no command line found")
			}
			cmd, rest, err := newRoot(io.Discard, io.Discard).Find(args)
			if err != nil || cmd.Name() != "serve" {
				t.Fatalf("%q runs %q (%v), want serve", args, cmd.Name(), err)
			}
			if err := cmd.ParseFlags(rest); err != nil {
				t.Fatalf("%q: %v", args, err)
			}
			if got := cmd.Flags().Lookup("config").Value.String(); got != "/etc/fenceproxy/fenceproxy.yaml" {
				t.Errorf("%q serves config %q, want /etc/fenceproxy/fenceproxy.yaml", args, got)
			}
			if extra := cmd.Flags().Args(); len(extra) > 0 {
				t.Errorf("%q: stray arguments %q", args, extra)
			}
		})
	}
}
