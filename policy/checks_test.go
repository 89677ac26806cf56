package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProtectionRules: protected tables without the proxy's own account
// are refused unless catalog.refresh: 0s says the operator runs without
// the catalog knowingly; the message names both fixes and the grant.
func TestProtectionRules(t *testing.T) {
	tables := "tables:\n  - name: app.invoices\n"
	user := "backend: {user: fenceproxy, password_env: FP_PW}\n"
	tests := []struct {
		name string
		yaml string
		want string // "" = accepted
	}{
		{"tables without backend.user", tables,
			"2:5: tables: protected tables need the proxy's own account for the schema catalog"},
		{"shadow mode is no exception", "fencing: {mode: shadow}\n" + tables,
			"3:5: tables: protected tables need the proxy's own account"},
		{"tables with backend.user", user + tables, ""},
		{"tables without backend.user, catalog off knowingly", tables + "catalog: {refresh: 0s}\n", ""},
		{"tables with backend.user, catalog off knowingly", user + tables + "catalog: {refresh: 0s}\n", ""},
		{"no tables: a plain proxy", "listen: 127.0.0.1:1\n", ""},
		{"catalog on without backend.user", tables + "catalog: {refresh: 2s}\n",
			"3:20: catalog.refresh: needs backend.user"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tt.yaml))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("accepted:\n%s", tt.yaml)
			case tt.want != "":
				if len(Errors(err)) != 1 || !strings.HasPrefix(err.Error(), "f.yaml:"+tt.want) {
					t.Fatalf("got %v\nwant f.yaml:%s...", err, tt.want)
				}
			}
		})
	}
	_, err := Parse("f.yaml", []byte(tables))
	for _, fix := range []string{"backend.user", "backend.password_env", "GRANT SELECT, SHOW VIEW, TRIGGER, EVENT ON *.*", "catalog.refresh: 0s"} {
		if !strings.Contains(err.Error(), fix) {
			t.Errorf("the message does not name %q: %v", fix, err)
		}
	}
}

// TestListenerConflicts: two listeners on one address, and a backend that
// is the proxy's own listener, are refused at the key that repeats it.
func TestListenerConflicts(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"listen equals admin", "listen: 127.0.0.1:6033\nadmin: 127.0.0.1:6033\n",
			`2:8: admin: "127.0.0.1:6033" and listen "127.0.0.1:6033" are the same address: each listener needs a port of its own`},
		{"admin on all interfaces, listen on loopback", "listen: 127.0.0.1:6033\nadmin: :6033\n",
			`2:8: admin: ":6033" and listen "127.0.0.1:6033" are the same address`},
		{"localhost and 127.0.0.1", "listen: localhost:7000\nadmin: 127.0.0.1:7000\n",
			`2:8: admin: "127.0.0.1:7000" and listen "localhost:7000" are the same address`},
		{"0.0.0.0 and [::1]", "listen: 0.0.0.0:7000\nadmin: \"[::1]:7000\"\n",
			`2:8: admin: "[::1]:7000" and listen "0.0.0.0:7000" are the same address`},
		{"backend is the listener", "listen: 127.0.0.1:6033\nbackend: {address: localhost:6033}\n",
			`2:20: backend.address: "localhost:6033" is the proxy's own listen address: the proxy would connect to itself`},
		{"backend is the admin listener", "admin: 0.0.0.0:9033\nbackend: {address: 127.0.0.1:9033}\n",
			`2:20: backend.address: "127.0.0.1:9033" is the proxy's own admin address`},
		{"default listen and admin given the same port", "admin: 127.0.0.1:6033\n",
			`1:8: admin: "127.0.0.1:6033" and listen "127.0.0.1:6033" are the same address`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tt.yaml))
			if err == nil || len(Errors(err)) != 1 || !strings.HasPrefix(err.Error(), "f.yaml:"+tt.want) {
				t.Fatalf("got %v\nwant f.yaml:%s", err, tt.want)
			}
		})
	}
	for _, ok := range []string{
		"listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\n",       // any free port, twice
		"listen: 127.0.0.1:6033\nadmin: 127.0.0.2:6033\n", // two loopback addresses
		"listen: 10.0.0.1:6033\nadmin: 10.0.0.2:6033\n",
		"listen: 127.0.0.1:6033\nadmin: \"\"\n",
		"listen: :6033\nbackend: {address: db.internal:6033}\n", // another host's port
	} {
		if _, err := Parse("f.yaml", []byte(ok)); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
}

