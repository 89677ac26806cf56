// Package policy is fenceproxy's configuration: the YAML file's types, their
// defaults, strict validation with file:line:column errors, and the immutable
// fencing Policy that the rewriter consults.
//
// The keys listed in DESIGN.md are a contract; everything else here may grow
// compatibly.
package policy

import (
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/lease"
)

// Config is one parsed and validated configuration file.
type Config struct {
	Listen string `yaml:"listen"` // MySQL protocol for apps, default 127.0.0.1:6033; "" = none (listen_socket only)
	// ListenSocket is a Unix socket for the MySQL protocol too ("" = none),
	// created with ListenSocketMode ("0660"); see listeners.go.
	ListenSocket     string        `yaml:"listen_socket"`
	ListenSocketMode string        `yaml:"listen_socket_mode"`
	ProxyProtocol    ProxyProtocol `yaml:"proxy_protocol"`
	Admin            string        `yaml:"admin"`           // HTTP /metrics /healthz /readyz /audit, default 127.0.0.1:9033; "" = off
	MaxConnections   int           `yaml:"max_connections"` // 0 = no limit; past it a client gets ERR 1040
	LogLevel         string        `yaml:"log_level"`       // debug | info | warn | error (default info)
	LogFormat        string        `yaml:"log_format"`      // text | json (default text)
	ClientTLS        ClientTLS     `yaml:"client_tls"`
	Timeouts         Timeouts      `yaml:"timeouts"`
	Limits           Limits        `yaml:"limits"`
	Backend          Backend       `yaml:"backend"`
	Fencing          Fencing       `yaml:"fencing"`
	Tables           []Table       `yaml:"tables"`
	Audit            Audit         `yaml:"audit"`
	Catalog          Catalog       `yaml:"catalog"`
	AdminAuth        AdminAuth     `yaml:"admin_auth"`
	AdminTLS         AdminTLS      `yaml:"admin_tls"`
	// InstanceID names this proxy in audit records (default: hostname and
	// listen port, host:port).
	InstanceID string `yaml:"instance_id"`

	Doctor Doctor `yaml:"doctor"`

	// Path is the file the config was read from (for messages and reload).
	Path string `yaml:"-"`

	policy *Policy  // built by Parse; see Config.Policy
	dec    *decoder // positions of the file's keys, for ErrorAt
}

// ClientTLS is TLS offered to apps connecting to the proxy.
type ClientTLS struct {
	CertFile   string `yaml:"cert_file"` // PEM; with key_file, the proxy offers TLS to clients
	KeyFile    string `yaml:"key_file"`
	Required   bool   `yaml:"required"`    // refuse clients that do not switch to TLS
	MinVersion string `yaml:"min_version"` // "1.2" (default) or "1.3"
}

// Enabled reports whether the proxy offers TLS to clients.
func (c ClientTLS) Enabled() bool { return c.CertFile != "" }

// Timeouts bound every wait the proxy makes on behalf of a client.
type Timeouts struct {
	// All default as below when absent; an explicit "0s" means no limit
	// (for shutdown: force-close at once).
	Connect   Duration `yaml:"connect"`   // backend dial + its initial handshake, default 5s
	Handshake Duration `yaml:"handshake"` // client handshake and authentication, default 10s
	Idle      Duration `yaml:"idle"`      // client silence between commands before the proxy closes it (default 8h, as MySQL's wait_timeout)
	Shutdown  Duration `yaml:"shutdown"`  // graceful drain on SIGTERM before connections are force-closed, default 30s
	// DrainDelay: after SIGTERM, how long the proxy keeps accepting new
	// clients while /readyz already answers 503, so that load balancers
	// take it out of rotation before it stops listening (default 0s).
	DrainDelay Duration `yaml:"drain_delay"`
}

