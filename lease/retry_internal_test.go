package lease

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
)

type numbered uint16

func (n numbered) Error() string       { return fmt.Sprintf("error %d", uint16(n)) }
func (n numbered) ErrorNumber() uint16 { return uint16(n) }

func TestIsConflict(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&mysql.MySQLError{Number: 1213}, true},
		{fmt.Errorf("lease: acquire: %w", &mysql.MySQLError{Number: 1213}), true},
		{numbered(1213), true},
		{fmt.Errorf("wrapped: %w", numbered(1213)), true},
		{&mysql.MySQLError{Number: 9007}, true}, // TiDB's write conflict
		{numbered(9007), true},
		{&mysql.MySQLError{Number: 1205}, false}, // a lock wait timeout may have waited on anything: not retried
		{numbered(1062), false},
		{errors.New("1213"), false},
		{nil, false},
	} {
		if got := IsConflict(tc.err); got != tc.want {
			t.Errorf("IsConflict(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestRetryingStopsAtSuccessOtherErrorsAndTheBound(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		results   []error // per attempt; past the end: success
		wantCalls int
		wantErr   bool
	}{
		{"success", nil, 1, false},
		{"conflicts then success", []error{numbered(1213), numbered(1213)}, 3, false},
		{"other error is not retried", []error{numbered(1062)}, 1, true},
		{"conflict then other error", []error{numbered(1213), numbered(1146)}, 2, true},
		{"bounded", []error{numbered(1213), numbered(1213), numbered(1213), numbered(1213), numbered(1213),
			numbered(1213), numbered(1213), numbered(1213), numbered(1213), numbered(1213)}, conflictAttempts, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			_, err := retrying(ctx, func() (int, error) {
				calls++
				if calls <= len(tc.results) {
					return 0, tc.results[calls-1]
				}
				return 1, nil
			})
			if calls != tc.wantCalls || (err != nil) != tc.wantErr {
				t.Fatalf("%d calls, err %v; want %d calls, error %v", calls, err, tc.wantCalls, tc.wantErr)
			}
		})
	}
	// A canceled context ends the waits: the conflict is returned at once.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	calls := 0
	_, err := retrying(cctx, func() (int, error) { calls++; return 0, numbered(1213) })
	if calls != 1 || !IsConflict(err) {
		t.Fatalf("canceled: %d calls, %v", calls, err)
	}
}
