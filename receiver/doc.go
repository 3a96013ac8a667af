// Package receiver is the transport-agnostic idempotent receiver: the one
// duplicate pipeline shared by the STOMP consumer, the RabbitMQ consumer and
// any hand-written consumer (Spring Integration's Idempotent Receiver and
// Fency's barrier, done so that no delivery is acknowledged while its
// outcome is unknown).
//
// Build a Receiver once with New (every setting in one Config, checked
// there) and run deliveries through Receiver.Process, or through a handler
// built with Receiver.Wrap. A transport turns each delivery into a
// *Message, then does what the Result says: Ack, Requeue (hand back, never acknowledge) or DeadLetter.
// The pipeline:
//
//  1. Key: m.Key (the broker's message id) or Config.KeyFunc; a missing key
//     is dead-lettered (or processed unchecked, by policy) — never a crash,
//     never a silent drop.
//  2. Memory tier: the connection audit (per destination
//     for queues, per consumer for topics; owned by the Receiver, so it
//     survives reconnects) plus an in-flight/outcome table. A key
//     completed here is acknowledged as a duplicate without a store round
//     trip; a key in flight here is waited for (bounded) and otherwise
//     requeued — never acknowledged.
//  3. Durable tier: idempotency.Store try-claim (Config.Store), or the
//     transactional inbox (Config.Inbox), or MemoryOnly on purpose. Claimed →
//     run; AlreadyConfirmed → duplicate; InProgress or an error → requeue.
//     A store that is an idempotency.BatchStore is wrapped in
//     idempotency.Group (Config.StoreBatch, Config.StoreLinger), so the
//     claims and confirms of concurrent deliveries share batch calls.
//  4. Extra selectors (Config.Selectors), e.g. a metadata-store selector.
//  5. Handler (panics recovered; the claim renewed at half its lease from
//     the claim until the settle), once a handler slot is free: a gate
//     (Config.Handlers, and a transport's per subscription) bounds the
//     handlers running at once while more deliveries wait, claimed, for a
//     slot, so that their claims, and the confirms of finished handlers
//     (a slot is given back before the confirm), share batches. Success →
//     confirm in the store, record the key as completed → Ack. Failure → roll back the audit bit and release the
//     claim → Requeue until MaxAttempts, then DeadLetter with the reason
//     and attempt count.
//
// Confirmed duplicates follow the DuplicatePolicy: drop (acknowledge, log at
// warn, count), dead-letter, deliver marked (Message.Duplicate and the
// "duplicate" header), or a hook; handlers built with Receiver.Wrap return
// ErrDuplicate, which transports map to "acknowledge, don't process".
//
// Config.Observer, when set, sees each delivery: its start, each
// selector's decision, the handler and the settlement (each in a context
// it may derive) and the Result. Package oteltrace, a module of its own,
// traces deliveries with OpenTelemetry through it, so this package
// imports no telemetry module.
//
// # Guarantees and limits
//
// The receiver never returns Ack for a delivery whose original is in flight
// or whose claim is held elsewhere. With a durable store, work confirmed
// before a crash or on another machine is recognised after restart. A
// handler whose effect landed but whose confirm did not (a crash between
// the two) runs again on redelivery: at-least-once cannot prevent that
// unless the effect and the confirm share one transaction, which is what
// package inbox (the transactional inbox) does. Without a store,
// an id below the audit window is treated as new (fail-open, counted), and
// an audit restored from a snapshot is trusted, so snapshot it only when
// nothing is in flight.
//
// # Concurrency
//
// A Receiver, its selectors and its Metrics are safe for concurrent use by
// any number of goroutines. One Message belongs to one Process call at a
// time (Process sets its derived key, Attempt and, for DuplicateDeliver,
// Duplicate and a copied Headers map). Process blocks while it waits for a
// handler slot, while the handler runs and, for a duplicate of an
// in-flight delivery, for at most Config.InFlightWait. The store tier renews all its held claims from one
// goroutine, which runs only while claims are held; a claim is no longer
// renewed once Process has settled it. Callbacks (OnDuplicate, Handler) are never called
// with a receiver lock held.
package receiver
