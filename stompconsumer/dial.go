package stompconsumer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/internal/tlsconf"
	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
)

// dialer opens STOMP connections to the configured endpoints.
type dialer struct {
	endpoints []endpoint
	tls       *tls.Config // nil: no TLS options; ssl:// endpoints then use system roots
	login     string
	passcode  string
	vhost     string
	clientID  string
	keep      []string      // header names the limiter keeps on a cut frame
	heartBeat time.Duration // < 0 disables
	timeout   time.Duration
	maxHeader int
	maxBody   int
	log       *slog.Logger
	red       redact.Redactor
	// publish: the connection is a Publisher's, whose Publish bounds a
	// SEND's receipt wait itself (go-stomp must not give it up: see dial).
	publish bool
}

// conn is one live STOMP connection.
type conn struct {
	stomp *stomp.Conn
	net   net.Conn
	ep    endpoint
	lim   *limitReader
}

// receiptTimeout bounds the waits for UNSUBSCRIBE and DISCONNECT receipts.
const receiptTimeout = 5 * time.Second

// commitTimeout bounds the wait for a COMMIT's receipt: past it the
// connection is failed (see commitWithin).
const commitTimeout = 10 * time.Second

// dial connects to ep: TCP with DialContext, TLS when the endpoint asks for
// it, then the STOMP 1.2 CONNECT. Every error wraps ErrRejected, ErrTLS or
// the network error, and is redacted.
func (d *dialer) dial(ctx context.Context, ep endpoint) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()

	var nd net.Dialer
	nc, err := nd.DialContext(ctx, "tcp", ep.hostport)
	if err != nil {
		return nil, d.red.Error(fmt.Errorf("stompconsumer: dial %s: %w", ep, err))
	}
	useTLS := ep.tls || (!ep.explicit && d.tls != nil)
	if useTLS {
		var cfg *tls.Config
		if d.tls != nil {
			cfg = d.tls.Clone()
		} else {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if cfg.ServerName == "" {
			cfg.ServerName = ep.host
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			if !tlsconf.Permanent(err) || ctx.Err() != nil {
				// A cancelled Run or a connection dropped mid-handshake
				// is not a certificate problem: it is retried (or ends
				// Run quietly), like any other failed dial.
				return nil, d.red.Error(fmt.Errorf("stompconsumer: TLS handshake with %s: %w", ep, err))
			}
			return nil, d.red.Error(fmt.Errorf("%w with %s: %w", ErrTLS, ep, err))
		}
		nc = tc
	}

	// go-stomp bounds neither the CONNECT write nor (without a ctx
	// deadline) the CONNECTED read; close the socket if ctx ends first.
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	lim := newLimitReader(nc, d.maxHeader, d.maxBody)
	for _, k := range d.keep {
		lim.keepHeader(k)
	}
	login, pass := d.login, d.passcode
	if login == "" && pass == "" {
		login, pass = ep.login, ep.passcode
	}
	host := d.vhost
	if host == "" {
		host = ep.host
	}
	hb := d.heartBeat
	if hb < 0 {
		hb = 0
	}
	opts := []func(*stomp.Conn) error{
		stomp.ConnOpt.AcceptVersion(stomp.V12),
		stomp.ConnOpt.Host(host),
		// No heart-beats from the client: go-stomp v3.1.3 gives up a
		// receipt wait after the interval it sends heart-beats at, leaves
		// the wait's channel behind, and its connection goroutine then
		// blocks for good on that channel at the next receipt or error,
		// with every later frame (and the close) waiting behind it. With
		// no client heart-beats it never gives up a wait; commitWithin
		// bounds the wait for a COMMIT's receipt instead.
		stomp.ConnOpt.HeartBeat(0, hb),
		stomp.ConnOpt.Logger(stompLogger{log: d.log, red: d.red}),
		stomp.ConnOpt.ReadBufferSize(16 << 10),
		stomp.ConnOpt.UnsubscribeReceiptTimeout(receiptTimeout),
		stomp.ConnOpt.DisconnectReceiptTimeout(receiptTimeout),
	}
	if !d.publish {
		opts = append(opts, stomp.ConnOpt.RcvReceiptTimeout(receiptTimeout))
	} else {
		// No bound: a SEND's receipt wait given up by go-stomp would
		// leave its channel behind and wedge the connection when the
		// receipt comes (see above). Publish bounds the wait by closing
		// the socket, which answers it with an error.
		opts = append(opts, stomp.ConnOpt.RcvReceiptTimeout(0))
	}
	if d.clientID != "" {
		opts = append(opts, stomp.ConnOpt.Header("client-id", d.clientID))
	}
	if login != "" || pass != "" {
		opts = append(opts, stomp.ConnOpt.Login(login, pass))
	}
	sc, err := stomp.ConnectWithContext(ctx, &limitedConn{Conn: nc, r: lim}, opts...)
	if !stop() {
		// ctx ended during CONNECT: the socket is closed.
		if sc != nil {
			_ = sc.MustDisconnect()
		}
		nc.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, d.red.Error(fmt.Errorf("stompconsumer: connect %s: %w", ep, err))
	}
	if err != nil {
		nc.Close()
		var se stomp.Error
		if errors.As(err, &se) && se.Frame != nil && se.Frame.Command == frame.ERROR {
			return nil, d.red.Error(fmt.Errorf("%w %s: %s", ErrRejected, ep, se.Message))
		}
		return nil, d.red.Error(fmt.Errorf("stompconsumer: connect %s: %w", ep, err))
	}
	_ = nc.SetDeadline(time.Time{})
	return &conn{stomp: sc, net: nc, ep: ep, lim: lim}, nil
}

// permanent reports whether a connection error will not go away by
// retrying: the broker rejected the CONNECT (credentials) or the server's
// certificate failed verification.
func permanent(err error) bool {
	if errors.Is(err, ErrRejected) {
		return true
	}
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	return errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci)
}

// limitedConn is the net.Conn handed to go-stomp: reads go through the
// frame limiter, everything else to the socket.
type limitedConn struct {
	net.Conn
	r *limitReader
}

func (c *limitedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// stompLogger adapts go-stomp's Logger to slog at debug level (go-stomp
// logs routine events such as a closed subscription as INFO/ERROR).
type stompLogger struct {
	log *slog.Logger
	red redact.Redactor
}

func (l stompLogger) out(level slog.Level, msg string) {
	l.log.Log(context.Background(), level, "go-stomp: "+l.red.String(msg))
}
func (l stompLogger) Debugf(f string, v ...any)   { l.out(slog.LevelDebug, fmt.Sprintf(f, v...)) }
func (l stompLogger) Infof(f string, v ...any)    { l.out(slog.LevelDebug, fmt.Sprintf(f, v...)) }
func (l stompLogger) Warningf(f string, v ...any) { l.out(slog.LevelDebug, fmt.Sprintf(f, v...)) }
func (l stompLogger) Errorf(f string, v ...any)   { l.out(slog.LevelDebug, fmt.Sprintf(f, v...)) }
func (l stompLogger) Debug(m string)              { l.out(slog.LevelDebug, m) }
func (l stompLogger) Info(m string)               { l.out(slog.LevelDebug, m) }
func (l stompLogger) Warning(m string)            { l.out(slog.LevelDebug, m) }
func (l stompLogger) Error(m string)              { l.out(slog.LevelDebug, m) }
