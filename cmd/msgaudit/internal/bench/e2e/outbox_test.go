package e2e

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestOutboxMeasurements runs each of the outbox's measurements once with
// a few messages against the real brokers and PostgreSQL: every sample
// must have a rate and an output holding one message per message sent,
// latency samples a p50 and p99, and the Markdown the measurement's
// header and output check.
func TestOutboxMeasurements(t *testing.T) {
	o := services(t)
	o.MySQLURL, o.RedisURL = "", "" // the outbox's measurements use neither
	tests := []struct {
		mode     string
		messages int
		rate     float64
		header   string
	}{
		{OutboxSend, 100, 0, "Outbox, consumer sends: 100 persistent messages"},
		{OutboxDrain, 300, 0, "Outbox, drain: a backlog of 300 messages"},
		{OutboxLatency, 200, 400, "Outbox, latency: 200 transactions per variant and round at 400/s"},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			o := o
			o.Outbox, o.Messages, o.Rate, o.Rounds, o.Timeout = tc.mode, tc.messages, tc.rate, 1, 30*time.Second
			var progress bytes.Buffer
			o.Progress = &progress
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rep, err := Run(ctx, o)
			if err != nil {
				t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
			}
			want := OutboxVariants(tc.mode)
			if len(rep.Samples) != len(want) || len(rep.Rows) != len(want) {
				t.Fatalf("%d samples and %d rows, want one per variant (%d)", len(rep.Samples), len(rep.Rows), len(want))
			}
			for _, s := range rep.Samples {
				if !slices.Contains(want, s.Broker+"/"+s.Variant) || s.Messages != tc.messages || !(s.Rate > 0) || s.Sent != tc.messages {
					t.Errorf("sample %+v: want a variant of %v, %d messages, a positive rate, %d sent", s, want, tc.messages, tc.messages)
				}
				if tc.rate > 0 && !(s.P50Millis > 0 && s.P99Millis >= s.P50Millis) {
					t.Errorf("%s/%s: p50 %v ms, p99 %v ms; want 0 < p50 <= p99", s.Broker, s.Variant, s.P50Millis, s.P99Millis)
				}
			}
			for _, r := range rep.Rows {
				if !(r.Ratio > 0) {
					t.Errorf("row %s/%s has no ratio to its bare client", r.Broker, r.Variant)
				}
			}
			var md bytes.Buffer
			if err := rep.Markdown(&md); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(md.String(), tc.header) || !strings.Contains(md.String(), "Output check: after each of the 6 runs") {
				t.Errorf("Markdown lacks %q at its head or the output check:\n%s", tc.header, md.String())
			}
		})
	}
}

// TestNewPlanOutbox checks the outbox's measurements' options and variant
// selection; the default run has none of their variants.
func TestNewPlanOutbox(t *testing.T) {
	all := Options{StompAddr: "s:1", AMQPURL: "amqp://a", NATSURL: "nats://n", PostgresURL: "postgres://p"}
	with := func(f func(*Options)) Options { o := all; f(&o); return o }
	tests := []struct {
		name         string
		o            Options
		want         []string // nil when an error is expected
		wantMessages int
		wantErr      string
	}{
		{"send: every broker", with(func(o *Options) { o.Outbox = OutboxSend }), OutboxVariants(OutboxSend), DefaultMessages, ""},
		{"drain: default backlog", with(func(o *Options) { o.Outbox = OutboxDrain; o.Brokers = []string{NATS} }),
			[]string{"nats/bare-drain", "nats/outbox-drain"}, DefaultDrainMessages, ""},
		{"drain: chosen backlog", with(func(o *Options) { o.Outbox = OutboxDrain; o.Messages = 5000; o.Brokers = []string{AMQP} }),
			[]string{"amqp/bare-drain", "amqp/outbox-drain"}, 5000, ""},
		{"a named variant brings its bare client", with(func(o *Options) {
			o.Outbox = OutboxLatency
			o.Rate = 100
			o.Variants = []string{"stomp/outbox-latency"}
		}),
			[]string{"stomp/bare-latency", "stomp/outbox-latency"}, DefaultMessages, ""},
		{"bare drain needs no database", with(func(o *Options) { o.Outbox = OutboxDrain; o.PostgresURL = ""; o.Variants = []string{"bare-drain"} }),
			[]string{"stomp/bare-drain", "amqp/bare-drain", "nats/bare-drain"}, DefaultDrainMessages, ""},
		{"the relay needs PostgreSQL", with(func(o *Options) { o.Outbox = OutboxDrain; o.PostgresURL = "" }),
			nil, 0, "stomp/outbox-drain needs PostgresURL"},
		{"a consumers' variant is not an outbox one", with(func(o *Options) { o.Outbox = OutboxSend; o.Variants = []string{"redis"} }),
			nil, 0, `unknown variant "redis"`},
		{"an outbox variant is not in the default run", with(func(o *Options) { o.Variants = []string{"outbox-drain"} }),
			nil, 0, `unknown variant "outbox-drain"`},
		{"unknown measurement", with(func(o *Options) { o.Outbox = "relay" }), nil, 0, `unknown Outbox measurement "relay"`},
		{"send measures throughput", with(func(o *Options) { o.Outbox = OutboxSend; o.Rate = 10 }), nil, 0, "Rate must be 0"},
		{"latency needs a rate", with(func(o *Options) { o.Outbox = OutboxLatency }), nil, 0, "needs a Rate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := newPlan(tc.o)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
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
			if !slices.Equal(got, tc.want) || p.Messages != tc.wantMessages {
				t.Errorf("variants %v, %d messages; want %v, %d", got, p.Messages, tc.want, tc.wantMessages)
			}
		})
	}
	p, err := newPlan(with(func(o *Options) { o.RedisURL, o.MySQLURL = "redis://r", "mysql://m/db" }))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range p.variants {
		if v.kind.outboxMode() != "" {
			t.Errorf("the default run has the outbox's variant %s", v.id())
		}
	}
}

