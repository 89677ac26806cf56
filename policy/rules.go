package policy

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Default values, filled in where a key is absent.
const (
	DefaultListen        = "127.0.0.1:6033"
	DefaultAdmin         = "127.0.0.1:9033"
	DefaultBackend       = "127.0.0.1:3306"
	DefaultLeaseTable    = "fenced_job_leases"
	DefaultLeaseVar      = "fence_lease"
	DefaultOwnerVar      = "fence_owner"
	DefaultTokenVar      = "fence_token"
	DefaultMaxQueryBytes = 64 << 20
	// Checking a statement costs the proxy memory per byte, token and
	// nesting level of it (measured: up to about 15 bytes a byte, 1 KiB a
	// token or nesting level, and the garbage collector lets the heap grow
	// to twice that): these keep a long-running proxy's peak within
	// 64 MiB of its idle size for any statement, all three limits reached
	// at once included (docs/limits.md).
	DefaultMaxParseBytes   = 1 << 20
	DefaultMaxParseTokens  = 25_000
	DefaultMaxParseNesting = 2_500
	DefaultRewriteCache    = 4096
	DefaultLogLevel        = "info"
	DefaultLogFormat       = "text"
	DefaultMinTLSVersion   = "1.2"
)

// Limits of identifiers, as MySQL has them.
const (
	maxIdentLen    = 64  // schema, table and user variable names
	maxLeaseName   = 191 // lease_name VARCHAR(191)
	maxQueryBytesL = 1 << 30
	maxTokensL     = 10_000_000 // limits.max_parse_tokens: about 10 GB to check such a query
	maxNestingL    = 100_000    // limits.max_parse_nesting: MariaDB's parser gives up at 32,000
	maxThreads     = 1024       // limits.threads; more is a typo, not a host
)

// Allowed values of the enumerated keys.
var (
	tlsModes      = []string{TLSDisabled, TLSPreferred, TLSRequired, TLSVerifyCA, TLSVerifyFull}
	engines       = []string{EngineAuto, EngineMariaDB, EngineGalera, EngineMySQL, EngineTiDB}
	onStaleValues = []string{OnStaleZeroRows, OnStaleError}
	modes         = []string{ModeEnforce, ModeShadow}
	logLevels     = []string{"debug", "info", "warn", "error"}
	logFormats    = []string{"text", "json"}
	tlsVersions   = []string{"1.2", "1.3"}
)

// problem is one failed rule: field is the yaml key path it is about (for
// its position in the file), reason what is wrong.
type problem struct {
	field  string
	reason string
}

func oneOf(value string, allowed []string) string {
	for _, a := range allowed {
		if value == a {
			return ""
		}
	}
	return fmt.Sprintf("%q is not one of %s", value, strings.Join(allowed, ", "))
}

// checkAddress checks host:port. A listening address may have an empty host
// (all interfaces) and port 0 (any free port, useful in tests); a dialled
// one needs both.
func checkAddress(addr string, listening bool) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Sprintf("%q is not host:port (IPv6 hosts in brackets: [::1]:3306)", addr)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Sprintf("%q: port must be a number from 0 to 65535", addr)
	}
	if !listening && (host == "" || n == 0) {
		return fmt.Sprintf("%q: needs a host and a non-zero port", addr)
	}
	return ""
}

// identChars reports whether s is a non-empty run of [A-Za-z0-9_$]: the
// unquoted identifier characters the rewriter can match without lexing
// quoting or character sets.
func identChars(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '$') {
			return false
		}
	}
	return true
}

// checkVariable checks a user variable name (without '@'): letters, digits
// and '_' only, so that @name needs no quoting.
func checkVariable(name string) string {
	if name == "" || len(name) > maxIdentLen {
		return fmt.Sprintf("%q: a variable name has 1 to %d characters", name, maxIdentLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return fmt.Sprintf("%q: a variable name may contain only A-Z, a-z, 0-9 and _", name)
		}
	}
	return ""
}

