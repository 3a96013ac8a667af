package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/acemq/msgaudit/receiver"
)

// Brokers.
const (
	// STOMP is ActiveMQ Classic over STOMP (Options.StompAddr).
	STOMP = "stomp"
	// AMQP is RabbitMQ over AMQP 0-9-1 (Options.AMQPURL).
	AMQP = "amqp"
	// NATS is NATS JetStream (Options.NATSURL).
	NATS = "nats"
)

// Defaults for the zero fields of Options.
const (
	DefaultMessages    = 20000
	DefaultRounds      = 3
	DefaultBodyBytes   = 200
	DefaultConcurrency = 4
	DefaultPrefetch    = 50
	DefaultTimeout     = 10 * time.Minute
)

// ErrOptions reports invalid Options.
var ErrOptions = errors.New("e2e: invalid options")

// kind is what consumes a variant's queue.
type kind uint8

const (
	bare kind = iota + 1
	auditOnly
	memoryStore
	redisStore
	postgresStore
	sqliteStore
	sqliteStoreFull
	inboxSQLite
	inboxPostgres
	// The same effect in the user's database: every message INSERTed into
	// a table, by a bare client with Concurrency workers (autocommit, ACK
	// after the commit) or in msgaudit's inbox transaction.
	bareEffectPostgres
	inboxEffectPostgres
	bareEffectMySQL
	inboxEffectMySQL
	// The same effect with an inbox row written by hand: each worker of a
	// bare client inserts the message's key into a table of its own in
	// the effect's transaction, skips the effect when the key is there,
	// commits, then ACKs.
	bareInboxPostgres
	bareInboxMySQL
	// The same effect with msgaudit's other choices: the handler INSERTs
	// into PostgreSQL with autocommit behind the audit only or an
	// idempotency store (Redis, PostgreSQL), or in the transaction of the
	// pgx inbox.
	auditEffectPostgres
	redisEffectPostgres
	postgresEffectPostgres
	pgxinboxEffectPostgres
	// The same effect in an SQLite file: the bare client INSERTs with
	// autocommit, the inbox variant in its transaction.
	bareEffectSQLite
	inboxEffectSQLite
	// The outbox's measurements (Options.Outbox): a consumer whose handler
	// INSERTs a row and sends one message to a second queue (a bare
	// client with autocommit and a confirmed publish before its ack, or
	// msgaudit's inbox with Config.Outbox); a backlog of outbox rows
	// drained by the relay, or the same messages published from memory
	// by a bare client; transactions that send one message each at
	// Options.Rate, timed from their COMMIT to a consumer of the output.
	bareSendPostgres
	outboxSendPostgres
	bareDrain
	outboxDrain
	bareLatency
	outboxLatency
)

// outboxMode is the Options.Outbox a kind is measured in, "" for the
// kinds of the default run.
func (k kind) outboxMode() string {
	switch k {
	case bareSendPostgres, outboxSendPostgres:
		return OutboxSend
	case bareDrain, outboxDrain:
		return OutboxDrain
	case bareLatency, outboxLatency:
		return OutboxLatency
	}
	return ""
}

// anchor names the variant of the same broker and round that a
// variant's Row.Ratio divides by: the broker's bare client, or, in the
// outbox's measurements, the bare client doing the same thing.
func (k kind) anchor() string {
	switch k.outboxMode() {
	case OutboxSend:
		return "bare-send-postgres"
	case OutboxDrain:
		return "bare-drain"
	case OutboxLatency:
		return "bare-latency"
	}
	return "bare"
}

// isAnchor reports whether k is the bare client every other variant of
// its measurement is divided by, and so always runs.
func (k kind) isAnchor() bool {
	switch k {
	case bare, bareSendPostgres, bareDrain, bareLatency:
		return true
	}
	return false
}

// effectDB names the database of an effect variant's writes: "postgres",
// "mysql", "sqlite" or "" (the handler only counts).
func (k kind) effectDB() string {
	switch k {
	case bareEffectPostgres, inboxEffectPostgres, bareInboxPostgres,
		auditEffectPostgres, redisEffectPostgres, postgresEffectPostgres, pgxinboxEffectPostgres,
		bareSendPostgres, outboxSendPostgres:
		return "postgres"
	case bareEffectMySQL, inboxEffectMySQL, bareInboxMySQL:
		return "mysql"
	case bareEffectSQLite, inboxEffectSQLite:
		return "sqlite"
	}
	return ""
}

// isBareEffect reports whether k is the bare client committing an effect
// with autocommit: the variant every other one with the same effectDB is
// divided by.
func (k kind) isBareEffect() bool {
	return k == bareEffectPostgres || k == bareEffectMySQL || k == bareEffectSQLite
}

// isBare reports whether k is consumed by a bare client.
func (k kind) isBare() bool {
	switch k {
	case bare, bareEffectPostgres, bareEffectMySQL, bareEffectSQLite, bareInboxPostgres, bareInboxMySQL, bareSendPostgres:
		return true
	}
	return false
}

