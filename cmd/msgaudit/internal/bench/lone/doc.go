// Package lone measures what batching adds to the latency of a lone
// message: one delivery at a time, with nothing else in flight, so that
// every batch the pipeline forms holds that one delivery. The target is
// that, with a single message and an idle broker, batching at its default
// settings adds at most 2 ms. The broker takes no part in the batching, so
// the benchmarks leave it out and drive receiver.Receiver.Process directly,
// the way the STOMP and RabbitMQ consumers do (a connection audit, one
// handler slot, the consumer's admission gate on the context), against the
// real store servers.
//
// BenchmarkLone/<store>/<mode> runs each delivery (a fresh message id)
// through a receiver whose durable tier is an idempotency store: SQLite
// (sqlitestore, a file in a temporary directory, default synchronous),
// Redis (redisstore on MSGAUDIT_REDIS_URL, its own key prefix) or
// PostgreSQL (pgstore on MSGAUDIT_POSTGRES_URL, its own table). Mode
// grouped is the receiver's default (receiver.Config.StoreBatch 0 and
// StoreLinger 0: the store calls go through idempotency.Group, which hands
// a lone call to its batching goroutine and sends it as a batch of one);
// mode single is StoreBatch 1 (no grouping: the store's single-key calls).
// Besides ns/op it reports storecalls/op (what the store was sent per
// delivery: a try-claim and a confirm) and, when grouped, keys/batch
// (1.00: every batch was lone).
//
// BenchmarkLoneStoreCalls/<store>/<batch|single> splits grouped's share:
// a lone key's try-claim and confirm sent straight to the store as batch
// calls of one key (what Group sends for a lone delivery) or as the
// single-key calls. batch − single is the batch statements' cost for one
// key; the rest of grouped − single is Group's hand-off to its batching
// goroutine and back.
//
// BenchmarkLoneInbox/<db>/<mode> does the same with the transactional
// inbox as the durable tier: package inbox on SQLite (database/sql) and
// package inbox/pgxinbox on PostgreSQL. Mode grouped is the inbox's
// default (Options.MaxBatch DefaultMaxBatch, Linger DefaultLinger, 5 ms),
// mode single is MaxBatch 1 (a transaction per delivery, no savepoints).
// A lone delivery commits at once when no other delivery waits for its
// lane; if it waited for the linger instead, grouped would be about 5 ms
// slower than single. It reports dbcalls/op (BEGIN, INSERT, COMMIT) and
// msgs/commit (1.00: every batch was lone).
//
// Run, with the services up, each sub-benchmark five times:
//
//	eval "$(./scripts/services env)"
//	go test -run '^$' -bench Lone -benchtime 300x -count 5 ./cmd/msgaudit/internal/bench/lone/
//
// ns/op is the latency of one lone delivery, from Process to its
// settlement (the store's confirm, the inbox's COMMIT). The latency
// batching adds is grouped − single at the same store: take the median of
// each over the runs (or feed the output to benchstat and compare the
// grouped and single rows of one store).
//
// TestLoneSettles runs every configuration for a few deliveries and checks
// that each one was handled once, settled (a redelivery to the same
// receiver, and to a fresh receiver on the same store, is rejected as a
// duplicate without running the handler), and went through the calls its
// mode says: batch calls of one key when grouped, single-key calls when
// not, and one COMMIT per delivery in the inbox.
package lone