// Limits bound memory per connection.
type Limits struct {
	// MaxQueryBytes is the largest COM_QUERY / COM_STMT_PREPARE text the
	// proxy buffers to inspect (default 64 MiB). Larger statements are
	// refused with an error: they cannot be checked for protected tables.
	MaxQueryBytes int `yaml:"max_query_bytes"`
	// The max_parse_* limits bound a COM_QUERY / COM_STMT_PREPARE text
	// that the proxy has to parse (it names a protected table, a catalog
	// object or a lease function, or changes the session); past one, the
	// text is refused while any table is protected. Texts that name
	// nothing protected are relayed without parsing and never counted.
	//
	// MaxParseBytes: its length (default 1 MiB).
	MaxParseBytes int `yaml:"max_parse_bytes"`
	// MaxParseTokens: its tokens (words, literals, operators), all its
	// statements together (default 25000).
	MaxParseTokens int `yaml:"max_parse_tokens"`
	// MaxParseNesting: how deep the parentheses of one of its statements
	// nest (default 2500).
	MaxParseNesting int `yaml:"max_parse_nesting"`
	// RewriteCache is the number of rewritten statements remembered
	// (default 4096; 0 = no cache: neither decisions nor statement shapes are remembered).
	RewriteCache int `yaml:"rewrite_cache"`
	// Threads is how many OS threads run the proxy's Go code at once
	// (GOMAXPROCS). 0 (default) = auto: half the CPUs the process may use
	// (at least 1) when the backend is on this host, where the proxy
	// shares them with the server and usually the clients; else, or when
	// the CPU affinity mask gives it CPUs of its own, all of them. The
	// environment's GOMAXPROCS wins over both.
	Threads int `yaml:"threads"`
}

// Backend is the MySQL/MariaDB server behind the proxy.
type Backend struct {
	Address    string `yaml:"address"`   // host:port, default 127.0.0.1:3306
	TLS        string `yaml:"tls"`       // disabled | preferred | required | verify-ca | verify-full (default disabled)
	CAFile     string `yaml:"ca_file"`   // PEM CA bundle for verify-ca / verify-full
	CertFile   string `yaml:"cert_file"` // optional client certificate
	KeyFile    string `yaml:"key_file"`
	ServerName string `yaml:"server_name"` // for verify-full, default: host of address

	// Engine is which database engine the backend is, which decides the
	// fence shape: auto (default: learned at connect from the handshake's
	// version string and, for MariaDB and MySQL, @@wsrep_on), mariadb,
	// galera (MariaDB or MySQL with wsrep on), mysql, or tidb.
	Engine string `yaml:"engine"`

	// User is the proxy's own account (optional): lease changes made by the
	// SQL lease functions and the audit table use it, so app users need only
	// SELECT on the lease table. Its password comes from PasswordEnv or
	// PasswordFile, never from the config file itself.
	User         string `yaml:"user"`
	PasswordEnv  string `yaml:"password_env"`
	PasswordFile string `yaml:"password_file"`

	// HealthInterval is how often the proxy checks the backend on its own,
	// whether or not clients use it (default 5s; 0s = only client
	// connections and /readyz tell): a login with User and a ping, or,
	// without User, a read of the server's greeting when the backend is on
	// a loopback address (elsewhere such probes count toward the server's
	// max_connect_errors and would get the proxy's host blocked). It sets
	// fenceproxy_backend_up and counts fenceproxy_backend_dial_failures_total.
	HealthInterval Duration `yaml:"health_interval"`
}

// Backend engines (backend.engine).
const (
	EngineAuto    = "auto"
	EngineMariaDB = "mariadb"
	EngineGalera  = "galera"
	EngineMySQL   = "mysql"
	EngineTiDB    = "tidb"
)

// Backend TLS modes.
const (
	TLSDisabled   = "disabled"
	TLSPreferred  = "preferred"
	TLSRequired   = "required"
	TLSVerifyCA   = "verify-ca"
	TLSVerifyFull = "verify-full"
)

// Fencing is how writes to protected tables are fenced.
type Fencing struct {
	LeaseTable string    `yaml:"lease_table"` // default fenced_job_leases; unqualified = same schema as the protected table
	Variables  Variables `yaml:"variables"`
	OnStale    string    `yaml:"on_stale"` // zero_rows | error (default zero_rows)
	Mode       string    `yaml:"mode"`     // enforce | shadow (default enforce)
	// DatabaseGuard: off (default) | triggers: guard triggers on every
	// protected table (installed by fenceproxy init --config) check the
	// fence inside the database for every write, through the proxy or not.
	DatabaseGuard string `yaml:"database_guard"`
	// DatabaseGuardExempt: accounts whose writes the guard triggers let
	// through without a fence (user or user@host, matched on USER()).
	DatabaseGuardExempt []string `yaml:"database_guard_exempt"`
}

// Variables names the session user variables (without '@') holding the fence context.
type Variables struct {
	Lease string `yaml:"lease"` // default fence_lease
	Owner string `yaml:"owner"` // default fence_owner
	Token string `yaml:"token"` // default fence_token
}

// on_stale and mode values.
const (
	OnStaleZeroRows = "zero_rows"
	OnStaleError    = "error"
	ModeEnforce     = "enforce"
	ModeShadow      = "shadow"
)

