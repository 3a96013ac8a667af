package stompconsumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/acemq/msgaudit/internal/consumerkit"
	"github.com/acemq/msgaudit/internal/outboxid"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/outbox"
	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
)

var _ outbox.Publisher = (*Publisher)(nil)

// Publisher publishes an outbox's messages to ActiveMQ over STOMP (see
// outbox.Publisher). Create it with NewPublisher; it is safe for
// concurrent use. go-stomp waits for one receipt at a time per
// connection, so concurrent Publish calls on one Publisher take turns.
//
// Printing a Publisher (with any verb) shows no credentials: they sit
// behind pointers fmt does not follow.
type Publisher struct{ p *publisher }

// publisher holds no secret itself: fmt prints the fields of the struct a
// pointer points to for a verb that does not fit it (%s of a Publisher
// prints this struct), but never follows a pointer further.
type publisher struct {
	dial    *dialer
	conns   *consumerkit.Redial[*conn]
	maxBody int
}

// sendTimeout bounds a SEND's wait for its receipt when ctx has no
// earlier deadline; past it the connection is closed and Publish returns
// a transient error.
const sendTimeout = 30 * time.Second

// NewPublisher returns a Publisher connected to the first broker of
// cfg.Addresses that answers. It reads only the connection fields of cfg:
// Addresses, Login, Passcode, VirtualHost, TLS, CAFile, CertFile,
// KeyFile, ServerName, ClientID, ConnectTimeout (bounding each dial),
// Heartbeat, ReconnectBackoff (spacing redials after failed ones),
// MaxHeaderBytes and MaxBodyBytes (a larger body is refused, as a
// Consumer with the same Config would cut it) and Pipeline.Logger (for
// go-stomp's logs, redacted).
//
// A lost connection is dialled again, over the addresses in rotation, at
// the next Publish after the one that found it broken.
func NewPublisher(ctx context.Context, cfg Config) (*Publisher, error) {
	if len(cfg.Addresses) == 0 {
		return nil, fmt.Errorf("%w: no Addresses", ErrConfig)
	}
	eps, tc, red, err := cfg.connection()
	if err != nil {
		return nil, err
	}
	cfg.connectionDefaults()
	log := cfg.Pipeline.Logger
	if log == nil {
		log = nopLogger()
	}
	log = slog.New(redact.NewHandler(log.Handler(), red))
	p := &publisher{
		dial: &dialer{endpoints: eps, tls: tc, login: cfg.Login, passcode: cfg.Passcode, vhost: cfg.VirtualHost,
			clientID: cfg.ClientID, heartBeat: cfg.Heartbeat, timeout: cfg.ConnectTimeout,
			maxHeader: cfg.MaxHeaderBytes, maxBody: cfg.MaxBodyBytes, log: log, red: red, publish: true},
		maxBody: cfg.MaxBodyBytes,
	}
	next := 0
	p.conns = consumerkit.NewRedial(func(ctx context.Context) (*conn, error) {
		var err error
		for range p.dial.endpoints {
			ep := p.dial.endpoints[next%len(p.dial.endpoints)]
			var cn *conn
			if cn, err = p.dial.dial(ctx, ep); err == nil {
				return cn, nil
			}
			next++
			if permanent(err) || ctx.Err() != nil {
				break
			}
		}
		return nil, err
	}, func(cn *conn) {
		// The socket first: it ends a SEND's receipt wait, which holds
		// the lock MustDisconnect takes; MustDisconnect apart, as a SEND
		// left behind (see send) holds that lock for good.
		cn.net.Close()
		go func() { _ = cn.stomp.MustDisconnect() }()
	}, cfg.ReconnectBackoff)
	if _, err := p.conns.Get(ctx); err != nil {
		return nil, err
	}
	return &Publisher{p}, nil
}

