// Command e2e measures msgaudit's consumers end to end against ActiveMQ
// (STOMP), RabbitMQ and NATS JetStream and prints a Markdown table of msgs/s per variant
// (package github.com/acemq/msgaudit/bench/e2e describes the method).
//
//	go run ./cmd/msgaudit/internal/bench/e2e/cmd/e2e [-n 20000] [-rounds 3] [-brokers stomp,amqp,nats] [-variants bare,redis,...] [-json out.json]
//	                           [-store-batch N] [-store-linger D] [-cpuprofile FILE]
//	go run ./cmd/msgaudit/internal/bench/e2e/cmd/e2e -outbox send|drain|latency [-n N] [-rate R] ...
//
// -outbox runs one of the outbox's measurements instead of the consumers'
// variants: send (a handler INSERTs and sends one message; msgaudit's
// inbox with Config.Outbox against a bare client publishing with the
// broker's confirmation), drain (a backlog of -n outbox rows, default
// 100,000, drained by the relay, against a bare client publishing as many
// from memory) or latency (-n transactions at -rate, each sending one
// message; p50/p99 from COMMIT to a consumer of the output).
//
// The services come from the variables the tests read: MSGAUDIT_STOMP_ADDR,
// MSGAUDIT_AMQP_URL, MSGAUDIT_NATS_URL, MSGAUDIT_REDIS_URL,
// MSGAUDIT_POSTGRES_URL and MSGAUDIT_MYSQL_URL (flags override them).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/bench/e2e"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// list splits a comma-separated flag value; "" is nil.
func list(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func run() (err error) {
	var o e2e.Options
	var brokers, variants, jsonPath, cpuProfile, outboxMode string
	fs := flag.NewFlagSet("e2e", flag.ContinueOnError)
	fs.IntVar(&o.Messages, "n", e2e.DefaultMessages, "messages per variant and round")
	fs.IntVar(&o.Rounds, "rounds", e2e.DefaultRounds, "rounds (variants interleaved round-robin)")
	fs.IntVar(&o.BodyBytes, "body", e2e.DefaultBodyBytes, "body size in bytes")
	fs.IntVar(&o.Concurrency, "concurrency", e2e.DefaultConcurrency, "msgaudit consumers' Concurrency")
	fs.IntVar(&o.Prefetch, "prefetch", e2e.DefaultPrefetch, "prefetch of every consumer")
	fs.IntVar(&o.InFlight, "inflight", 0, "msgaudit consumers' InFlight (0: their default, Prefetch when -concurrency is above 1)")
	fs.IntVar(&o.StoreBatch, "store-batch", 0, "receiver.Config.StoreBatch of the variants with an idempotency store (0: the receiver's default)")
	fs.DurationVar(&o.StoreLinger, "store-linger", 0, "receiver.Config.StoreLinger of the variants with an idempotency store (0: the receiver's default, no waiting)")
	fs.IntVar(&o.InboxBatch, "inbox-batch", 0, "inbox.Options.MaxBatch of the inbox variants (0: the inbox's default)")
	fs.DurationVar(&o.InboxLinger, "inbox-linger", 0, "inbox.Options.Linger of the inbox variants (0: the inbox's default)")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (runtime/pprof) to this file")
	fs.Float64Var(&o.Rate, "rate", 0, "latency mode: send the messages at this many per second while consuming, and report p50/p99 from send to settlement (0: pre-load, throughput mode)")
	fs.DurationVar(&o.Timeout, "timeout", e2e.DefaultTimeout, "bound on one variant's consumption")
	fs.StringVar(&brokers, "brokers", "stomp,amqp,nats", "comma-separated brokers: stomp, amqp, nats")
	fs.StringVar(&variants, "variants", "", "comma-separated variants (default all): "+strings.Join(e2e.Variants(), ", ")+"; a bare name such as redis means it on every broker; each broker's bare client always runs")
	fs.StringVar(&outboxMode, "outbox", "", "run one of the outbox's measurements instead of the consumers' variants: "+e2e.OutboxSend+" ("+strings.Join(e2e.OutboxVariants(e2e.OutboxSend), ", ")+"), "+
		e2e.OutboxDrain+" (-n is the backlog, default "+fmt.Sprint(e2e.DefaultDrainMessages)+"; "+strings.Join(e2e.OutboxVariants(e2e.OutboxDrain), ", ")+") or "+
		e2e.OutboxLatency+" (needs -rate; "+strings.Join(e2e.OutboxVariants(e2e.OutboxLatency), ", ")+"); -variants then picks among these")
	fs.StringVar(&jsonPath, "json", "", "also write the full report (every sample) as JSON to this file")
	fs.StringVar(&o.StompAddr, "stomp", os.Getenv("MSGAUDIT_STOMP_ADDR"), "ActiveMQ STOMP address host:port")
	fs.StringVar(&o.AMQPURL, "amqp", os.Getenv("MSGAUDIT_AMQP_URL"), "RabbitMQ URL")
	fs.StringVar(&o.NATSURL, "nats", os.Getenv("MSGAUDIT_NATS_URL"), "NATS server with JetStream, nats://host:4222")
	fs.StringVar(&o.RedisURL, "redis", os.Getenv("MSGAUDIT_REDIS_URL"), "Redis URL")
	fs.StringVar(&o.PostgresURL, "postgres", os.Getenv("MSGAUDIT_POSTGRES_URL"), "PostgreSQL URL")
	fs.StringVar(&o.MySQLURL, "mysql", os.Getenv("MSGAUDIT_MYSQL_URL"), "MySQL or MariaDB URL (mysql://user@host:port/db), for the mysql effect variants")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.Brokers, o.Variants, o.Outbox = list(brokers), list(variants), outboxMode
	nSet := false
	fs.Visit(func(f *flag.Flag) { nSet = nSet || f.Name == "n" })
	if outboxMode == e2e.OutboxDrain && !nSet {
		o.Messages = 0 // the drain's default backlog
	}
	o.Progress = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			if cerr := f.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}()
	}
	start := time.Now()
	rep, err := e2e.Run(ctx, o)
	if rep != nil {
		rep.CPUProfile = cpuProfile
		if werr := rep.Markdown(os.Stdout); werr != nil && err == nil {
			err = werr
		}
		if jsonPath != "" {
			f, ferr := os.Create(jsonPath)
			if ferr != nil {
				return ferr
			}
			if jerr := rep.JSON(f); jerr != nil && err == nil {
				err = jerr
			}
			if cerr := f.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
	}
	fmt.Fprintf(os.Stderr, "took %v\n", time.Since(start).Round(time.Second))
	return err
}
