package pgstore

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestRetryDeadlock: a statement aborted as a deadlock victim is sent
// again, at most deadlockRetries more times; any other error, or a
// cancelled context, ends the retries at once.
func TestRetryDeadlock(t *testing.T) {
	p := &Store{}
	deadlock := &pgconn.PgError{Code: "40P01"}
	other := &pgconn.PgError{Code: "23505"}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name      string
		ctx       context.Context
		errs      []error // what each attempt returns; nil after the list
		wantCalls int
		wantErr   error
	}{
		{"ok", context.Background(), nil, 1, nil},
		{"deadlock then ok", context.Background(), []error{deadlock, deadlock}, 3, nil},
		{"deadlock every time", context.Background(), []error{deadlock, deadlock, deadlock, deadlock, deadlock}, deadlockRetries + 1, deadlock},
		{"other error", context.Background(), []error{other}, 1, other},
		{"deadlock, context ended", cancelled, []error{deadlock}, 1, deadlock},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := p.retryDeadlock(tc.ctx, func() error {
				calls++
				if calls <= len(tc.errs) {
					return tc.errs[calls-1]
				}
				return nil
			})
			if calls != tc.wantCalls || !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Errorf("%d calls, %v; want %d, %v", calls, err, tc.wantCalls, tc.wantErr)
			}
		})
	}
}
