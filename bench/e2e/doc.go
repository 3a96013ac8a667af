// Package e2e measures msgaudit's consumers end to end against real brokers:
// ActiveMQ Classic over STOMP and RabbitMQ over AMQP 0-9-1.
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
//
// A variant that leaves a message behind, or handles fewer than all of
// them within Options.Timeout, is an error, not a figure.
//
// The variants (Variants lists them) are, per broker: a bare client written
// without msgaudit (go-stomp with ack:client-individual; amqp091-go with
// manual acks), msgaudit's consumer with the in-memory tier only ("audit"),
// with each idempotency store (memory, Redis, PostgreSQL, SQLite with
// synchronous=NORMAL, its default, and with FULL) and with
// the transactional inbox on SQLite and on PostgreSQL. msgaudit's consumers
// run with Options.Concurrency handlers, Options.Prefetch and
// Options.InFlight deliveries in the duplicate pipeline at once (by default
// the consumers' own default: Prefetch when Concurrency is above 1); the bare
// clients use the same prefetch (activemq.prefetchSize, basic.qos) and one
// goroutine. Variants run interleaved round-robin over Options.Rounds rounds,
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
// Run the whole thing with bench/e2e.sh (flags: go run ./bench/e2e/cmd/e2e
// -h); TestE2E runs it with 200 messages and one round against the services
// the tests use.
package e2e
