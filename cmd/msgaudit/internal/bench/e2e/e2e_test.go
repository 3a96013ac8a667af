package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/stompsub"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/go-stomp/stomp/v3"
	"github.com/nats-io/nats.go/jetstream"
	"pgregory.net/rapid"
)

// services returns Options with every service the variants use, skipping
// (failing under CI) when one is not configured.
func services(t *testing.T) Options {
	t.Helper()
	return Options{
		StompAddr:   testenv.Getenv(t, "MSGAUDIT_STOMP_ADDR", "ActiveMQ's STOMP listener"),
		AMQPURL:     testenv.Getenv(t, "MSGAUDIT_AMQP_URL", "RabbitMQ"),
		NATSURL:     testenv.Getenv(t, "MSGAUDIT_NATS_URL", "a NATS server with JetStream"),
		RedisURL:    testenv.Getenv(t, "MSGAUDIT_REDIS_URL", "Redis"),
		PostgresURL: testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "PostgreSQL"),
		MySQLURL:    testenv.Getenv(t, "MSGAUDIT_MYSQL_URL", "MySQL or MariaDB"),
	}
}

// variantIDs returns the ids of the variants keep accepts, in report order.
func variantIDs(keep func(variant) bool) []string {
	var out []string
	for _, v := range allVariants {
		if keep(v) {
			out = append(out, v.id())
		}
	}
	return out
}

// TestE2E runs every variant without an effect once with 200 messages
// against the real brokers and checks that each produced a sample and a
// row. TestEffectBackends runs the effect variants.
func TestE2E(t *testing.T) {
	o := services(t)
	o.Messages, o.Rounds, o.Timeout, o.Dir = 200, 1, 30*time.Second, t.TempDir()
	o.Variants = variantIDs(func(v variant) bool { return v.kind.effectDB() == "" })
	var want []variant
	for _, v := range allVariants {
		if v.kind.effectDB() == "" {
			want = append(want, v)
		}
	}
	var progress bytes.Buffer
	o.Progress = &progress
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	_, haveProc := readProcs()
	if len(rep.Samples) != len(want) {
		t.Fatalf("%d samples, want one per variant (%d)", len(rep.Samples), len(want))
	}
	for i, s := range rep.Samples {
		v := want[i]
		if s.Broker != v.broker || s.Variant != v.name || s.Round != 1 || s.Messages != 200 || !(s.Rate > 0) || !(s.Seconds > 0) || s.EffectRows != 0 {
			t.Errorf("sample %d = %+v, want variant %s, round 1, 200 messages, a positive rate, no effect rows", i, s, v.id())
		}
		if !haveProc {
			continue
		}
		m := s.Machine
		if m == nil || (m.Store != nil) != (len(v.needs()) > 0) || !(m.BusyPct >= 0 && m.BusyPct <= 100) || m.Broker < 0 || m.Other < 0 {
			t.Errorf("sample %d (%s): machine CPU %+v, want one with a store figure iff the variant uses a server, busy within 0–100%%", i, v.id(), m)
		}
	}
	var md bytes.Buffer
	if err := rep.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	if rows := strings.Count(md.String(), "\n| "); rows != len(want)+1 {
		t.Errorf("Markdown has %d table lines, want a header and %d rows:\n%s", rows, len(want), md.String())
	}
	if haveProc && !strings.Contains(md.String(), "| machine busy |") {
		t.Errorf("Markdown has no machine columns:\n%s", md.String())
	}
	if strings.Contains(md.String(), "Effect check") {
		t.Errorf("Markdown reports an effect check without effect variants:\n%s", md.String())
	}
	var js bytes.Buffer
	if err := rep.JSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Rows) != len(want) {
		t.Errorf("JSON round trip: %v, %d rows, want %d", err, len(back.Rows), len(want))
	}
}

