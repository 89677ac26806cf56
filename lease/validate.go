package lease

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits of the values the lease operations accept. They are checked before
// any SQL is built, so that no statement depends on the server silently
// truncating or converting a value (INSERT IGNORE would).
const (
	// MaxNameBytes is the longest lease name, in bytes (the column is
	// VARCHAR(191) utf8mb4; counting bytes keeps every name well inside it).
	MaxNameBytes = 191
	// MaxOwnerBytes is the longest owner token (the column is VARBINARY(64)).
	MaxOwnerBytes = 64
	// MinTTL and MaxTTL bound a lease's time to live. The column keeps
	// milliseconds, so a shorter TTL could not be represented; the upper
	// bound keeps expiries far from the TIMESTAMP range's end (2038-01-19)
	// and catches unit mistakes (seconds passed as milliseconds).
	MinTTL = time.Millisecond
	MaxTTL = 30 * 24 * time.Hour
	// MaxIdentBytes is the longest schema or table name part.
	MaxIdentBytes = 64
)

// ErrInvalid is wrapped by every argument validation error.
var ErrInvalid = errors.New("lease: invalid argument")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// ValidateName checks a lease name: 1..191 bytes of valid UTF-8, no control
// characters, and no trailing space. Trailing spaces are refused because
// utf8mb4_bin is a PAD SPACE collation: 'job' and 'job  ' would be the same
// primary key, one lease under two spellings.
func ValidateName(name string) error {
	switch {
	case name == "":
		return invalidf("empty lease name")
	case len(name) > MaxNameBytes:
		return invalidf("lease name is %d bytes, the limit is %d", len(name), MaxNameBytes)
	case !utf8.ValidString(name):
		return invalidf("lease name is not valid UTF-8")
	case strings.HasSuffix(name, " "):
		return invalidf("lease name %q ends with a space (the collation ignores trailing spaces)", name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return invalidf("lease name %q contains a control character", name)
		}
	}
	return nil
}

// ValidateOwner checks an owner token: 1..64 bytes, any bytes (the column
// is binary, compared byte for byte).
func ValidateOwner(owner string) error {
	switch {
	case owner == "":
		return invalidf("empty owner token")
	case len(owner) > MaxOwnerBytes:
		return invalidf("owner token is %d bytes, the limit is %d", len(owner), MaxOwnerBytes)
	}
	return nil
}

// ValidateTTL checks a time to live: MinTTL..MaxTTL. The SQL carries it in
// whole microseconds; any finer part is dropped.
func ValidateTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return invalidf("ttl %v is outside %v..%v", ttl, MinTTL, MaxTTL)
	}
	return nil
}

// ValidateTable checks a table name: "table" or "schema.table", each part
// 1..64 bytes of printable ASCII other than '`' and '.'. Keeping identifiers
// ASCII keeps every generated statement pure ASCII, so the statements mean
// the same thing under any client character set.
func ValidateTable(table string) error {
	schema, name, qualified := strings.Cut(table, ".")
	if !qualified {
		schema, name = "", table
	} else if err := validateIdent(schema); err != nil {
		return err
	}
	return validateIdent(name)
}

func validateIdent(s string) error {
	if s == "" || len(s) > MaxIdentBytes {
		return invalidf("table name part %q must be 1..%d bytes", s, MaxIdentBytes)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e || c == '`' || c == '.' {
			return invalidf("table name part %q: only printable ASCII without '`', '.' or spaces", s)
		}
	}
	return nil
}

// quoteTable returns the table name as backquoted identifiers (backquotes
// are identifier quotes under every sql_mode, ANSI_QUOTES included).
// The name must have passed ValidateTable.
func quoteTable(table string) string {
	if schema, name, ok := strings.Cut(table, "."); ok {
		return "`" + schema + "`.`" + name + "`"
	}
	return "`" + table + "`"
}

// siblingTable returns name in the same schema as table ("app.leases",
// "fenced_audit" -> "app.fenced_audit").
func siblingTable(table, name string) string {
	if schema, _, ok := strings.Cut(table, "."); ok {
		return schema + "." + name
	}
	return name
}

// NewOwner returns a fresh random owner token: 128 bits, hex-encoded (32
// bytes). An owner token is a bearer secret: whoever presents it with the
// fence token may write under the lease.
func NewOwner() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand panics rather than return an error)
	return hex.EncodeToString(b[:])
}

// OwnerHash returns a short, stable fingerprint of an owner token for logs,
// CLI output and audit records: the first 8 bytes of its SHA-256, as 16 hex
// digits. It reveals nothing useful about a random owner token; a guessable
// owner chosen by hand (WithOwner("worker-1")) can of course be guessed.
func OwnerHash(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(sum[:8])
}

// ownerHashSQL is OwnerHash computed by the database, of the owner token
// expr evaluates to: what the guards and the verdict query read back for
// audit records, so that the secret never leaves the database.
func ownerHashSQL(expr string) string { return "LEFT(SHA2(" + expr + ", 256), 16)" }

// ParseTTLSeconds parses a time to live written in seconds, as the SQL lease
// functions take it: digits with an optional fraction of up to 6 digits
// ("30", "1.5", "0.250", "90.000001"); no sign, no exponent. The result is
// exact (no floating point) and checked with ValidateTTL.
func ParseTTLSeconds(s string) (time.Duration, error) {
	intPart, frac, hasDot := strings.Cut(s, ".")
	if intPart == "" && (!hasDot || frac == "") {
		return 0, invalidf("ttl %q: expected seconds like 30 or 1.5", s)
	}
	if len(frac) > 6 {
		return 0, invalidf("ttl %q: at most 6 decimals (microseconds)", s)
	}
	var sec int64
	for _, c := range []byte(intPart) {
		if c < '0' || c > '9' {
			return 0, invalidf("ttl %q: expected seconds like 30 or 1.5", s)
		}
		sec = sec*10 + int64(c-'0')
		if sec > int64(MaxTTL/time.Second) {
			return 0, invalidf("ttl %q is longer than %v", s, MaxTTL)
		}
	}
	var us int64
	for i := 0; i < 6; i++ {
		us *= 10
		if i < len(frac) {
			c := frac[i]
			if c < '0' || c > '9' {
				return 0, invalidf("ttl %q: expected seconds like 30 or 1.5", s)
			}
			us += int64(c - '0')
		}
	}
	d := time.Duration(sec)*time.Second + time.Duration(us)*time.Microsecond
	if err := ValidateTTL(d); err != nil {
		return 0, err
	}
	return d, nil
}
