package natsconsumer

import "errors"

// Sentinel errors. Errors returned by this package wrap one of them with
// %w; none of them ever contains a password or a token.
var (
	// ErrConfig reports an invalid Config (no URL, stream, consumer,
	// handler or dead-letter subject, an unparsable URL, unreadable TLS
	// files, a dead-letter subject the consumer's filters match), from
	// New, or, from Run (not retried), a consumed stream that captures
	// the dead-letter subject the consumer reads, or a durable consumer
	// configuration the server refuses.
	ErrConfig = errors.New("natsconsumer: invalid config")

	// ErrConnect is returned by Run when Config.ConnectRetries is set and
	// no server could be reached at start within the first attempt and
	// that many retries; the last error is included.
	ErrConnect = errors.New("natsconsumer: cannot connect")

	// ErrRejected is returned by Run when the server refuses the
	// credentials (an authorization violation). It is not retried.
	ErrRejected = errors.New("natsconsumer: connection rejected by server")

	// ErrTLS wraps a TLS handshake failure, most often a certificate the
	// configured CA does not sign. It is not retried.
	ErrTLS = errors.New("natsconsumer: TLS handshake failed")

	// ErrNoStream is wrapped by Run's error when Config.Stream does not
	// exist, or when no stream captures Config.DeadLetterSubject. It is
	// not retried: the consumer creates neither.
	ErrNoStream = errors.New("natsconsumer: stream does not exist")

	// ErrRunning is returned by Run when the consumer is already running.
	ErrRunning = errors.New("natsconsumer: already running")

	// ErrTooManyDeliveries is the cause recorded for a delivery that
	// JetStream has delivered more than Pipeline.MaxAttempts times
	// without a handler failure ending any of them (the consumer died or
	// lost its connection each time): it is dead-lettered without running
	// the handler again.
	ErrTooManyDeliveries = errors.New("natsconsumer: delivered more often than MaxAttempts")
)