// TestEffectBackends runs every effect variant once with a few messages
// against the real brokers: the bare clients and msgaudit's audit, stores
// and inboxes committing the same INSERT to PostgreSQL, MariaDB or an
// SQLite file. Each run must leave exactly one row per message in its
// effect table, and each row but the bare-effect ones a ratio to the bare
// client with the same effect.
func TestEffectBackends(t *testing.T) {
	const msgs = 50
	o := services(t)
	o.Messages, o.Rounds, o.Timeout, o.Dir = msgs, 1, 30*time.Second, t.TempDir()
	o.Variants = variantIDs(func(v variant) bool { return v.kind.effectDB() != "" })
	var progress bytes.Buffer
	o.Progress = &progress
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	if want := len(o.Variants) + 3; len(rep.Samples) != want { // and the 3 bare clients
		t.Fatalf("%d samples, want %d", len(rep.Samples), want)
	}
	kinds := map[string]kind{}
	for _, v := range allVariants {
		kinds[v.name] = v.kind
	}
	for _, s := range rep.Samples {
		want := 0
		if kinds[s.Variant].effectDB() != "" {
			want = msgs
		}
		if s.EffectRows != want {
			t.Errorf("%s/%s: %d effect rows, want %d", s.Broker, s.Variant, s.EffectRows, want)
		}
	}
	for _, row := range rep.Rows {
		k := kinds[row.Variant]
		if hasRatio := k.effectDB() != "" && !k.isBareEffect(); hasRatio != (row.EffectRatio > 0) {
			t.Errorf("%s/%s: EffectRatio %v, want one iff the variant is compared with a bare-effect client", row.Broker, row.Variant, row.EffectRatio)
		}
	}
	var md bytes.Buffer
	if err := rep.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("Effect check: after each of the %d runs of an effect variant", len(o.Variants)); !strings.Contains(md.String(), want) {
		t.Errorf("Markdown lacks %q:\n%s", want, md.String())
	}
	if !strings.Contains(progress.String(), fmt.Sprintf("effect table: %d rows, %d distinct keys", msgs, msgs)) {
		t.Errorf("progress does not report the effect check:\n%s", progress.String())
	}
}

