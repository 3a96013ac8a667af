package outbox_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/outbox"
)

// TestOrderKeyUnderFailuresAndRestarts: messages of one OrderKey leave in
// commit order, one in flight at a time, each at least once with resends
// only of the same id, while two relays share the table, publishes fail at
// random and relays are stopped and restarted.
func TestOrderKeyUnderFailuresAndRestarts(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *db) {
		const keys, perKey = 6, 25
		ob := d.outbox(t, outbox.Options{Lease: time.Second, Concurrency: 8})
		var mu sync.Mutex
		inflight := map[string]int{}
		var violations []string
		rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
		p := &recorder{fail: func(id string, m outbox.Message) error {
			mu.Lock()
			if inflight[m.OrderKey]++; m.OrderKey != "" && inflight[m.OrderKey] > 1 {
				violations = append(violations, "two messages of key "+m.OrderKey+" in flight")
			}
			fail := rng.IntN(5) == 0
			pause := time.Duration(rng.IntN(500)) * time.Microsecond
			mu.Unlock()
			time.Sleep(pause)
			mu.Lock()
			inflight[m.OrderKey]--
			mu.Unlock()
			if fail {
				return errDown
			}
			return nil
		}}
		// Senders: per key, one goroutine sends its sequence in separate
		// transactions, some rolled back (those numbers never leave).
		var wg sync.WaitGroup
		sent := make([][]int, keys)
		for k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := "k" + strconv.Itoa(k)
				for i := range perKey {
					commit := i%7 != 3
					send(t, ob, d.db, commit, outbox.Message{Destination: "q", OrderKey: key, Body: []byte(strconv.Itoa(i))},
						outbox.Message{Destination: "unordered", Body: []byte(key)})
					if commit {
						sent[k] = append(sent[k], i)
					}
				}
			}()
		}
		// Two relays, each stopped and started again a few times.
		stopRelays := make(chan struct{})
		var rw sync.WaitGroup
		for range 2 {
			rw.Add(1)
			go func() {
				defer rw.Done()
				for {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(50+rand.IntN(200))*time.Millisecond)
					_ = ob.Run(ctx, p)
					cancel()
					select {
					case <-stopRelays:
						return
					default:
					}
				}
			}()
		}
		wg.Wait()
		want := 0
		for _, s := range sent {
			want += len(s)
		}
		distinct := func() map[string]published {
			m := map[string]published{}
			for _, c := range p.confirmed() {
				m[c.id] = c
			}
			return m
		}
		eventually(t, "every committed message", func() bool { return len(distinct()) == 2*want })
		close(stopRelays)
		rw.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(violations) > 0 {
			t.Fatalf("%d violations, first: %s", len(violations), violations[0])
		}
		// Per key: the first confirmation of each id in order of the
		// committed sequence; resends only after their first.
		seen := map[string]bool{}
		got := make(map[string][]int)
		ids := map[string]string{}
		for _, c := range p.confirmed() {
			if c.m.Destination != "q" {
				continue
			}
			n, _ := strconv.Atoi(string(c.m.Body))
			if prev, ok := ids[c.m.OrderKey+"/"+string(c.m.Body)]; ok && prev != c.id {
				t.Fatalf("key %s message %d sent with two ids %q and %q", c.m.OrderKey, n, prev, c.id)
			}
			ids[c.m.OrderKey+"/"+string(c.m.Body)] = c.id
			if seen[c.id] {
				continue
			}
			seen[c.id] = true
			got[c.m.OrderKey] = append(got[c.m.OrderKey], n)
		}
		for k := range keys {
			key := "k" + strconv.Itoa(k)
			if fmt.Sprint(got[key]) != fmt.Sprint(sent[k]) {
				t.Errorf("key %s left as %v, committed as %v", key, got[key], sent[k])
			}
		}
		for _, c := range p.confirmed() {
			if strings.HasPrefix(string(c.m.Body), "never") {
				t.Errorf("a rolled-back message left: %+v", c)
			}
		}
	})
}

// TestOrderKeySerialisesSenders: a second transaction sending on an order
// key waits for the first one's commit, so the key's rows are numbered in
// commit order.
func TestOrderKeySerialisesSenders(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *db) {
		ob := d.outbox(t, outbox.Options{})
		ctx := context.Background()
		other := d.open(t)
		txA, err := d.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.Send(ctx, txA, outbox.Message{Destination: "q", OrderKey: "k", Body: []byte("A")}); err != nil {
			t.Fatal(err)
		}
		bDone := make(chan error, 1)
		go func() {
			tx, err := other.BeginTx(ctx, nil)
			if err == nil {
				err = ob.Send(ctx, tx, outbox.Message{Destination: "q", OrderKey: "k", Body: []byte("B")})
				if err == nil {
					err = tx.Commit()
				} else {
					_ = tx.Rollback()
				}
			}
			bDone <- err
		}()
		select {
		case err := <-bDone:
			t.Fatalf("B's send on the same key finished (%v) while A had not committed", err)
		case <-time.After(300 * time.Millisecond):
		}
		if err := txA.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-bDone; err != nil {
			t.Fatalf("B: %v", err)
		}
		p := &recorder{}
		relay(t, ob, p)
		eventually(t, "both", func() bool { return len(p.confirmed()) == 2 })
		if got := string(p.confirmed()[0].m.Body) + string(p.confirmed()[1].m.Body); got != "AB" {
			t.Errorf("left as %s, committed as AB", got)
		}
	})
}
