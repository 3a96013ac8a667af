//go:build unix

package crashtest

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
)

// A fleet run: fleetConsumers consumer processes share one queue and one
// durable tier; fleetMessages persistent messages are on the queue when
// they start; every fleetKillMin to fleetKillMax one of them, chosen at
// random, is killed with SIGKILL and restarted, until 95% of the keys are
// applied. So that a fast machine sees as many kills as a slow one, a kill
// also comes whenever the ledger has grown by a (fleetMinKills+1)th of
// those keys since the last one: at least fleetMinKills kills per run. Before it, one process alone consumes soloMessages on a queue
// of its own, the reference for the fleet's throughput.
const (
	fleetConsumers = 4
	fleetMessages  = 20000
	soloMessages   = 4000
	fleetKillMin   = 1500 * time.Millisecond
	fleetKillMax   = 3 * time.Second
	fleetMinKills  = 6
)

// fleetPlan is one fleet configuration.
type fleetPlan struct {
	Transport, Store string
	// StoreURL, for StoreRedis, overrides MSGAUDIT_REDIS_URL (a Redis
	// Cluster URL).
	StoreURL string
	// Consumers processes consume Messages; Kill turns the kill loop on.
	Consumers, Messages int
	Kill                bool
	Seed                uint64
}

// fleetResult is what a fleet run observed.
type fleetResult struct {
	Plan                             fleetPlan
	Kills, KillsEffect, KillsSettled int
	InEffect, InSettled              int64
	KillsOf                          []int
	Outcome
	// Consume is the time from the consumers' start until the ledger held
	// every key; Rate is Messages over it.
	Consume time.Duration
	Rate    float64
}

func (r fleetResult) String() string {
	p := r.Plan
	dlq := "n/a"
	if r.BrokerDLQLeft >= 0 {
		dlq = fmt.Sprint(r.BrokerDLQLeft)
	}
	return fmt.Sprintf("fleet %s store=%s consumers=%d messages=%d kills=%d per-consumer=%v (effect-window %d with %d deliveries, settle-ack-window %d with %d) "+
		"lost=%d twice=%d unknown=%d delivered=%d redelivered=%d duplicates(audit=%d store=%d in-flight=%d other=%d) handler-calls=%d processed=%d retries=%d "+
		"dead-lettered=%d handler-errors=%d processed-by-consumer=%v left(queue=%d dlq=%d broker-dlq=%s) consume=%.1fs rate=%.0f msgs/s",
		p.Transport, p.Store, p.Consumers, p.Messages, r.Kills, r.KillsOf, r.KillsEffect, r.InEffect, r.KillsSettled, r.InSettled,
		r.Lost, r.Twice, r.Unknown, r.Totals.Delivered, r.Totals.Redelivered, r.Totals.DuplicatesAudit, r.Totals.DuplicatesStore,
		r.Totals.DuplicatesInFlight, r.Totals.DuplicatesOther, r.Totals.Calls, r.Totals.Processed, r.Totals.Retries,
		r.Totals.DeadLettered, r.Totals.HandlerErrors, r.ProcessedBy, r.QueueLeft, r.DeadLetterLeft, dlq, r.Consume.Seconds(), r.Rate)
}

