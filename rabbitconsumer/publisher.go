package rabbitconsumer

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/acemq/msgaudit/internal/consumerkit"
	"github.com/acemq/msgaudit/internal/copyhdr"
	"github.com/acemq/msgaudit/internal/outboxid"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/outbox"
	amqp "github.com/rabbitmq/amqp091-go"
)

var _ outbox.Publisher = (*Publisher)(nil)

// Publisher publishes an outbox's messages to RabbitMQ (see
// outbox.Publisher). Create it with NewPublisher; it is safe for
// concurrent use: each Publish in flight has a confirm-mode channel of
// its own on the one connection.
//
// Printing a Publisher (with any verb) shows no credentials: they sit
// behind pointers fmt does not follow.
type Publisher struct{ p *outboxPublisher }

// outboxPublisher holds the URL and its redactor behind one more pointer:
// fmt prints the fields of the struct a pointer points to for a verb
// that does not fit it (%s of a Publisher prints this struct), but never
// follows a pointer further.
type outboxPublisher struct {
	*pubConf
	conns *consumerkit.Redial[*pubConn]
}

type pubConf struct {
	url     string
	maxBody int
	red     redact.Redactor
}

// pubConn is one connection and its idle channels.
type pubConn struct {
	conn *amqp.Connection
	mu   sync.Mutex
	idle []*pubChan
}

// pubChan is a channel in confirm mode, used by one Publish at a time, so
// that a basic.return (which RabbitMQ sends before the confirm of the
// same message, and amqp091 hands over before it processes the confirm)
// is in returns once the confirm is in.
type pubChan struct {
	ch      *amqp.Channel
	returns chan amqp.Return
}

// NewPublisher returns a Publisher connected to cfg.URL. It reads only
// the connection fields of cfg: URL, TLS, CAFile, CertFile, KeyFile,
// ServerName, ConnectTimeout, Heartbeat, FrameSize, ConnectionName,
// ReconnectBackoff (spacing redials after failed ones) and MaxBodyBytes
// (a larger body is refused, as a Consumer with the same Config would
// dead-letter it). A lost connection is dialled again at the next
// Publish after the one that found it broken.
func NewPublisher(ctx context.Context, cfg Config) (*Publisher, error) {
	cfg, err := cfg.connDefaults()
	if err != nil {
		return nil, err
	}
	tc, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	red := newRedactor(cfg.URL)
	p := &outboxPublisher{pubConf: &pubConf{url: cfg.URL, maxBody: cfg.MaxBodyBytes, red: red}}
	p.conns = consumerkit.NewRedial(func(ctx context.Context) (*pubConn, error) {
		conn, err := dial(ctx, cfg, tc)
		if err != nil {
			return nil, classify(err, cfg.URL, red)
		}
		return &pubConn{conn: conn}, nil
	}, func(pc *pubConn) { _ = pc.conn.Close() }, cfg.ReconnectBackoff)
	if _, err := p.conns.Get(ctx); err != nil {
		return nil, fmt.Errorf("rabbitconsumer: connect %s: %w", redact.Strict(cfg.URL), err)
	}
	return &Publisher{p}, nil
}

