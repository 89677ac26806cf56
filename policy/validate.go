package policy

import (
	"fmt"
	"strings"
	"time"
	"unicode"
)

// Defaults of the timeouts.
const (
	DefaultConnectTimeout   = 5 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultIdleTimeout      = 8 * time.Hour // MySQL's wait_timeout
	DefaultShutdownTimeout  = 30 * time.Second
)

// DefaultCatalogRefresh: an object created directly on the server is
// taken into account within this time.
const DefaultCatalogRefresh = 2 * time.Second

// Bounds of catalog.refresh: the check is a query on information_schema,
// not to be run in a tight loop; and a catalog much older than minutes
// lets new objects be refused (or missed) for too long.
const (
	minCatalogRefresh = 100 * time.Millisecond
	maxCatalogRefresh = 10 * time.Minute
)

// DefaultHealthInterval: how often the proxy checks the backend on its
// own (backend.health_interval); its bounds.
const (
	DefaultHealthInterval = 5 * time.Second
	minHealthInterval     = 100 * time.Millisecond
	maxHealthInterval     = time.Hour
)

// Defaults of the audit file's rotation.
const (
	DefaultAuditMaxSizeMB  = 100
	DefaultAuditMaxBackups = 10
	DefaultAuditQueueSize  = 10000
	maxAuditQueueSize      = 1000000
)

// fillDefaults sets every key the file does not set (absent or null) to its
// default. A key set explicitly keeps its value, even "" or 0, so that
// validation can judge it: `admin: ""` turns the admin server off, a
// zero timeout means none.
func (c *Config) fillDefaults(d *decoder) {
	str := func(path string, field *string, def string) {
		if !d.has(path) {
			*field = def
		}
	}
	dur := func(path string, field *Duration, def time.Duration) {
		if !d.has(path) {
			*field = Duration(def)
		}
	}
	str("listen", &c.Listen, DefaultListen)
	c.fillListenerDefaults(d)
	str("admin", &c.Admin, DefaultAdmin)
	str("log_level", &c.LogLevel, DefaultLogLevel)
	str("log_format", &c.LogFormat, DefaultLogFormat)
	str("client_tls.min_version", &c.ClientTLS.MinVersion, DefaultMinTLSVersion)
	dur("timeouts.connect", &c.Timeouts.Connect, DefaultConnectTimeout)
	dur("timeouts.handshake", &c.Timeouts.Handshake, DefaultHandshakeTimeout)
	dur("timeouts.idle", &c.Timeouts.Idle, DefaultIdleTimeout)
	dur("timeouts.shutdown", &c.Timeouts.Shutdown, DefaultShutdownTimeout)
	if !d.has("limits.max_query_bytes") {
		c.Limits.MaxQueryBytes = DefaultMaxQueryBytes
	}
	if !d.has("limits.max_parse_bytes") {
		c.Limits.MaxParseBytes = DefaultMaxParseBytes
	}
	if !d.has("limits.max_parse_tokens") {
		c.Limits.MaxParseTokens = DefaultMaxParseTokens
	}
	if !d.has("limits.max_parse_nesting") {
		c.Limits.MaxParseNesting = DefaultMaxParseNesting
	}
	if !d.has("limits.rewrite_cache") {
		c.Limits.RewriteCache = DefaultRewriteCache
	}
	str("backend.address", &c.Backend.Address, DefaultBackend)
	str("backend.tls", &c.Backend.TLS, TLSDisabled)
	str("backend.engine", &c.Backend.Engine, EngineAuto)
	dur("backend.health_interval", &c.Backend.HealthInterval, DefaultHealthInterval)
	str("fencing.lease_table", &c.Fencing.LeaseTable, DefaultLeaseTable)
	str("fencing.variables.lease", &c.Fencing.Variables.Lease, DefaultLeaseVar)
	str("fencing.variables.owner", &c.Fencing.Variables.Owner, DefaultOwnerVar)
	str("fencing.variables.token", &c.Fencing.Variables.Token, DefaultTokenVar)
	str("fencing.on_stale", &c.Fencing.OnStale, OnStaleZeroRows)
	str("fencing.mode", &c.Fencing.Mode, ModeEnforce)
	str("fencing.database_guard", &c.Fencing.DatabaseGuard, GuardOff)
	if !d.has("audit.max_size_mb") {
		c.Audit.MaxSizeMB = DefaultAuditMaxSizeMB
	}
	if !d.has("audit.max_backups") {
		c.Audit.MaxBackups = DefaultAuditMaxBackups
	}
	if !d.has("catalog.refresh") && c.Backend.User != "" {
		c.Catalog.Refresh = Duration(DefaultCatalogRefresh)
	}
	if !d.has("audit.queue_size") {
		c.Audit.QueueSize = DefaultAuditQueueSize
	}
}

