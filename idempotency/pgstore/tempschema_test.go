package pgstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/pgstore"
)

// TestPostgresTempSchemaRefused: a table in a temporary schema would be a
// different table on every pooled connection, so two stores (or two
// connections of one) would both claim a key. New and
// Open refuse it before any I/O; look-alike names that are
// ordinary schemas are accepted.
func TestPostgresTempSchemaRefused(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"pg_temp.x", "PG_TEMP.x", "pg_temp_3.x", "pg_toast_temp_12.x", "Pg_Temp_0.t"} {
		_, err := pgstore.New(ctx, idlePool(t), name, idempotency.Options{})
		if err == nil || !strings.Contains(err.Error(), "temporary schema") {
			t.Errorf("New(%q) = %v; want a temporary-schema error", name, err)
		}
		_, err = pgstore.Open(ctx, "postgres://postgres@127.0.0.1:1/test?msgaudit_table="+name, idempotency.Options{})
		if err == nil || !strings.Contains(err.Error(), "temporary schema") {
			t.Errorf("Open(…msgaudit_table=%s) = %v; want a temporary-schema error", name, err)
		}
	}
	for _, name := range []string{"pg_temporary.x", "my_pg_temp.x", "pg_temp", "public.pg_temp"} {
		if _, err := pgstore.New(ctx, idlePool(t), name, idempotency.Options{}); err != nil {
			t.Errorf("New(%q) = %v", name, err)
		}
	}
}