// Table is one protected table.
type Table struct {
	Name  string `yaml:"name"`  // schema.table
	Lease string `yaml:"lease"` // fixed lease name, or a template over the table's columns ("invoice:{customer_id}"); "" = the session's @fence_lease

	// Template is Lease parsed when it is a template (template.go), else nil.
	Template *Template `yaml:"-"`

	// CreatedLater declares a table that need not exist yet (a migration
	// creates it after the proxy starts): the start-up and reload checks
	// do not require it, and it is fenced by name from the moment it
	// appears, as every protected table is.
	CreatedLater bool `yaml:"created_later"`

	Schema string `yaml:"-"` // from Name
	Table  string `yaml:"-"` // from Name
	Line   int    `yaml:"-"` // line of this entry in the file (0 if not from a file)
}

// Audit is where rejected stale writes and refusals are recorded.
type Audit struct {
	File string `yaml:"file"` // JSON lines; "" = no file (metrics and /audit only)
	// MaxSizeMB rotates the file when it would grow past this many MiB
	// (default 100); 0 = never: an external logrotate moves it, then SIGHUP.
	MaxSizeMB int `yaml:"max_size_mb"`
	// MaxBackups is the number of rotated files kept (default 10).
	MaxBackups int `yaml:"max_backups"`

	// The audit table (fenced_audit) is written through backend.user;
	// without it only the file, the log, metrics and /audit get records.

	// TableSchema is the one schema whose fenced_audit gets every record;
	// "" = the protected table's own schema.
	TableSchema string `yaml:"table_schema"`
	// Retention deletes audit table rows older than this ("30d", "12h");
	// 0 or absent = keep every row.
	Retention Duration `yaml:"retention"`
	// QueueSize bounds the records waiting for the audit table (default
	// 10000); past it records reach the file only, and are counted as
	// dropped.
	QueueSize int `yaml:"queue_size"`
}

// AdminAuth is the bearer token the admin endpoint asks for. Without one,
// every path is open to whoever reaches the admin address.
type AdminAuth struct {
	TokenFile string `yaml:"token_file"` // the token is the file's content, trailing newline excluded
	TokenEnv  string `yaml:"token_env"`  // or the value of this environment variable
	// ProtectProbes also requires the token for /metrics, /healthz and
	// /readyz (default false: probes and scrapers usually cannot send one).
	ProtectProbes bool `yaml:"protect_probes"`
}

// Enabled reports whether the admin endpoint requires a token.
func (a AdminAuth) Enabled() bool { return a.TokenFile != "" || a.TokenEnv != "" }

// AdminTLS makes the admin endpoint HTTPS.
type AdminTLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Doctor configures `fenceproxy doctor`.
type Doctor struct {
	// TrustedAccounts are accounts whose privileges are known and meant
	// (operators, the migration account): doctor reports what they may do
	// as information, not as findings. Each is user@host as the account
	// was created (quoted or not: 'ops'@'10.0.%', ops@localhost), or a
	// bare name: that user at any host, or the role of that name.
	TrustedAccounts []string `yaml:"trusted_accounts"`
}

// Catalog is the proxy's knowledge of the schema objects that write tables
// without naming them (views, triggers, routines, cascading foreign keys,
// events), read with backend.user.
type Catalog struct {
	// Refresh: how often the catalog is checked for changes made directly
	// on the server (default 2s when backend.user is set; 0s = no catalog).
	Refresh Duration `yaml:"refresh"`
}

// Duration is a time.Duration written in YAML as a Go duration string
// ("5s", "8h"); see duration.go.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Policy is the immutable fencing view of a Config that the rewriter uses.
// A new Policy (with a higher Version) is built on every reload.
type Policy struct {
	Version    uint64
	LeaseTable string // as configured: "name" or "schema.name"
	Vars       Variables
	OnStale    string
	Mode       string
	Tables     []Table // validated: unique, schema and table set
	// DatabaseGuard is fencing.database_guard (GuardOff or GuardTriggers),
	// GuardExempt its exempt accounts.
	DatabaseGuard string
	GuardExempt   []lease.Account

	byName map[string]*Table // key: lower(schema) + "." + lower(table)
}

// Lookup returns the protected table schema.table, matched ASCII
// case-insensitively (fail closed: lower_case_table_names may fold case).
func (p *Policy) Lookup(schema, table string) (*Table, bool) {
	if p == nil {
		return nil, false
	}
	t, ok := p.byName[strings.ToLower(schema)+"."+strings.ToLower(table)]
	return t, ok
}

// LeaseTableFor returns the lease table to read for a protected table in schema.
func (p *Policy) LeaseTableFor(schema string) (string, string) {
	return lease.TableFor(p.LeaseTable, schema)
}
