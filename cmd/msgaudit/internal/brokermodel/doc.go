// Package brokermodel is an in-process MODEL of an at-least-once message
// broker, built for msgaudit's tests and its demo. It is not a broker: it
// has no network protocol, no persistence and no clustering, and real
// deployments use a real broker (ActiveMQ, RabbitMQ). It reproduces the
// delivery facts the duplicate pipeline depends on, as observed on ActiveMQ
// 5.17.2 over STOMP:
//
//   - Queues only ("/queue/<name>"), messages dispatched round-robin to the
//     subscriptions that have prefetch room (default prefetch 1000).
//   - Stable OpenWire-shaped message ids: every sending connection is one
//     producer ("ID:<host>-<port>-<millis>-<instance>:<conn>:<seq>", from a
//     msgid.Generator), its sequence shared across destinations; the id
//     never changes on redelivery or in the dead-letter queue.
//   - Client-individual acknowledgement. Everything delivered and not acked
//     — prefetched messages the application never saw included — is
//     redelivered with Redelivered=true when the connection closes, is cut
//     or unsubscribes; redelivery is unlimited.
//   - NACK is a poison ack, not a retry: a persistent message goes to the
//     dead-letter queue "/queue/ActiveMQ.DLQ" (keeping its id and headers,
//     adding original-destination), a non-persistent one is discarded.
//   - Transactions: SENDs and ACKs in one transaction commit together; an
//     aborted ACK leaves the message delivered-but-unacked (no redelivery on
//     the live subscription); aborted SENDs still consume sequence numbers.
//   - A restart drops non-persistent messages and starts new producer keys.
//
// Fault injection: Cut (abrupt connection loss), CutAll, Replay (copies of
// recently delivered messages enqueued again with their ids, as failover
// replays them — including copies of messages still in flight), Restart,
// and Options.OnReceive, called as each delivery reaches the application,
// from which a test can cut the connection mid-delivery.
//
// # Concurrency
//
// A Broker and its connections, subscriptions and transactions are safe for
// concurrent use; one mutex guards the whole model. Hooks are called without
// it held, so they may call back into the broker.
package brokermodel