// storeKind is the kind without its effect of a variant that adds an
// autocommit INSERT to msgaudit's audit or store (audit, redis, postgres),
// 0 for the others.
func (k kind) storeKind() kind {
	switch k {
	case auditEffectPostgres:
		return auditOnly
	case redisEffectPostgres:
		return redisStore
	case postgresEffectPostgres:
		return postgresStore
	}
	return 0
}

// variant is one consumer configuration on one broker.
type variant struct {
	broker string
	name   string
	kind   kind
}

// id is the variant's name in flags and reports: "stomp/redis".
func (v variant) id() string { return v.broker + "/" + v.name }

// needs names the Options fields of the servers a variant's store, inbox
// and effect use (none for SQLite and the memory tiers).
func (v variant) needs() []string {
	var out []string
	if v.kind == redisStore || v.kind.storeKind() == redisStore {
		out = append(out, "RedisURL")
	}
	if v.kind == postgresStore || v.kind == inboxPostgres || v.kind.effectDB() == "postgres" ||
		v.kind == outboxDrain || v.kind == bareLatency || v.kind == outboxLatency {
		out = append(out, "PostgresURL")
	}
	if v.kind.effectDB() == "mysql" {
		out = append(out, "MySQLURL")
	}
	return out
}

// allVariants is every variant in report order.
var allVariants = func() []variant {
	var vs []variant
	for _, b := range []string{STOMP, AMQP, NATS} {
		vs = append(vs, variant{b, "bare", bare}, variant{b, "audit", auditOnly})
		if b == STOMP {
			vs = append(vs, variant{b, "memory", memoryStore})
		}
		if b != NATS { // NATS runs the inbox and effect variants only
			vs = append(vs,
				variant{b, "redis", redisStore},
				variant{b, "postgres", postgresStore},
				variant{b, "sqlite", sqliteStore},
				variant{b, "sqlite-full", sqliteStoreFull},
			)
		}
		vs = append(vs,
			variant{b, "inbox-sqlite", inboxSQLite},
			variant{b, "inbox-postgres", inboxPostgres},
			variant{b, "bare-effect-postgres", bareEffectPostgres},
			variant{b, "bare-inbox-postgres", bareInboxPostgres},
			variant{b, "audit-effect-postgres", auditEffectPostgres},
			variant{b, "redis-effect-postgres", redisEffectPostgres},
			variant{b, "postgres-effect-postgres", postgresEffectPostgres},
			variant{b, "inbox-effect-postgres", inboxEffectPostgres},
			variant{b, "pgxinbox-effect-postgres", pgxinboxEffectPostgres},
			variant{b, "bare-effect-mysql", bareEffectMySQL},
			variant{b, "bare-inbox-mysql", bareInboxMySQL},
			variant{b, "inbox-effect-mysql", inboxEffectMySQL},
			variant{b, "bare-effect-sqlite", bareEffectSQLite},
			variant{b, "inbox-effect-sqlite", inboxEffectSQLite},
		)
	}
	return vs
}()

// outboxVariants are the variants of each outbox measurement
// (Options.Outbox), in report order.
var outboxVariants = func() map[string][]variant {
	m := map[string][]variant{}
	for _, b := range []string{STOMP, AMQP, NATS} {
		m[OutboxSend] = append(m[OutboxSend], variant{b, "bare-send-postgres", bareSendPostgres}, variant{b, "outbox-send-postgres", outboxSendPostgres})
		m[OutboxDrain] = append(m[OutboxDrain], variant{b, "bare-drain", bareDrain}, variant{b, "outbox-drain", outboxDrain})
		m[OutboxLatency] = append(m[OutboxLatency], variant{b, "bare-latency", bareLatency}, variant{b, "outbox-latency", outboxLatency})
	}
	return m
}()

// reportVariants is every variant, the outbox's included, in report
// order.
var reportVariants = slices.Concat(allVariants, outboxVariants[OutboxSend], outboxVariants[OutboxDrain], outboxVariants[OutboxLatency])

// OutboxVariants returns the names of the variants of one outbox
// measurement (OutboxSend, OutboxDrain or OutboxLatency), in report
// order; nil for another mode.
func OutboxVariants(mode string) []string {
	var out []string
	for _, v := range outboxVariants[mode] {
		out = append(out, v.id())
	}
	return out
}

// Variants returns the names of every variant, in report order:
// "stomp/bare", "stomp/audit", "stomp/memory", "stomp/redis", …,
// "nats/inbox-effect-sqlite". The memory store runs on STOMP only; NATS
// runs the bare client, audit, the inboxes and the effect variants (those
// with a store included), not the idempotency stores without an effect.
func Variants() []string {
	out := make([]string, len(allVariants))
	for i, v := range allVariants {
		out[i] = v.id()
	}
	return out
}

