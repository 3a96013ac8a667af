// Package crashtest kills real consumer processes with SIGKILL and checks
// msgaudit's promise afterwards: no message lost, none applied twice.
//
// A test binary re-executes itself as a child (RunChild, selected with
// -test.run) that builds a real stompconsumer or rabbitconsumer and applies
// every message to a ledger table (key primary key, count of
// applications) in PostgreSQL or an SQLite file. The parent (Run) fills
// the queue, starts the child, stops and kills it at random moments,
// restarts it after every kill, and at the end compares the ledger with
// what it sent and checks that the queue and the dead-letter queues are
// empty.
//
// The child widens the two windows where a kill matters by sleeping in
// them: after the effect is written and before the handler returns
// (with a transactional inbox: before the transaction commits; with an
// external store: after the effect committed, before the store confirms),
// and after the durable tier settled, before the acknowledgement is sent.
// It counts the deliveries inside each window in a small file shared
// through mmap; the parent freezes the child with SIGSTOP, reads the
// counts and then sends SIGKILL, so every kill is attributed to the
// windows it landed in. The child also writes a snapshot of its receiver
// metrics to a file several times a second, which the parent reads after
// each kill.
package crashtest
