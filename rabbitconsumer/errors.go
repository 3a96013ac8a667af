package rabbitconsumer

import "errors"

// Sentinel errors. Errors returned by this package wrap one of them with
// %w; none of them ever contains a password.
var (
	// ErrConfig reports an invalid Config (no URL, queue or handler, an
	// unparsable URL, unreadable TLS files).
	ErrConfig = errors.New("rabbitconsumer: invalid config")

	// ErrConnect is returned by Run when Config.ConnectRetries is set and
	// the broker could not be reached at start within the first attempt
	// and that many retries; the last error is included.
	ErrConnect = errors.New("rabbitconsumer: cannot connect")

	// ErrRejected is returned by Run when the broker refuses the login or
	// the virtual host (AMQP 403 ACCESS_REFUSED, 530 NOT_ALLOWED). It is
	// not retried: a retry would only repeat the refusal.
	ErrRejected = errors.New("rabbitconsumer: connection rejected by broker")

	// ErrTLS wraps a TLS handshake failure, most often a certificate the
	// configured CA does not sign. It is not retried.
	ErrTLS = errors.New("rabbitconsumer: TLS handshake failed")

	// ErrNoQueue is wrapped by Run's error when Config.Queue does not exist
	// (and Config.Declare is not set). It is not retried and is not a
	// connection failure.
	ErrNoQueue = errors.New("rabbitconsumer: queue does not exist")

	// ErrDeclare is wrapped by Run's error when the broker refuses to
	// declare Config.Queue (Config.Declare), typically because the queue
	// exists with other arguments. It is not retried.
	ErrDeclare = errors.New("rabbitconsumer: cannot declare queue")

	// ErrRunning is returned by Run when the consumer is already running.
	ErrRunning = errors.New("rabbitconsumer: already running")

	// ErrBodyTooLarge is the cause recorded for a delivery whose body
	// exceeds Config.MaxBodyBytes (it is dead-lettered, not handled).
	ErrBodyTooLarge = errors.New("rabbitconsumer: body too large")
)