// TestFleet runs four consumer processes on one queue, sharing the
// PostgreSQL transactional inbox or the Redis store (a Redis Cluster when
// MSGAUDIT_REDIS_CLUSTER_URL is set), with one of them killed by SIGKILL
// every few seconds and restarted. With the inbox it requires exactly
// once: nothing lost, nothing applied twice, the queue and the dead-letter
// queues empty. With the Redis store it requires nothing lost and reports
// the keys applied twice and their cause (the store lives outside the
// ledger's database). STOMP (ActiveMQ) runs both, AMQP (RabbitMQ) the
// inbox. Each configuration also runs one process alone,
// without kills, for the throughput the fleet is compared with. It runs
// when MSGAUDIT_CRASH_EXTENDED=1.
func TestFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet tests start and kill consumer processes; skipped in -short mode")
	}
	if os.Getenv("MSGAUDIT_CRASH_EXTENDED") != "1" {
		t.Skip("a fleet of four killed and restarted consumer processes; set MSGAUDIT_CRASH_EXTENDED=1 to run it")
	}
	for _, tc := range []struct {
		name, transport, store string
	}{
		{"stomp-inbox-postgres", STOMP, StoreInbox},
		{"stomp-redis-store", STOMP, StoreRedis},
		{"amqp-inbox-postgres", AMQP, StoreInbox},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var storeURL string
			if tc.store == StoreRedis {
				storeURL = os.Getenv("MSGAUDIT_REDIS_CLUSTER_URL")
			}
			if storeURL != "" {
				// The cluster's failover test kills a master under an
				// exclusive lock; a fleet run must not overlap it.
				storetestkit.LockService(t, "redis-cluster", false)
			}
			solo := runFleet(t, fleetPlan{Transport: tc.transport, Store: tc.store, StoreURL: storeURL, Consumers: 1, Messages: soloMessages})
			checkFleet(t, solo)
			r := runFleet(t, fleetPlan{Transport: tc.transport, Store: tc.store, StoreURL: storeURL, Consumers: fleetConsumers, Messages: fleetMessages, Kill: true})
			checkFleet(t, r)
			if r.Kills < fleetMinKills {
				t.Errorf("only %d kills landed before 95%% of the keys were applied, want at least %d", r.Kills, fleetMinKills)
			}
			for i, n := range r.CalledBy {
				if n == 0 {
					t.Errorf("consumer %d never called its handler: the run did not exercise %d consumers", i, len(r.CalledBy))
				}
			}
			switch {
			case tc.store == StoreInbox && r.Twice > 0:
				t.Errorf("applied twice: %d keys (first: %v)", r.Twice, r.FirstTwice)
			case r.Twice > 0:
				t.Logf("applied twice: %d keys (first: %v), not asserted: %s; the kills found %d deliveries in that window",
					r.Twice, r.FirstTwice, storeNote, r.InEffect)
			}
			t.Logf("fleet throughput %.0f msgs/s with %d consumers under %d kills, one consumer alone %.0f msgs/s (%.2f×)",
				r.Rate, r.Plan.Consumers, r.Kills, solo.Rate, r.Rate/solo.Rate)
		})
	}
}

// checkFleet asserts what every fleet run must show: every key applied,
// nothing unknown, nothing left on the queue or a dead-letter queue.
func checkFleet(t *testing.T, r fleetResult) {
	t.Helper()
	if r.Lost > 0 {
		t.Errorf("lost: %d of %d keys never applied (first: %v)", r.Lost, r.Plan.Messages, r.FirstLost)
	}
	if r.Unknown > 0 {
		t.Errorf("the ledger holds %d keys that were never sent", r.Unknown)
	}
	if r.QueueLeft != 0 {
		t.Errorf("%d messages left on the queue after the consumers went quiet", r.QueueLeft)
	}
	if r.DeadLetterLeft != 0 || r.BrokerDLQLeft > 0 {
		t.Errorf("dead letters: %d on the consumer's dead-letter destination, %d on the broker's DLQ", r.DeadLetterLeft, r.BrokerDLQLeft)
	}
}

