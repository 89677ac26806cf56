package lease

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/go-sql-driver/mysql"
)

// On MariaDB Galera a lease statement that races a write to the same lease
// row on another node fails certification, or is brute-force aborted by
// the other node's write, with error 1213 (ER_LOCK_DEADLOCK) even in
// autocommit mode once the server's own wsrep_retry_autocommit retries are
// spent. 1213 means the statement did not commit, so running it again is
// the same as running it the first time: every lease statement is one
// autocommit statement whose WHERE decides on the row as it is then.
// Retrying statement by statement (never the whole operation) keeps each
// operation's meaning: an acquire whose UPDATE committed is not run again
// because its read-back conflicted.

// conflictAttempts bounds the attempts of one statement; conflictBackoff
// is the first wait between them, doubled each time up to conflictMaxWait,
// with jitter so that two nodes' retries do not collide again in step.
const (
	conflictAttempts = 8
	conflictBackoff  = 2 * time.Millisecond
	conflictMaxWait  = 100 * time.Millisecond
)

// ErrorNumberer is an error carrying a server error number; the proxy's
// backend errors implement it.
type ErrorNumberer interface {
	ErrorNumber() uint16
}

// IsConflict reports whether err is the server's error 1213 (a deadlock on
// InnoDB, a certification failure or brute-force abort on Galera) or
// TiDB's 9007 (write conflict: an autocommit statement is an optimistic
// transaction there, and fails at its commit when another transaction
// committed the same row meanwhile). Either way the statement (on Galera:
// the transaction) did not commit.
func IsConflict(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return conflictNumber(me.Number)
	}
	var en ErrorNumberer
	return errors.As(err, &en) && conflictNumber(en.ErrorNumber())
}

func conflictNumber(n uint16) bool { return n == 1213 || n == 9007 }

// retrying runs one lease statement, again after a conflict, at most
// conflictAttempts times, waiting with backoff; ctx bounds the waits.
func retrying[T any](ctx context.Context, run func() (T, error)) (T, error) {
	wait := conflictBackoff
	for attempt := 1; ; attempt++ {
		v, err := run()
		if err == nil || !IsConflict(err) || attempt == conflictAttempts {
			return v, err
		}
		t := time.NewTimer(wait/2 + rand.N(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
		wait = min(2*wait, conflictMaxWait)
	}
}

func execRetrying(ctx context.Context, c Conn, q string) (int64, error) {
	return retrying(ctx, func() (int64, error) { return c.Exec(ctx, q) })
}

func queryRetrying(ctx context.Context, c Conn, q string) ([][]string, error) {
	return retrying(ctx, func() ([][]string, error) { return c.Query(ctx, q) })
}
