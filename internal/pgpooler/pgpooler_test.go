package pgpooler_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/acemq/msgaudit/internal/pgpooler"
)

func TestExplain(t *testing.T) {
	exists := &pgconn.PgError{Code: "42P05", Message: `prepared statement "stmtcache_4d26f88b" already exists`}
	missing := &pgconn.PgError{Code: "26000", Message: `prepared statement "stmtcache_73d8b511" does not exist`}
	cases := []struct {
		name string
		err  error
		hint bool
	}{
		{"already exists", exists, true},
		{"does not exist, wrapped", fmt.Errorf("idempotency: postgres claim: %w", missing), true},
		{"a statement of the application's own", &pgconn.PgError{Code: "26000", Message: `prepared statement "mine" does not exist`}, false},
		{"another server error", &pgconn.PgError{Code: "23505", Message: "stmtcache_ in a duplicate key"}, false},
		{"not a server error", errors.New(`prepared statement "stmtcache_1" does not exist`), false},
		{"nil", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := pgpooler.Explain(tc.err)
			if !errors.Is(got, tc.err) {
				t.Errorf("Explain(%v) = %v, which does not wrap the error", tc.err, got)
			}
			if has := got != nil && strings.Contains(got.Error(), "default_query_exec_mode=exec"); has != tc.hint {
				t.Errorf("Explain(%v) = %v; hint %v, want %v", tc.err, got, has, tc.hint)
			}
			if !tc.hint && got != tc.err {
				t.Errorf("Explain(%v) changed the error to %v", tc.err, got)
			}
		})
	}
}