// Publish sends m to the STOMP destination m.Destination, persistent,
// with the header outboxid.Header set to id and m.Headers (a
// "content-type" among them is the frame's content type), and returns
// nil once the broker's receipt confirms it. It refuses (outbox.ErrRefused)
// an id outboxid.Valid rejects, a destination that is empty, holds NUL,
// CR or LF or names no queue or topic ("/queue/", which ActiveMQ answers
// by dropping the connection), a body over MaxBodyBytes, a header the
// STOMP frame or this package reserves (destination, receipt,
// content-length, transaction, message-id, persistent, outboxid.Header,
// the retry-copy headers...) or one whose name or value holds NUL, CR or
// LF; and so does the broker's ERROR frame answering the SEND (ActiveMQ
// refuses, for one, a /remote-temp-queue/ that does not exist). Any other
// error (a lost connection, no receipt within ctx's deadline or 30s) is
// transient: the connection is closed and the next Publish dials again.
func (pp *Publisher) Publish(ctx context.Context, id string, m outbox.Message) error {
	p := pp.p
	contentType, err := p.check(id, m)
	if err != nil {
		return fmt.Errorf("%w: %w", outbox.ErrRefused, err)
	}
	opts := make([]func(*frame.Frame) error, 0, len(m.Headers)+3)
	for k, v := range m.Headers {
		if !strings.EqualFold(k, frame.ContentType) {
			opts = append(opts, stomp.SendOpt.Header(k, v))
		}
	}
	opts = append(opts, stomp.SendOpt.Header(outboxid.Header, id), stomp.SendOpt.Header("persistent", "true"), stomp.SendOpt.Receipt)
	for try := 0; ; try++ {
		cn, err := p.conns.Get(ctx)
		if err != nil {
			return p.dial.red.Error(fmt.Errorf("stompconsumer: publish %s: %w", id, err))
		}
		err = p.send(ctx, cn, m.Destination, contentType, m.Body, opts)
		if err == nil {
			return nil
		}
		var se stomp.Error
		if errors.As(err, &se) && se.Frame != nil && se.Frame.Command == frame.ERROR && se.Frame.Header.Get(frame.ReceiptId) != "" {
			// The broker answered this SEND (the only one awaiting a
			// receipt on the connection) with an ERROR and closed the
			// connection.
			p.conns.Drop(cn)
			return p.dial.red.Error(fmt.Errorf("%w: stompconsumer: %s refused %s to %s: %s", outbox.ErrRefused, cn.ep, id, m.Destination, se.Message))
		}
		p.conns.Drop(cn)
		if errors.Is(err, stomp.ErrAlreadyClosed) && try == 0 {
			// The connection was found closed before anything was
			// written: dial again at once.
			continue
		}
		return p.dial.red.Error(fmt.Errorf("stompconsumer: publish %s to %s on %s: %w", id, m.Destination, cn.ep, err))
	}
}

// send SENDs with a receipt on cn and waits for it until ctx ends or
// sendTimeout passes; then it closes the socket, which ends go-stomp's
// wait with an error, and returns ctx's error or the timeout.
func (p *publisher) send(ctx context.Context, cn *conn, dest, contentType string, body []byte, opts []func(*frame.Frame) error) error {
	done := make(chan error, 1)
	go func() { done <- cn.stomp.Send(dest, contentType, body, opts...) }()
	t := time.NewTimer(sendTimeout)
	defer t.Stop()
	var cause error
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		cause = ctx.Err()
	case <-t.C:
		cause = fmt.Errorf("no receipt within %v", sendTimeout)
	}
	cn.net.Close()
	// Closing the socket answers go-stomp's wait, unless its connection
	// goroutine already ended (the connection died just before this SEND
	// took the lock): then the SEND waits for good, and is left behind.
	select {
	case <-done:
	case <-time.After(receiptTimeout):
	}
	return cause
}

// reservedPublish are the header names Publish refuses in
// outbox.Message.Headers, compared without regard to case: the frame's
// own (consumer.go's reserved), the ones Publish sets, and ActiveMQ's
// receipt-id and subscription id.
func reservedPublish(k string) bool {
	k = strings.ToLower(k)
	return reserved[k] || k == outboxid.Header || k == frame.Id
}

// check validates a message before it is sent and returns its content
// type.
func (p *publisher) check(id string, m outbox.Message) (string, error) {
	if !outboxid.Valid(id) {
		return "", fmt.Errorf("id %q is not a valid outbox id", truncate(id, 64))
	}
	d := m.Destination
	if d == "" || strings.ContainsAny(d, "\x00\r\n") {
		return "", fmt.Errorf("destination %q", d)
	}
	for _, prefix := range []string{"/queue/", "/topic/", "/temp-queue/", "/temp-topic/"} {
		if d == prefix {
			return "", fmt.Errorf("destination %q names no queue or topic", d)
		}
	}
	if len(m.Body) > p.maxBody {
		return "", fmt.Errorf("body of %d bytes over MaxBodyBytes %d", len(m.Body), p.maxBody)
	}
	var contentType string
	for k, v := range m.Headers {
		switch {
		case k == "" || strings.ContainsAny(k, "\x00\r\n") || strings.ContainsAny(v, "\x00\r\n"):
			return "", fmt.Errorf("header %q: an empty name, or NUL, CR or LF in its name or value", k)
		case strings.EqualFold(k, frame.ContentType):
			contentType = v
		case reservedPublish(k):
			return "", fmt.Errorf("header %q is reserved", k)
		}
	}
	return contentType, nil
}

// Close disconnects. Publish returns an error after it.
func (pp *Publisher) Close() error {
	pp.p.conns.Close()
	return nil
}
