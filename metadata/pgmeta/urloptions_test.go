package pgmeta_test

import (
	"context"
	"testing"

	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/metadata"
	"github.com/acemq/msgaudit/metadata/pgmeta"
)

// TestURLOptionsKeepTheirSpace: a query value with an escaped space
// (options=-c%20statement_timeout%3D4321) reaches the server as written,
// next to msgaudit_table, which Open removes: the option takes effect on
// the store's connections. pgx reads "+" as a plus sign, so a re-encoded
// URL ("-c+statement_timeout…") fails to connect.
func TestURLOptionsKeepTheirSpace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "the real service")
	table := newTable(t, postgresPool(t))
	for _, q := range []string{
		"msgaudit_table=" + table + "&options=-c%20statement_timeout%3D4321",
		"options=-c%20statement_timeout%3D4321&msgaudit_table=" + table,
	} {
		s, err := metadata.Open(ctx, storetestkit.WithQuery(u, q))
		if err != nil {
			t.Fatalf("Open(…?%s): %v", q, err)
		}
		var got string
		err = pgmeta.Pool(s.(*pgmeta.Store)).QueryRow(ctx, "SHOW statement_timeout").Scan(&got)
		_ = s.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got != "4321ms" {
			t.Errorf("Open(…?%s): statement_timeout is %q, want 4321ms", q, got)
		}
	}
}
