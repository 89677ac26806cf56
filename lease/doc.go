// Package lease implements fenceproxy's leases over a MySQL/MariaDB table:
// acquire, renew, release and inspect, a Keeper that renews a lease while a
// job runs, and the schema.
//
// # Contract
//
// The lease table (see SchemaSQL) has one row per lease: lease_name, a
// binary owner_token, a fence_token that grows by one at every acquire and
// never goes backwards, and leased_until, a TIMESTAMP(3) compared with
// SYSDATE(3) only. Every rule is decided inside the database, by database
// time:
//
//   - acquire succeeds only if the row is absent or expired; it sets a new
//     owner (random 128 bits unless given) and fence_token + 1 (1 for a new
//     row). A lease that is not expired is held, even by its own owner:
//     holders renew, they do not re-acquire.
//   - renew succeeds only if owner and token match and the lease is not
//     expired; it sets the expiry to now + ttl.
//   - release succeeds only if owner and token match and the lease is not
//     expired; it expires the lease and keeps the row. Releasing an
//     expired lease returns ErrLost: the holder learns that its lease ran out
//     before it finished, which matters more than the release.
//
// # One implementation, two transports
//
// The statements come from pure builders (AcquireSQL, RenewSQL, ReleaseSQL,
// StatusSQL, ListSQL) that inline every value safely: no placeholders, pure
// ASCII, valid under any sql_mode and client character set. The rules for
// reading their results live in AcquireOn, RenewOn, ReleaseOn, GetOn and
// ListOn, which run over a Conn. Store runs them over database/sql; the
// proxy runs the very same functions over its own MySQL connection (a Conn
// implementation of a few lines) to answer fence_acquire() and friends.
//
// Success never depends on CLIENT_FOUND_ROWS: acquire's UPDATE and release's
// UPDATE always change a row they match (the token moves; the expiry moves
// back by at least 1 ms), and renew reads its row back instead of trusting the
// count (a renewal landing on the same millisecond changes nothing).
//
// # Measured (MariaDB 10.11, EXPLAIN, Handler_read_* counters)
//
// lease_name = _utf8mb4 X'..' COLLATE utf8mb4_bin against the utf8mb4_bin
// primary key is a const lookup in SELECT and a one-row PRIMARY range in
// UPDATE (Handler_read_key 1, Handler_read_next 0), under every tested
// sql_mode and client character set (TestStatementsArePrimaryKeyLookups).
// A bare X'..' (binary, coercible) is converted to the column's collation and
// also gives a const lookup on MariaDB; the introducer form is used anyway
// so the literal's type never depends on the server's coercion rules. A
// lease_name compared with a latin1 string becomes a full index scan.
//
// utf8mb4_bin is a PAD SPACE collation: 'job' and 'job ' are one key.
// Names with trailing spaces are therefore refused (ValidateName).
//
// # Time
//
// SYSDATE(3) is the server's clock at the moment of evaluation: SET
// timestamp does not move it (it does move NOW() and UTC_TIMESTAMP()), and a
// TIMESTAMP column compared with it is immune to SET time_zone. One caveat
// remains: the comparison happens in the session's time zone, so in a
// session whose zone has daylight saving time (including SYSTEM on a host
// with such a zone) the hour repeated when clocks go back is ambiguous, and
// expiries set or compared during it can be off by that hour. Run lease
// sessions with time_zone='+00:00' (the CLI does) or on UTC hosts.
// SYSDATE also needs a server without --sysdate-is-now, and statement-based
// binary logging treats it as unsafe (use ROW or MIXED).
//
// # MariaDB Galera
//
// On a Galera cluster a lease statement that races a change of the same
// lease row on another node (two acquirers of an expired lease, a takeover
// and a renewal) fails certification with error 1213. Every lease
// statement is one autocommit statement, so 1213 means it did not commit:
// the operations run it again (IsConflict; at most 8 attempts, backoff
// from 2 ms doubling to 100 ms, with jitter, bounded by the context), each
// statement on its own, so an acquire whose UPDATE committed is never
// repeated because its read-back conflicted. The table's WriteCounter
// column is what fenced writes bump there (see WriteCounter);
// CreateSchema adds it to older tables. Measured on 3 nodes with
// wsrep_retry_autocommit=0 (TestGaleraLeaseOperationsRetryConflicts):
// about 500 acquires and 1,250 retried conflicts in 4 s, tokens 1..n with
// none lost or repeated; without the retries, acquires fail with 1213.
//
// # Keeper
//
// Store.Keep renews a lease in the background every ttl/3 (configurable),
// each renewal bounded by a timeout and never allowed to run past the last
// confirmed renewal's send time + ttl; on the first failure it cancels the
// job's context (context.Cause says why) and stops. That is the invoice
// incident's fix: renew every 20 s for a 60 s lease, abort the job as soon
// as a renewal fails. A renewal the Keeper gave up on (timeout) may still be
// applied by the server later: that can only extend the lease of the owner
// that gave up, delaying the next holder (release it after Stop).
package lease
