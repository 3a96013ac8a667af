// Package stompconsumer is an at-least-once STOMP consumer for ActiveMQ
// Classic that never loses a message and absorbs its redeliveries. It runs
// every delivery through the duplicate pipeline of package receiver (the
// connection audit, the in-flight/outcome table, then a transactional
// inbox (Config.Pipeline.Inbox) or an idempotency store (Config.Pipeline.Store)) and settles
// it with the broker only after the work is recorded. With the inbox, whose
// key commits in the handler's own database transaction, no message is
// applied twice even when the process is killed; with an external store, a
// crash between the handler's effect and the store's confirm can apply a
// message again once its claim lapses (see package inbox).
//
// # Connections
//
// Config.Addresses lists brokers ("tcp://h:p", "ssl://h:p",
// "stomp+ssl://h:p" or "h:p"). The consumer dials with a net.Dialer
// (DialContext), wraps the socket in TLS when the address or the TLS
// options ask for it, and speaks STOMP 1.2 with login, passcode, host
// header and heart-beats. When a connection breaks it reconnects to the
// next address with exponential backoff and jitter and subscribes again;
// each connection is one generation. At start it keeps trying, over the
// addresses in rotation, until a broker answers or Run's context ends, as
// ActiveMQ's failover transport does: a consumer (re)started while the
// brokers restart or a master/slave pair changes masters rides it out,
// logging each failed attempt (address, attempt, error, next wait).
// Config.ConnectRetries bounds the start instead (ErrConnect, with the
// last dial error). A broker that answers CONNECT with an ERROR frame (wrong credentials: "User name
// [null] or password is invalid.") or a certificate that fails
// verification ends Run at once with ErrRejected or ErrTLS: retrying
// cannot help and would hammer the broker's authentication.
//
// The passcode (and any password in an address URL) is never written to a
// log line or an error: Config's String and Format redact it, every log
// record passes through a redacting handler and every error is scrubbed.
//
// # Acknowledgement order
//
// Subscriptions use ack:client-individual with activemq.prefetchSize =
// Config.Prefetch. For each delivery, receiver.Process decides: Ack →
// the consumer sends ACK after the store confirmed; Requeue → a retry
// (below); DeadLetter → a dead-letter copy. A delivery whose original is
// still in flight (here or on another consumer holding the store claim) is
// never acknowledged while that outcome is unknown. Each ACK names one
// message: ack:client's cumulative ACK would also acknowledge every message
// delivered before it on the subscription, deliveries still running or
// being retried included (BenchmarkAckModes measures the modes).
//
// An ack id belongs to the connection that delivered the message. When a
// connection is lost, every delivery received on it and not yet
// acknowledged — prefetched ones the handler never saw included — comes
// back from the broker with redelivered:true. The consumer therefore
// never acknowledges a delivery of a dead generation: deliveries still
// queued are dropped unprocessed (counted in Stats.Dropped), and handlers
// already running finish and settle with the pipeline (a success is
// confirmed and remembered, so its redelivery is acknowledged as a
// duplicate; a failure is rolled back, so its redelivery runs) but send
// nothing to the broker (Stats.StaleAcks). The audit is checked when a
// delivery is processed, not when it arrives, so a prefetched delivery
// that is dropped never set an audit bit and needs no rollback
// (receiver.Forget): calling Forget for it could only clear a bit set by
// another, completed delivery of the same key. A delivery claimed ahead of
// its handler (Config.InFlight) whose handler has not started when the
// connection is lost or a graceful stop begins is abandoned: the pipeline
// settles it Abandoned (its audit bit rolled back, its claim released), it
// is counted in Stats.Dropped and not acknowledged, and the broker sends it
// again.
//
// # Retries without NACK
//
// On ActiveMQ a STOMP NACK is not a retry: it is a poison ack. A
// persistent message goes straight to ActiveMQ.DLQ on the first NACK and a
// non-persistent one is discarded. Redelivery only happens when the
// connection or the subscription ends. So a failed delivery is retried in
// one of two ways, after Result.RetryAfter (Config.Pipeline.Backoff):
//
//   - In place, the default (no Config.CopySecret): the worker that holds
//     the delivery waits the backoff and runs it through the pipeline
//     again. The delivery stays unacknowledged on its connection, so it
//     keeps its prefetch slot and its worker meanwhile; the pipeline counts
//     its attempts (receiver.Config.MaxAttempts holds: after MaxAttempts
//     handler runs it is dead-lettered; Stats.LocalRetries counts these
//     retries). If the connection is lost or the process ends meanwhile,
//     the broker sends the original again, with its own message-id; its
//     attempts count on in this Consumer, and from one on another consumer
//     or after a restart.
//   - As a copy, only with Config.CopySecret set, the same on every
//     consumer of these queues: in ONE STOMP transaction the consumer
//     SENDs a persistent copy to the back of the same destination, carrying
//     x-original-key (the original's key) and x-attempts (the attempts
//     made), signed (below), and ACKs the original; then COMMITs and waits
//     for the receipt. ActiveMQ commits a SEND and an ACK of one
//     transaction together, so exactly one live instance of the message
//     exists at every moment: if the commit's outcome is unknown because
//     the connection broke, either the copy is queued and the original
//     gone, or the original comes back and no copy exists. The copy is
//     keyed by the key it carries, so every consumer sharing the secret
//     treats it as the same message (its audit bit was rolled back and its
//     claim released when the attempt failed), and its attempts count on
//     from x-attempts (Stats.RetriesSent counts the copies). Only a failed
//     handler's delivery, whose effect was rolled back, is copied.
//
// Without a shared secret, copies would be unsafe: a consumer that cannot
// verify a copy's signature (another process, or this one after a
// restart) takes it as a new message. With the default key, the
// message-id, it is keyed by the copy's own id, so once another delivery
// of the original's id (a producer's resend under the same id) has been
// applied, the copy applies the message again. So the default never makes
// one.
//
// Whatever the mode, a delivery whose outcome is unknown (its key in
// flight here or on another consumer, or the store unable to answer) and
// one whose handler succeeded but whose confirm failed (its effect may have
// committed) are retried in place after a backoff, keeping their own
// identity. After MaxAttempts the message is dead-lettered: a copy to
// Config.DeadLetterDestination with x-dead-letter-reason (Result.Reason),
// x-attempts and HeaderOriginalDestination, committed with the ACK of the
// original in one transaction, in both modes.
//
// # Signed copies
//
// Any producer can set x-original-key and x-attempts, so the consumer
// honours them only on its own copies: each copy it makes (retry, dead
// letter, cut record) carries an HMAC-SHA256, in the header
// x-copy-signature, of the key and attempts it carries and of a SHA-256 of
// its body, under Config.CopySecret (without one, under a random secret of
// the Consumer's own, which only dead letters and cut records use). On a
// delivery whose signature does not verify, those headers are removed
// before the pipeline and key functions see it: it is keyed by its own id
// and its attempts count from one. So a producer cannot give its message
// another message's key (which would make that message a "duplicate",
// acknowledged unhandled), nor make its message dead-letter after one
// failure, and a signature moved onto another body is worthless. Nor can
// a STOMP producer choose the message-id the default key is: ActiveMQ
// replaces a message-id header on SEND with its own.
//
// # Outbox messages
//
// In the default configuration (Config.KeyHeader unset, no
// Pipeline.KeyFunc) a delivery carrying a valid msgaudit-outbox-id header
// (as Publisher, an outbox's STOMP transport, sends it) is keyed by
// "outbox:<id>" in place of its message-id, which ActiveMQ assigns anew on
// every resend: a relay's resend of the same id is absorbed as a
// duplicate. The tag keeps the two kinds apart (an ActiveMQ message-id
// starts "ID:"), and such keys go past the connection audit to the
// pipeline's tables and its Store or Inbox. A header outboxid.Valid
// refuses (empty, over 128 bytes, a space, ':' or '\\') is ignored: the
// delivery is keyed by its message-id, never failed. A retry copy keeps
// the outbox key in x-original-key. Any producer can set the header, so
// within the outbox domain a producer chooses its key, as a RabbitMQ
// producer chooses its message_id; with KeyHeader set the header is not
// read.
//
// Topic messages cannot be copied back to their destination (every
// subscriber would receive the copy), so a topic delivery is retried in
// place, in the worker that holds it, until it succeeds or is
// dead-lettered. A non-durable topic subscription loses what it had not
// acknowledged when its connection breaks: that is what a non-durable
// subscription is; use a durable one (Subscription.Headers
// activemq.subscriptionName and Config.ClientID) when that matters.
//
// This package sends NACK for one thing only: a persistent frame cut by
// the size limits (below), whose body the consumer does not hold and the
// broker can keep.
//
// # Frame limits
//
// go-stomp v3.1.3 bounds neither header lines nor bodies. The consumer
// reads every frame through a limiter enforcing Config.MaxHeaderBytes
// (default 64 KiB) and Config.MaxBodyBytes (default 16 MiB) while holding
// at most one frame's allowed bytes. An oversized frame is cut to its
// essential headers (message-id, ack, destination, content-type, the key
// headers, …) and its remainder discarded as it streams in, so the
// consumer never holds its body. The handler does not see it: the
// consumer sends a persistent record of it to Config.DeadLetterDestination,
// carrying the kept headers, an empty body, HeaderBodyOmitted ("true"),
// "x-dead-letter-reason" (which limit, and the body's size when
// the broker sent a content-length), HeaderOriginalDestination and
// HeaderOriginalMessageID; it logs it (without a body) and counts it in
// Stats.Oversized and Stats.DeadLetters. What happens to the original
// depends on the broker's persistent header:
//
//   - persistent:true: once the record is committed (confirmed by its
//     receipt), the original is NACKed. ActiveMQ takes a NACK as a poison
//     ack and moves the full message, body included and message-id
//     unchanged, to its dead-letter queue (ActiveMQ.DLQ by default,
//     DLQ.<queue> with a per-queue strategy); the record carries
//     HeaderOriginalNacked ("true") to point there. The NACK cannot join
//     the record's transaction: ActiveMQ refuses a transacted poison ack
//     and closes the connection. If the process or the connection ends
//     between the record and the NACK, the original is delivered again and
//     cut again, so its record may appear twice (same
//     HeaderOriginalMessageID); the message is never lost. This relies on
//     ActiveMQ's NACK: a broker that redelivers a NACKed message instead
//     (RabbitMQ's STOMP plugin does by default) would get a new record
//     for every redelivery.
//   - anything else (non-persistent, STOMP's default, or the header not
//     kept): the record and the ACK of the original commit in one
//     transaction, since ActiveMQ discards a non-persistent message on a
//     NACK. The body is gone once the record is committed: raise the
//     limits, send such messages persistent, or keep them below the
//     limits when the body matters.
//
// A command line longer than MaxHeaderBytes is no STOMP and ends the
// connection. What go-stomp still buffers on its own: up to 20 frames in
// its read channel and 16 per subscription, each within the limits.
//
// # No transacted batches
//
// The consumer does not group deliveries into STOMP transactions (BEGIN,
// handle n, ACK in the transaction, COMMIT). receiver.Process settles each
// delivery with the audit and the store as soon as its handler returns, so
// a batch ABORT could not undo the handlers' effects, and on ActiveMQ an
// aborted ACK does not even redeliver on the live subscription (the
// messages stay delivered but unacknowledged until the connection ends).
// ACKs are not round trips (no receipt), so a batch would save little.
//
// # Graceful shutdown
//
// When Run's context is cancelled the consumer stops dispatching, lets
// in-flight handlers finish (their context is cancelled after
// Config.ShutdownTimeout), sends their ACKs or copies, and only then
// DISCONNECTs, waiting for the receipt that confirms the broker processed
// them. The order matters: ActiveMQ silently ignores an ACK sent after
// UNSUBSCRIBE, so the subscriptions are ended by the DISCONNECT, after the
// last ACK, not by an UNSUBSCRIBE before it. Deliveries received but not
// started are not acknowledged; the broker sends them again.
//
// go-stomp v3.1.3 queues a frame while holding its connection's lock and
// without a bound, so a broker that stops reading blocks an ACK, and
// blocks it for good once the connection is gone. A worker still blocked
// so ShutdownTimeout plus 3 s after Run's context ends (on the connection
// Run stops with, or on one lost earlier) is abandoned with an error log
// line that says how many, and Run returns; its delivery stays
// unacknowledged. Each connection lost that way leaves its blocked
// goroutines behind.
//
// # Concurrency
//
// A Consumer is safe for concurrent use; Run may be called once at a time.
// Each subscription has Config.InFlight worker goroutines fed in arrival
// order by a reader that never blocks (go-stomp serves a whole connection
// from one goroutine); each runs a delivery through receiver.Process, and a
// gate of Concurrency slots per subscription (over every connection, so a
// lost connection's handlers still finishing count too) admits the
// handlers: up to InFlight deliveries are claimed ahead while at most
// Concurrency handlers run, so that a group-committing store sees their
// claims and confirms together. With Concurrency 1 (and the default
// InFlight 1) a subscription's messages are handled one at a time in
// arrival order; retries, redeliveries and reconnects reorder messages in
// any case. Handlers must be safe for concurrent use when Concurrency > 1.
// Stats and Metrics may be read at any time.
package stompconsumer
