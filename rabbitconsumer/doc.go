// Package rabbitconsumer is an at-least-once RabbitMQ consumer
// (github.com/rabbitmq/amqp091-go) that applies every message once: each
// delivery runs through the duplicate pipeline of package receiver with
// Fency's key — the AMQP message-id property, namespaced by the queue name
// — and an idempotency store shared by competing consumers
// (Config.Pipeline.Store; Redis, through idempotency.Open of a "redis://…"
// URL, as Fency does) or a transactional inbox (Config.Pipeline.Inbox).
//
// # Acknowledgements
//
// The queue is consumed with manual acknowledgements and a QoS prefetch of
// Config.Prefetch: Config.InFlight deliveries go through the pipeline at
// once, Config.Concurrency handlers run at once. For each delivery
// receiver.Process decides:
//
//   - Ack: the handler succeeded and the store confirmed the key, or the
//     delivery is a duplicate of confirmed work (logged at warn and
//     counted: Fency's default; see Config.Pipeline.Duplicates for the
//     others). The consumer acknowledges successes in batches: one
//     basic.ack with multiple=true names the highest delivery tag below
//     which every delivery of the channel is settled, sent once the
//     successes ready at that moment are all marked, so one frame covers
//     many. A delivery still running (or waiting to be retried) holds the
//     tags above it back: a multiple ack never covers it. When half of
//     Prefetch successes wait behind it, they are acknowledged one by one,
//     so that they do not keep the prefetch window full.
//   - Requeue: the handler failed (its claim was released and its audit
//     bit rolled back), or the outcome is unknown (the original is in
//     flight here or on another consumer, or the store cannot answer).
//     After Result.RetryAfter (Config.Pipeline.Backoff, 5s at most by
//     default) the
//     consumer sends basic.nack with requeue=true; unlike ActiveMQ's STOMP
//     NACK, RabbitMQ really requeues. A delivery whose outcome is unknown
//     is never acknowledged. Nacks, and the acks of dead-lettered
//     deliveries, name their own tag, sent in turn with the multiple acks:
//     a tag leaves the set a multiple ack may cover only once its own
//     frame is sent.
//   - DeadLetter: after Config.Pipeline.MaxAttempts failures, for a message without
//     a key, or by duplicate policy. The consumer publishes a persistent
//     copy with the headers x-dead-letter-reason, x-attempts,
//     x-original-queue and x-original-key to the dead-letter destination
//     (by default the durable queue "<queue>.dlq", declared on connect),
//     waits for the broker's publisher confirm and only then acknowledges
//     the original; if the copy is not confirmed the original is handed
//     back. Nothing is ever dropped silently.
//
// A message without a message-id takes its key from Config.KeyHeader; with
// neither it goes down Config.Pipeline.MissingKey (default: dead-letter, reason
// "missing-key").
//
// # Connection loss
//
// Each connection (with its consuming channel and a confirm-mode channel
// for dead letters) is one generation. When the connection or a channel
// closes (NotifyClose) the generation is dead: delivery tags belong to
// their channel, so nothing of it is acknowledged any more — deliveries
// it had buffered but not started are dropped and rolled back with
// receiver.Forget (the broker redelivers all of them), deliveries claimed
// ahead whose handler had not started are abandoned (settled Abandoned by
// the pipeline: audit bit rolled back, claim released), and handlers still
// running finish and settle with the pipeline (a success is confirmed in
// the store and remembered, so its redelivery is acknowledged as a
// duplicate; a failure is released, so its redelivery runs) but send
// nothing to the broker (Stats.StaleAcks). The consumer reconnects with
// exponential backoff and full jitter (Config.ReconnectBackoff) until
// Run's context ends. At start it keeps trying the same way, so a
// consumer (re)started while the broker restarts rides it out, logging
// each failed attempt (address, attempt, error, next wait);
// Config.ConnectRetries bounds the start instead (ErrConnect). A refused
// login or vhost (ErrRejected) and a certificate that fails verification
// (ErrTLS) end Run at once: retrying cannot help.
//
// # TLS, credentials and limits
//
// amqps:// URLs use TLS with Config.TLS, or a CA file, a client
// certificate and a server name (Config.CAFile, CertFile/KeyFile,
// ServerName). Credentials come from the URL. The password is never
// logged and never appears in an error: Config's String and Format redact
// it, every log record passes through a redacting handler and errors are
// scrubbed.
//
// Config.FrameSize (default 128 KiB) is the frame size the client
// negotiates (amqp.Config.FrameSize): a message's properties and headers
// travel in one frame, so it bounds them. amqp091-go has no body limit: it
// assembles the whole body before handing over the delivery, so
// Config.MaxBodyBytes (default 16 MiB) is checked after the read — an
// oversized body is dead-lettered (reason "body-too-large: …") without
// running the handler. Bound what the broker accepts with RabbitMQ's
// max_message_size.
//
// # Graceful shutdown
//
// When Run's context is cancelled the consumer cancels its consumer tag,
// hands back (nack, requeue) the deliveries it had not started (those
// claimed ahead of a handler too, their claims released), lets
// running handlers finish (their context is cancelled after
// Config.ShutdownTimeout) and settles them, then closes the connection.
//
// # The queue and the store
//
// The consumer does not declare Config.Queue unless Config.Declare is set
// (then durable, with Config.QueueArguments). Without it a missing queue
// makes Run return an error wrapping ErrNoQueue at once, naming the queue;
// it is not retried as a connection failure. The dead-letter queue
// "<queue>.dlq" is declared on every connection unless a dead-letter
// exchange is configured.
//
// Durability is an explicit choice: Config.Pipeline.Store for a store
// shared by consumers and restarts, Config.Pipeline.Inbox for a
// transactional inbox, or Config.Pipeline.MemoryOnly to detect duplicates
// within the process only (Run logs what that does not cover).
//
// # Concurrency
//
// A Consumer is safe for concurrent use; Run may be called once at a time.
// Config.InFlight goroutines run deliveries through receiver.Process, and a
// gate of Concurrency slots (over every generation, so a dead generation's
// handlers still finishing count too) admits the handlers: up to InFlight
// deliveries are claimed ahead while at most Concurrency handlers run, so
// that a group-committing store sees their claims and confirms together.
// With Concurrency 1 (and the default InFlight 1) the queue's messages are
// handled one at a time in delivery order (requeues and redeliveries
// reorder them anyway). Handlers must be safe for concurrent use when
// Concurrency > 1. Stats and Metrics may be read at any time.
package rabbitconsumer
