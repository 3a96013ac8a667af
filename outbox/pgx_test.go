package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/inbox/pgxinbox"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/outbox"
	"github.com/acemq/msgaudit/receiver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// TestPgxHandlerSends: a pgx inbox handler sends through OutboxTx; a
// failed run's sends roll back with it, the committed run's leave once,
// and the relay runs on the same pool through database/sql.
func TestPgxHandlerSends(t *testing.T) {
	raw := testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "the PostgreSQL outbox tests need a server")
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	suffix := randHex(4)
	table, inTable := "msgaudit_outbox_pgx_"+suffix, "msgaudit_outbox_pgxin_"+suffix
	t.Cleanup(func() {
		for _, tb := range []string{table, inTable} {
			_, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+tb)
		}
	})
	ob, err := outbox.New(ctx, db, outbox.Options{Dialect: inbox.PostgreSQL, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ob.Close() })
	ib, err := pgxinbox.New(ctx, pool, inbox.Options{Dialect: inbox.PostgreSQL, Table: inTable})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ib.Close() })
	r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{ib}})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	h := pgxinbox.Handler(func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
		runs++
		for range 2 {
			if err := ob.Send(ctx, pgxinbox.OutboxTx(tx), outbox.Message{Destination: "next", Body: []byte{byte('0' + runs)}}); err != nil {
				return err
			}
		}
		if runs == 1 {
			return errors.New("the first run fails after sending")
		}
		return nil
	})
	for range 2 {
		r.Process(ctx, &receiver.Message{Key: "k", Destination: "/queue/in"}, h)
	}
	p := &recorder{}
	relay(t, ob, p)
	eventually(t, "two messages", func() bool { return len(p.confirmed()) == 2 })
	time.Sleep(200 * time.Millisecond)
	got := p.confirmed()
	if len(got) != 2 || string(got[0].m.Body) != "2" || string(got[1].m.Body) != "2" || got[0].id == got[1].id ||
		!strings.HasPrefix(got[0].id, "d-") {
		t.Fatalf("published %+v; want the second run's two messages, with two derived ids", got)
	}
	if err := ob.Send(ctx, db, outbox.Message{Destination: "q"}); !errors.Is(err, outbox.ErrConfig) {
		t.Errorf("Send on a *sql.DB = %v, want ErrConfig (no transaction to commit with)", err)
	}
}
