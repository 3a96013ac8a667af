package receiver

import (
	"errors"

	"github.com/acemq/msgaudit/internal/admission"
)

// Sentinel errors of the receiver package.
var (
	// ErrDuplicate is returned by a handler built with Receiver.Wrap when the
	// delivery is a duplicate of finished work: the transport acknowledges
	// it and does not process it (Spring's throw-on-rejection, mapped to
	// "acknowledge, don't process").
	ErrDuplicate = errors.New("receiver: duplicate delivery")
	// ErrRequeue is wrapped by a Wrap'd handler's error when the delivery
	// must be handed back (never acknowledged) and retried later.
	ErrRequeue = errors.New("receiver: requeue")
	// ErrDeadLetter is wrapped by a Wrap'd handler's error when the
	// delivery must be dead-lettered (sent to a dead-letter destination
	// with the reason, then acknowledged).
	ErrDeadLetter = errors.New("receiver: dead-letter")
	// ErrNoKey means a delivery has no idempotency key (an empty key, or the
	// key function found nothing).
	ErrNoKey = errors.New("receiver: missing key")
	// ErrBadKey means a key can never be checked (for example an id the
	// connection audit cannot parse and no durable tier follows). Selectors
	// wrap it so the receiver dead-letters instead of requeueing forever.
	ErrBadKey = errors.New("receiver: malformed key")
	// ErrPanic wraps the value of a handler panic recovered by Process.
	ErrPanic = errors.New("receiver: handler panicked")
	// ErrAbandoned is the Result.Err of a delivery abandoned before its
	// handler started: its context ended, or its transport's abandon
	// signal closed (the connection was lost, a graceful stop began),
	// while it waited for a handler slot. Nothing was applied and nothing
	// is to be acknowledged.
	ErrAbandoned error = admission.ErrAbandoned
	// ErrConfig is returned by New for an invalid Config.
	ErrConfig = errors.New("receiver: invalid config")
)