// TestEffectCheck checks the verification of an effect table on an SQLite
// file: a missing row fails it, one row per key passes, and the primary
// key refuses a second row of a key.
func TestEffectCheck(t *testing.T) {
	p, err := newPlan(Options{StompAddr: "s:1", AMQPURL: "amqp://a", NATSURL: "nats://n", Variants: []string{"stomp/bare-effect-sqlite"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Dir = t.TempDir()
	ctx := context.Background()
	fx, err := p.openEffect(ctx, "sqlite", p.names(p.variants[1], 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fx.close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	for _, k := range []string{"a", "b"} {
		if err := fx.exec(ctx, k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if rows, err := fx.check(ctx, 3); err == nil || rows != 2 || !strings.Contains(err.Error(), "holds 2 rows with 2 distinct keys") {
		t.Errorf("check with 2 of 3 rows: %d, %v; want 2 and an error", rows, err)
	}
	if err := fx.exec(ctx, "b", []byte("x")); err == nil {
		t.Error("a second row of key b was inserted")
	}
	if err := fx.exec(ctx, "c", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if rows, err := fx.check(ctx, 3); err != nil || rows != 3 {
		t.Errorf("check with 3 rows: %d, %v", rows, err)
	}
}

// TestStoreGrouping runs the store variants with StoreBatch and
// StoreLinger set (and the inbox's with InboxBatch and InboxLinger), through the receiver the run builds itself, against the
// real brokers, and checks that the table's header names them.
func TestStoreGrouping(t *testing.T) {
	o := services(t)
	o.Messages, o.Rounds, o.Timeout, o.Dir = 200, 1, 30*time.Second, t.TempDir()
	o.Variants = []string{"memory", "redis", "sqlite", "inbox-sqlite"}
	o.StoreBatch, o.StoreLinger = 4, time.Millisecond
	o.InboxBatch, o.InboxLinger = 2, 3*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	// 3 bare clients, memory on STOMP only, no store on NATS.
	if len(rep.Samples) != 11 {
		t.Errorf("%d samples, want 11", len(rep.Samples))
	}
	var md strings.Builder
	if err := rep.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "StoreBatch 4, StoreLinger 1ms, inbox MaxBatch 2, inbox Linger 3ms;") {
		t.Errorf("header does not name the store grouping:\n%s", md.String())
	}
}

// TestVerifyEmptyCountsUnacknowledged checks that the verification after a
// measurement sees messages left on a queue, delivered but unacknowledged
// ones included, so a variant that loses an ack cannot pass, and that
// cleanup removes them.
func TestVerifyEmptyCountsUnacknowledged(t *testing.T) {
	o := services(t)
	p, err := newPlan(Options{StompAddr: o.StompAddr, AMQPURL: o.AMQPURL, NATSURL: o.NATSURL, Variants: []string{"bare"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body := func(int) []byte { return []byte("x") }

	t.Run("stomp", func(t *testing.T) {
		b := &stompBroker{addr: o.StompAddr}
		n := p.names(variant{STOMP, "verify", bare}, 1)
		t.Cleanup(func() { // drains the queue if the test failed before it did
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := b.cleanup(cctx, n); err != nil {
				t.Error(err)
			}
		})
		if err := b.preload(ctx, n, 3, body); err != nil {
			t.Fatal(err)
		}
		c, err := b.dial(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sub, err := c.Subscribe(queueDest(n), stomp.AckClientIndividual, stomp.SubscribeOpt.Header("activemq.prefetchSize", "1"))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-sub.C:
		case <-ctx.Done():
			t.Fatal("no delivery of the pre-loaded messages within the test's deadline")
		}
		err = b.verifyEmpty(ctx, n)
		if err == nil || !strings.Contains(err.Error(), "holds 3") {
			t.Errorf("verifyEmpty with 3 messages, one delivered and not acknowledged: %v, want \"holds 3\"", err)
		}
		// Leave them unacknowledged: cleanup must drain the queue.
		if err := c.Disconnect(); err != nil {
			t.Fatal(err)
		}
		if err := b.cleanup(ctx, n); err != nil {
			t.Fatalf("cleanup: %v", err)
		}
		if err := b.verifyEmpty(ctx, n); err != nil {
			t.Errorf("verifyEmpty after cleanup: %v", err)
		}
	})

	t.Run("amqp", func(t *testing.T) {
		b := &amqpBroker{url: o.AMQPURL}
		n := p.names(variant{AMQP, "verify", bare}, 1)
		t.Cleanup(func() {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := b.cleanup(cctx, n); err != nil {
				t.Error(err)
			}
		})
		if err := b.preload(ctx, n, 3, body); err != nil {
			t.Fatal(err)
		}
		conn, ch, err := b.dial(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := ch.Qos(1, 0, false); err != nil {
			t.Fatal(err)
		}
		ds, err := ch.Consume(n.queue, "", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-ds:
		case <-ctx.Done():
			t.Fatal("no delivery of the pre-loaded messages within the test's deadline")
		}
		if err := b.verifyEmpty(ctx, n); err == nil {
			t.Error("verifyEmpty passed with a consumer holding an unacknowledged delivery and 2 messages ready")
		}
		if err := conn.Close(); err != nil { // the held delivery goes back
			t.Fatal(err)
		}
		err = b.verifyEmpty(ctx, n)
		if err == nil || !strings.Contains(err.Error(), "holds 3") {
			t.Errorf("verifyEmpty after the consumer closed: %v, want \"holds 3\"", err)
		}
	})

	t.Run("nats", func(t *testing.T) {
		// A short wait: each failing verifyEmpty waits this long.
		b := &natsBroker{url: o.NATSURL, emptyWait: 2 * time.Second}
		n := p.names(variant{NATS, "verify", bare}, 1)
		t.Cleanup(func() {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := b.cleanup(cctx, n); err != nil {
				t.Error(err)
			}
		})
		if err := b.preload(ctx, n, 3, body); err != nil {
			t.Fatal(err)
		}
		nc, js, err := b.dial(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		cons, err := js.CreateOrUpdateConsumer(ctx, natsStream(n), jetstream.ConsumerConfig{Durable: "verify", AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			t.Fatal(err)
		}
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		m, ok := <-batch.Messages()
		if !ok {
			t.Fatalf("no delivery of the pre-loaded messages: %v", batch.Error())
		}
		err = b.verifyEmpty(ctx, n)
		if err == nil || !strings.Contains(err.Error(), "holds 3") {
			t.Errorf("verifyEmpty with 3 messages, one delivered and not acknowledged: %v, want \"holds 3\"", err)
		}
		if err := m.DoubleAck(ctx); err != nil { // acknowledged: the work queue drops it
			t.Fatal(err)
		}
		err = b.verifyEmpty(ctx, n)
		if err == nil || !strings.Contains(err.Error(), "holds 2") {
			t.Errorf("verifyEmpty after acknowledging one of 3: %v, want \"holds 2\"", err)
		}
		// Consume and acknowledge the other two: the stream is empty, and
		// a message on the dead-letter subject is seen.
		batch, err = cons.Fetch(2, jetstream.FetchMaxWait(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
			got++
		}
		if got != 2 {
			t.Fatalf("fetched %d of the 2 remaining messages: %v", got, batch.Error())
		}
		if err := b.verifyEmpty(ctx, n); err != nil {
			t.Errorf("verifyEmpty with every message acknowledged: %v", err)
		}
		if _, err := js.Publish(ctx, natsDLQSubject(n), []byte("dead")); err != nil {
			t.Fatal(err)
		}
		err = b.verifyEmpty(ctx, n)
		if err == nil || !strings.Contains(err.Error(), natsDLQStream(n)+" still holds 1") {
			t.Errorf("verifyEmpty with a dead letter: %v, want the dead-letter stream holding 1", err)
		}
		if err := b.cleanup(ctx, n); err != nil {
			t.Fatalf("cleanup: %v", err)
		}
		for _, name := range []string{natsStream(n), natsDLQStream(n)} {
			if _, err := js.Stream(ctx, name); !errors.Is(err, jetstream.ErrStreamNotFound) {
				t.Errorf("stream %s after cleanup: %v, want ErrStreamNotFound", name, err)
			}
		}
	})
}

// TestNewPlan checks the option validation and the variant selection.
func TestNewPlan(t *testing.T) {
	all := Options{StompAddr: "s:1", AMQPURL: "amqp://a", NATSURL: "nats://n", RedisURL: "redis://r", PostgresURL: "postgres://p", MySQLURL: "mysql://m/db"}
	with := func(f func(*Options)) Options { o := all; f(&o); return o }
	tests := []struct {
		name    string
		o       Options
		want    []string // variant ids; nil when an error is expected
		wantErr string
	}{
		{"defaults: every variant", all, Variants(), ""},
		{"bare name on every broker running it, bare clients added", with(func(o *Options) { o.Variants = []string{"redis"} }),
			[]string{"stomp/bare", "stomp/redis", "amqp/bare", "amqp/redis"}, ""},
		{"one broker", with(func(o *Options) { o.Brokers = []string{AMQP}; o.Variants = []string{"audit", "stomp/memory"} }),
			[]string{"amqp/bare", "amqp/audit"}, ""},
		{"variant not on the chosen broker", with(func(o *Options) { o.Brokers = []string{AMQP}; o.Variants = []string{"memory"} }),
			nil, "none of the variants"},
		{"inbox on every broker", with(func(o *Options) { o.Variants = []string{"inbox-postgres"} }),
			[]string{"stomp/bare", "stomp/inbox-postgres", "amqp/bare", "amqp/inbox-postgres", "nats/bare", "nats/inbox-postgres"}, ""},
		{"nats only", with(func(o *Options) {
			o.Brokers = []string{NATS}
			o.Variants = []string{"audit", "inbox-sqlite", "bare-inbox-postgres", "inbox-effect-mysql"}
		}), []string{"nats/bare", "nats/audit", "nats/inbox-sqlite", "nats/bare-inbox-postgres", "nats/inbox-effect-mysql"}, ""},
		{"no store on nats", with(func(o *Options) { o.Brokers = []string{NATS}; o.Variants = []string{"redis", "sqlite"} }),
			nil, "none of the variants"},
		{"stores with an effect on nats", with(func(o *Options) {
			o.Brokers = []string{NATS}
			o.Variants = []string{"redis-effect-postgres", "postgres-effect-postgres", "bare-effect-sqlite"}
		}), []string{"nats/bare", "nats/redis-effect-postgres", "nats/postgres-effect-postgres", "nats/bare-effect-sqlite"}, ""},
		{"effect on SQLite needs no server", with(func(o *Options) {
			o.PostgresURL, o.RedisURL, o.MySQLURL = "", "", ""
			o.Variants = []string{"amqp/inbox-effect-sqlite"}
		}), []string{"amqp/bare", "amqp/inbox-effect-sqlite"}, ""},
		{"missing PostgreSQL for an effect behind Redis", with(func(o *Options) { o.PostgresURL = ""; o.Variants = []string{"amqp/redis-effect-postgres"} }),
			nil, "amqp/redis-effect-postgres needs PostgresURL"},
		{"missing Redis for an effect behind Redis", with(func(o *Options) { o.RedisURL = ""; o.Variants = []string{"amqp/redis-effect-postgres"} }),
			nil, "amqp/redis-effect-postgres needs RedisURL"},
		{"missing PostgreSQL for the pgx inbox", with(func(o *Options) { o.PostgresURL = ""; o.Variants = []string{"nats/pgxinbox-effect-postgres"} }),
			nil, "nats/pgxinbox-effect-postgres needs PostgresURL"},
		{"missing NATS", with(func(o *Options) { o.NATSURL = "" }), nil, "nats/bare needs NATSURL"},
		{"full name", with(func(o *Options) { o.Variants = []string{"amqp/inbox-sqlite"} }),
			[]string{"amqp/bare", "amqp/inbox-sqlite"}, ""},
		{"unknown variant", with(func(o *Options) { o.Variants = []string{"kafka"} }), nil, `unknown variant "kafka"`},
		{"unknown broker", with(func(o *Options) { o.Brokers = []string{"mqtt"} }), nil, `unknown broker "mqtt"`},
		{"negative messages", with(func(o *Options) { o.Messages = -1 }), nil, "Messages is -1"},
		{"negative timeout", with(func(o *Options) { o.Timeout = -time.Second }), nil, "Timeout is -1s"},
		{"negative in-flight", with(func(o *Options) { o.InFlight = -1 }), nil, "InFlight is -1"},
		{"negative store batch", with(func(o *Options) { o.StoreBatch = -1 }), nil, "StoreBatch -1"},
		{"negative store linger", with(func(o *Options) { o.StoreLinger = -time.Millisecond }), nil, "StoreLinger -1ms"},
		{"negative inbox batch", with(func(o *Options) { o.InboxBatch = -1 }), nil, "InboxBatch -1"},
		{"negative inbox linger", with(func(o *Options) { o.InboxLinger = -time.Millisecond }), nil, "InboxLinger -1ms"},
		{"missing Redis", with(func(o *Options) { o.RedisURL = "" }), nil, "stomp/redis needs RedisURL"},
		{"missing Redis, not needed", with(func(o *Options) { o.RedisURL = ""; o.Variants = []string{"sqlite"}; o.Brokers = []string{STOMP} }),
			[]string{"stomp/bare", "stomp/sqlite"}, ""},
		{"missing broker", with(func(o *Options) { o.AMQPURL = "" }), nil, "amqp/bare needs AMQPURL"},
		{"negative rate", with(func(o *Options) { o.Rate = -1 }), nil, "Rate is -1"},
		{"NaN rate", with(func(o *Options) { o.Rate = math.NaN() }), nil, "Rate is NaN"},
		{"rate too high", with(func(o *Options) { o.Rate = 2e6 }), nil, "Rate is 2e+06"},
		{"latency mode, body too short for the send time", with(func(o *Options) { o.Rate = 100; o.BodyBytes = 10 }), nil, "BodyBytes is 10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := newPlan(tt.o)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("newPlan: %v, want ErrOptions containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range p.variants {
				got = append(got, v.id())
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("variants %q, want %q", got, tt.want)
			}
			if p.Messages != DefaultMessages || p.Rounds != DefaultRounds || p.Concurrency != DefaultConcurrency || p.Prefetch != DefaultPrefetch || p.Timeout != DefaultTimeout {
				t.Errorf("defaults not filled in: %+v", p.Options)
			}
		})
	}
}

// TestInFlight: the depth the report states is the consumers' own default
// unless set.
func TestInFlight(t *testing.T) {
	for _, tc := range []struct{ concurrency, prefetch, inFlight, want int }{
		{4, 50, 0, 50}, {1, 50, 0, 1}, {8, 4, 0, 8}, {4, 50, 4, 4},
	} {
		p, err := newPlan(Options{StompAddr: "s:1", AMQPURL: "amqp://a", NATSURL: "nats://n", Variants: []string{"audit"},
			Concurrency: tc.concurrency, Prefetch: tc.prefetch, InFlight: tc.inFlight})
		if err != nil {
			t.Fatal(err)
		}
		if got := newReport(p).InFlight; got != tc.want {
			t.Errorf("%+v: InFlight %d", tc, got)
		}
	}
}

// TestSummarize checks the rows: median and range over rounds, and the ratio
// to the bare client of the same broker and round.
func TestSummarize(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	r := &Report{Samples: []Sample{
		{Broker: STOMP, Variant: "bare", Round: 1, Rate: 1000, CPUMicros: 10, Machine: &MachineCPU{Broker: 50, Other: 1, BusyPct: 90}},
		{Broker: STOMP, Variant: "redis", Round: 1, Rate: 500, CPUMicros: 40, Machine: &MachineCPU{Broker: 60, Store: f(20), Other: 2, BusyPct: 99}},
		{Broker: STOMP, Variant: "bare", Round: 2, Rate: 2000, CPUMicros: 12, Machine: &MachineCPU{Broker: 40, Other: 3, BusyPct: 80}},
		{Broker: STOMP, Variant: "redis", Round: 2, Rate: 600, CPUMicros: 30, Machine: &MachineCPU{Broker: 70, Store: f(10), Other: 1, BusyPct: 97}},
		{Broker: STOMP, Variant: "bare", Round: 3, Rate: 1500, CPUMicros: 11, Machine: &MachineCPU{Broker: 45, Other: 2, BusyPct: 85}},
		{Broker: STOMP, Variant: "redis", Round: 3, Rate: 900, CPUMicros: 20, Machine: &MachineCPU{Broker: 65, Store: f(30), Other: 3, BusyPct: 98}},
		{Broker: AMQP, Variant: "bare", Round: 1, Rate: 4000},
		{Broker: AMQP, Variant: "redis", Round: 1, Rate: 1000},
	}}
	r.summarize()
	want := []Row{
		{STOMP, "bare", 3, 1500, 1000, 2000, 1, 11, &MachineCPU{Broker: 45, Other: 2, BusyPct: 85}, 0, 0, 0, nil},
		{STOMP, "redis", 3, 600, 500, 900, 0.5, 30, &MachineCPU{Broker: 65, Store: f(20), Other: 2, BusyPct: 98}, 0, 0, 0, nil}, // ratios 0.5, 0.3, 0.6
		{AMQP, "bare", 1, 4000, 4000, 4000, 1, 0, nil, 0, 0, 0, nil},
		{AMQP, "redis", 1, 1000, 1000, 1000, 0.25, 0, nil, 0, 0, 0, nil},
	}
	if len(r.Rows) != len(want) {
		t.Fatalf("rows %+v, want %+v", r.Rows, want)
	}
	machine := func(m *MachineCPU) string {
		if m == nil {
			return "<nil>"
		}
		st := "<nil>"
		if m.Store != nil {
			st = fmt.Sprint(*m.Store)
		}
		return fmt.Sprintf("{broker %v store %s other %v busy %v}", m.Broker, st, m.Other, m.BusyPct)
	}
	for i := range want {
		got, w := r.Rows[i], want[i]
		gm, wm := machine(got.Machine), machine(w.Machine)
		got.Machine, w.Machine = nil, nil
		if got != w || gm != wm {
			t.Errorf("row %d = %+v %s, want %+v %s", i, got, gm, w, wm)
		}
	}
	var md strings.Builder
	if err := r.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"| ActiveMQ (STOMP) | msgaudit, Redis store | 600 | 500–900 | 0.50 | 30.0 | 65.0 | 20.0 | 2.0 | 98% |",
		"| ActiveMQ (STOMP) | bare go-stomp client, ack:client-individual | 1,500 | 1,000–2,000 | 1.00 | 11.0 | 45.0 | – | 2.0 | 85% |",
		"| RabbitMQ (AMQP) | msgaudit, Redis store | 1,000 | 1,000–1,000 | 0.25 | 0.0 | | | | |",
	} {
		if !strings.Contains(md.String(), line+"\n") {
			t.Errorf("Markdown lacks %q:\n%s", line, md.String())
		}
	}
}

// TestMarkdownHeader checks that the header line names the store grouping
// and the CPU profile when set, and that without /proc figures the table
// has no machine columns.
func TestMarkdownHeader(t *testing.T) {
	r := &Report{Messages: 10, Rounds: 1, StoreBatch: 8, StoreLinger: 2 * time.Millisecond, CPUProfile: "cpu.out",
		Rows: []Row{{Broker: STOMP, Variant: "bare", Rounds: 1}}}
	var md strings.Builder
	if err := r.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"InFlight 0, StoreBatch 8, StoreLinger 2ms;", "CPU profile of the run: cpu.out.", "| client CPU µs/msg |\n|---"} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("Markdown lacks %q:\n%s", s, md.String())
		}
	}
	r.StoreBatch, r.StoreLinger, r.CPUProfile = 0, 0, ""
	md.Reset()
	if err := r.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	if s := md.String(); strings.Contains(s, "Store") || strings.Contains(s, "profile") {
		t.Errorf("Markdown names unset options:\n%s", s)
	}
}

// TestMedianProperty checks median against its definition: at least half
// the values are at most it and at least half at least it, and it lies
// within their range.
func TestMedianProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		xs := rapid.SliceOfN(rapid.Float64Range(0, 1e6), 1, 50).Draw(t, "xs")
		m := median(xs)
		var le, ge int
		lo, hi := xs[0], xs[0]
		for _, x := range xs {
			if x <= m {
				le++
			}
			if x >= m {
				ge++
			}
			lo, hi = min(lo, x), max(hi, x)
		}
		if 2*le < len(xs) || 2*ge < len(xs) || m < lo || m > hi {
			t.Fatalf("median(%v) = %v: %d at most, %d at least, range %v–%v", xs, m, le, ge, lo, hi)
		}
	})
}

// TestThousands checks the rate formatting of the table.
func TestThousands(t *testing.T) {
	for _, tt := range []struct {
		in   float64
		want string
	}{{0, "0"}, {999.4, "999"}, {1000, "1,000"}, {7360, "7,360"}, {1234567.8, "1,234,568"}, {-4200, "-4,200"}} {
		if got := thousands(tt.in); got != tt.want {
			t.Errorf("thousands(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestOrder checks that every round runs every variant once and that rounds
// start at different variants.
func TestOrder(t *testing.T) {
	for _, rounds := range []int{1, 2, 3, 7, 20} {
		p := &plan{Options: Options{Rounds: rounds}, variants: allVariants}
		firsts := map[string]bool{}
		for r := 1; r <= rounds; r++ {
			got := p.order(r)
			seen := map[string]int{}
			for _, v := range got {
				seen[v.id()]++
			}
			if len(got) != len(allVariants) || len(seen) != len(allVariants) {
				t.Fatalf("rounds %d, round %d: order %v is not a permutation of the variants", rounds, r, got)
			}
			firsts[got[0].id()] = true
		}
		if want := min(rounds, len(allVariants)); len(firsts) != want {
			t.Errorf("rounds %d: %d different first variants, want %d", rounds, len(firsts), want)
		}
	}
}

// TestUnsubscribeUnread checks that ending a subscription whose messages
// nobody reads any more returns: with sub.C full, go-stomp's Unsubscribe
// alone never does (its receipt is queued behind the unread messages, and
// when its wait times out it blocks putting an error on sub.C).
func TestUnsubscribeUnread(t *testing.T) {
	o := services(t)
	p, err := newPlan(Options{StompAddr: o.StompAddr, Brokers: []string{STOMP}, Variants: []string{"bare"}})
	if err != nil {
		t.Fatal(err)
	}
	b := &stompBroker{addr: o.StompAddr}
	n := p.names(variant{STOMP, "unsubscribe", bare}, 1)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := b.cleanup(cctx, n); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.preload(ctx, n, 100, func(int) []byte { return []byte("x") }); err != nil {
		t.Fatal(err)
	}
	c, err := b.dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.MustDisconnect()
	sub, err := c.Subscribe(queueDest(n), stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	for len(sub.C) < cap(sub.C) { // the state drain and browse leave behind when they return early
		if ctx.Err() != nil {
			t.Fatalf("only %d of %d messages buffered in sub.C", len(sub.C), cap(sub.C))
		}
		time.Sleep(10 * time.Millisecond)
	}
	done := make(chan error, 1)
	go func() { done <- stompsub.Unsubscribe(sub) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("unsubscribe: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("unsubscribe of a subscription with unread messages still blocked after 10 s")
	}
}

// TestSummarizeEffectRatio: an inbox-effect row is divided, round by
// round, by the bare client that commits the same effect to the same
// database, and the median of those ratios is its EffectRatio.
func TestSummarizeEffectRatio(t *testing.T) {
	r := &Report{Samples: []Sample{
		{Broker: AMQP, Variant: "bare", Round: 1, Rate: 8000},
		{Broker: AMQP, Variant: "bare-effect-mysql", Round: 1, Rate: 2000},
		{Broker: AMQP, Variant: "inbox-effect-mysql", Round: 1, Rate: 2200},
		{Broker: AMQP, Variant: "bare", Round: 2, Rate: 8000},
		{Broker: AMQP, Variant: "bare-effect-mysql", Round: 2, Rate: 1000},
		{Broker: AMQP, Variant: "inbox-effect-mysql", Round: 2, Rate: 1500},
		{Broker: AMQP, Variant: "bare", Round: 3, Rate: 8000},
		{Broker: AMQP, Variant: "bare-effect-mysql", Round: 3, Rate: 2000},
		{Broker: AMQP, Variant: "inbox-effect-mysql", Round: 3, Rate: 1000},
		{Broker: AMQP, Variant: "bare-effect-postgres", Round: 1, Rate: 4000},
		{Broker: AMQP, Variant: "redis-effect-postgres", Round: 1, Rate: 1000},
		{Broker: AMQP, Variant: "pgxinbox-effect-postgres", Round: 1, Rate: 6000},
		{Broker: AMQP, Variant: "bare-effect-sqlite", Round: 1, Rate: 500},
		{Broker: AMQP, Variant: "inbox-effect-sqlite", Round: 1, Rate: 1000},
		{Broker: AMQP, Variant: "inbox-effect-sqlite", Round: 2, Rate: 900}, // no bare-effect-sqlite in round 2
	}}
	r.summarize()
	got := map[string]Row{}
	for _, row := range r.Rows {
		got[row.Variant] = row
	}
	if e := got["inbox-effect-mysql"].EffectRatio; e != 1.1 { // ratios 1.1, 1.5, 0.5
		t.Errorf("EffectRatio %v, want the median 1.1", e)
	}
	for v, want := range map[string]float64{
		"bare-effect-mysql": 0, "bare-effect-postgres": 0, "bare-effect-sqlite": 0, "bare": 0,
		"redis-effect-postgres": 0.25, "pgxinbox-effect-postgres": 1.5, "inbox-effect-sqlite": 2,
	} {
		if e := got[v].EffectRatio; e != want {
			t.Errorf("%s EffectRatio %v, want %v", v, e, want)
		}
	}
	var md bytes.Buffer
	if err := r.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "**1.10×** the bare client with the same effect") {
		t.Errorf("Markdown does not show the effect ratio:\n%s", md.String())
	}
}
