package receiver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/nilcheck"
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

// Option configures Wrap and NewWrap. An option given an invalid value
// (a nil store or selector) makes NewWrap return an error wrapping
// ErrConfig, and Wrap panic.
type Option interface {
	apply(*wrapConfig)
}

// wrapConfig is the Config the options build, with the first invalid
// option's error.
type wrapConfig struct {
	Config
	err error
}

func (w *wrapConfig) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

type optionFunc func(*wrapConfig)

func (f optionFunc) apply(c *wrapConfig) { f(c) }

// WithConfig starts from a whole Config (later options override it).
func WithConfig(cfg Config) Option { return optionFunc(func(c *wrapConfig) { c.Config = cfg }) }

// WithAudit sets the connection audit tier; a nil a is an error (leave the
// option out for no audit).
func WithAudit(a Auditor) Option {
	return optionFunc(func(c *wrapConfig) {
		if nilcheck.IsNil(a) {
			c.fail(fmt.Errorf("%w: WithAudit: nil auditor (leave WithAudit out for no audit)", ErrConfig))
		}
		c.Audit = a
	})
}

// WithStore sets the durable idempotency store and its namespace ("" =
// the destination). A nil s is an error — typically a store whose Open
// error was ignored; leave WithStore out to run without a durable store.
func WithStore(s idempotency.Store, namespace string) Option {
	return optionFunc(func(c *wrapConfig) {
		if nilcheck.IsNil(s) {
			c.fail(fmt.Errorf("%w: WithStore: nil store (was an error from opening it ignored? leave WithStore out for no durable store)", ErrConfig))
		}
		c.Store, c.Namespace = s, namespace
	})
}

// WithSelectors appends selectors after the store. A nil selector is an
// error — typically one whose constructor's error was ignored.
func WithSelectors(s ...Selector) Option {
	return optionFunc(func(c *wrapConfig) {
		for i, sel := range s {
			if nilcheck.IsNil(sel) {
				c.fail(fmt.Errorf("%w: WithSelectors: selector %d is nil (%T; was an error from building it ignored?)", ErrConfig, i, sel))
			}
		}
		c.Selectors = append(c.Selectors, s...)
	})
}

// WithKeyFunc sets the key function.
func WithKeyFunc(f KeyFunc) Option { return optionFunc(func(c *wrapConfig) { c.KeyFunc = f }) }

// WithDuplicates sets the duplicate policy.
func WithDuplicates(p DuplicatePolicy) Option {
	return optionFunc(func(c *wrapConfig) { c.Duplicates = p })
}

// WithOnDuplicate sets the duplicate hook and the DuplicateHook policy.
func WithOnDuplicate(f func(ctx context.Context, m *Message, reason string)) Option {
	return optionFunc(func(c *wrapConfig) { c.OnDuplicate, c.Duplicates = f, DuplicateHook })
}

// WithMaxAttempts sets the attempt bound.
func WithMaxAttempts(n int) Option { return optionFunc(func(c *wrapConfig) { c.MaxAttempts = n }) }

// WithMetrics sets the metrics.
func WithMetrics(m *Metrics) Option { return optionFunc(func(c *wrapConfig) { c.Metrics = m }) }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *wrapConfig) { c.Logger = l }) }

// NewWrap is the three-line wrap for any consumer: it builds a Receiver
// from opts and returns h wrapped in it. The returned handler returns nil
// (acknowledge), ErrDuplicate (acknowledge, don't process) or an error
// matching ErrRequeue / ErrDeadLetter; ActionOf maps any of them to the
// transport's action. An invalid configuration — a nil h, an option given
// a nil store or selector, a Config New rejects — is an error wrapping
// ErrConfig, returned here and never at the first message.
func NewWrap(h Handler, opts ...Option) (Handler, error) {
	var cfg wrapConfig
	for _, o := range opts {
		if o == nil {
			cfg.fail(fmt.Errorf("%w: nil Option", ErrConfig))
			continue
		}
		o.apply(&cfg)
	}
	if h == nil {
		cfg.fail(fmt.Errorf("%w: nil Handler", ErrConfig))
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	r, err := New(cfg.Config)
	if err != nil {
		return nil, err
	}
	return r.Wrap(h), nil
}

// Wrap is NewWrap for a configuration known to be valid: it panics where
// NewWrap returns an error (a programming error, like regexp.MustCompile).
// Use NewWrap when a store or selector comes from a call that can fail.
func Wrap(h Handler, opts ...Option) Handler {
	w, err := NewWrap(h, opts...)
	if err != nil {
		panic("receiver: Wrap: " + err.Error())
	}
	return w
}