// runFleet carries out p against the PostgreSQL ledger: it produces
// p.Messages, starts p.Consumers children, kills a random one every
// fleetKillMin to fleetKillMax while p.Kill and fewer than 95% of the
// keys are applied, waits for the ledger and quiet consumers, stops them
// and counts. Missing services skip (fail under CI).
func runFleet(t *testing.T, p fleetPlan) fleetResult {
	t.Helper()
	if p.Seed == 0 {
		p.Seed = mrand.Uint64()
	}
	rng := mrand.New(mrand.NewPCG(p.Seed, 1))
	id := storetestkit.Hex(5)
	dir := t.TempDir()
	ctx := context.Background()
	cfg := Config{Transport: p.Transport, DB: PostgreSQL, Store: p.Store, ClaimTTL: 2 * time.Second,
		Concurrency: 4, Prefetch: 50, Dir: dir, Ledger: "fleet_ledger_" + id}
	cfg.DSN = testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "PostgreSQL")
	br, drained := fleetBroker(t, &cfg, id)

	db, err := openDB(cfg.DB, cfg.DSN, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	led := newLedger(db, cfg.DB, cfg.Ledger)
	if err := led.makeTable(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := led.drop(context.Background()); err != nil {
			t.Errorf("cleanup: drop %s: %v", cfg.Ledger, err)
		}
	})
	if p.Store == StoreRedis && p.StoreURL != "" {
		cfg.StoreURL = p.StoreURL
		cfg.StoreAt = "msgaudit:fleet:" + id + ":"
		t.Cleanup(func() { deleteClusterPrefix(t, cfg.StoreURL, cfg.StoreAt) })
	} else {
		prepareStore(t, &cfg, db, id)
	}

	keys := make([]string, p.Messages)
	for i := range keys {
		keys[i] = fmt.Sprintf("fleet-%s:%d", id, i+1)
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	produced := time.Now()
	err = br.produce(pctx, cfg.Queue, keys)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("produced %d persistent messages in %.1fs", p.Messages, time.Since(produced).Seconds())

	res := fleetResult{Plan: p, Outcome: newOutcome(p.Consumers), KillsOf: make([]int, p.Consumers)}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	children := make([]*child, p.Consumers)
	for i := range children {
		c, err := newChild(exe, &cfg, i)
		if err != nil {
			t.Fatal(err)
		}
		children[i] = c
		t.Cleanup(c.cleanup)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range children {
				t.Logf("child %d log (last lines):\n%s", c.idx, c.tail(20))
			}
		}
	})
	start := time.Now()
	for _, c := range children {
		if err := c.start(); err != nil {
			t.Fatal(err)
		}
	}
	if p.Kill {
		if err := killLoop(ctx, led, children, p.Messages*95/100, rng, &res); err != nil {
			t.Fatal(err)
		}
	}
	if err := awaitFullLedger(ctx, led, p.Messages, children); err != nil {
		t.Error(err)
	}
	res.Consume = time.Since(start)
	res.Rate = float64(p.Messages) / res.Consume.Seconds()
	if err := awaitLedger(ctx, led, p.Messages, children); err != nil {
		t.Error(err)
	}
	res.finish(ctx, t, children, br, cfg, led, keys)
	*drained = true
	t.Logf("%s seed=%d", res, p.Seed)
	return res
}

// fleetBroker connects the parent to cfg.Transport's broker and names the
// run's queues; the returned flag, once set, tells the cleanup that the
// final checks emptied them.
func fleetBroker(t *testing.T, cfg *Config, id string) (broker, *bool) {
	t.Helper()
	drained := new(bool)
	switch cfg.Transport {
	case STOMP:
		cfg.Addr = testenv.Getenv(t, "MSGAUDIT_STOMP_ADDR", "ActiveMQ's STOMP port")
		cfg.Queue = "/queue/msgaudit.fleet." + id
		cfg.DeadLetter = cfg.Queue + ".DLQ"
		b, err := dialSTOMP(cfg.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.close)
		t.Cleanup(func() {
			if !*drained {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				for _, q := range []string{cfg.Queue, cfg.DeadLetter, brokerDLQ(cfg.Queue)} {
					if _, err := b.take(ctx, q); err != nil {
						t.Errorf("cleanup: %v", err)
					}
				}
			}
		})
		return b, drained
	case AMQP:
		cfg.Addr = testenv.Getenv(t, "MSGAUDIT_AMQP_URL", "RabbitMQ")
		cfg.Queue = "msgaudit.fleet." + id
		cfg.DeadLetter = cfg.Queue + ".dlq"
		b, err := dialAMQP(cfg.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.close)
		if err := b.declare(cfg.Queue, cfg.DeadLetter); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := b.remove(cfg.Queue, cfg.DeadLetter); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
		return b, drained
	}
	t.Fatalf("crashtest: unknown transport %q", cfg.Transport)
	return nil, nil
}

