package pgstore_test

import (
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency/pgstore"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// TestPostgresURLOptionsKeepTheirSpace: a query value with an escaped
// space (options=-c%20statement_timeout%3D4321) reaches the server as
// written, next to msgaudit_table, which Open removes: the option takes
// effect on the store's connections. pgx reads "+" as a plus sign, so a
// re-encoded URL ("-c+statement_timeout…") fails to connect.
func TestPostgresURLOptionsKeepTheirSpace(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	_, table := postgresTestPool(t, nil, 0)
	for _, q := range []string{
		"msgaudit_table=" + table + "&options=-c%20statement_timeout%3D4321",
		"options=-c%20statement_timeout%3D4321&msgaudit_table=" + table,
	} {
		s, err := pgstore.Open(ctx, storetestkit.WithQuery(postgresTestURL(t), q), pgstore.Options{})
		if err != nil {
			t.Fatalf("Open(…?%s): %v", q, err)
		}
		var got string
		err = pgstore.Pool(s).QueryRow(ctx, "SHOW statement_timeout").Scan(&got)
		_ = s.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got != "4321ms" {
			t.Errorf("Open(…?%s): statement_timeout is %q, want 4321ms", q, got)
		}
	}
}
