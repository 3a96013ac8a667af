// Package e2e measures msgaudit's consumers end to end against real brokers:
// ActiveMQ Classic over STOMP, RabbitMQ over AMQP 0-9-1 and NATS JetStream.
//
// Each variant consumes its own fresh queue, pre-loaded with Options.Messages
// persistent messages of Options.BodyBytes bytes, with a handler that only
// counts. The clock starts just before the consumer connects and stops when
// the broker has confirmed the last acknowledgement:
//
//   - STOMP: once the handler has counted every message the consumer is
//     stopped gracefully; the clock stops when the broker has answered the
//     DISCONNECT's receipt. ActiveMQ processes a connection's frames in
//     order, so the receipt comes after every ACK sent before it. Then,
//     outside the timing, a queue browse (browser:true, which also lists
//     messages delivered but not acknowledged) must find the queue and its
//     dead-letter queue empty.
//   - AMQP: the same, ending with the channel's and connection's close
//     handshakes; RabbitMQ requeues every unacknowledged delivery of a
//     closed channel, so the passive queue.declare made afterwards counts
//     every message not acknowledged (a passive declare during the run
//     would not: its count leaves out deliveries held unacknowledged by a
//     consumer). It must report 0 for the queue and its dead-letter queue.
//   - NATS: each measurement has a stream of its own (file storage,
//     work-queue retention: a message stays in the stream until a consumer
//     acknowledges it, delivered or not) and a dead-letter stream; the
//     messages are published with every PubAck awaited. The consumers ack
//     without waiting for a reply (as natsconsumer does) and flush their
//     connection when they stop (a PING the server answers after reading
//     every ack before it), but the clock stops earlier, when the last
//     ack is written: msgaudit's at the end of Process with an ack, seen
//     through Config.Observer; the bare client's once Ack returns. The
//     reason is natsconsumer's graceful stop, which waits up to 2 s for
//     its last pull request to run out; that wait, a whole second or two
//     in a run of a few seconds, says nothing of the consumer's rate. The
//     server drops acknowledged messages from a work-queue stream shortly
//     after reading their acks, so the verification, after the consumer
//     stopped, waits up to 10 s for both streams to hold no message.
//
// A variant that leaves a message behind, or handles fewer than all of
// them within Options.Timeout, is an error, not a figure.
//
// The variants (Variants lists them) are, per broker: a bare client written
// without msgaudit (go-stomp with ack:client-individual; amqp091-go with
// manual acks; a nats.go jetstream durable pull consumer with explicit
// acks), msgaudit's consumer with the in-memory tier only ("audit"),
// with each idempotency store (memory, Redis, PostgreSQL, SQLite with
// synchronous=NORMAL, its default, and with FULL; not on NATS) and with
// the transactional inbox on SQLite and on PostgreSQL, and the effect
// variants, on every broker: a row INSERTed per message (its key the
// primary key) into PostgreSQL, MariaDB or an SQLite file
// (synchronous=FULL), by a bare client with autocommit (bare-effect-<db>),
// by a bare client with a hand-written inbox row in the same transaction
// (bare-inbox-postgres, bare-inbox-mysql), by msgaudit's handler with
// autocommit behind the audit only or a store (audit-effect-postgres,
// redis-effect-postgres, postgres-effect-postgres), or in the transaction
// of msgaudit's inbox (inbox-effect-<db>; pgxinbox-effect-postgres with
// inbox/pgxinbox). Each effect variant's row also has its rate divided by
// that of bare-effect-<db> of the same round (Row.EffectRatio), and after
// each of its runs its table must hold exactly one row per message
// (Sample.EffectRows), or the run fails. msgaudit's consumers
// run with Options.Concurrency handlers, Options.Prefetch and
// Options.InFlight deliveries in the duplicate pipeline at once (by default
// the consumers' own default: Prefetch when Concurrency is above 1;
// natsconsumer, which has no prefetch, gets that same depth as its
// InFlight); the bare clients use the same prefetch (activemq.prefetchSize,
// basic.qos, PullMaxMessages) and one goroutine. Variants run interleaved round-robin over Options.Rounds rounds,
// so that a slow spell of a shared machine spreads over all of them, and
// each round starts at another variant, so that none always follows the
// same one; each
// round's figure is also divided by that round's bare client of the same
// broker.
//
// Client CPU time per message (user plus system time of this process,
// getrusage) is reported next to the rate. It includes in-process SQLite,
// but not the work of the brokers, Redis or PostgreSQL.
//
// Where there is a /proc (Linux), every measurement also reads the CPU time
// (utime+stime, every thread; not the time of reaped children) of every
// process on the machine from /proc/<pid>/stat, just before the clock
// starts and just after it stops, and /proc/stat's aggregate line inside
// those two readings; the readings themselves (a few ms for ~120 processes
// on a slow-syscall VM) are outside the clock. A process counts with its
// time at the second reading minus that at the first (a pid and start time
// name it, so a reused pid is another process); one that starts in between
// counts with all its time, one that ends in between counts for nothing.
// The time is sorted, per message (MachineCPU), into:
//
//   - broker: the process listening on the broker's TCP port (found from
//     /proc/net/tcp{,6} and /proc/<pid>/fd before pre-loading; ActiveMQ's
//     java, RabbitMQ's beam.smp, nats-server) and its descendants
//     (RabbitMQ's erl_child_setup and inet_gethost). Where no listener is
//     found, every process named java (STOMP), beam.smp (AMQP) or
//     nats-server (NATS).
//   - store: for the variants with a server (redis, postgres,
//     inbox-postgres, the effect variants but SQLite's), the processes
//     listening on the store's and the effect database's URL's ports and
//     their descendants, so PostgreSQL's backends, whether they live through
//     the variant (the pool's connections) or not; the fallback is every
//     redis-server, postgres or mariadbd process. None for the others: SQLite's work
//     is in the client's figure.
//   - other: every other process but this one, the other broker and idle
//     services included.
//   - machine busy: user+nice+system+irq+softirq+steal over that plus idle
//     and iowait, summed over the CPUs, between the two readings of
//     /proc/stat, in percent.
//
// The kernel's clock tick (USER_HZ, 100 Hz) is the resolution of every
// process figure: 10 ms of CPU each, so short measurements give coarse
// figures. The table shows the median over the rounds of each; the JSON
// samples also hold the time per process name and the listeners' pids.
//
// Options.StoreBatch and StoreLinger, when set, configure the grouping of
// store calls (receiver.Config.StoreBatch and StoreLinger) for the variants
// with a store; the run then builds their receiver.Receiver itself, with the
// fields the consumers would use, and the header line of the table names
// them.
//
// Options.Outbox runs one of the transactional outbox's measurements
// instead (send, drain, latency; the field's documentation and e2e.md
// describe them): msgaudit's inbox and relay against bare clients that
// publish with the broker's confirmation (a STOMP receipt, AMQP publisher
// confirms, a JetStream PubAck), each output counted on the broker after
// the run.
//
// Run the whole thing with cmd/msgaudit/internal/bench/e2e.sh (flags: go run ./cmd/msgaudit/internal/bench/e2e/cmd/e2e
// -h); TestE2E runs the variants without an effect with 200 messages and
// one round against the services the tests use, TestEffectBackends the
// effect variants with 50.
package e2e
