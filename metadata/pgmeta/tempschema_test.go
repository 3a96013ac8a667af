package pgmeta_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/msgaudit/metadata"
	"github.com/acemq/msgaudit/metadata/pgmeta"
)

// TestTempSchemaRefused: a table in a temporary schema would be a
// different table on every pooled connection (no shared state at all), so
// pgmeta.New and Open refuse it before any I/O; look-alike names that are
// ordinary schemas are accepted.
func TestTempSchemaRefused(t *testing.T) {
	for _, name := range []string{"pg_temp.x", "PG_TEMP.x", "pg_temp_3.x", "pg_toast_temp_12.x", "Pg_Temp_0.t"} {
		if _, err := pgmeta.New(&pgxpool.Pool{}, name); !errors.Is(err, metadata.ErrInvalidName) {
			t.Errorf("pgmeta.New(%q) = %v; want ErrInvalidName", name, err)
		}
		if _, err := metadata.Open(context.Background(), "postgres://postgres@127.0.0.1:1/test?msgaudit_table="+name); !errors.Is(err, metadata.ErrInvalidName) {
			t.Errorf("Open(…msgaudit_table=%s) = %v; want ErrInvalidName", name, err)
		}
	}
	for _, name := range []string{"pg_temporary.x", "my_pg_temp.x", "pg_temp", "public.pg_temp"} {
		if _, err := pgmeta.New(&pgxpool.Pool{}, name); err != nil {
			t.Errorf("pgmeta.New(%q) = %v", name, err)
		}
	}
}
