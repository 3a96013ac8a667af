package chaintest

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/natsconsumer"
	"github.com/acemq/msgaudit/outbox"
	"github.com/acemq/msgaudit/rabbitconsumer"
	"github.com/acemq/msgaudit/stompconsumer"
	"github.com/nats-io/nats.go/jetstream"
)

// TestRelayParksRefused: on each broker, a message to a destination the
// broker refuses and one over its size limit are parked with the broker's
// reason after MaxAttempts, and the others flow.
func TestRelayParksRefused(t *testing.T) {
	for _, transport := range []string{"stomp", "amqp", "nats"} {
		t.Run(transport, func(t *testing.T) {
			ctx := context.Background()
			prefix := "park_" + randHex(4) + "_"
			cfg := config{Transport: transport, Prefix: prefix}
			var b broker
			var refused string
			var pub func() (outbox.Publisher, func(), error)
			switch transport {
			case "stomp":
				cfg.Addr = testenv.Getenv(t, "MSGAUDIT_STOMP_ADDR", "the relay test needs ActiveMQ")
				cfg.QueueA, cfg.QueueB, cfg.DLQ = "/queue/msgaudit."+prefix+"a", "/queue/msgaudit."+prefix+"b", "/queue/msgaudit."+prefix+"dlq"
				b, refused = &stompBroker{cfg: &cfg}, "/remote-temp-queue/ID:msgaudit-none-"+prefix
				pub = func() (outbox.Publisher, func(), error) {
					p, err := stompconsumer.NewPublisher(ctx, stompconsumer.Config{Addresses: []string{cfg.Addr}, MaxBodyBytes: 1024})
					if err != nil {
						return nil, nil, err
					}
					return p, func() { _ = p.Close() }, nil
				}
			case "amqp":
				cfg.Addr = testenv.Getenv(t, "MSGAUDIT_AMQP_URL", "the relay test needs RabbitMQ")
				cfg.QueueA, cfg.QueueB, cfg.DLQ = "msgaudit."+prefix+"a", "msgaudit."+prefix+"b", "msgaudit."+prefix+"dlq"
				b, refused = &amqpBroker{cfg: &cfg}, "msgaudit."+prefix+"none"
				pub = func() (outbox.Publisher, func(), error) {
					p, err := rabbitconsumer.NewPublisher(ctx, rabbitconsumer.Config{URL: cfg.Addr, MaxBodyBytes: 1024})
					if err != nil {
						return nil, nil, err
					}
					return p, func() { _ = p.Close() }, nil
				}
			case "nats":
				cfg.Addr = testenv.Getenv(t, "MSGAUDIT_NATS_URL", "the relay test needs NATS JetStream")
				cfg.QueueA, cfg.QueueB, cfg.DLQ = prefix+"a", prefix+"b", prefix+"dlq"
				b, refused = &natsBroker{cfg: &cfg}, prefix+"none"
				pub = func() (outbox.Publisher, func(), error) {
					p, err := natsconsumer.NewPublisher(ctx, natsconsumer.Config{URL: cfg.Addr})
					if err != nil {
						return nil, nil, err
					}
					return p, func() { _ = p.Close() }, nil
				}
			}
			if err := b.setup(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.cleanup(context.Background()) })
			if nb, ok := b.(*natsBroker); ok {
				// The size limit on NATS is the stream's.
				nc, js, err := nb.js()
				if err != nil {
					t.Fatal(err)
				}
				_, err = js.UpdateStream(ctx, jetstream.StreamConfig{Name: cfg.QueueB, Subjects: []string{cfg.QueueB},
					Storage: jetstream.FileStorage, MaxMsgSize: 1024})
				nc.Close()
				if err != nil {
					t.Fatal(err)
				}
			}
			raw := testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "the relay test needs PostgreSQL")
			db, err := sql.Open("pgx", raw)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			t.Cleanup(func() { _, _ = db.Exec(`DROP TABLE IF EXISTS ` + prefix + `ob`) })
			ob, err := outbox.New(ctx, db, outbox.Options{Dialect: inbox.PostgreSQL, Table: prefix + "ob", MaxAttempts: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer ob.Close()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range []outbox.Message{
				{Destination: cfg.QueueB, Body: []byte("1")},
				{Destination: refused, Body: []byte("refused")},
				{Destination: cfg.QueueB, Body: make([]byte, 4096)},
				{Destination: cfg.QueueB, Body: []byte("2")},
			} {
				if err := ob.Send(ctx, tx, m); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			p, closePub, err := pub()
			if err != nil {
				t.Fatal(err)
			}
			defer closePub()
			rctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- ob.Run(rctx, p) }()
			deadline := time.Now().Add(30 * time.Second)
			var sent, parked int
			for {
				_ = db.QueryRow(`SELECT count(*) FILTER (WHERE state = 1), count(*) FILTER (WHERE state = 2) FROM `+prefix+`ob`).Scan(&sent, &parked)
				if sent == 2 && parked == 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("sent %d, parked %d; want 2 and 2", sent, parked)
				}
				time.Sleep(50 * time.Millisecond)
			}
			stop()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			rows, err := db.Query(`SELECT destination, octet_length(body), attempts, reason FROM ` + prefix + `ob WHERE state = 2`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				var dest, reason string
				var size, attempts int
				if err := rows.Scan(&dest, &size, &attempts, &reason); err != nil {
					t.Fatal(err)
				}
				t.Logf("parked: %s (%d bytes) after %d attempts: %s", dest, size, attempts, reason)
				if attempts != 2 || !strings.Contains(reason, outbox.ErrRefused.Error()) {
					t.Errorf("parked %s after %d attempts with reason %q; want 2 and the refusal", dest, attempts, reason)
				}
			}
		})
	}
}