// Options configures a run. The zero value of every numeric field means its
// default; the addresses of the services the chosen variants use are
// required.
type Options struct {
	// Messages is the number of messages pre-loaded per variant and round;
	// default 20,000.
	Messages int
	// Rounds is the number of rounds; every variant runs once per round,
	// interleaved with the others. Default 3.
	Rounds int
	// BodyBytes is the body size of every message; default 200.
	BodyBytes int
	// Concurrency and Prefetch configure msgaudit's consumers (the bare
	// clients use Prefetch and one goroutine); defaults 4 and 50.
	Concurrency, Prefetch int
	// InFlight is the consumers' InFlight, the deliveries going through
	// the duplicate pipeline at once; 0 means the consumers' default
	// (Prefetch when Concurrency is above 1, else 1).
	InFlight int
	// Brokers limits the run to some of STOMP, AMQP and NATS (nil: all
	// three).
	Brokers []string
	// Variants limits the run to these variants (names as in Variants,
	// or a bare name such as "redis" for that variant on every chosen
	// broker); nil means all of them. A broker's bare client always runs
	// too, since every ratio divides by it.
	Variants []string
	// StompAddr is ActiveMQ's STOMP listener ("host:port"); AMQPURL is
	// RabbitMQ ("amqp://user:pass@host:port/"); NATSURL is a NATS server
	// with JetStream ("nats://host:4222"); RedisURL and PostgresURL are the
	// stores' servers, MySQLURL (mysql://user@host:port/db) the MySQL or
	// MariaDB server of the mysql effect variants.
	StompAddr, AMQPURL, NATSURL, RedisURL, PostgresURL, MySQLURL string
	// Dir holds the SQLite files; "" means a temporary directory, removed
	// at the end.
	Dir string
	// Timeout bounds one variant's consumption; default 10 minutes.
	Timeout time.Duration
	// StoreBatch and StoreLinger are the receiver.Config fields of the
	// same names for the variants with an idempotency store (memory,
	// redis, postgres, sqlite, sqlite-full): the largest group of store
	// calls and how long one may wait for others. 0 means the receiver's
	// default; when either is set, the run builds those variants'
	// receiver.Receiver itself, as the consumers would, with these two
	// fields added, and passes it as the consumers' Config.Receiver. The
	// audit-only and inbox variants have no store and ignore them.
	StoreBatch  int
	StoreLinger time.Duration
	// InboxBatch and InboxLinger are the inbox.Options MaxBatch and Linger
	// of the inbox variants (inbox-*, inbox-effect-*): the most deliveries
	// one COMMIT covers and how long a batch takes new members. 0 means
	// the inbox's default.
	InboxBatch  int
	InboxLinger time.Duration
	// Rate, when above 0, is latency mode: nothing is pre-loaded; the
	// Messages are sent at Rate per second (persistent, each with its
	// send time at the head of its body) while the consumer runs, and
	// each Sample has the median and 99th percentile of the time from
	// send to settlement: for msgaudit, the end of Process with an
	// acknowledgement (after the inbox's COMMIT or the store's confirm,
	// right before the consumer writes the ACK); for a bare client, its
	// ACK written (after its effect's COMMIT). Every broker takes the ACK
	// without a receipt. The msgs/s is then the rate the consumer kept
	// up with, at most about Rate. For msgaudit's consumers the Sample's
	// Tail also splits the time of the slowest 1 % into phases (through
	// the receiver's Observer), to show what the 99th percentile waits on.
	Rate float64
	// Outbox, when set, runs one of the outbox's measurements instead of
	// the consumers' variants (Variants then picks among OutboxVariants):
	//
	//   - OutboxSend: Messages pre-loaded, consumed by a handler that
	//     INSERTs a row into PostgreSQL and sends one message to a second
	//     queue (subject): msgaudit's inbox with Config.Outbox
	//     (outbox-send-postgres), against a bare client with Concurrency
	//     workers that INSERTs with autocommit, publishes with the
	//     broker's confirmation and then acks (bare-send-postgres). The
	//     clock stops when every input is acknowledged and every output
	//     confirmed (msgaudit: the outbox's Backlog holds none); the
	//     output queue must then hold Messages.
	//   - OutboxDrain: a backlog of Messages outbox rows (default
	//     DefaultDrainMessages), recorded untimed, drained by Outbox.Run
	//     with the transport's Publisher (outbox-drain), against a bare
	//     client publishing as many messages from memory with
	//     DrainConcurrency goroutines, each publish confirmed
	//     (bare-drain).
	//   - OutboxLatency: Messages transactions at Rate per second, each
	//     sending one message and committing; a consumer of the output
	//     queue records each message's time from its COMMIT's return to
	//     its receipt (p50, p99). msgaudit's relay runs in this process
	//     (outbox-latency); the bare client INSERTs with autocommit and
	//     then publishes with the broker's confirmation (bare-latency).
	//
	// Rate must be 0 for the first two and above 0 for OutboxLatency.
	Outbox string
	// Progress receives a line per measurement; nil discards them.
	Progress io.Writer
}

// The outbox's measurements (Options.Outbox).
const (
	OutboxSend    = "send"
	OutboxDrain   = "drain"
	OutboxLatency = "latency"
)

// DefaultDrainMessages is the backlog of OutboxDrain when
// Options.Messages is 0.
const DefaultDrainMessages = 100000

