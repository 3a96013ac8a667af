// Package natsconsumer is an at-least-once NATS JetStream consumer
// (github.com/nats-io/nats.go and its jetstream package) that applies
// every message once: each delivery runs through the duplicate pipeline
// of package receiver with a key stable across redeliveries and a
// transactional inbox (Config.Pipeline.Inbox), an idempotency store
// (Config.Pipeline.Store) or, on purpose, the in-process tiers only
// (Config.Pipeline.MemoryOnly).
//
// # The consumer and its keys
//
// Config.Stream must exist; Run creates or updates the durable pull
// consumer Config.Consumer on it with explicit acknowledgements,
// Config.AckWait and MaxDeliver -1: the pipeline bounds the attempts and
// dead-letters, so the server never stops delivering a message silently.
// Pull requests ask only for the free places of Config.InFlight, so a
// message never waits in a client buffer while its AckWait runs. A
// durable consumer deleted while Run runs (by an operator, or with a
// server's memory storage) is created again; like any new consumer it
// starts at the beginning of the stream, so on a stream that keeps
// acknowledged messages its history comes again, and the durable tier
// absorbs what was handled.
//
// A delivery's key is "id:<Nats-Msg-Id>" when the publisher set a
// Nats-Msg-Id header, else "seq:<stream>:<stream sequence>": unique in the
// stream and the same on every redelivery. The tags keep the keys a
// publisher chooses apart from the keys the consumer derives: whatever
// Nats-Msg-Id a publisher sets, it never names another message's
// sequence. JetStream drops a repeated Nats-Msg-Id only within the
// stream's duplicate window at publish time; the pipeline recognises it
// at any time. Keys are scoped by the stream and the durable name
// (Message.Destination is "<stream>#<consumer>"): each durable consumer of
// a stream receives every message and handles it as its own unit of work,
// while processes sharing one durable name share the scope. The default
// audit (Config.Pipeline.Audit nil) takes the "seq:<stream>:<sequence>"
// keys as one producer per stream with the stream sequence as its
// sequence, so its bit window absorbs redeliveries in O(1); a redelivery
// older than the window goes to the durable tier. Publisher keys bypass
// it, to the pipeline's in-flight and completed tables and its durable
// tier.
//
// Upgrading from a version that keyed a delivery by the bare Nats-Msg-Id
// or "<stream>:<sequence>": the durable tier knows finished work under the
// old keys only, so a message in flight across the upgrade (delivered
// before it, redelivered after) may run its handler once more.
//
// # Acknowledgements
//
// For each delivery receiver.Process decides:
//
//   - Ack: the handler succeeded and its key is recorded (or the delivery
//     is a duplicate of finished work): the consumer sends Ack. A plain
//     Ack, not AckSync (double ack): an Ack lost on the way only brings
//     the message back, and the pipeline acknowledges that redelivery as
//     a duplicate without running the handler. A graceful stop flushes
//     the connection before closing it, so that the last Acks reach the
//     server.
//   - Requeue after the handler ran: it failed (its effect rolled back,
//     its audit bit and claim released) or its outcome is unknown (the
//     confirm failed): the consumer sends NakWithDelay with
//     Result.RetryAfter (Config.Pipeline.Backoff, 5s at most by default),
//     and JetStream delivers the message again after that delay. A
//     delivery whose outcome is unknown is never acknowledged.
//   - Requeue without running (deferred: the key in flight here, or
//     claimed by another process, or a store that cannot answer): the
//     consumer keeps the delivery (InProgress holds its AckWait off) and
//     tries it again in place after Pipeline.Backoff of the number of
//     tries so far (Stats.LocalRetries), until it runs or is settled. It
//     holds its InFlight place meanwhile. A graceful stop or a connection
//     loss ends the wait, and the delivery is handed back with
//     NakWithDelay.
//   - DeadLetter: after Config.Pipeline.MaxAttempts attempts, or by
//     duplicate policy. The consumer publishes a record to
//     Config.DeadLetterSubject with JetStream and waits for the
//     dead-letter stream's PubAck, and only then terminates the original
//     with a Term sent as a request the server answers (the synchronous
//     form, which is used here only: a lost Term would bring the message
//     back to be dead-lettered again). If the record is not
//     acknowledged the original is handed back with NakWithDelay: never
//     lost. The record carries the original's body and headers (except
//     the server's Nats-* headers), x-dead-letter-reason, x-attempts,
//     x-original-key, HeaderOriginalStream, HeaderOriginalSubject,
//     HeaderOriginalSequence, HeaderOriginalMsgID (the publisher's
//     Nats-Msg-Id as it set it) and a Nats-Msg-Id of its own,
//     "msgaudit-dlq:<stream>#<consumer>:<sequence>" (the stream and the
//     consumer joined so that two consumers sharing a dead-letter stream
//     never give one id), so that the dead-letter stream drops a second
//     record of one message within its duplicate window (a lost Term).
//     The record counts as stored only when the stream that captured the
//     dead-letter subject at Run acknowledges it (the publish expects
//     that stream by name). Run refuses a consumed stream that captures
//     the dead-letter subject the consumer reads (ErrConfig): each record
//     would come back to be dead-lettered again.
//
// The attempt number is JetStream's delivery count (NumDelivered in the
// message's metadata), raised by the pipeline's own count of failures. A
// delivery JetStream has delivered more often than MaxAttempts without a
// failure ending an attempt (the consumer was killed, or lost its
// connection, each time: a crash loop) is dead-lettered without running
// the handler again (ErrTooManyDeliveries), unless the pipeline finds it
// a duplicate of finished work, which is acknowledged. NumDelivered is
// the server's count of every delivery, so the guard counts: the
// attempts whose handler ran, the deliveries whose outcome is unknown (a
// consumer killed or cut off while holding it, an AckWait that lapsed, a
// dead-letter record not stored), and, once per graceful stop or
// connection loss, a delivery that was held but had not run then (handed
// back with Nak). Deferrals while another delivery of the key runs or
// holds the store's claim, or while the store cannot answer, are waited
// in place and are not counted: a message whose claim another process
// left behind runs once the claim lapses.
//
// # Long handlers
//
// While a delivery is in the pipeline (waiting for a handler, its handler
// running, its key being recorded) the consumer sends InProgress every
// AckWait/4, so the server does not deliver it again however long the
// handler runs; this is JetStream's counterpart of a store claim's lease
// renewal.
//
// # Connection loss
//
// nats.go reconnects by itself (Config.ReconnectBackoff between
// attempts). Each stretch of the connection is a generation. When the
// connection is lost, deliveries waiting for a handler are abandoned
// (settled Abandoned by the pipeline: audit bit rolled back, claim
// released) and handed back with Nak, and deliveries received after the
// loss are handed back unprocessed (Stats.Dropped); handlers already
// running finish and settle. JetStream acknowledgements name the stream
// sequence, not the connection, so the Ack of a handler that finished
// during the outage is sent once the client has reconnected; if it is
// lost, or the server delivered the message again meanwhile, the
// redelivery is a duplicate. Messages the server sent into the broken
// connection come back after AckWait.
//
// # Graceful shutdown
//
// When Run's context is cancelled the consumer stops pulling (the last
// pull request runs out, at most 2s, rather than leave the server sending
// into an inbox nobody reads), hands back what it had not started, lets
// running handlers finish (their context is cancelled after
// Config.ShutdownTimeout) and settles them, flushes the connection and
// closes it.
//
// # Limits and credentials
//
// The server bounds a message's size (max_payload, 1 MiB by default).
// Credentials come from the URL; they are never logged and never appear
// in an error: Config's String and Format mask each server's user
// information (everything between "://" and the last '@'; between the
// first "://" and the last '@' of the whole list when it does not split
// cleanly into servers), every log record passes through a redacting
// handler and errors are scrubbed. New refuses a raw '/', '?', '#' or '@'
// in user information (and a raw ',' or '%', which leave parts that are
// no URL): they must be percent-encoded.
//
// # Concurrency
//
// A Consumer is safe for concurrent use; Run may be called once at a
// time. Up to Config.InFlight deliveries go through receiver.Process at
// once and a gate of Concurrency slots admits their handlers. With
// Concurrency 1 (and the default InFlight) the messages are handled one
// at a time in stream order (retries and redeliveries reorder them
// anyway). Handlers must be safe for concurrent use when Concurrency > 1.
// Stats and Metrics may be read at any time.
package natsconsumer
