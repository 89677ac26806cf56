package lease

import (
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// This file builds every statement the lease operations run. The builders
// are pure: no I/O, every value inlined, nothing left to placeholders, so the
// same text runs through database/sql (Store) and through the proxy's raw
// MySQL connection inside an application's session. Inlining rules:
//
//   - lease names:   _utf8mb4 X'<hex>' COLLATE utf8mb4_bin (a character
//     literal of exactly the column's collation: the lookup stays a
//     primary-key lookup, see EXPLAIN notes in doc.go);
//   - owner tokens:  X'<hex>' (binary, compared with the VARBINARY column
//     byte for byte);
//   - numbers:       decimal integers (fence tokens, TTLs in microseconds);
//   - tables:        `schema`.`table`, ASCII only.
//
// Hex literals, introducers, COLLATE and backquotes mean the same under
// every sql_mode (ANSI_QUOTES, NO_BACKSLASH_ESCAPES, ORACLE, ...) and the
// statements are pure ASCII, so the client character set does not matter
// either. Time is SYSDATE(3) only: SET timestamp moves NOW(),
// CURRENT_TIMESTAMP and UTC_TIMESTAMP() but not SYSDATE().

// statusColumns are the columns of every status row, in order; ParseStatus
// reads them. HEX() keeps the name and owner bytes away from the session's
// character_set_results; UNIX_TIMESTAMP(timestamp column) is the stored UTC
// instant, independent of time_zone; the difference is the database's own
// view of the time left (one SYSDATE evaluation, so Held and Remaining agree).
const statusColumns = "HEX(lease_name), HEX(owner_token), fence_token, " +
	"UNIX_TIMESTAMP(leased_until), TIMESTAMPDIFF(MICROSECOND, SYSDATE(3), leased_until)"

// StatusColumns names the columns of the rows returned by the status
// queries (AcquirePlan.Read, RenewPlan.Read, StatusSQL, ListSQL).
var StatusColumns = []string{"lease_name_hex", "owner_token_hex", "fence_token", "leased_until_unix", "remaining_us"}

// NameLiteral returns lease name as an SQL literal of the lease_name
// column's exact type (_utf8mb4 X'..' COLLATE utf8mb4_bin), safe under any
// sql_mode and client character set: the form to use when setting
// @fence_lease so the fence's lookup stays a primary-key lookup.
func NameLiteral(name string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	return nameLit(name), nil
}

// OwnerLiteral returns an owner token as a binary SQL literal (X'..').
func OwnerLiteral(owner string) (string, error) {
	if err := ValidateOwner(owner); err != nil {
		return "", err
	}
	return ownerLit(owner), nil
}

func nameLit(name string) string {
	return "_utf8mb4 X'" + hex.EncodeToString([]byte(name)) + "' COLLATE utf8mb4_bin"
}

func ownerLit(owner string) string {
	return "X'" + hex.EncodeToString([]byte(owner)) + "'"
}

func untilExpr(ttl time.Duration) string {
	return "SYSDATE(3) + INTERVAL " + strconv.FormatInt(int64(ttl/time.Microsecond), 10) + " MICROSECOND"
}

func validateAll(table, name string, owner *string, ttl *time.Duration) error {
	if err := ValidateTable(table); err != nil {
		return err
	}
	if err := ValidateName(name); err != nil {
		return err
	}
	if owner != nil {
		if err := ValidateOwner(*owner); err != nil {
			return err
		}
	}
	if ttl != nil {
		if err := ValidateTTL(*ttl); err != nil {
			return err
		}
	}
	return nil
}

// AcquirePlan is the statement sequence of an acquire. Run it on one session,
// in autocommit mode, outside any transaction:
//
//  1. Update: takes over an expired row (new owner, fence_token + 1, new
//     expiry). 1 affected row: acquired, go to Read. 0: go on. The row
//     always changes when it matches (the token moves), so the count is the
//     same with or without CLIENT_FOUND_ROWS.
//  2. Insert: creates the row with token 1. 1 affected row: acquired, go to
//     Read. 0: the row exists and is not expired: held (by another owner, or
//     by this owner: an unexpired lease is renewed, not re-acquired).
//     INSERT IGNORE can only ignore the duplicate key: every value was
//     validated before the text was built.
//  3. Read: one status row of this owner's lease. No row, or a row whose
//     remaining time is not positive: the lease was lost again before it
//     could be read (a TTL shorter than the round trip): report it lost.
//
// Each of 1 and 2 is one atomic statement: InnoDB evaluates the WHERE of
// Update on the latest committed row version under the row's X lock, so of
// many concurrent acquirers exactly one sees the row expired; of many
// concurrent inserts exactly one inserts.
type AcquirePlan struct {
	Update string
	Insert string
	Read   string
}

// AcquireSQL builds the statements that acquire lease name for owner with
// time to live ttl in the lease table table.
func AcquireSQL(table, name, owner string, ttl time.Duration) (AcquirePlan, error) {
	if err := validateAll(table, name, &owner, &ttl); err != nil {
		return AcquirePlan{}, err
	}
	t, n, o, u := quoteTable(table), nameLit(name), ownerLit(owner), untilExpr(ttl)
	return AcquirePlan{
		Update: "UPDATE " + t + " SET owner_token = " + o + ", fence_token = fence_token + 1, leased_until = " + u +
			" WHERE lease_name = " + n + " AND leased_until <= SYSDATE(3)",
		Insert: "INSERT IGNORE INTO " + t + " (lease_name, owner_token, fence_token, leased_until) VALUES (" +
			n + ", " + o + ", 1, " + u + ")",
		Read: "SELECT " + statusColumns + " FROM " + t + " WHERE lease_name = " + n + " AND owner_token = " + o,
	}, nil
}

// RenewPlan is the statement sequence of a renewal. Run it on one session,
// in autocommit mode, outside any transaction:
//
//  1. Update: sets the expiry to SYSDATE(3) + ttl if owner and token match
//     and the lease has not expired. Ignore its affected-row count: without
//     CLIENT_FOUND_ROWS a renewal that lands on the same millisecond changes
//     nothing and reports 0.
//  2. Read: one status row if owner and token still match and the lease is
//     not expired by database time: renewed (the row's expiry is the new
//     one). No row: lost (expired, taken over, or released). An unexpired
//     row with this owner and token can exist after Update only if Update
//     matched it: tokens never go backwards and nothing but this owner's
//     renewal makes an expired lease unexpired.
type RenewPlan struct {
	Update string
	Read   string
}

// RenewSQL builds the statements that renew owner's lease name at fence
// token token for ttl.
func RenewSQL(table, name, owner string, token uint64, ttl time.Duration) (RenewPlan, error) {
	if err := validateAll(table, name, &owner, &ttl); err != nil {
		return RenewPlan{}, err
	}
	t, match := quoteTable(table), heldBy(name, owner, token)
	return RenewPlan{
		Update: "UPDATE " + t + " SET leased_until = " + untilExpr(ttl) + " WHERE " + match,
		Read:   "SELECT " + statusColumns + " FROM " + t + " WHERE " + match,
	}, nil
}

// heldBy is the condition "this owner holds this lease at this token now".
func heldBy(name, owner string, token uint64) string {
	return "lease_name = " + nameLit(name) + " AND owner_token = " + ownerLit(owner) +
		" AND fence_token = " + strconv.FormatUint(token, 10) + " AND leased_until > SYSDATE(3)"
}

// ReleaseSQL builds the one statement that releases owner's lease name at
// fence token token: it expires the lease and keeps the row, so the next
// acquire continues the token sequence. 1 affected row: released. 0: lost
// (expired before the release, taken over, or never this owner's).
//
// The new expiry is LEAST(leased_until - 1 ms, SYSDATE(3)): never later than
// now, and always different from the old value, so a match always changes the
// row and the count does not depend on CLIENT_FOUND_ROWS (setting it to
// SYSDATE(3) alone could equal the old value when that was 1 ms ahead).
func ReleaseSQL(table, name, owner string, token uint64) (string, error) {
	if err := validateAll(table, name, &owner, nil); err != nil {
		return "", err
	}
	return "UPDATE " + quoteTable(table) +
		" SET leased_until = LEAST(leased_until - INTERVAL 1000 MICROSECOND, SYSDATE(3)) WHERE " +
		heldBy(name, owner, token), nil
}

// StatusSQL builds the query of lease name's row: one status row, or none if
// the lease never existed.
func StatusSQL(table, name string) (string, error) {
	if err := validateAll(table, name, nil, nil); err != nil {
		return "", err
	}
	return "SELECT " + statusColumns + " FROM " + quoteTable(table) + " WHERE lease_name = " + nameLit(name), nil
}

// ListSQL builds the query of every lease row, ordered by name.
func ListSQL(table string) (string, error) {
	if err := ValidateTable(table); err != nil {
		return "", err
	}
	return "SELECT " + statusColumns + " FROM " + quoteTable(table) + " ORDER BY lease_name", nil
}

// ParseStatus reads one status row (the text of the StatusColumns, as the
// text protocol sends them) into a Status.
func ParseStatus(row []string) (Status, error) {
	if len(row) != len(StatusColumns) {
		return Status{}, fmt.Errorf("lease: status row has %d columns, want %d", len(row), len(StatusColumns))
	}
	name, err := hex.DecodeString(row[0])
	if err != nil {
		return Status{}, fmt.Errorf("lease: status row: lease name: %v", err)
	}
	owner, err := hex.DecodeString(row[1])
	if err != nil {
		return Status{}, fmt.Errorf("lease: status row: owner: %v", err)
	}
	token, err := strconv.ParseUint(row[2], 10, 64)
	if err != nil {
		return Status{}, fmt.Errorf("lease: status row: fence token: %v", err)
	}
	until, err := parseUnixDecimal(row[3])
	if err != nil {
		return Status{}, fmt.Errorf("lease: status row: leased_until: %v", err)
	}
	us, err := strconv.ParseInt(row[4], 10, 64)
	if err != nil || us > math.MaxInt64/int64(time.Microsecond) || us < math.MinInt64/int64(time.Microsecond) {
		return Status{}, fmt.Errorf("lease: status row: remaining time %q", row[4])
	}
	rem := time.Duration(us) * time.Microsecond
	return Status{
		Lease:     Lease{Name: string(name), Owner: string(owner), Token: token, Until: until},
		Held:      rem > 0,
		Remaining: rem,
	}, nil
}

// parseUnixDecimal parses "1764420000.123" (seconds since the epoch with an
// optional fraction) exactly.
func parseUnixDecimal(s string) (time.Time, error) {
	secPart, frac, _ := strings.Cut(s, ".")
	sec, err := strconv.ParseInt(secPart, 10, 64)
	if err != nil || len(frac) > 9 {
		return time.Time{}, fmt.Errorf("bad unix time %q", s)
	}
	var ns int64
	for i := 0; i < 9; i++ {
		ns *= 10
		if i < len(frac) {
			c := frac[i]
			if c < '0' || c > '9' {
				return time.Time{}, fmt.Errorf("bad unix time %q", s)
			}
			ns += int64(c - '0')
		}
	}
	return time.Unix(sec, ns).UTC(), nil
}
