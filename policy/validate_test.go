package policy

import (
	"strings"
	"testing"
	"time"
)

// TestEachRuleReportsPositionAndReason: one entry per rule, each file
// breaking exactly that rule, with the exact message expected.
func TestEachRuleReportsPositionAndReason(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string // the one error, without the "f.yaml:" prefix
	}{
		// YAML and structure
		{"syntax error", "listen: [1, 2\n", ""},
		{"unknown top-level key", "lisen: 127.0.0.1:1\n",
			`1:1: unknown key "lisen" (known: admin, admin_auth, admin_tls, audit, backend, catalog, client_tls, doctor, fencing, instance_id, limits, listen, listen_socket, listen_socket_mode, log_format, log_level, max_connections, proxy_protocol, tables, timeouts)`},
		{"unknown nested key", "backend:\n  adress: 127.0.0.1:3306\n",
			`2:3: unknown key "adress" in backend (known: address, ca_file, cert_file, engine, health_interval, key_file, password_env, password_file, server_name, tls, user)`},
		{"unknown key in a table entry", "tables:\n  - name: a.b\n    leese: x\n",
			`3:5: unknown key "leese" in tables[0] (known: created_later, lease, name)`},
		{"duplicate key", "listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n",
			`2:1: listen: duplicate key (first at line 1)`},
		{"merge key", "backend: &b {address: 127.0.0.1:1}\nfencing:\n  <<: *b\n",
			`3:3: merge keys (<<) are not supported: repeat the keys`},
		{"two documents", "listen: 127.0.0.1:1\n---\nadmin: \"\"\n",
			`2:1: only one YAML document is allowed in a config file`},
		{"file is not a mapping", "- listen\n",
			`1:1: the file: expected a mapping of keys, not a list`},
		{"section is not a mapping", "backend: 127.0.0.1:3306\n",
			`1:10: backend: expected a mapping of keys, not "127.0.0.1:3306"`},
		{"tables is not a list", "tables: app.t\n",
			`1:9: tables: expected a list, not "app.t"`},
		{"string expected", "listen: {host: x}\n",
			`1:9: listen: expected a string, not a mapping`},
		{"integer expected", "max_connections: many\n",
			`1:18: max_connections: expected an integer, not "many"`},
		{"float is not an integer", "max_connections: 1.5\n",
			`1:18: max_connections: expected an integer, not "1.5"`},
		{"bool expected", "client_tls:\n  cert_file: c.pem\n  key_file: k.pem\n  required: yes\n",
			`4:13: client_tls.required: expected true or false, not "yes"`},

		// addresses
		{"listen without port", "listen: 127.0.0.1\n",
			`1:9: listen: "127.0.0.1" is not host:port (IPv6 hosts in brackets: [::1]:3306)`},
		{"listen port out of range", "listen: 127.0.0.1:70000\n",
			`1:9: listen: "127.0.0.1:70000": port must be a number from 0 to 65535`},
		{"listen empty", "listen: \"\"\n",
			`1:9: listen: "" is not host:port (IPv6 hosts in brackets: [::1]:3306)`},
		{"admin named port", "admin: localhost:http\n",
			`1:8: admin: "localhost:http": port must be a number from 0 to 65535`},
		{"backend without host", "backend:\n  address: :3306\n",
			`2:12: backend.address: ":3306": needs a host and a non-zero port`},
		{"backend port 0", "backend:\n  address: db:0\n",
			`2:12: backend.address: "db:0": needs a host and a non-zero port`},

		// numbers and enums
		{"negative max_connections", "max_connections: -1\n",
			`1:18: max_connections: must be 0 (no limit) or more`},
		{"log_level", "log_level: verbose\n",
			`1:12: log_level: "verbose" is not one of debug, info, warn, error`},
		{"log_format", "log_format: xml\n",
			`1:13: log_format: "xml" is not one of text, json`},
		{"backend.tls", "backend:\n  tls: on\n",
			`2:8: backend.tls: "on" is not one of disabled, preferred, required, verify-ca, verify-full`},
		{"backend.engine", "backend:\n  engine: percona\n",
			`2:11: backend.engine: "percona" is not one of auto, mariadb, galera, mysql, tidb`},
		{"on_stale", "fencing:\n  on_stale: ignore\n",
			`2:13: fencing.on_stale: "ignore" is not one of zero_rows, error`},
		{"mode", "fencing:\n  mode: audit\n",
			`2:9: fencing.mode: "audit" is not one of enforce, shadow`},
		{"min_version", "client_tls:\n  cert_file: c.pem\n  key_file: k.pem\n  min_version: \"1.1\"\n",
			`4:16: client_tls.min_version: "1.1" is not one of 1.2, 1.3`},
		{"min_version written as 1.20", "client_tls:\n  cert_file: c.pem\n  key_file: k.pem\n  min_version: 1.20\n",
			`4:16: client_tls.min_version: "1.20" is not one of 1.2, 1.3`},
		{"max_query_bytes 0", "limits:\n  max_query_bytes: 0\n",
			`2:20: limits.max_query_bytes: must be from 1 to 1073741824 (1 GiB, the largest max_allowed_packet)`},
		{"max_query_bytes over 1 GiB", "limits:\n  max_query_bytes: 1073741825\n",
			`2:20: limits.max_query_bytes: must be from 1 to 1073741824 (1 GiB, the largest max_allowed_packet)`},
		{"max_parse_bytes 0", "limits:\n  max_parse_bytes: 0\n",
			`2:20: limits.max_parse_bytes: must be from 1 to 1073741824 (1 GiB)`},
		{"max_parse_bytes over 1 GiB", "limits:\n  max_parse_bytes: 1073741825\n",
			`2:20: limits.max_parse_bytes: must be from 1 to 1073741824 (1 GiB)`},
		{"max_parse_tokens 0", "limits:\n  max_parse_tokens: 0\n",
			`2:21: limits.max_parse_tokens: must be from 1 to 10000000`},
		{"max_parse_tokens too many", "limits:\n  max_parse_tokens: 10000001\n",
			`2:21: limits.max_parse_tokens: must be from 1 to 10000000`},
		{"max_parse_nesting 0", "limits:\n  max_parse_nesting: 0\n",
			`2:22: limits.max_parse_nesting: must be from 1 to 100000`},
		{"max_parse_nesting too deep", "limits:\n  max_parse_nesting: 100001\n",
			`2:22: limits.max_parse_nesting: must be from 1 to 100000`},
		{"rewrite_cache negative", "limits:\n  rewrite_cache: -1\n",
			`2:18: limits.rewrite_cache: must be 0 (no cache) or more`},
		{"threads negative", "limits:\n  threads: -1\n",
			`2:12: limits.threads: must be 0 (auto) or from 1 to 1024`},
		{"threads too many", "limits:\n  threads: 5000\n",
			`2:12: limits.threads: must be 0 (auto) or from 1 to 1024`},

		// catalog
		{"catalog.refresh too short", "backend:\n  user: fp\n  password_env: PW\ncatalog:\n  refresh: 10ms\n",
			`5:12: catalog.refresh: must be 0s (no catalog) or from 100ms to 10m0s`},
		{"catalog.refresh too long", "backend:\n  user: fp\n  password_env: PW\ncatalog:\n  refresh: 1h\n",
			`5:12: catalog.refresh: must be 0s (no catalog) or from 100ms to 10m0s`},
		{"catalog.refresh negative", "backend:\n  user: fp\n  password_env: PW\ncatalog:\n  refresh: -2s\n",
			`5:12: catalog.refresh: must be 0s (no catalog) or from 100ms to 10m0s`},
		{"catalog.refresh without backend.user", "catalog:\n  refresh: 2s\n",
			`2:12: catalog.refresh: needs backend.user: the catalog is read with the proxy's own account`},

		// audit file rotation
		{"max_size_mb negative", "audit:\n  file: a.jsonl\n  max_size_mb: -1\n",
			`3:16: audit.max_size_mb: must be from 0 (no rotation) to 1048576`},
		{"max_size_mb over 1 TiB", "audit:\n  file: a.jsonl\n  max_size_mb: 1048577\n",
			`3:16: audit.max_size_mb: must be from 0 (no rotation) to 1048576`},
		{"max_backups 0 is unbounded", "audit:\n  file: a.jsonl\n  max_backups: 0\n",
			`3:16: audit.max_backups: must be 1 or more: the backups kept are bounded`},
		{"max_backups without rotation", "audit:\n  file: a.jsonl\n  max_size_mb: 0\n  max_backups: 3\n",
			`4:16: audit.max_backups: has no effect with audit.max_size_mb: 0 (the proxy does not rotate)`},
		{"max_size_mb without a file", "audit:\n  max_size_mb: 10\n",
			`2:16: audit.max_size_mb: needs audit.file`},
		{"max_backups with file empty", "audit:\n  file: \"\"\n  max_backups: 2\n",
			`3:16: audit.max_backups: needs audit.file`},

		// audit table
		{"table_schema without backend.user", "audit:\n  table_schema: ops\n",
			`2:17: audit.table_schema: needs backend.user: the audit table is written through the proxy's own account`},
		{"retention without backend.user", "audit:\n  retention: 30d\n",
			`2:14: audit.retention: needs backend.user: the audit table is written through the proxy's own account`},
		{"table_schema quoted", "backend: {user: fp, password_env: P}\naudit:\n  table_schema: \"a-b\"\n",
			`3:17: audit.table_schema: "a-b": must be a schema name of 1 to 64 characters of A-Z a-z 0-9 _ $`},
		{"retention negative", "backend: {user: fp, password_env: P}\naudit:\n  retention: -1h\n",
			`3:14: audit.retention: must not be negative (0s = keep every row)`},
		{"retention under a second", "backend: {user: fp, password_env: P}\naudit:\n  retention: 10ms\n",
			`3:14: audit.retention: must be 1s or more (0s = keep every row)`},
		{"retention days with a bad rest", "backend: {user: fp, password_env: P}\naudit:\n  retention: 3dx\n",
			`3:14: audit.retention: "3dx" is not a duration such as "5s", "1m30s", "30d" or "0s"`},
		{"queue_size 0", "backend: {user: fp, password_env: P}\naudit:\n  queue_size: 0\n",
			`3:15: audit.queue_size: must be from 1 to 1000000`},

		// admin endpoint
		{"instance_id empty", "instance_id: \"\"\n",
			`1:14: instance_id: must not be empty (omit it for hostname:port)`},
		{"instance_id with a newline", "instance_id: \"a\\nb\"\n",
			`1:14: instance_id: must be 1 to 255 bytes without control characters`},
		{"token file and env", "admin_auth:\n  token_file: t\n  token_env: T\n",
			`3:14: admin_auth.token_env: give admin_auth.token_file or admin_auth.token_env, not both`},
		{"protect_probes without a token", "admin_auth:\n  protect_probes: true\n",
			`2:19: admin_auth.protect_probes: needs admin_auth.token_file or admin_auth.token_env`},
		{"admin_tls without key", "admin_tls:\n  cert_file: c.pem\n",
			`2:14: admin_tls.cert_file: needs admin_tls.key_file too`},
		{"admin_auth with admin off", "admin: \"\"\nadmin_auth:\n  token_env: T\n",
			`3:3: admin_auth: has no effect with admin: "" (no admin endpoint)`},

		// durations
		{"duration without unit", "timeouts:\n  idle: 30\n",
			`2:9: timeouts.idle: 30 is not a duration: write it with a unit, such as "5s" or "0s"`},
		{"duration unparsable", "timeouts:\n  connect: 5 seconds\n",
			`2:12: timeouts.connect: "5 seconds" is not a duration such as "5s", "1m30s", "30d" or "0s"`},
		{"duration negative", "timeouts:\n  shutdown: -1s\n",
			`2:13: timeouts.shutdown: must not be negative (0s = no limit)`},

		// TLS files
		{"client cert without key", "client_tls:\n  cert_file: c.pem\n",
			`2:14: client_tls.cert_file: needs client_tls.key_file too`},
		{"client key without cert", "client_tls:\n  key_file: k.pem\n",
			`2:13: client_tls.key_file: needs client_tls.cert_file too`},
		{"client TLS required without cert", "client_tls:\n  required: true\n",
			`2:13: client_tls.required: needs client_tls.cert_file and key_file`},
		{"backend cert without key", "backend:\n  tls: required\n  cert_file: c.pem\n",
			`3:14: backend.cert_file: needs backend.key_file too`},
		{"backend key without cert", "backend:\n  tls: required\n  key_file: k.pem\n",
			`3:13: backend.key_file: needs backend.cert_file too`},
		{"verify-ca without ca_file", "backend:\n  tls: verify-ca\n",
			`2:8: backend.tls: verify-ca needs backend.ca_file`},

		// the proxy's own account
		{"user without password source", "backend:\n  user: fp\n",
			`2:9: backend.user: needs backend.password_env or backend.password_file`},
		{"user with both password sources", "backend:\n  user: fp\n  password_env: PW\n  password_file: pw.txt\n",
			`4:18: backend.password_file: give backend.password_env or backend.password_file, not both`},
		{"password_env without user", "backend:\n  password_env: PW\n",
			`2:17: backend.password_env: needs backend.user`},
		{"password_file without user", "backend:\n  password_file: pw.txt\n",
			`2:18: backend.password_file: needs backend.user`},

		// fencing
		{"variable with a dash", "fencing:\n  variables: {lease: fence-lease}\n",
			`2:22: fencing.variables.lease: "fence-lease": a variable name may contain only A-Z, a-z, 0-9 and _`},
		{"variable with @", "fencing:\n  variables:\n    token: \"@tok\"\n",
			`3:12: fencing.variables.token: "@tok": a variable name may contain only A-Z, a-z, 0-9 and _`},
		{"variable empty", "fencing:\n  variables:\n    owner: \"\"\n",
			`3:12: fencing.variables.owner: "": a variable name has 1 to 64 characters`},
		{"variable too long", "fencing:\n  variables:\n    owner: " + strings.Repeat("v", 65) + "\n",
			`3:12: fencing.variables.owner: "` + strings.Repeat("v", 65) + `": a variable name has 1 to 64 characters`},
		{"variables equal ignoring case", "fencing:\n  variables: {owner: Fence_Lease}\n",
			`2:22: fencing.variables.owner: "Fence_Lease" is also the lease variable: the three variables must differ`},
		{"lease_table with a dash", "fencing:\n  lease_table: job-leases\n",
			`2:16: fencing.lease_table: "job-leases": must be name or schema.name, each part 1 to 64 characters of A-Z a-z 0-9 _ $ (quoted or non-ASCII names are not supported yet)`},
		{"lease_table with three parts", "fencing:\n  lease_table: a.b.c\n",
			`2:16: fencing.lease_table: "a.b.c": must be name or schema.name`},
		{"lease_table empty schema", "fencing:\n  lease_table: .leases\n",
			`2:16: fencing.lease_table: ".leases": must be name or schema.name, each part 1 to 64 characters of A-Z a-z 0-9 _ $ (quoted or non-ASCII names are not supported yet)`},

		// tables
		{"table without schema", "tables:\n  - name: invoices\n",
			`2:11: tables[0].name: "invoices": a protected table is named schema.table, each part 1 to 64 characters of A-Z a-z 0-9 _ $ (quoted or non-ASCII names are not supported yet)`},
		{"table name backquoted", "tables:\n  - name: \"`app`.`invoices`\"\n",
			"2:11: tables[0].name: \"`app`.`invoices`\": a protected table is named schema.table, each part 1 to 64 characters of A-Z a-z 0-9 _ $ (quoted or non-ASCII names are not supported yet)"},
		{"table name non-ASCII", "tables:\n  - name: app.rechnungsläufe\n",
			`2:11: tables[0].name: "app.rechnungsläufe": a protected table is named schema.table, each part 1 to 64 characters of A-Z a-z 0-9 _ $ (quoted or non-ASCII names are not supported yet)`},
		{"table name with three parts", "tables:\n  - name: a.b.c\n",
			`2:11: tables[0].name: "a.b.c": a protected table is named schema.table, each part 1 to 64 characters of A-Z a-z 0-9 _ $ (quoted or non-ASCII names are not supported yet)`},
		{"table name missing", "tables:\n  - lease: job\n",
			`2:5: tables[0]: name is required (schema.table)`},
		{"empty table entry", "tables:\n  - name: a.b\n  -\n",
			`3:3: tables[1]: name is required (schema.table)`},
		{"duplicate table ignoring case", "tables:\n  - name: app.Invoices\n  - name: APP.invoices\n",
			`3:11: tables[1].name: "APP.invoices" is listed twice: on lines 2 and 3 (names match ignoring case)`},
		{"table is the lease table", "tables:\n  - name: app.fenced_job_leases\n",
			`2:11: tables[0].name: "app.fenced_job_leases" is the lease table itself: it cannot be fenced by its own rows`},
		{"table is the qualified lease table", "fencing:\n  lease_table: ops.leases\ntables:\n  - name: OPS.Leases\n",
			`4:11: tables[0].name: "OPS.Leases" is the lease table itself: it cannot be fenced by its own rows`},
		{"fixed lease empty", "tables:\n  - name: a.b\n    lease: \"\"\n",
			`3:12: tables[0].lease: a fixed lease name has 1 to 191 bytes (omit lease to use the session's variable)`},
		{"fixed lease too long", "tables:\n  - name: a.b\n    lease: " + strings.Repeat("x", 192) + "\n",
			`3:12: tables[0].lease: a fixed lease name has 1 to 191 bytes (omit lease to use the session's variable)`},
		{"fixed lease with a quote", "tables:\n  - name: a.b\n    lease: \"it's\"\n",
			`3:12: tables[0].lease: "it's": a fixed lease name may contain only printable ASCII without ' " \ ` + "`" + ` or ?`},
		{"fixed lease with a backslash", "tables:\n  - name: a.b\n    lease: 'a\\b'\n",
			`3:12: tables[0].lease: "a\\b": a fixed lease name may contain only printable ASCII without ' " \ ` + "`" + ` or ?`},
		{"fixed lease with a placeholder mark", "tables:\n  - name: a.b\n    lease: job?\n",
			`3:12: tables[0].lease: "job?": a fixed lease name may contain only printable ASCII without ' " \ ` + "`" + ` or ?`},
		{"fixed lease with a trailing space", "tables:\n  - name: a.b\n    lease: \"job \"\n",
			`3:12: tables[0].lease: "job ": a fixed lease name may not end with a space (the lease table's collation ignores trailing spaces)`},
		{"fixed lease non-ASCII", "tables:\n  - name: a.b\n    lease: jöb\n",
			`3:12: tables[0].lease: "jöb": a fixed lease name may contain only printable ASCII without ' " \ ` + "`" + ` or ?`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("f.yaml", []byte(knowingly(tt.yaml)))
			if err == nil {
				t.Fatalf("accepted:\n%s", tt.yaml)
			}
			if c != nil {
				t.Error("a Config came back with the error")
			}
			errs := Errors(err)
			if len(errs) != 1 {
				t.Fatalf("want 1 error, got %d:\n%v", len(errs), err)
			}
			if tt.want == "" { // only the position format is ours
				if !strings.HasPrefix(err.Error(), "f.yaml:1:") {
					t.Errorf("got %q, want f.yaml:1:COL: ...", err)
				}
				return
			}
			if got := err.Error(); got != "f.yaml:"+tt.want {
				t.Errorf("\n got: %s\nwant: f.yaml:%s", got, tt.want)
			}
		})
	}
}