// killLoop kills a random child every fleetKillMin to fleetKillMax, or
// sooner when the ledger passes the next of fleetMinKills evenly spaced
// progress points (each child frozen first, so its gauges tell which
// windows the kill landed in), and restarts it, until the ledger holds
// stopAt keys.
func killLoop(ctx context.Context, led *ledger, children []*child, stopAt int, rng *mrand.Rand, res *fleetResult) error {
	deadline := time.Now().Add(completeDeadline)
	step := max(stopAt/(fleetMinKills+1), 1)
	next := step // the progress point that forces the next kill
	for {
		wait := fleetKillMin + time.Duration(rng.Int64N(int64(fleetKillMax-fleetKillMin)))
		for until := time.Now().Add(wait); time.Now().Before(until); time.Sleep(20 * time.Millisecond) {
			keys, _, err := led.counts(ctx)
			if err != nil {
				return err
			}
			if keys >= stopAt {
				return nil
			}
			if keys >= next {
				break
			}
			for _, c := range children {
				if err := c.exited(); err != nil {
					return fmt.Errorf("child %d (run %d) exited with the ledger at %d keys: %v\n%s", c.idx, c.runs, keys, err, c.tail(20))
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("after %v the ledger holds %d keys, short of the %d that end the kills", completeDeadline, keys, stopAt)
			}
		}
		keys, _, err := led.counts(ctx)
		if err != nil {
			return err
		}
		next = (keys/step + 1) * step
		v := children[rng.IntN(len(children))]
		effect, settled, calls, err := v.kill()
		if err != nil {
			return err
		}
		res.Kills++
		res.KillsOf[v.idx]++
		res.InEffect += effect
		res.InSettled += settled
		if effect > 0 {
			res.KillsEffect++
		}
		if settled > 0 {
			res.KillsSettled++
		}
		snap, err := readSnapshot(v.metricsPath)
		if err != nil {
			return err
		}
		snap.Calls = calls
		res.Totals.add(snap)
		res.ProcessedBy[v.idx] += snap.Metrics.Processed
		res.CalledBy[v.idx] += calls
		if err := v.start(); err != nil {
			return err
		}
	}
}

// awaitFullLedger waits until the ledger holds n keys (the moment the
// throughput is measured to), failing if a child exits or after
// completeDeadline.
func awaitFullLedger(ctx context.Context, led *ledger, n int, children []*child) error {
	deadline := time.Now().Add(completeDeadline)
	for {
		keys, _, err := led.counts(ctx)
		if err != nil {
			return err
		}
		if keys >= n {
			return nil
		}
		for _, c := range children {
			if err := c.exited(); err != nil {
				return fmt.Errorf("child %d exited before the end (ledger: %d of %d keys): %v", c.idx, keys, n, err)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v the ledger holds %d of %d keys", completeDeadline, keys, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deleteClusterPrefix removes every key under prefix from each master of
// the Redis Cluster at url ("redis+cluster://host:port,host:port,…").
func deleteClusterPrefix(t testing.TB, url, prefix string) {
	_, rest, _ := strings.Cut(url, "://")
	rest, _, _ = strings.Cut(rest, "/")
	rest, _, _ = strings.Cut(rest, "?")
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(rest, ",")})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		iter := m.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := m.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	})
	if err != nil {
		t.Errorf("cleanup: delete %s* from the cluster: %v", prefix, err)
	}
}
