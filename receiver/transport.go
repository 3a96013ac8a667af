package receiver

// TransportStats are a transport's own counters, the same type for every
// transport (stompconsumer, rabbitconsumer and natsconsumer's
// Consumer.Stats; promexport.Transport exports them). The duplicate pipeline's counters
// (delivered, processed, duplicates by reason, handler errors, store
// latency) are in Metrics. A counter a transport does not keep stays zero;
// each field says which transports keep it.
type TransportStats struct {
	// Connects counts successful connections (the first one included);
	// Reconnects those after a connection loss; ConnectErrors failed
	// attempts. Every transport.
	Connects, Reconnects, ConnectErrors uint64
	// Lost counts connections or channels that broke while consuming
	// (RabbitMQ, NATS; STOMP counts them in Reconnects).
	Lost uint64
	// Acks counts deliveries acknowledged, processed work and absorbed
	// duplicates (RabbitMQ, NATS).
	Acks uint64
	// Requeues counts deliveries handed back to the broker with
	// Nack(requeue=true) on RabbitMQ, NakWithDelay on NATS.
	Requeues uint64
	// RetriesSent counts retry copies committed with the original's ACK;
	// LocalRetries counts retries run in place (STOMP).
	RetriesSent, LocalRetries uint64
	// DeadLetters counts dead-letter copies the broker took (committed
	// with the original's ACK on STOMP, confirmed before it on RabbitMQ
	// and NATS). Every transport.
	DeadLetters uint64
	// DeadLetterErrors counts dead-letter publishes that failed, the
	// original handed back instead (RabbitMQ, NATS).
	DeadLetterErrors uint64
	// Oversized counts deliveries over the size limits, dead-lettered
	// unhandled (STOMP: a record without the body, counted in DeadLetters
	// as well, and a persistent original NACKed so that the broker
	// dead-letters it in full). STOMP and RabbitMQ.
	Oversized uint64
	// Dropped counts deliveries received but never processed because
	// their connection was lost or the consumer stopped; the broker sends
	// them again. Every transport.
	Dropped uint64
	// StaleAcks counts acknowledgements not sent because the delivery's
	// connection (or channel) had been lost: its ack id means nothing on
	// any other. STOMP and RabbitMQ (a JetStream ack names the stream
	// sequence and is sent after a reconnect).
	StaleAcks uint64
	// AckErrors counts acknowledgement failures (on STOMP each ends the
	// connection). Every transport.
	AckErrors uint64
	// Generation is the number of the current (or last) connection.
	// Every transport.
	Generation uint64
}
