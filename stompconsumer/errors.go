package stompconsumer

import "errors"

// Sentinel errors. Errors returned by this package wrap one of them with
// %w and add the address or the broker's own message; none of them ever
// contains the passcode.
var (
	// ErrConfig reports an invalid Config (an unparseable address, a
	// subscription without a destination or handler, unreadable TLS files).
	ErrConfig = errors.New("stompconsumer: invalid config")

	// ErrConnect is returned by Run when Config.ConnectRetries is set and
	// no broker could be reached at start within the first attempt and
	// that many retries. The last dial error is included in the message.
	ErrConnect = errors.New("stompconsumer: cannot connect")

	// ErrRejected is returned when a broker answers CONNECT with an ERROR
	// frame, typically wrong credentials ("User name [null] or password is
	// invalid."). The broker's message is included. It is not retried: a
	// retry would only repeat the rejection (a retry storm against the
	// broker's authentication).
	ErrRejected = errors.New("stompconsumer: connection rejected by broker")

	// ErrTLS wraps a TLS handshake failure, most often a certificate the
	// configured CA does not sign (x509: certificate signed by unknown
	// authority). A certificate verification failure is not retried.
	ErrTLS = errors.New("stompconsumer: TLS handshake failed")

	// ErrConnectionLost is logged (and counted) when a live connection
	// breaks; the consumer reconnects on its own and Run does not return it.
	ErrConnectionLost = errors.New("stompconsumer: connection lost")

	// ErrFrameTooLarge is reported when a frame from the broker exceeds
	// Config.MaxHeaderBytes or Config.MaxBodyBytes.
	ErrFrameTooLarge = errors.New("stompconsumer: frame too large")

	// ErrRunning is returned by Run when the consumer is already running.
	ErrRunning = errors.New("stompconsumer: already running")
)
