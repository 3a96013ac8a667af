package brokermodel

import "errors"

// Sentinel errors of the broker model.
var (
	// ErrDisconnected is returned by every operation on a connection that
	// was closed or cut (an ack on it is lost, as on a dead TCP connection).
	ErrDisconnected = errors.New("brokermodel: connection lost")
	// ErrUnknownAck is returned for an ack or nack of a delivery this
	// connection does not hold (already acked, or redelivered elsewhere).
	ErrUnknownAck = errors.New("brokermodel: unknown delivery")
	// ErrDestination is returned for a destination the model does not
	// serve (only "/queue/<name>").
	ErrDestination = errors.New("brokermodel: unsupported destination")
	// ErrTxDone is returned by a transaction used after Commit or Abort.
	ErrTxDone = errors.New("brokermodel: transaction already finished")
	// ErrClosed is returned after Broker.Close.
	ErrClosed = errors.New("brokermodel: broker closed")
)
