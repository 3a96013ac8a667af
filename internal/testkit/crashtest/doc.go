// Package crashtest kills real consumer processes with SIGKILL and checks
// msgaudit's promise afterwards: no message lost, none applied twice.
//
// A test binary re-executes itself as a child (its TestMain calls RunChild
// when IsChild) that builds a real stompconsumer, rabbitconsumer or
// natsconsumer and applies every message to a ledger table (key primary
// key, count of applications) in PostgreSQL or an SQLite file. The parent (Run) fills
// the queue, starts the child, stops and kills it at random moments
// spread over the work (random numbers of keys applied, plus a jitter),
// restarts it after every kill, and at the end compares the ledger with
// what it sent and checks that the queue and the dead-letter queues are
// empty.
//
// The child holds open the two windows where a kill matters by sleeping
// in them, and counts the deliveries inside each:
//
//   - the effect window, from the effect's write to the effect recorded as
//     done: with the transactional inbox, until the transaction commits
//     (a kill rolls effect and key back together); with an external store,
//     from the effect's own commit until the store confirms (a kill leaves
//     a claim that lapses, and the redelivery applies the message again);
//     with no store, until the handler returns;
//   - the settle-ack window, from the commit or confirm to the broker
//     acknowledgement (a kill redelivers a message the durable tier knows).
//
// The counts live in a small file both processes map (mmap). The parent
// freezes the child with SIGSTOP, reads them and then sends SIGKILL, so
// every kill is attributed to the windows it landed in. The child also
// writes a snapshot of its receiver metrics to a file every 100 ms,
// which the parent reads after each kill (so a killed child's last 100 ms
// may be missing from the totals).
package crashtest
