package receiver

import (
	"context"
	"errors"
	"log/slog"

	"github.com/acemq/msgaudit/idempotency"
)

// AsError converts the result into the error a Wrap'd handler returns:
// nil for an Ack of processed work (or of a duplicate the handler saw under
// DuplicateDeliver); ErrDuplicate for an Ack of a duplicate that was not
// processed; an *ActionError (matching ErrRequeue or ErrDeadLetter with
// errors.Is, and the handler's error) for Requeue and DeadLetter.
func (res Result) AsError() error {
	switch res.Action {
	case Ack:
		if res.Duplicate && !res.Ran {
			return ErrDuplicate
		}
		return nil
	case DeadLetter, Requeue:
		return &ActionError{Result: res}
	}
	return &ActionError{Result: Result{Action: Requeue, Reason: "invalid-action", Err: res.Err}}
}

// ActionError carries a Requeue or DeadLetter Result out of a Wrap'd
// handler. errors.Is matches ErrRequeue or ErrDeadLetter, and the handler's
// error.
type ActionError struct {
	Result Result
}

// Error describes the action, reason and cause.
func (e *ActionError) Error() string {
	s := "receiver: " + e.Result.Action.String() + " (" + e.Result.Reason + ")"
	if e.Result.Err != nil {
		s += ": " + e.Result.Err.Error()
	}
	return s
}

// Unwrap returns the action's sentinel and the cause.
func (e *ActionError) Unwrap() []error {
	sentinel := ErrRequeue
	if e.Result.Action == DeadLetter {
		sentinel = ErrDeadLetter
	}
	if e.Result.Err == nil {
		return []error{sentinel}
	}
	return []error{sentinel, e.Result.Err}
}

// ActionOf maps a Wrap'd handler's error to the transport's action: nil and
// ErrDuplicate → Ack; an error matching ErrDeadLetter → DeadLetter; any
// other error (ErrRequeue, or an error from an unwrapped handler) →
// Requeue. A transport never acknowledges on an error it does not know.
func ActionOf(err error) Action {
	switch {
	case err == nil, errors.Is(err, ErrDuplicate):
		return Ack
	case errors.Is(err, ErrDeadLetter):
		return DeadLetter
	}
	return Requeue
}

// ResultOf extracts the Result carried by a Wrap'd handler's error.
func ResultOf(err error) (Result, bool) {
	var ae *ActionError
	if errors.As(err, &ae) {
		return ae.Result, true
	}
	return Result{}, false
}

// Wrap returns a Handler that runs h through r's pipeline. Its error tells
// the transport what to do (see Result.AsError and ActionOf).
func (r *Receiver) Wrap(h Handler) Handler {
	return func(ctx context.Context, m *Message) error {
		return r.Process(ctx, m, h).AsError()
	}
}

// Option configures Wrap.
type Option interface {
	apply(*Config)
}

type optionFunc func(*Config)

func (f optionFunc) apply(c *Config) { f(c) }

// WithConfig starts from a whole Config (later options override it).
func WithConfig(cfg Config) Option { return optionFunc(func(c *Config) { *c = cfg }) }

// WithAudit sets the connection audit tier.
func WithAudit(a Auditor) Option { return optionFunc(func(c *Config) { c.Audit = a }) }

// WithStore sets the durable idempotency store and its namespace ("" =
// the destination).
func WithStore(s idempotency.Store, namespace string) Option {
	return optionFunc(func(c *Config) { c.Store, c.Namespace = s, namespace })
}

// WithSelectors appends selectors after the store.
func WithSelectors(s ...Selector) Option {
	return optionFunc(func(c *Config) { c.Selectors = append(c.Selectors, s...) })
}

// WithKeyFunc sets the key function.
func WithKeyFunc(f KeyFunc) Option { return optionFunc(func(c *Config) { c.KeyFunc = f }) }

// WithDuplicates sets the duplicate policy.
func WithDuplicates(p DuplicatePolicy) Option {
	return optionFunc(func(c *Config) { c.Duplicates = p })
}

// WithOnDuplicate sets the duplicate hook and the DuplicateHook policy.
func WithOnDuplicate(f func(ctx context.Context, m *Message, reason string)) Option {
	return optionFunc(func(c *Config) { c.OnDuplicate, c.Duplicates = f, DuplicateHook })
}

// WithMaxAttempts sets the attempt bound.
func WithMaxAttempts(n int) Option { return optionFunc(func(c *Config) { c.MaxAttempts = n }) }

// WithMetrics sets the metrics.
func WithMetrics(m *Metrics) Option { return optionFunc(func(c *Config) { c.Metrics = m }) }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *Config) { c.Logger = l }) }

// Wrap is the three-line wrap for any consumer: it builds a Receiver from
// opts and returns h wrapped in it. The returned handler returns nil
// (acknowledge), ErrDuplicate (acknowledge, don't process) or an error
// matching ErrRequeue / ErrDeadLetter; ActionOf maps any of them to the
// transport's action. It panics on an invalid configuration (a programming
// error, like regexp.MustCompile); build the Receiver with New to get the
// error instead.
func Wrap(h Handler, opts ...Option) Handler {
	var cfg Config
	for _, o := range opts {
		o.apply(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		panic("receiver: Wrap: " + err.Error())
	}
	return r.Wrap(h)
}
