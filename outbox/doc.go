// Package outbox is the transactional outbox: a handler records the
// messages it sends in the same database transaction as its effect, and a
// relay publishes them once that transaction has committed.
package outbox