// Publish publishes m, persistent, with the message id id, to the queue
// m.Destination (the routing key on the default exchange), its headers
// m.Headers, mandatory, and returns nil once the broker's confirm
// acknowledges it. It refuses (outbox.ErrRefused) an id outboxid.Valid
// rejects, a routing key that is empty or over 255 bytes, a body over
// MaxBodyBytes, a header name that is empty, over 255 bytes or holds a
// control character, and a header RabbitMQ or this package reads
// (CC and BCC, which route copies elsewhere; x-death and its kin;
// x-delivery-count, which the consumer takes as the attempts made; the
// copy headers); and so does the broker: a message no queue takes (the
// broker returns it) or one it nacks. Any other error (a lost connection
// or channel, ctx ending before the confirm) is transient: the
// connection or channel is closed and the next Publish opens another.
func (pp *Publisher) Publish(ctx context.Context, id string, m outbox.Message) error {
	p := pp.p
	if err := p.check(id, m); err != nil {
		return fmt.Errorf("%w: rabbitconsumer: %w", outbox.ErrRefused, err)
	}
	var headers amqp.Table
	if len(m.Headers) > 0 {
		headers = make(amqp.Table, len(m.Headers))
		for k, v := range m.Headers {
			headers[k] = v
		}
	}
	pc, err := p.conns.Get(ctx)
	if err != nil {
		return p.red.Error(fmt.Errorf("rabbitconsumer: publish %s: %w", id, err))
	}
	c, err := pc.channel()
	if err != nil {
		p.conns.Drop(pc)
		return fmt.Errorf("rabbitconsumer: publish %s: open a channel: %w", id, classify(err, p.url, p.red))
	}
	msg := amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent, Headers: headers, Body: m.Body}
	dc, err := c.ch.PublishWithDeferredConfirmWithContext(ctx, "", m.Destination, true, false, msg)
	if err == nil {
		var ok bool
		if ok, err = dc.WaitContext(ctx); err == nil {
			if ok || !c.ch.IsClosed() {
				select {
				case r := <-c.returns:
					pc.put(c)
					return p.red.Error(fmt.Errorf("%w: rabbitconsumer: %s returned %s (routing key %q): %d %s",
						outbox.ErrRefused, redact.Strict(p.url), id, m.Destination, r.ReplyCode, r.ReplyText))
				default:
				}
			}
			switch {
			case ok:
				pc.put(c)
				return nil
			case !c.ch.IsClosed():
				pc.put(c)
				return fmt.Errorf("%w: rabbitconsumer: %s nacked %s (routing key %q)", outbox.ErrRefused, redact.Strict(p.url), id, m.Destination)
			}
			err = fmt.Errorf("channel closed before the confirm")
		}
	}
	// The outcome is unknown: the channel goes (a late confirm or return
	// must not meet the next Publish), and the connection if it broke.
	_ = c.ch.Close()
	if pc.conn.IsClosed() {
		p.conns.Drop(pc)
	}
	return fmt.Errorf("rabbitconsumer: publish %s to %q: %w", id, m.Destination, classify(err, p.url, p.red))
}

// channel returns an idle channel or opens one in confirm mode.
func (pc *pubConn) channel() (*pubChan, error) {
	pc.mu.Lock()
	for len(pc.idle) > 0 {
		c := pc.idle[len(pc.idle)-1]
		pc.idle = pc.idle[:len(pc.idle)-1]
		if !c.ch.IsClosed() {
			pc.mu.Unlock()
			return c, nil
		}
	}
	pc.mu.Unlock()
	ch, err := pc.conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, err
	}
	return &pubChan{ch: ch, returns: ch.NotifyReturn(make(chan amqp.Return, 1))}, nil
}

// put makes c idle again.
func (pc *pubConn) put(c *pubChan) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.idle = append(pc.idle, c)
}

// check validates a message before it is published.
func (p *outboxPublisher) check(id string, m outbox.Message) error {
	if !outboxid.Valid(id) {
		return fmt.Errorf("id %q is not a valid outbox id", truncate(id, 64))
	}
	if m.Destination == "" || len(m.Destination) > 255 {
		return fmt.Errorf("routing key %q: empty or over 255 bytes", truncate(m.Destination, 64))
	}
	if len(m.Body) > p.maxBody {
		return fmt.Errorf("body of %d bytes over MaxBodyBytes %d", len(m.Body), p.maxBody)
	}
	for k, v := range m.Headers {
		if k == "" || len(k) > 255 || strings.ContainsFunc(k, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return fmt.Errorf("header %q: an empty name, one over 255 bytes or a control character in it", truncate(k, 64))
		}
		if strings.ContainsAny(v, "\x00\r\n") {
			return fmt.Errorf("header %q: NUL, CR or LF in its value", k)
		}
		if reservedPublish(k) {
			return fmt.Errorf("header %q is reserved", k)
		}
	}
	return nil
}

// reservedPublish reports whether Publish refuses the header name k
// (compared without regard to case).
func reservedPublish(k string) bool {
	k = strings.ToLower(k)
	switch k {
	case "cc", "bcc", "x-death", strings.ToLower(HeaderDeliveryCount), strings.ToLower(HeaderOriginalQueue),
		copyhdr.OriginalKey, copyhdr.Attempts, copyhdr.DeadLetterReason, outboxid.Header:
		return true
	}
	return strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-")
}

// Close closes the connection. Publish returns an error after it.
func (pp *Publisher) Close() error {
	pp.p.conns.Close()
	return nil
}