func TestHealthInterval(t *testing.T) {
	c, err := Parse("f.yaml", []byte("backend: {health_interval: 0s}\n"))
	if err != nil || c.Backend.HealthInterval != 0 {
		t.Fatalf("0s: %v %v", c, err)
	}
	for _, bad := range []string{"10ms", "2h", "-1s"} {
		_, err := Parse("f.yaml", []byte("backend: {health_interval: "+bad+"}\n"))
		if err == nil || !strings.Contains(err.Error(), "backend.health_interval: must be 0s (no active check) or from 100ms to 1h0m0s") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

func TestTrustedAccounts(t *testing.T) {
	c, err := Parse("f.yaml", []byte("doctor:\n  trusted_accounts: [root@localhost, \"'ops'@'10.0.%'\", migrate]\n"))
	if err != nil || len(c.Doctor.TrustedAccounts) != 3 {
		t.Fatalf("%v %v", c, err)
	}
	_, err = Parse("f.yaml", []byte("doctor:\n  trusted_accounts: [root@localhost, \"ops@\"]\n"))
	if err == nil || !strings.HasPrefix(err.Error(), `f.yaml:2:38: doctor.trusted_accounts[1]: "ops@": the host after '@' is empty`) {
		t.Errorf("bad trusted account: %v", err)
	}
}

// TestCheckReturnsWhatItDecoded: a file with problems still yields the
// keys that decoded, with the bad ones marked, and ErrorAt places later
// problems at their keys.
func TestCheckReturnsWhatItDecoded(t *testing.T) {
	src := "listen: nowhere\nbackend:\n  user: fp\n  password_file: [a, b]\naudit:\n  file: /nonexistent-dir/audit.jsonl\ntables:\n  - name: app.invoices\n    created_later: true\n"
	c, err := Check("f.yaml", []byte(src))
	if err == nil || c == nil {
		t.Fatalf("Check = %v, %v", c, err)
	}
	if !c.Reported("listen") || !c.Reported("backend.password_file") || c.Reported("audit.file") || c.Reported("backend.user") {
		t.Errorf("Reported: listen %v, backend.password_file %v, audit.file %v, backend.user %v",
			c.Reported("listen"), c.Reported("backend.password_file"), c.Reported("audit.file"), c.Reported("backend.user"))
	}
	if c.Audit.File != "/nonexistent-dir/audit.jsonl" || len(c.Tables) != 1 || !c.Tables[0].CreatedLater {
		t.Errorf("decoded: audit.file %q, tables %+v", c.Audit.File, c.Tables)
	}
	if got := c.ErrorAt("audit.file", "no such directory").Error(); got != "f.yaml:6:9: audit.file: no such directory" {
		t.Errorf("ErrorAt(audit.file) = %s", got)
	}
	if got := c.ErrorAt("tables[0].name", "missing").Error(); got != "f.yaml:8:11: tables[0].name: missing" {
		t.Errorf("ErrorAt(tables[0].name) = %s", got)
	}
	if got := c.ErrorAt("admin_tls.cert_file", "x").Error(); got != "f.yaml: admin_tls.cert_file: x" {
		t.Errorf("ErrorAt of a key the file lacks = %s", got)
	}
	if p, err := Parse("f.yaml", []byte(src)); p != nil || err == nil {
		t.Errorf("Parse of the same file = %v, %v", p, err)
	}
}

func TestReloaderCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fp.yaml")
	writeFile(t, path, "tables:\n  - name: app.runs\n")
	r, err := NewReloader(path)
	if err != nil {
		t.Fatal(err)
	}
	refuse := errors.New("app.run does not exist")
	r.SetCheck(func(c *Config) error {
		if c.Tables[0].Name == "app.run" {
			return refuse
		}
		return nil
	})
	writeFile(t, path, "tables:\n  - name: app.run\n")
	if _, err := r.Reload(); !errors.Is(err, refuse) || r.LastError() != err {
		t.Fatalf("Reload with a check that refuses: %v", err)
	}
	if r.Current().Tables[0].Name != "app.runs" || r.Policy().Version != 1 {
		t.Fatalf("the refused config was installed: %+v", r.Current().Tables)
	}
	writeFile(t, path, "tables:\n  - name: app.jobs\n")
	if _, err := r.Reload(); err != nil || r.Current().Tables[0].Name != "app.jobs" {
		t.Fatalf("Reload with a check that passes: %v", err)
	}
	_ = os.Remove(path)
}
