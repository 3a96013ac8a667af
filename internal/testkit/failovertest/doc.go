// Package failovertest kills the master of a real ActiveMQ master/slave
// pair with SIGKILL while a stompconsumer, configured with both brokers'
// addresses, consumes from it, and checks msgaudit's promise through the
// failovers: no message lost and, with the transactional inbox, none
// applied twice.
//
// The pair is the activemq-pair service of scripts/services: two ActiveMQ
// Classic brokers sharing one KahaDB store, of which only the holder of the
// store's file lock is master and opens its connectors; the standby waits
// on the lock and takes over when the master's process dies. The test
// produces persistent messages to whichever broker is master (resending an
// unconfirmed transaction after a failover, so the queue may hold copies
// under new message ids), kills the master's JVM twice during the run,
// restarts each killed broker as the new standby, and compares a ledger
// table (key → number of applications) with what it sent. It reports the
// redeliveries, the duplicates each tier absorbed and the consumer's time
// to resume after each kill.
//
// The test runs under MSGAUDIT_CRASH_EXTENDED=1 (scripts/test sets it) and
// reads the pair from MSGAUDIT_STOMP_PAIR_ADDRS, MSGAUDIT_STOMP_PAIR_PIDFILES
// and MSGAUDIT_STOMP_PAIR_START.
package failovertest
