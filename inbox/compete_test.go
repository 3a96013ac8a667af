package inbox_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/receiver"
)

// TestCompetingDelivery: delivery A of a key is inside its handler when
// delivery B of the same key, through another pool and receiver (another
// process), reaches the inbox. On PostgreSQL the test waits until B's
// INSERT is blocked on A's row, then lets A finish:
//
//   - A commits under READ COMMITTED: B then finds the key, a duplicate
//     acknowledged without running its handler;
//   - A commits under REPEATABLE READ or SERIALIZABLE: B fails with a
//     serialization failure (SQLSTATE 40001) and is requeued, never
//     acknowledged; its retry is a duplicate;
//   - A fails: B then inserts the key and runs, new work.
//
// Either way exactly one effect commits.
func TestCompetingDelivery(t *testing.T) {
	cases := []struct {
		name      string
		isolation sql.IsolationLevel
		aFails    bool
		want      receiver.Action // B's first result
		dup       bool            // B's first result is a duplicate
	}{
		{"read committed, A commits", sql.LevelDefault, false, receiver.Ack, true},
		{"repeatable read, A commits", sql.LevelRepeatableRead, false, receiver.Requeue, false},
		{"serializable, A commits", sql.LevelSerializable, false, receiver.Requeue, false},
		{"read committed, A fails", sql.LevelDefault, true, receiver.Ack, false},
		{"serializable, A fails", sql.LevelSerializable, true, receiver.Ack, false},
	}
	b := newPostgres(t, false)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := "race-" + randHex(6)
			ibA := b.newInbox(t, inbox.Options{Isolation: c.isolation})
			dbB := b.open(t)
			ibB, err := inbox.New(context.Background(), dbB, inbox.Options{Dialect: inbox.PostgreSQL, Table: b.table, Isolation: c.isolation})
			if err != nil {
				t.Fatal(err)
			}
			inA, releaseA := make(chan struct{}), make(chan struct{})
			doneA := make(chan receiver.Result, 1)
			go func() {
				doneA <- process(t, newReceiver(t, ibA, nil), msg(key), inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
					if err := b.apply(ctx, tx, m.Key, "ok"); err != nil {
						return err
					}
					close(inA)
					<-releaseA
					if c.aFails {
						return errHandler
					}
					return nil
				}))
			}()
			select {
			case <-inA:
			case <-time.After(30 * time.Second):
				t.Fatal("delivery A never reached its handler")
			}
			ranB := false
			doneB := make(chan receiver.Result, 1)
			go func() {
				doneB <- process(t, newReceiver(t, ibB, nil), msg(key), inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
					ranB = true
					return b.apply(ctx, tx, m.Key, "ok")
				}))
			}()
			waitBlocked(t, b, b.table)
			close(releaseA)
			var resA, resB receiver.Result
			for range 2 {
				select {
				case resA = <-doneA:
				case resB = <-doneB:
				case <-time.After(30 * time.Second):
					t.Fatal("deliveries A and B did not both finish")
				}
			}
			if wantA := map[bool]receiver.Action{false: receiver.Ack, true: receiver.Requeue}[c.aFails]; resA.Action != wantA {
				t.Errorf("A: %v (%s, %v); want %v", resA.Action, resA.Reason, resA.Err, wantA)
			}
			if resB.Action != c.want || resB.Duplicate != c.dup {
				t.Errorf("B: %v duplicate=%v (%s, %v); want %v duplicate=%v", resB.Action, resB.Duplicate, resB.Reason, resB.Err, c.want, c.dup)
			}
			if c.want == receiver.Requeue && (resB.Err == nil || !strings.Contains(resB.Err.Error(), "40001")) {
				t.Errorf("B's requeue is not a serialization failure: %v", resB.Err)
			}
			if ranB != (c.want == receiver.Ack && !c.dup) {
				t.Errorf("B's handler ran = %v", ranB)
			}
			// B's retry settles it; one effect in the end.
			if resB.Action == receiver.Requeue {
				if res := process(t, newReceiver(t, ibB, nil), msg(key), inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
					return b.apply(ctx, tx, m.Key, "ok")
				})); res.Action != receiver.Ack || !res.Duplicate {
					t.Errorf("B's retry: %v duplicate=%v (%s); want a duplicate ack", res.Action, res.Duplicate, res.Reason)
				}
			}
			if n := b.applied(t, key); n != 1 {
				t.Errorf("effect applied %d times; want 1", n)
			}
		})
	}
}

// waitBlocked waits until a backend's INSERT into table waits for a lock.
func waitBlocked(t *testing.T, b *backend, table string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		err := b.db.QueryRowContext(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO "' || $1 || '"%'`, table).Scan(&n)
		if err != nil {
			t.Fatalf("pg_stat_activity: %v", err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("delivery B's INSERT never waited for delivery A's transaction")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
