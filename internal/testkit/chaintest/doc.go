// Package chaintest kills the processes of a chain with SIGKILL and checks
// that each hop is exactly once: a producer fills queue A; consumer A
// (inbox and outbox in its database, the relay in its process) applies
// each message and, in the same transaction, sends one to queue B;
// consumer B (inbox) applies those. Its tests run on ActiveMQ, RabbitMQ
// and NATS JetStream with PostgreSQL, and on NATS with SQLite and MariaDB.
package chaintest