// TestAllErrorsOfAFileTogether: structural and semantic errors are
// reported together, in file order.
func TestAllErrorsOfAFileTogether(t *testing.T) {
	src := `listen: nowhere
lisen: 127.0.0.1:1
max_connections: -2
backend:
  tls: verify-ca
fencing:
  mode: loud
tables:
  - name: app.t
  - name: app.T
timeouts:
  idle: 5
catalog: {refresh: 0s}
`
	_, err := Parse("f.yaml", []byte(src))
	var got []string
	for _, e := range Errors(err) {
		got = append(got, e.Error()[:strings.Index(e.Error(), ": ")])
	}
	want := []string{"f.yaml:1:9", "f.yaml:2:1", "f.yaml:3:18", "f.yaml:5:8", "f.yaml:7:9", "f.yaml:10:11", "f.yaml:12:9"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("positions:\n got %v\nwant %v\nerror:\n%v", got, want, err)
	}
	if lines := strings.Count(err.Error(), "\n") + 1; lines != len(want) {
		t.Errorf("err.Error() has %d lines, want one per problem", lines)
	}
}

// TestValidValuesAccepted covers the edges the rules must let through.
func TestValidValuesAccepted(t *testing.T) {
	tests := []struct{ name, yaml string }{
		{"empty file", ""},
		{"only comments", "# nothing yet\n"},
		{"empty mapping", "{}\n"},
		{"null sections", "backend:\nfencing:\ntables:\n"},
		{"admin off", "admin: \"\"\n"},
		{"listen on all interfaces, any port", "listen: :0\n"},
		{"IPv6", "listen: \"[::1]:6033\"\nbackend:\n  address: \"[::1]:3306\"\n"},
		{"zero timeouts", "timeouts: {connect: 0s, handshake: 0s, idle: 0s, shutdown: 0s}\n"},
		{"client TLS", "client_tls: {cert_file: c.pem, key_file: k.pem, required: true, min_version: \"1.3\"}\n"},
		{"min_version as a number", "client_tls: {cert_file: c.pem, key_file: k.pem, min_version: 1.2}\n"},
		{"verify-full without ca_file (system roots)", "backend: {tls: verify-full}\n"},
		{"user with password_env", "backend: {user: fp, password_env: FP_PW}\n"},
		{"user with password_file", "backend: {user: fp, password_file: pw}\n"},
		{"audit table keys", "backend: {user: fp, password_env: P}\naudit: {table_schema: ops$1, retention: 30d, queue_size: 1}\n"},
		{"retention days and hours", "backend: {user: fp, password_env: P}\naudit: {retention: 1d12h}\n"},
		{"admin token and TLS", "instance_id: proxy-1\nadmin_auth: {token_env: T, protect_probes: true}\nadmin_tls: {cert_file: c.pem, key_file: k.pem}\n"},
		{"dollar in names", "fencing: {lease_table: ops$x.l$}\ntables:\n  - name: a$.b$\n"},
		{"fixed lease with colon and space", "tables:\n  - name: app.runs\n    lease: \"admin: nightly run #2\"\n"},
		{"table in another schema named like an unqualified lease table", "fencing: {lease_table: ops.fenced_job_leases}\ntables:\n  - name: app.fenced_job_leases\n"},
		{"anchors and aliases", "backend: &b\n  address: db:3306\nfencing: {mode: shadow}\ntables:\n  - &t {name: a.b}\n"},
		{"zero tables", "tables: []\n"},
		{"UTF-8 byte order mark", "\ufefflisten: 127.0.0.1:1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Parse("f.yaml", []byte(knowingly(tt.yaml))); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// knowingly adds catalog.refresh: 0s to a file with protected tables and
// no proxy account, for tests of other rules: without it (or
// backend.user) such a file is refused (TestProtectionRules).
func knowingly(yaml string) string {
	if strings.Contains(yaml, "tables:") && !strings.Contains(yaml, "user:") && !strings.Contains(yaml, "catalog") {
		return yaml + "catalog: {refresh: 0s}\n"
	}
	return yaml
}

// TestParseDuration: days in front of a Go duration, and what is refused.
func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"30d", 30 * 24 * time.Hour, true},
		{"1d12h", 36 * time.Hour, true},
		{"0d", 0, true},
		{"90s", 90 * time.Second, true},
		{"d", 0, false},
		{"1d-1h", 0, false},
		{"3dx", 0, false},
		{"999999999999d", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDuration(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Fatalf("ParseDuration(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
			}
		})
	}
}
