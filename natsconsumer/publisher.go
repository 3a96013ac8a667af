package natsconsumer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/acemq/msgaudit/internal/consumerkit"
	"github.com/acemq/msgaudit/internal/outboxid"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/outbox"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var _ outbox.Publisher = (*Publisher)(nil)

// Publisher publishes an outbox's messages to NATS JetStream (see
// outbox.Publisher). Create it with NewPublisher; it is safe for
// concurrent use.
//
// Printing a Publisher (with any verb) shows no credentials: they sit
// behind pointers fmt does not follow.
type Publisher struct{ p *natsPublisher }

// natsPublisher holds the configuration behind one more pointer: fmt
// prints the fields of the struct a pointer points to for a verb that
// does not fit it (%s of a Publisher prints this struct), but never
// follows a pointer further.
type natsPublisher struct {
	*pubConf
	conns *consumerkit.Redial[*pubConn]
}

type pubConf struct {
	cfg Config
	red redact.Redactor
}

type pubConn struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// NewPublisher returns a Publisher connected to cfg.URL. It reads only
// the connection fields of cfg: URL, TLS, CAFile, CertFile, KeyFile,
// ServerName, ConnectTimeout, ReconnectBackoff, Heartbeat and
// ConnectionName. The connection reconnects in the background, as the
// Consumer's does (nats.go), spaced by ReconnectBackoff; a Publish while
// it is down fails at once (nothing is buffered) with a transient error.
func NewPublisher(ctx context.Context, cfg Config) (*Publisher, error) {
	cfg, err := cfg.connDefaults()
	if err != nil {
		return nil, err
	}
	tc, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	red := redact.New(cfg.secrets()...)
	p := &natsPublisher{pubConf: &pubConf{cfg: cfg, red: red}}
	p.conns = consumerkit.NewRedial(func(ctx context.Context) (*pubConn, error) {
		nc, err := nats.Connect(cfg.URL, append(connOptions(cfg, tc), nats.ReconnectBufSize(-1))...)
		if err != nil {
			return nil, classify(err, cfg, red)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, red.Error(err)
		}
		return &pubConn{nc: nc, js: js}, nil
	}, func(pc *pubConn) { pc.nc.Close() }, cfg.ReconnectBackoff)
	if _, err := p.conns.Get(ctx); err != nil {
		return nil, fmt.Errorf("natsconsumer: connect %s: %w", cfg.redactedURL(), err)
	}
	return &Publisher{p}, nil
}

// Publish publishes m to the subject m.Destination with JetStream, its
// Nats-Msg-Id id and its headers m.Headers, and returns nil once the
// stream's PubAck confirms it; a PubAck that says the stream already
// holds the id within its duplicate window is success too. It refuses
// (outbox.ErrRefused) an id outboxid.Valid rejects, a subject one cannot
// publish to (empty, wildcards, whitespace), a header whose name is
// empty or holds ':', whitespace or a control character, one whose value
// holds CR, LF or NUL, any Nats-* header (the server's: Nats-Msg-Id,
// Nats-Expected-*, Nats-Rollup, Nats-TTL...) and outboxid.Header; and so
// does the server: no stream captures the subject (no responders), or the
// message is over the server's max_payload or the stream's maximum
// message size. Any other error (a lost connection, no PubAck before
// ctx's deadline or JetStream's default timeout) is transient.
func (pp *Publisher) Publish(ctx context.Context, id string, m outbox.Message) error {
	p := pp.p
	if err := check(id, m); err != nil {
		return fmt.Errorf("%w: natsconsumer: %w", outbox.ErrRefused, err)
	}
	pc, err := p.conns.Get(ctx)
	if err != nil {
		return p.red.Error(fmt.Errorf("natsconsumer: publish %s: %w", id, err))
	}
	msg := nats.NewMsg(m.Destination)
	msg.Data = m.Body
	for k, v := range m.Headers {
		msg.Header[k] = []string{v}
	}
	// A PubAck with Duplicate set is success: the stream holds the id.
	if _, err = pc.js.PublishMsg(ctx, msg, jetstream.WithMsgID(id)); err == nil {
		return nil
	}
	if refused(err) {
		return p.red.Error(fmt.Errorf("%w: natsconsumer: publish %s to %q: %w", outbox.ErrRefused, id, m.Destination, err))
	}
	if pc.nc.IsClosed() {
		p.conns.Drop(pc)
	}
	return p.red.Error(fmt.Errorf("natsconsumer: publish %s to %q on %s: %w", id, m.Destination, p.cfg.redactedURL(), err))
}

// refused reports whether a publish error is the server refusing the
// message.
func refused(err error) bool {
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrMaxPayload) {
		return true
	}
	var ae *jetstream.APIError
	return errors.As(err, &ae) && ae.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum
}

// check validates a message before it is published.
func check(id string, m outbox.Message) error {
	if !outboxid.Valid(id) {
		return fmt.Errorf("id %q is not a valid outbox id", truncate(id, 64))
	}
	if !validSubject(m.Destination, false) || strings.ContainsFunc(m.Destination, isControl) {
		return fmt.Errorf("subject %q is not one to publish to", truncate(m.Destination, 64))
	}
	for k, v := range m.Headers {
		switch {
		case k == "" || strings.ContainsAny(k, ": ") || strings.ContainsFunc(k, isControl):
			return fmt.Errorf("header %q: an empty name, or ':', a space or a control character in it", truncate(k, 64))
		case strings.ContainsAny(v, "\x00\r\n"):
			return fmt.Errorf("header %q: NUL, CR or LF in its value", k)
		case len(k) >= 5 && strings.EqualFold(k[:5], "nats-"), strings.EqualFold(k, outboxid.Header):
			return fmt.Errorf("header %q is reserved", k)
		}
	}
	return nil
}

func isControl(r rune) bool { return r < ' ' || r == 0x7f }

// Close closes the connection. Publish returns an error after it.
func (pp *Publisher) Close() error {
	pp.p.conns.Close()
	return nil
}
