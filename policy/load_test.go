package policy

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
)

func TestDefaults(t *testing.T) {
	want := Config{
		Listen:    "127.0.0.1:6033",
		Admin:     "127.0.0.1:9033",
		LogLevel:  "info",
		LogFormat: "text",
		ClientTLS: ClientTLS{MinVersion: "1.2"},
		Timeouts: Timeouts{
			Connect:   Duration(5 * time.Second),
			Handshake: Duration(10 * time.Second),
			Idle:      Duration(8 * time.Hour),
			Shutdown:  Duration(30 * time.Second),
		},
		Limits:  Limits{MaxQueryBytes: 64 << 20, MaxParseBytes: 1 << 20, MaxParseTokens: 25_000, MaxParseNesting: 2_500, RewriteCache: 4096},
		Backend: Backend{Address: "127.0.0.1:3306", TLS: "disabled", Engine: "auto", HealthInterval: Duration(5 * time.Second)},
		Fencing: Fencing{
			LeaseTable: "fenced_job_leases",
			Variables:  Variables{Lease: "fence_lease", Owner: "fence_owner", Token: "fence_token"},
			OnStale:    "zero_rows",
			Mode:       "enforce",

			DatabaseGuard: "off",
		},
		Audit: Audit{MaxSizeMB: 100, MaxBackups: 10, QueueSize: 10000},
		Path:  "d.yaml",
	}
	for _, src := range []string{"", "{}\n", "backend:\nfencing:\n  variables:\ntimeouts:\n"} {
		c, err := Parse("d.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		c.policy, c.dec = nil, nil
		if !reflect.DeepEqual(*c, want) {
			t.Errorf("defaults of %q:\n got %+v\nwant %+v", src, *c, want)
		}
	}
}

func TestExplicitZeroAndEmptyAreKept(t *testing.T) {
	c, err := Parse("f.yaml", []byte("admin: \"\"\ntimeouts: {idle: 0s, connect: 0s}\nlimits: {rewrite_cache: 0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Admin != "" || c.Timeouts.Idle != 0 || c.Timeouts.Connect != 0 || c.Limits.RewriteCache != 0 {
		t.Errorf("explicit values replaced by defaults: %+v", c)
	}
	if c.Timeouts.Handshake.D() != 10*time.Second {
		t.Errorf("absent handshake timeout: %v", c.Timeouts.Handshake)
	}
}

func TestExampleConfigLoads(t *testing.T) {
	path := filepath.Join("..", "configs", "fenceproxy.yaml")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != DefaultListen || c.Backend.TLS != TLSDisabled || c.Fencing.Mode != ModeEnforce {
		t.Errorf("unexpected values: %+v", c)
	}
	if len(c.Tables) != 2 {
		t.Fatalf("tables: %+v", c.Tables)
	}
	runs := c.Tables[0]
	if runs.Schema != "app" || runs.Table != "reconciliation_runs" || runs.Lease != "admin:reconciliation" || runs.Line == 0 {
		t.Errorf("first table: %+v", runs)
	}
	if want := filepath.Join("..", "configs", "audit.jsonl"); c.Audit.File != want {
		t.Errorf("audit.file = %q, want %q (relative to the config)", c.Audit.File, want)
	}
	// Every key of the types appears in the example (commented out or not).
	data, _ := os.ReadFile(path)
	for _, key := range allKeys(reflect.TypeFor[Config]()) {
		if !strings.Contains(string(data), key+":") {
			t.Errorf("the example does not show %s", key)
		}
	}
}

// allKeys lists the yaml keys of t, recursively (leaf names only).
func allKeys(t reflect.Type) []string {
	var keys []string
	for name, i := range yamlFields(t) {
		keys = append(keys, name)
		ft := t.Field(i).Type
		if ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			keys = append(keys, allKeys(ft)...)
		}
	}
	return keys
}

func TestTablesGetSchemaTableAndLine(t *testing.T) {
	c, err := Parse("f.yaml", []byte(knowingly("tables:\n  - name: app.runs\n    lease: nightly\n\n  - {name: App.Invoices}\n")))
	if err != nil {
		t.Fatal(err)
	}
	want := []Table{
		{Name: "app.runs", Lease: "nightly", Schema: "app", Table: "runs", Line: 2},
		{Name: "App.Invoices", Schema: "App", Table: "Invoices", Line: 5},
	}
	if !reflect.DeepEqual(c.Tables, want) {
		t.Errorf("tables:\n got %+v\nwant %+v", c.Tables, want)
	}
}

func TestRelativePathsFollowTheConfigFile(t *testing.T) {
	src := `client_tls: {cert_file: c.pem, key_file: /abs/k.pem}
backend: {tls: verify-ca, ca_file: certs/ca.pem, cert_file: b.pem, key_file: bk.pem, user: fp, password_file: pw}
audit: {file: audit.jsonl}
`
	c, err := Parse("/etc/fenceproxy/fp.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	got := []string{c.ClientTLS.CertFile, c.ClientTLS.KeyFile, c.Backend.CAFile, c.Backend.CertFile, c.Backend.KeyFile, c.Backend.PasswordFile, c.Audit.File}
	want := []string{"/etc/fenceproxy/c.pem", "/abs/k.pem", "/etc/fenceproxy/certs/ca.pem", "/etc/fenceproxy/b.pem", "/etc/fenceproxy/bk.pem", "/etc/fenceproxy/pw", "/etc/fenceproxy/audit.jsonl"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("\n got %v\nwant %v", got, want)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("got %v", err)
	}
}

func TestDurationDecodesWithGoYAML(t *testing.T) {
	var v struct {
		D Duration `yaml:"d"`
	}
	if err := yaml.Unmarshal([]byte("d: 1m30s\n"), &v); err != nil || v.D.D() != 90*time.Second {
		t.Fatalf("got %v, %v", v.D, err)
	}
	if err := yaml.Unmarshal([]byte("d: soon\n"), &v); err == nil {
		t.Fatal("accepted d: soon")
	}
	out, err := yaml.Marshal(struct {
		D Duration `yaml:"d"`
	}{Duration(5 * time.Second)})
	if err != nil || strings.TrimSpace(string(out)) != "d: 5s" {
		t.Fatalf("marshal: %q %v", out, err)
	}
}

func TestBackendPassword(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "pw")
	os.WriteFile(file, []byte("s3cret with space\n"), 0o600)
	t.Setenv("FP_TEST_PW", "from-env")
	tests := []struct {
		name    string
		b       Backend
		want    string
		wantErr string
	}{
		{"no user", Backend{}, "", ""},
		{"env", Backend{User: "fp", PasswordEnv: "FP_TEST_PW"}, "from-env", ""},
		{"env unset", Backend{User: "fp", PasswordEnv: "FP_TEST_UNSET_PW"}, "", "FP_TEST_UNSET_PW is not set"},
		{"file", Backend{User: "fp", PasswordFile: file}, "s3cret with space", ""},
		{"file missing", Backend{User: "fp", PasswordFile: file + "x"}, "", "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.b.Password()
			if got != tt.want || (err == nil) != (tt.wantErr == "") || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got %q, %v; want %q, %q", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestAuditRotationKeys(t *testing.T) {
	for _, c := range []struct {
		yaml          string
		size, backups int
	}{
		{"audit: {file: a.jsonl}\n", DefaultAuditMaxSizeMB, DefaultAuditMaxBackups},
		{"audit: {file: a.jsonl, max_size_mb: 0}\n", 0, DefaultAuditMaxBackups},
		{"audit: {file: a.jsonl, max_size_mb: 5, max_backups: 1}\n", 5, 1},
	} {
		cfg, err := Parse("f.yaml", []byte(c.yaml))
		if err != nil {
			t.Fatalf("%q: %v", c.yaml, err)
		}
		if cfg.Audit.MaxSizeMB != c.size || cfg.Audit.MaxBackups != c.backups {
			t.Errorf("%q: max_size_mb %d, max_backups %d; want %d, %d", c.yaml, cfg.Audit.MaxSizeMB, cfg.Audit.MaxBackups, c.size, c.backups)
		}
	}
}

func TestCatalogRefreshDefault(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want time.Duration
	}{
		{"listen: 127.0.0.1:6033\n", 0},
		{"backend:\n  user: fp\n  password_env: PW\n", DefaultCatalogRefresh},
		{"backend:\n  user: fp\n  password_env: PW\ncatalog:\n  refresh: 0s\n", 0},
		{"backend:\n  user: fp\n  password_env: PW\ncatalog:\n  refresh: 500ms\n", 500 * time.Millisecond},
	} {
		cfg, err := Parse("f.yaml", []byte(c.yaml))
		if err != nil {
			t.Fatalf("%q: %v", c.yaml, err)
		}
		if got := cfg.Catalog.Refresh.D(); got != c.want {
			t.Errorf("%q: catalog.refresh = %v, want %v", c.yaml, got, c.want)
		}
	}
}

// TestAdminToken: the admin token from a file (trailing newline dropped) or
// an environment variable; unset, unreadable or empty is an error.
func TestAdminToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Setenv("FP_TEST_ADMIN_TOKEN", "env-token")
	t.Setenv("FP_TEST_ADMIN_EMPTY", "")
	tests := []struct {
		name string
		auth AdminAuth
		want string
		err  string
	}{
		{"none", AdminAuth{}, "", ""},
		{"env", AdminAuth{TokenEnv: "FP_TEST_ADMIN_TOKEN"}, "env-token", ""},
		{"env unset", AdminAuth{TokenEnv: "FP_TEST_ADMIN_UNSET"}, "", "FP_TEST_ADMIN_UNSET is not set"},
		{"env empty", AdminAuth{TokenEnv: "FP_TEST_ADMIN_EMPTY"}, "", "the token is empty"},
		{"file", AdminAuth{TokenFile: write("tok", "file-token\r\n")}, "file-token", ""},
		{"file empty", AdminAuth{TokenFile: write("empty", "\n")}, "", "the token is empty"},
		{"file missing", AdminAuth{TokenFile: filepath.Join(dir, "nope")}, "", "admin_auth.token_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.auth.Token()
			if got != tt.want || (tt.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("Token() = %q, %v; want %q, error containing %q", got, err, tt.want, tt.err)
			}
		})
	}
}