// plan is a validated Options with its variants resolved.
type plan struct {
	Options
	variants []variant
	runID    string
}

// newPlan validates o, fills in the defaults and resolves the variants.
func newPlan(o Options) (*plan, error) {
	pool := allVariants
	switch o.Outbox {
	case "":
	case OutboxSend, OutboxDrain:
		if o.Rate != 0 {
			return nil, fmt.Errorf("%w: Outbox %q measures throughput; Rate must be 0", ErrOptions, o.Outbox)
		}
	case OutboxLatency:
		if o.Rate <= 0 {
			return nil, fmt.Errorf("%w: Outbox %q needs a Rate", ErrOptions, o.Outbox)
		}
	default:
		return nil, fmt.Errorf("%w: unknown Outbox measurement %q (want %q, %q or %q)", ErrOptions, o.Outbox, OutboxSend, OutboxDrain, OutboxLatency)
	}
	if o.Outbox != "" {
		pool = outboxVariants[o.Outbox]
	}
	if o.Outbox == OutboxDrain && o.Messages == 0 {
		o.Messages = DefaultDrainMessages
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{
		{"Messages", &o.Messages, DefaultMessages},
		{"Rounds", &o.Rounds, DefaultRounds},
		{"BodyBytes", &o.BodyBytes, DefaultBodyBytes},
		{"Concurrency", &o.Concurrency, DefaultConcurrency},
		{"Prefetch", &o.Prefetch, DefaultPrefetch},
	} {
		if *f.v < 0 {
			return nil, fmt.Errorf("%w: %s is %d, must not be negative", ErrOptions, f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if o.InFlight < 0 {
		return nil, fmt.Errorf("%w: InFlight is %d, must not be negative", ErrOptions, o.InFlight)
	}
	if o.StoreBatch < 0 || o.StoreLinger < 0 {
		return nil, fmt.Errorf("%w: StoreBatch %d and StoreLinger %v must not be negative", ErrOptions, o.StoreBatch, o.StoreLinger)
	}
	if o.InboxBatch < 0 || o.InboxLinger < 0 {
		return nil, fmt.Errorf("%w: InboxBatch %d and InboxLinger %v must not be negative", ErrOptions, o.InboxBatch, o.InboxLinger)
	}
	if math.IsNaN(o.Rate) || o.Rate < 0 || o.Rate > 1e6 {
		return nil, fmt.Errorf("%w: Rate is %v msgs/s, must be between 0 (throughput mode) and 1,000,000", ErrOptions, o.Rate)
	}
	if o.Rate > 0 && o.BodyBytes < stampLen {
		return nil, fmt.Errorf("%w: BodyBytes is %d; latency mode needs at least %d for the send time", ErrOptions, o.BodyBytes, stampLen)
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("%w: Timeout is %v, must not be negative", ErrOptions, o.Timeout)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	brokers := o.Brokers
	if len(brokers) == 0 {
		brokers = []string{STOMP, AMQP, NATS}
	}
	for _, b := range brokers {
		if b != STOMP && b != AMQP && b != NATS {
			return nil, fmt.Errorf("%w: unknown broker %q (want %q, %q or %q)", ErrOptions, b, STOMP, AMQP, NATS)
		}
	}
	want := map[string]bool{}       // variant ids asked for
	wantBroker := map[string]bool{} // brokers with a variant asked for
	for _, name := range o.Variants {
		found := false
		for _, v := range pool {
			if name == v.id() || name == v.name {
				found = true
				if slices.Contains(brokers, v.broker) {
					want[v.id()], wantBroker[v.broker] = true, true
				}
			}
		}
		if !found {
			known := make([]string, len(pool))
			for i, v := range pool {
				known[i] = v.id()
			}
			return nil, fmt.Errorf("%w: unknown variant %q (known: %s)", ErrOptions, name, strings.Join(known, ", "))
		}
	}
	p := &plan{Options: o}
	for _, v := range pool {
		if !slices.Contains(brokers, v.broker) {
			continue
		}
		if len(want) > 0 && !want[v.id()] && (!v.kind.isAnchor() || !wantBroker[v.broker]) {
			continue
		}
		p.variants = append(p.variants, v)
	}
	if len(o.Variants) > 0 && len(want) == 0 {
		return nil, fmt.Errorf("%w: none of the variants %q runs on the brokers %q", ErrOptions, o.Variants, brokers)
	}
	urls := map[string]string{"RedisURL": o.RedisURL, "PostgresURL": o.PostgresURL, "MySQLURL": o.MySQLURL}
	for _, v := range p.variants {
		missing := ""
		switch {
		case v.broker == STOMP && o.StompAddr == "":
			missing = "StompAddr"
		case v.broker == AMQP && o.AMQPURL == "":
			missing = "AMQPURL"
		case v.broker == NATS && o.NATSURL == "":
			missing = "NATSURL"
		}
		for _, f := range v.needs() {
			if missing == "" && urls[f] == "" {
				missing = f
			}
		}
		if missing != "" {
			return nil, fmt.Errorf("%w: variant %s needs %s", ErrOptions, v.id(), missing)
		}
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	p.runID = hex.EncodeToString(b)
	return p, nil
}

// Sample is one measurement: one variant in one round.
type Sample struct {
	Broker  string `json:"broker"`
	Variant string `json:"variant"`
	Round   int    `json:"round"`
	// Messages were handled in Seconds, from connecting to the broker's
	// confirmation of the last acknowledgement (NATS: to the last
	// acknowledgement written; the package documentation says why).
	Messages int     `json:"messages"`
	Seconds  float64 `json:"seconds"`
	// Rate is Messages / Seconds.
	Rate float64 `json:"msgs_per_s"`
	// CPUMicros is this process's user+system CPU time per message, in
	// microseconds (0 where getrusage is not available).
	CPUMicros float64 `json:"cpu_us_per_msg"`
	// Machine is the CPU time every process on the machine spent during
	// the measurement, from /proc; nil where /proc is not available.
	Machine *MachineCPU `json:"machine_cpu,omitempty"`
	// P50Millis and P99Millis, in latency mode (Options.Rate), are the
	// median and 99th percentile of the messages' time from send to
	// settlement, in milliseconds.
	P50Millis float64 `json:"p50_ms,omitempty"`
	P99Millis float64 `json:"p99_ms,omitempty"`
	// Tail, in latency mode for msgaudit's consumers, is where the
	// slowest 1 % of the messages spent their time.
	Tail *Tail `json:"tail,omitempty"`
	// EffectRows, for an effect variant, is the number of rows its effect
	// table held after the run: checked to be Messages, each with a
	// distinct key (the run fails otherwise); 0 for the others.
	EffectRows int `json:"effect_rows,omitempty"`
	// Sent, in the outbox's measurements, is the number of messages the
	// output queue (stream) held after the run: checked to be Messages
	// (the run fails otherwise).
	Sent int `json:"sent,omitempty"`
}

// MachineCPU is the CPU time of the machine's processes during one
// measurement (in a Row, the median over its rounds of each field), in CPU
// µs per message: user plus system time of every thread, from
// /proc/<pid>/stat read just before the clock starts and just after it
// stops. A process's figure is its time at the second reading minus its
// time at the first; one that starts in between counts with all its time at
// the second reading, one that ends in between counts for nothing (its time
// after the first reading is lost, as is the time of children it reaped:
// /proc's cutime is not counted). The resolution is the kernel's clock
// tick, 10 ms per process.
type MachineCPU struct {
	// Broker is the broker's processes: the one listening on the broker's
	// port (ActiveMQ's java, RabbitMQ's beam.smp, nats-server) and its
	// descendants, or, where no listener is found, every process named
	// java (STOMP), beam.smp (AMQP) or nats-server (NATS).
	Broker float64 `json:"broker_us_per_msg"`
	// Store is the servers of the variant's store, inbox and effect, for
	// the variants that use one: the processes listening on the Redis,
	// PostgreSQL or MySQL URL's port (Redis and PostgreSQL both for
	// redis-effect-postgres) and their descendants (PostgreSQL's backends
	// are children of the postmaster), or, where no listener is found,
	// every redis-server, postgres or mariadbd process. nil for the
	// variants without a server (SQLite runs in this process).
	Store *float64 `json:"store_us_per_msg,omitempty"`
	// Other is every other process except this one, whose time is
	// Sample.CPUMicros (getrusage): the other broker, idle services, the
	// kernel's threads.
	Other float64 `json:"other_us_per_msg"`
	// BusyPct is the share of the machine's CPU time (every CPU) that was
	// busy between the two readings of /proc/stat's aggregate line:
	// user+nice+system+irq+softirq+steal over that plus idle and iowait,
	// in percent.
	BusyPct float64 `json:"machine_busy_pct"`
	// ByName is every process name (comm) that spent CPU time, this
	// process included, in µs per message; samples only.
	ByName map[string]float64 `json:"by_name_us_per_msg,omitempty"`
	// BrokerPIDs and StorePIDs are the listeners found on the broker's and
	// the store's port (empty: attributed by name); samples only.
	BrokerPIDs []int `json:"broker_pids,omitempty"`
	StorePIDs  []int `json:"store_pids,omitempty"`
	// ReadMicros is how long the second reading of every process took, in
	// µs (outside the clock, like the first); samples only.
	ReadMicros float64 `json:"proc_read_us,omitempty"`
}

// Run pre-loads, consumes and verifies every chosen variant in every round,
// interleaved round-robin (each round starts at another variant), and
// returns the samples and their summary. It
// stops at the first variant that fails (an error, a timeout, a message left
// on a queue), returning the samples measured so far with the error.
func Run(ctx context.Context, o Options) (*Report, error) {
	p, err := newPlan(o)
	if err != nil {
		return nil, err
	}
	if p.Dir == "" {
		dir, err := os.MkdirTemp("", "msgaudit-e2e-")
		if err != nil {
			return nil, fmt.Errorf("e2e: temporary directory: %w", err)
		}
		defer os.RemoveAll(dir)
		p.Dir = dir
	}
	rep := newReport(p)
	for round := 1; round <= p.Rounds; round++ {
		for _, v := range p.order(round) {
			s, err := p.measure(ctx, v, round)
			if err != nil {
				rep.summarize()
				return rep, fmt.Errorf("e2e: %s, round %d: %w", v.id(), round, err)
			}
			lat := ""
			if s.P50Millis > 0 {
				lat = fmt.Sprintf(" p50 %.2f ms p99 %.2f ms", s.P50Millis, s.P99Millis)
			}
			fx := ""
			if s.EffectRows > 0 {
				fx = fmt.Sprintf("; effect table: %d rows, %d distinct keys", s.EffectRows, s.EffectRows)
			}
			if s.Sent > 0 {
				fx += fmt.Sprintf("; output: %d messages", s.Sent)
			}
			fmt.Fprintf(p.Progress, "round %d %-30s %8d msgs %7.2fs %9.0f msgs/s %6.1f µs CPU/msg%s%s%s\n",
				round, v.id(), s.Messages, s.Seconds, s.Rate, s.CPUMicros, lat, s.Machine.progress(), fx)
			rep.Samples = append(rep.Samples, s)
		}
	}
	rep.summarize()
	return rep, nil
}

// order is the variants in the order round (from 1) runs them: the list
// rotated by (round-1)·len/Rounds, so that no variant always runs right
// after the same one (a broker still busy with the previous queue, a
// store's first run after a long pause) and every round still runs each
// once.
func (p *plan) order(round int) []variant {
	k := (round - 1) * len(p.variants) / p.Rounds % len(p.variants)
	return append(slices.Clone(p.variants[k:]), p.variants[:k]...)
}

// names are a measurement's queue, table, key prefix and file names.
type names struct {
	queue  string // broker queue name (without /queue/)
	ident  string // SQL table / file / key prefix: letters, digits, '_'
	seqKey string // the producer part of AMQP message ids
}

func (p *plan) names(v variant, round int) names {
	slug := strings.ReplaceAll(v.name, "-", "_")
	base := fmt.Sprintf("e2e_%s_%s_%s_%d", p.runID, v.broker, slug, round)
	return names{
		queue:  strings.ReplaceAll(base, "_", "."),
		ident:  base,
		seqKey: "e2e-" + p.runID + "-" + v.broker + "-" + v.name + "-" + fmt.Sprint(round),
	}
}

// measure runs one variant once: pre-load, consume (timed), verify, clean up.
func (p *plan) measure(ctx context.Context, v variant, round int) (s Sample, err error) {
	n := p.names(v, round)
	body := make([]byte, p.BodyBytes)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	b := p.broker(v)
	switch v.kind.outboxMode() {
	case OutboxDrain:
		return p.measureDrain(ctx, v, round, b.(outputs), n)
	case OutboxLatency:
		return p.measureLatency(ctx, v, round, b.(outputs), n)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		err = errors.Join(err, b.cleanup(cctx, n))
	}()
	out, sends := b.(outputs), v.kind.outboxMode() == OutboxSend
	if sends {
		if err := out.declareOut(ctx, n); err != nil {
			return s, fmt.Errorf("declaring the output: %w", err)
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			err = errors.Join(err, out.cleanupOut(cctx, n))
		}()
	}
	if p.Rate > 0 {
		// Latency mode: the queue exists before the consumer starts; the
		// messages are sent while it runs.
		if err := b.preload(ctx, n, 0, nil); err != nil {
			return s, fmt.Errorf("declaring the queue: %w", err)
		}
	} else if err := b.preload(ctx, n, p.Messages, func(int) []byte { return body }); err != nil {
		return s, fmt.Errorf("pre-loading %d messages: %w", p.Messages, err)
	}
	var be *backend
	if v.kind != bare {
		be, err = p.openBackend(ctx, v.kind, n)
		if err != nil {
			return s, err
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			err = errors.Join(err, be.close(cctx))
		}()
		if sends {
			be.sendTo = out.outDest(n)
		}
		if v.kind == bareSendPostgres {
			// The bare client's handler: the INSERT with autocommit,
			// then a publish the broker confirms; it acks after both.
			bp, err := out.barePublisher(ctx, n)
			if err != nil {
				return s, fmt.Errorf("the bare publisher: %w", err)
			}
			defer bp.close()
			insert := be.apply
			be.apply = func(ctx context.Context, key string, body []byte) error {
				if err := insert(ctx, key, body); err != nil {
					return err
				}
				return bp.publish(ctx, body)
			}
		}
	}
	broker, store := p.servers(v)
	runtime.GC()
	// /proc is read outside the clock: every process, then the machine's
	// aggregate, before it starts; the reverse after it stops.
	procs0, haveProcs := readProcs()
	stat0, haveStat := readCPUStat()
	cpu0, _ := cpuTime()
	cnt := p.newCounter()
	var sent chan error
	start := time.Now()
	if p.Rate > 0 {
		sent = make(chan error, 1)
		sctx, stopSending := context.WithCancel(ctx)
		defer stopSending()
		go func() { sent <- b.preload(sctx, n, p.Messages, p.paced(start, body)) }()
	}
	handled, err := b.consume(ctx, p, v, n, be, cnt)
	elapsed := time.Since(start)
	if t := cnt.lastAck.Load(); t > 0 { // NATS: the clock stops at the last ack written
		// or, with an outbox, when every output was confirmed, if later
		elapsed = time.Unix(0, max(t, cnt.outDone.Load())).Sub(start)
	}
	if sent != nil {
		if serr := <-sent; serr != nil && err == nil {
			err = fmt.Errorf("sending at %v msgs/s: %w", p.Rate, serr)
		}
	}
	cpu1, _ := cpuTime()
	stat1, _ := readCPUStat()
	procs1, haveProcs1 := readProcs()
	if err != nil {
		return s, fmt.Errorf("consuming: %w (handled %d of %d)", err, handled, p.Messages)
	}
	if handled != p.Messages {
		return s, fmt.Errorf("handled %d of %d messages", handled, p.Messages)
	}
	if err := b.verifyEmpty(ctx, n); err != nil {
		return s, fmt.Errorf("after consuming: %w", err)
	}
	effectRows := 0
	if be != nil && be.effect != nil {
		if effectRows, err = be.effect.check(ctx, p.Messages); err != nil {
			return s, fmt.Errorf("after consuming: %w", err)
		}
	}
	outRows := 0
	if sends {
		if outRows, err = out.countOut(ctx, n, p.Messages); err != nil {
			return s, fmt.Errorf("counting the output: %w", err)
		}
		if outRows != p.Messages {
			return s, fmt.Errorf("the output holds %d messages, want one per input (%d)", outRows, p.Messages)
		}
	}
	s = Sample{
		Broker:     v.broker,
		Variant:    v.name,
		Round:      round,
		Messages:   p.Messages,
		Seconds:    elapsed.Seconds(),
		Rate:       float64(p.Messages) / elapsed.Seconds(),
		CPUMicros:  float64(cpu1-cpu0) / float64(time.Microsecond) / float64(p.Messages),
		EffectRows: effectRows,
		Sent:       outRows,
	}
	if haveProcs && haveProcs1 && haveStat {
		s.Machine = machineCPU(procs0, procs1, stat0, stat1, broker, store, os.Getpid(), p.Messages)
	}
	if cnt.lat != nil {
		var got int
		s.P50Millis, s.P99Millis, got = cnt.lat.quantiles()
		s.Tail = cnt.lat.tail()
		if got < p.Messages*99/100 {
			return s, fmt.Errorf("latency recorded for %d of %d messages (%d without a send time)", got, p.Messages, cnt.lat.bad)
		}
	}
	return s, nil
}

// broker returns the broker side of v.
func (p *plan) broker(v variant) broker {
	switch v.broker {
	case STOMP:
		return &stompBroker{addr: p.StompAddr}
	case NATS:
		return &natsBroker{url: p.NATSURL, emptyWait: natsEmptyWait}
	}
	return &amqpBroker{url: p.AMQPURL}
}

// servers returns the processes a variant's broker and the servers of its
// store, inbox and effect run as; store is empty for a variant without a
// server.
func (p *plan) servers(v variant) (broker *server, store servers) {
	switch v.broker {
	case STOMP:
		broker = findServer("java", addrPort(p.StompAddr))
	case NATS:
		broker = findServer("nats-server", urlPort(p.NATSURL, 4222))
	default:
		broker = findServer("beam.smp", urlPort(p.AMQPURL, 5672))
	}
	for _, f := range v.needs() {
		switch f {
		case "RedisURL":
			store = append(store, findServer("redis-server", urlPort(p.RedisURL, 6379)))
		case "PostgresURL":
			store = append(store, findServer("postgres", urlPort(p.PostgresURL, 5432)))
		case "MySQLURL":
			store = append(store, findServer("mariadbd", urlPort(p.MySQLURL, 3306)))
		}
	}
	return broker, store
}

// machineCPU sorts the CPU time spent between two snapshots into the
// broker's, the store servers', this process's (pid self, left out: its
// figure is getrusage's) and the rest, per message.
func machineCPU(p0, p1 *procSnapshot, s0, s1 cpuStat, broker *server, store servers, self, messages int) *MachineCPU {
	per := func(ticks uint64) float64 { return float64(ticks) * 1e6 / clockTicks / float64(messages) }
	m := &MachineCPU{ByName: map[string]float64{}, BrokerPIDs: broker.pids, ReadMicros: float64(p1.took) / float64(time.Microsecond)}
	var bt, st, ot uint64
	for k, d := range delta(p0, p1) {
		ps := p1.procs[k]
		m.ByName[ps.comm] += per(d)
		switch {
		case k.pid == self:
		case broker.owns(p1, k.pid, ps.comm):
			bt += d
		case store.owns(p1, k.pid, ps.comm):
			st += d
		default:
			ot += d
		}
	}
	m.Broker, m.Other = per(bt), per(ot)
	if len(store) > 0 {
		x := per(st)
		m.Store, m.StorePIDs = &x, store.pids()
	}
	if s1.total > s0.total && s1.busy >= s0.busy {
		m.BusyPct = 100 * float64(s1.busy-s0.busy) / float64(s1.total-s0.total)
	}
	return m
}

// progress is the machine's figures for a progress line, "" without them.
func (m *MachineCPU) progress() string {
	if m == nil {
		return ""
	}
	st := ""
	if m.Store != nil {
		st = fmt.Sprintf(", store %.1f", *m.Store)
	}
	return fmt.Sprintf(" (broker %.1f%s, other %.1f µs/msg; machine %.0f%% busy; /proc read in %.1f ms)",
		m.Broker, st, m.Other, m.BusyPct, m.ReadMicros/1000)
}

// broker is one broker's side of a measurement.
type broker interface {
	// preload puts count persistent messages, body(i) the i-th, on the queue and
	// returns once the broker has them all.
	preload(ctx context.Context, n names, count int, body func(i int) []byte) error
	// consume runs the variant until it has handled every message and
	// the broker has confirmed the last acknowledgement; it returns the
	// number of handler calls.
	consume(ctx context.Context, p *plan, v variant, n names, be *backend, cnt *counter) (int, error)
	// verifyEmpty fails when the queue or its dead-letter queue holds a
	// message.
	verifyEmpty(ctx context.Context, n names) error
	// cleanup removes what the measurement left on the broker.
	cleanup(ctx context.Context, n names) error
}

// runCounted runs a msgaudit consumer (run is its Run, stats its Stats)
// until cnt reaches its target and then, when drained is not nil, until
// drained returns (the outbox has relayed every message: cnt.outDone),
// stops it gracefully and checks that it ran cleanly: one connection, and
// no retry, dead letter, lost, dropped or stale delivery and no failed
// acknowledgement.
func runCounted(ctx context.Context, p *plan, cnt *counter, run func(context.Context) error, stats func() receiver.TransportStats, drained func(context.Context) error) error {
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- run(rctx) }()
	werr := cnt.wait(ctx, ran, p.Timeout)
	if werr == nil && drained != nil {
		dctx, cancel := context.WithTimeout(ctx, p.Timeout)
		if werr = drained(dctx); werr == nil {
			cnt.outDone.Store(time.Now().UnixNano())
		}
		cancel()
	}
	stop()
	if werr != nil {
		return werr
	}
	if err := <-ran; err != nil {
		return fmt.Errorf("stopping the consumer: %w", err)
	}
	st := stats()
	if st.Requeues+st.RetriesSent+st.DeadLetters+st.DeadLetterErrors+st.AckErrors+st.Lost+st.Dropped+st.StaleAcks > 0 || st.Connects != 1 {
		return fmt.Errorf("the consumer did not run cleanly: %+v", st)
	}
	return nil
}

// counter counts handler calls and closes done at the target; in latency
// mode lat records each message's time from send to settlement.
type counter struct {
	target int64
	count  atomic.Int64
	done   chan struct{}
	lat    *latencies // nil in throughput mode
	// lastAck is when the last acknowledgement was written (Unix
	// nanoseconds), for a broker whose clock stops there (NATS); 0
	// elsewhere.
	lastAck atomic.Int64
	// outDone is when the outbox was seen holding no message (Unix
	// nanoseconds), for a variant with one; 0 elsewhere.
	outDone atomic.Int64
}

// acked records that an acknowledgement was written now.
func (c *counter) acked() {
	now := time.Now().UnixNano()
	for {
		old := c.lastAck.Load()
		if old >= now || c.lastAck.CompareAndSwap(old, now) {
			return
		}
	}
}

func newCounter(target int) *counter {
	return &counter{target: int64(target), done: make(chan struct{})}
}

// newCounter is a counter for one measurement of p.
func (p *plan) newCounter() *counter {
	c := newCounter(p.Messages)
	if p.Rate > 0 {
		c.lat = &latencies{d: make([]time.Duration, 0, p.Messages)}
	}
	return c
}

// inc counts one handled message.
func (c *counter) inc() {
	if c.count.Add(1) == c.target {
		close(c.done)
	}
}

// settled records, in latency mode, the time since body's send time: a
// bare client calls it once its ACK is written.
func (c *counter) settled(body []byte) {
	if c.lat != nil {
		c.lat.record(body)
	}
}

// handled returns the number of handler calls so far.
func (c *counter) handled() int { return int(c.count.Load()) }

// wait blocks until the target is reached, ctx ends or stop reports a
// consumer that ended on its own.
func (c *counter) wait(ctx context.Context, stopped <-chan error, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.done:
		return nil
	case err := <-stopped:
		return fmt.Errorf("consumer stopped before handling every message: %v", err)
	case <-t.C:
		return fmt.Errorf("not every message was handled within %v", timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}