// checkLeaseTable checks "name" or "schema.name".
func checkLeaseTable(name string) string {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return fmt.Sprintf("%q: must be name or schema.name", name)
	}
	for _, p := range parts {
		if !identChars(p) || len(p) > maxIdentLen {
			return fmt.Sprintf("%q: must be name or schema.name, each part 1 to %d characters of A-Z a-z 0-9 _ $ (quoted or non-ASCII names are not supported yet)", name, maxIdentLen)
		}
	}
	return ""
}

// checkLease checks a fixed lease name. The rewriter inlines it as a plain
// single-quoted literal, so it must read the same under every sql_mode and
// character set: printable ASCII without quotes or backslash; and without
// '?', which a prepared statement would count as a placeholder. The lease
// table's utf8mb4_bin collation ignores trailing spaces, so none at the end.
func checkLease(lease string) string {
	if lease == "" || len(lease) > maxLeaseName {
		return fmt.Sprintf("a fixed lease name has 1 to %d bytes (omit lease to use the session's variable)", maxLeaseName)
	}
	for i := 0; i < len(lease); i++ {
		c := lease[i]
		if c < 0x20 || c > 0x7e || c == '\'' || c == '"' || c == '\\' || c == '`' || c == '?' {
			return fmt.Sprintf("%q: a fixed lease name may contain only printable ASCII without ' \" \\ ` or ?", lease)
		}
	}
	if lease[len(lease)-1] == ' ' {
		return fmt.Sprintf("%q: a fixed lease name may not end with a space (the lease table's collation ignores trailing spaces)", lease)
	}
	return ""
}

// fillDefaults sets the defaults of empty fencing fields.
func (f *Fencing) fillDefaults() {
	setDefault(&f.LeaseTable, DefaultLeaseTable)
	setDefault(&f.Variables.Lease, DefaultLeaseVar)
	setDefault(&f.Variables.Owner, DefaultOwnerVar)
	setDefault(&f.Variables.Token, DefaultTokenVar)
	setDefault(&f.OnStale, OnStaleZeroRows)
	setDefault(&f.Mode, ModeEnforce)
	setDefault(&f.DatabaseGuard, GuardOff)
}

func setDefault(s *string, def string) {
	if *s == "" {
		*s = def
	}
}

// check applies the fencing rules to a section with defaults filled in.
func (f *Fencing) check() []problem {
	var ps []problem
	add := func(field, reason string) {
		if reason != "" {
			ps = append(ps, problem{field, reason})
		}
	}
	add("fencing.lease_table", checkLeaseTable(f.LeaseTable))
	add("fencing.on_stale", oneOf(f.OnStale, onStaleValues))
	add("fencing.mode", oneOf(f.Mode, modes))
	ps = append(ps, f.checkGuard()...)
	vars := []struct{ key, name string }{
		{"lease", f.Variables.Lease}, {"owner", f.Variables.Owner}, {"token", f.Variables.Token},
	}
	for i, v := range vars {
		field := "fencing.variables." + v.key
		if r := checkVariable(v.name); r != "" {
			add(field, r)
			continue
		}
		for _, w := range vars[:i] {
			// User variable names are case-insensitive in MySQL.
			if strings.EqualFold(v.name, w.name) {
				add(field, fmt.Sprintf("%q is also the %s variable: the three variables must differ", v.name, w.key))
			}
		}
	}
	return ps
}

// check validates a table entry against the lease table and fills in
// Schema and Table; it returns the reason it is invalid, or "".
func (t *Table) check(leaseTable string) string {
	schema, table, ok := strings.Cut(t.Name, ".")
	if !ok || !identChars(schema) || !identChars(table) || len(schema) > maxIdentLen || len(table) > maxIdentLen {
		return fmt.Sprintf("%q: a protected table is named schema.table, each part 1 to %d characters of A-Z a-z 0-9 _ $ (quoted or non-ASCII names are not supported yet)", t.Name, maxIdentLen)
	}
	t.Schema, t.Table = schema, table
	leaseSchema, leaseName, qualified := strings.Cut(leaseTable, ".")
	if !qualified {
		leaseSchema, leaseName = schema, leaseTable
	}
	if strings.EqualFold(schema, leaseSchema) && strings.EqualFold(table, leaseName) {
		return fmt.Sprintf("%q is the lease table itself: it cannot be fenced by its own rows", t.Name)
	}
	return ""
}
