// Package idempotency remembers finished work, durably and across
// machines, so a consumer of an at-least-once queue runs each message's
// work once.
//
// # The consumer rule
//
// For every delivery, call TryClaim with the message's Key (a namespace
// such as the queue or consumer group, plus the message id) and act on
// the Outcome:
//
//   - Claimed: run the work. On success Confirm the claim, then
//     acknowledge the delivery. On failure Release the claim and hand the
//     delivery back (requeue), so the next attempt can claim it.
//   - AlreadyConfirmed: the work is finished; the delivery is a
//     duplicate. Acknowledge it without running the work.
//   - InProgress: someone holds a claim and has not confirmed. The
//     outcome is unknown, so do NOT acknowledge: requeue and retry later.
//     (If the holder died, its claim expires after Options.ClaimTTL and a
//     later attempt takes it over.)
//   - An error: the store could not answer. Requeue; never treat an error
//     as a verdict.
//
// Claiming before the work and confirming only after it closes both holes
// of a "seen?" check: marking before the work loses the message when the
// handler crashes, marking after lets two concurrent deliveries both run.
//
// # Claims, tokens and expiry
//
// A Claim is a lease carrying an owner token. It lapses after ClaimTTL
// (default 5 minutes) unless the holder calls Renew, so a consumer that
// died without releasing does not block the key forever. Confirm, Release
// and Renew by a caller that no longer holds the claim (its lease lapsed,
// it was released, or someone took it over) return ErrClaimLost and change
// nothing: a slow handler finding ErrClaimLost on Confirm must assume the
// work may run again elsewhere. A confirmation is remembered for
// Options.Retention (default 7 days) and then forgotten; the SQL backends
// delete the rows of expired claims and confirmations on their own every
// Options.PurgeInterval (an hour by default), and Redis expires its keys
// itself.
//
// # Backends
//
// Memory (one process, for tests) lives here. The durable backends are
// packages of their own, so a program links only the drivers it uses:
// sqlitestore (embedded, durable, the default for one machine), redisstore
// and pgstore (shared by several consumer machines). Open picks one from a
// URL once its package is imported, as database/sql picks a driver:
//
//	import _ "github.com/acemq/msgaudit/idempotency/redisstore"
//
// and a scheme whose package is missing is an error naming it. A backend
// outside this module registers with Register. The stores that keep time
// themselves (Memory, SQLite) read Options.Clock; Redis and PostgreSQL
// use their server's clock. Every backend passes the same conformance
// suite, package storetest.
//
// # Keys
//
// An empty Key.ID is ErrInvalidKey; an empty namespace is allowed. Keys
// whose storage form (see Options.MaxKeyLength) is longer than Options.MaxKeyLength,
// or that hold bytes a backend's text type cannot (NUL, invalid UTF-8), are
// stored as their SHA-256: never truncated, never merged.
//
// # Concurrency
//
// Every Store of this package and its backends is safe for concurrent use by any number of
// goroutines (and, for SQLite, Redis and PostgreSQL, processes). Exactly
// one caller holds a live claim on a key at any time. A cancelled or
// expired context returns ctx.Err(); when it was already done at the call,
// nothing changed. A backend error or timeout is always an error with a
// zero Outcome, never a false Claimed or AlreadyConfirmed.
//
// # Batches and group commit
//
// A backend that can claim, confirm and release many keys in one round
// trip or transaction implements BatchStore (Memory does; storetest holds
// every BatchStore to answering each key exactly as the single-key call
// would). Group wraps a BatchStore so that the single-key calls of many
// concurrent goroutines (the deliveries a consumer has in flight) share
// batch calls: the store's cost per call is paid once per batch instead of
// once per message.
package idempotency