// validate records every rule the config breaks, at the key concerned.
func (c *Config) validate(d *decoder) {
	check := func(path, reason string) {
		if reason != "" {
			d.fail(path, reason)
		}
	}
	if c.Listen != "" || c.ListenSocket == "" {
		check("listen", checkAddress(c.Listen, true))
	}
	c.validateListeners(d)
	if c.Admin != "" { // "" = no admin server
		check("admin", checkAddress(c.Admin, true))
	}
	if c.MaxConnections < 0 {
		d.fail("max_connections", "must be 0 (no limit) or more")
	}
	check("log_level", oneOf(c.LogLevel, logLevels))
	check("log_format", oneOf(c.LogFormat, logFormats))

	// client_tls
	pair(d, "client_tls", c.ClientTLS.CertFile, c.ClientTLS.KeyFile)
	if c.ClientTLS.CertFile == "" {
		for _, k := range []string{"required", "min_version"} {
			if d.has("client_tls." + k) {
				d.fail("client_tls."+k, "needs client_tls.cert_file and key_file")
			}
		}
	}
	check("client_tls.min_version", oneOf(c.ClientTLS.MinVersion, tlsVersions))

	// timeouts and limits
	for _, t := range []struct {
		key string
		d   Duration
	}{
		{"connect", c.Timeouts.Connect}, {"handshake", c.Timeouts.Handshake},
		{"idle", c.Timeouts.Idle}, {"shutdown", c.Timeouts.Shutdown}, {"drain_delay", c.Timeouts.DrainDelay},
	} {
		if t.d < 0 {
			d.fail("timeouts."+t.key, "must not be negative (0s = no limit)")
		}
	}
	if n := c.Limits.MaxQueryBytes; n < 1 || n > maxQueryBytesL {
		d.fail("limits.max_query_bytes", fmt.Sprintf("must be from 1 to %d (1 GiB, the largest max_allowed_packet)", maxQueryBytesL))
	}
	if r := c.Catalog.Refresh.D(); r != 0 {
		switch {
		case r < minCatalogRefresh || r > maxCatalogRefresh:
			d.fail("catalog.refresh", fmt.Sprintf("must be 0s (no catalog) or from %v to %v", minCatalogRefresh, maxCatalogRefresh))
		case c.Backend.User == "":
			d.fail("catalog.refresh", "needs backend.user: the catalog is read with the proxy's own account")
		}
	}
	if n := c.Limits.MaxParseBytes; n < 1 || n > maxQueryBytesL {
		d.fail("limits.max_parse_bytes", fmt.Sprintf("must be from 1 to %d (1 GiB)", maxQueryBytesL))
	}
	if n := c.Limits.MaxParseTokens; n < 1 || n > maxTokensL {
		d.fail("limits.max_parse_tokens", fmt.Sprintf("must be from 1 to %d", maxTokensL))
	}
	if n := c.Limits.MaxParseNesting; n < 1 || n > maxNestingL {
		d.fail("limits.max_parse_nesting", fmt.Sprintf("must be from 1 to %d", maxNestingL))
	}
	if c.Limits.RewriteCache < 0 {
		d.fail("limits.rewrite_cache", "must be 0 (no cache) or more")
	}
	if n := c.Limits.Threads; n < 0 || n > maxThreads {
		d.fail("limits.threads", fmt.Sprintf("must be 0 (auto) or from 1 to %d", maxThreads))
	}

	c.Backend.validate(d)
	c.validateAddresses(d)
	c.validateProtection(d)
	c.Doctor.validate(d)

	for _, p := range c.Fencing.check() {
		d.fail(p.field, p.reason)
	}
	c.validateTables(d)
	c.validateGuard(d)
	c.Audit.validate(d)
	c.Audit.validateTable(d, c.Backend.User != "")
	c.validateAdmin(d)
}

func (a *Audit) validateTable(d *decoder, hasUser bool) {
	if !hasUser {
		for _, k := range []string{"table_schema", "retention", "queue_size"} {
			if d.has("audit." + k) {
				d.fail("audit."+k, "needs backend.user: the audit table is written through the proxy's own account")
			}
		}
		return
	}
	if d.has("audit.table_schema") && (!identChars(a.TableSchema) || len(a.TableSchema) > maxIdentLen) {
		d.fail("audit.table_schema", fmt.Sprintf("%q: must be a schema name of 1 to %d characters of A-Z a-z 0-9 _ $", a.TableSchema, maxIdentLen))
	}
	if a.Retention < 0 {
		d.fail("audit.retention", "must not be negative (0s = keep every row)")
	} else if a.Retention > 0 && a.Retention.D() < time.Second {
		d.fail("audit.retention", "must be 1s or more (0s = keep every row)")
	}
	if a.QueueSize < 1 || a.QueueSize > maxAuditQueueSize {
		d.fail("audit.queue_size", fmt.Sprintf("must be from 1 to %d", maxAuditQueueSize))
	}
}