// TestSummarizeOutboxRatio: an outbox variant's ratio divides by the bare
// client of its own measurement in the same round, not by the broker's
// plain bare client.
func TestSummarizeOutboxRatio(t *testing.T) {
	r := &Report{Samples: []Sample{
		{Broker: AMQP, Variant: "bare", Round: 1, Rate: 100000},
		{Broker: AMQP, Variant: "bare-drain", Round: 1, Rate: 10000},
		{Broker: AMQP, Variant: "outbox-drain", Round: 1, Rate: 5000},
		{Broker: AMQP, Variant: "bare-drain", Round: 2, Rate: 8000},
		{Broker: AMQP, Variant: "outbox-drain", Round: 2, Rate: 6000},
		{Broker: AMQP, Variant: "outbox-drain", Round: 3, Rate: 7000}, // no bare-drain in round 3
		{Broker: NATS, Variant: "bare-send-postgres", Round: 1, Rate: 2000},
		{Broker: NATS, Variant: "outbox-send-postgres", Round: 1, Rate: 1000},
	}}
	r.summarize()
	want := map[string]float64{
		"amqp/bare":                 1,
		"amqp/bare-drain":           1,
		"amqp/outbox-drain":         (0.5 + 0.75) / 2,
		"nats/bare-send-postgres":   1,
		"nats/outbox-send-postgres": 0.5,
	}
	if len(r.Rows) != len(want) {
		t.Fatalf("rows %+v, want %d", r.Rows, len(want))
	}
	for _, row := range r.Rows {
		if w, ok := want[row.Broker+"/"+row.Variant]; !ok || row.Ratio != w {
			t.Errorf("%s/%s: ratio %v, want %v", row.Broker, row.Variant, row.Ratio, w)
		}
	}
}

// TestSeq: putSeq writes what seqOf reads back; a body without a number
// has none.
func TestSeq(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		i := rapid.IntRange(0, 1<<40).Draw(t, "i")
		body := bytes.Repeat([]byte("x"), rapid.IntRange(seqLen, 300).Draw(t, "len"))
		putSeq(body, i)
		if got, ok := seqOf(body); !ok || got != i {
			t.Fatalf("seqOf(putSeq(%d)) = %d, %v", i, got, ok)
		}
	})
	for _, body := range [][]byte{nil, []byte("123"), bytes.Repeat([]byte("a"), 200), []byte("-000000000000000001xx")} {
		if i, ok := seqOf(body); ok {
			t.Errorf("seqOf(%q) = %d, true; want none", body, i)
		}
	}
}

// TestPairLatencies: a latency per index with both times, the others
// counted as missing.
func TestPairLatencies(t *testing.T) {
	tests := []struct {
		name         string
		commit, recv []int64
		want         []time.Duration
		missing      int
	}{
		{"all paired", []int64{10, 20, 30}, []int64{15, 40, 31}, []time.Duration{5, 20, 1}, 0},
		{"not received", []int64{10, 20}, []int64{12, 0}, []time.Duration{2}, 1},
		{"no commit time", []int64{0, 20}, []int64{12, 25}, []time.Duration{5}, 1},
		{"received before the commit returned", []int64{100}, []int64{90}, []time.Duration{-10}, 0},
		{"none", nil, nil, []time.Duration{}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, missing := pairLatencies(tc.commit, tc.recv)
			if !slices.Equal(got, tc.want) || missing != tc.missing {
				t.Errorf("got %v, %d missing; want %v, %d", got, missing, tc.want, tc.missing)
			}
		})
	}
}