func (c *Config) validateAdmin(d *decoder) {
	if c.InstanceID != "" && (len(c.InstanceID) > 255 || strings.ContainsFunc(c.InstanceID, unicode.IsControl)) {
		d.fail("instance_id", "must be 1 to 255 bytes without control characters")
	}
	if d.has("instance_id") && c.InstanceID == "" {
		d.fail("instance_id", "must not be empty (omit it for hostname:port)")
	}
	a := c.AdminAuth
	if a.TokenFile != "" && a.TokenEnv != "" {
		d.fail("admin_auth.token_env", "give admin_auth.token_file or admin_auth.token_env, not both")
	}
	if !a.Enabled() && d.has("admin_auth.protect_probes") {
		d.fail("admin_auth.protect_probes", "needs admin_auth.token_file or admin_auth.token_env")
	}
	pair(d, "admin_tls", c.AdminTLS.CertFile, c.AdminTLS.KeyFile)
	if c.Admin == "" {
		for _, k := range []string{"admin_auth", "admin_tls"} {
			if d.has(k) {
				d.fail(k, "has no effect with admin: \"\" (no admin endpoint)")
			}
		}
	}
}

// maxAuditSizeMB keeps MaxSizeMB far from overflowing lumberjack's byte
// count: 1 TiB.
const maxAuditSizeMB = 1 << 20

func (a *Audit) validate(d *decoder) {
	if a.File == "" {
		for _, k := range []string{"max_size_mb", "max_backups"} {
			if d.has("audit." + k) {
				d.fail("audit."+k, "needs audit.file")
			}
		}
		return
	}
	if a.MaxSizeMB < 0 || a.MaxSizeMB > maxAuditSizeMB {
		d.fail("audit.max_size_mb", fmt.Sprintf("must be from 0 (no rotation) to %d", maxAuditSizeMB))
	}
	switch {
	case a.MaxSizeMB == 0 && d.has("audit.max_backups"):
		d.fail("audit.max_backups", "has no effect with audit.max_size_mb: 0 (the proxy does not rotate)")
	case a.MaxBackups < 1:
		// lumberjack reads 0 as "keep every backup": unbounded.
		d.fail("audit.max_backups", "must be 1 or more: the backups kept are bounded")
	}
}

// pair checks that section's cert_file and key_file are given together.
func pair(d *decoder, section, cert, key string) {
	switch {
	case cert != "" && key == "":
		d.fail(section+".cert_file", "needs "+section+".key_file too")
	case key != "" && cert == "":
		d.fail(section+".key_file", "needs "+section+".cert_file too")
	}
}

func (b *Backend) validate(d *decoder) {
	if r := checkAddress(b.Address, false); r != "" {
		d.fail("backend.address", r)
	}
	if r := oneOf(b.TLS, tlsModes); r != "" {
		d.fail("backend.tls", r)
	}
	if r := oneOf(b.Engine, engines); r != "" {
		d.fail("backend.engine", r)
	}
	if h := b.HealthInterval.D(); h != 0 && (h < minHealthInterval || h > maxHealthInterval) {
		d.fail("backend.health_interval", fmt.Sprintf("must be 0s (no active check) or from %v to %v", minHealthInterval, maxHealthInterval))
	}
	if b.TLS == TLSVerifyCA && b.CAFile == "" {
		d.fail("backend.tls", "verify-ca needs backend.ca_file")
	}
	pair(d, "backend", b.CertFile, b.KeyFile)

	// The proxy's own account: its password never sits in the config.
	switch {
	case b.User == "":
		for _, k := range []string{"password_env", "password_file"} {
			if d.has("backend." + k) {
				d.fail("backend."+k, "needs backend.user")
			}
		}
	case d.reported("backend.password_env") || d.reported("backend.password_file"):
		// Said already; an undecodable value is not a missing one.
	case b.PasswordEnv == "" && b.PasswordFile == "":
		d.fail("backend.user", "needs backend.password_env or backend.password_file")
	case b.PasswordEnv != "" && b.PasswordFile != "":
		d.fail("backend.password_file", "give backend.password_env or backend.password_file, not both")
	}
}

// validateTables checks each protected table and fills in Schema, Table
// and Line.
func (c *Config) validateTables(d *decoder) {
	first := map[string]int{} // key -> line
	for i := range c.Tables {
		t := &c.Tables[i]
		path := fmt.Sprintf("tables[%d]", i)
		t.Line = d.line(path)
		if d.has(path + ".lease") {
			tpl, r := checkLeaseValue(t.Lease)
			if r != "" {
				d.fail(path+".lease", r)
			}
			t.Template = tpl
			if tpl != nil {
				c.validateTemplate(d, path+".lease")
			}
		}
		if !d.has(path + ".name") {
			d.fail(path, "name is required (schema.table)")
			continue
		}
		if r := t.check(c.Fencing.LeaseTable); r != "" {
			d.fail(path+".name", r)
			continue
		}
		key := t.key()
		line := d.line(path + ".name")
		if prev, dup := first[key]; dup {
			d.fail(path+".name", fmt.Sprintf("%q is listed twice: on lines %d and %d (names match ignoring case)", t.Name, prev, line))
			continue
		}
		first[key] = line
	}
}
