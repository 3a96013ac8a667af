package stompconsumer

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/acemq/msgaudit/internal/consumerkit"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/internal/tlsconf"
)

// Defaults for the zero fields of Config (each field's documentation
// says its default).
const (
	defaultPrefetch        = 100
	defaultConcurrency     = 1
	defaultConnectTimeout  = 10 * time.Second
	defaultHeartbeat       = 15 * time.Second
	defaultShutdownTimeout = 30 * time.Second
	defaultMaxHeaderBytes  = 64 << 10
	defaultMaxBodyBytes    = 16 << 20
	defaultDeadLetter      = "/queue/ActiveMQ.DLQ"
)

// Headers this package writes on the copies it sends, besides
// "x-original-key" (the key a copy is audited under), "x-attempts" (the
// attempts already made), "x-dead-letter-reason" (Result.Reason) and
// "x-copy-signature", which authenticates the first two (see
// Config.CopySecret).
const (
	// HeaderOriginalDestination is the destination a dead-lettered message
	// was consumed from.
	HeaderOriginalDestination = "x-original-destination"
	// HeaderRetryReason is the Result.Reason of the attempt a retry copy
	// (made only with Config.CopySecret) follows ("handler-error" or
	// "panic").
	HeaderRetryReason = "x-retry-reason"
	// HeaderBodyOmitted is "true" on the dead-letter record of a frame cut
	// by the size limits: the record carries the frame's essential headers
	// and an empty body, because the consumer never held the original body.
	// HeaderOriginalNacked says whether that body is kept elsewhere.
	HeaderBodyOmitted = "x-body-omitted"
	// HeaderOriginalNacked is "true" on the dead-letter record of a
	// persistent frame cut by the size limits: once the record was
	// committed, the original, body and all, was NACKed, which hands it to
	// the broker's own dead-lettering (on ActiveMQ its dead-letter queue:
	// ActiveMQ.DLQ by default, DLQ.<queue> with a per-queue strategy).
	// The header is absent when the original was ACKed with the record,
	// its body lost: a non-persistent message (or one whose persistent
	// header was not kept), which ActiveMQ would discard on a NACK.
	HeaderOriginalNacked = "x-original-nacked"
	// HeaderOriginalMessageID is the broker's message-id of the original
	// on the dead-letter record of a frame cut by the size limits; a
	// NACKed original keeps that id in the broker's dead-letter queue.
	HeaderOriginalMessageID = "x-original-message-id"
)

// tlsConfig builds the client TLS configuration from Config.TLS or the
// file fields. It returns nil when nothing about TLS is configured.
func (c *Config) tlsConfig() (*tls.Config, error) {
	t, err := tlsconf.Build(c.TLS, tlsconf.Files{CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile, ServerName: c.ServerName})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return t, nil
}

// String describes the configuration with every secret redacted: the
// passcode, passwords in address URLs and TLS keys never appear. %v and %+v
// of a Config (or *Config) use it too.
func (c Config) String() string {
	var b strings.Builder
	b.WriteString("stompconsumer.Config{Addresses:[")
	for i, a := range c.Addresses {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(redact.Strict(a))
	}
	b.WriteString("]")
	fmt.Fprintf(&b, " Login:%q", c.Login)
	if c.Passcode != "" {
		b.WriteString(" Passcode:xxxxx")
	} else {
		b.WriteString(" Passcode:\"\"")
	}
	if c.VirtualHost != "" {
		fmt.Fprintf(&b, " VirtualHost:%q", c.VirtualHost)
	}
	if c.TLS != nil || c.CAFile != "" || c.CertFile != "" {
		fmt.Fprintf(&b, " TLS:{custom:%t CAFile:%q CertFile:%q ServerName:%q}", c.TLS != nil, c.CAFile, c.CertFile, c.ServerName)
	}
	dests := make([]string, len(c.Subscriptions))
	for i, s := range c.Subscriptions {
		dests[i] = s.Destination
	}
	fmt.Fprintf(&b, " Subscriptions:%v Prefetch:%d Concurrency:%d InFlight:%d MaxAttempts:%d", dests, c.Prefetch, c.Concurrency, c.InFlight, c.Pipeline.MaxAttempts)
	fmt.Fprintf(&b, " ConnectRetries:%d Heartbeat:%v DeadLetterDestination:%q KeyHeader:%q Store:%t Inbox:%t MemoryOnly:%t",
		c.ConnectRetries, c.Heartbeat, c.DeadLetterDestination, c.KeyHeader, c.Pipeline.Store != nil, c.Pipeline.Inbox != nil, c.Pipeline.MemoryOnly)
	if len(c.CopySecret) > 0 {
		b.WriteString(" CopySecret:xxxxx")
	}
	b.WriteString("}")
	return b.String()
}

// Format makes every verb (%v, %+v, %#v, %s, %q, ...) print the redacted
// String.
func (c Config) Format(f fmt.State, verb rune) { redact.Format(f, verb, c.String()) }

// nopLogger returns a logger that discards everything.
func nopLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// String describes the consumer by its configuration, redacted as
// Config.String redacts it: the consumer's unexported fields (the
// configuration, the dialer, the redactor) would otherwise print the
// passcode raw under %+v.
func (c *Consumer) String() string { return "stompconsumer.Consumer{" + c.cfg.String() + "}" }

// Format makes every verb (%#v included) print the redacted String.
func (c *Consumer) Format(f fmt.State, verb rune) { redact.Format(f, verb, c.String()) }

// connectionDefaults fills the zero connection fields the Consumer and
// the Publisher share: ConnectTimeout, Heartbeat, MaxHeaderBytes,
// MaxBodyBytes and ReconnectBackoff.
func (c *Config) connectionDefaults() {
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = defaultConnectTimeout
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = defaultHeartbeat
	}
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = defaultMaxHeaderBytes
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = defaultMaxBodyBytes
	}
	c.ReconnectBackoff = consumerkit.WithDefaults(c.ReconnectBackoff, 100*time.Millisecond, 10*time.Second, 0.5)
}

// connection parses the connection fields of c: the endpoints of
// Addresses, the TLS configuration, and the redactor of the passcode and
// the passwords in the addresses.
func (c *Config) connection() ([]endpoint, *tls.Config, redact.Redactor, error) {
	red := redact.New(c.Passcode).With(redact.URLSecrets(c.Addresses...)...)
	eps := make([]endpoint, len(c.Addresses))
	for i, a := range c.Addresses {
		ep, err := parseAddress(a)
		if err != nil {
			return nil, nil, red, err
		}
		eps[i] = ep
		red = red.With(ep.passcode)
	}
	tc, err := c.tlsConfig()
	if err != nil {
		return nil, nil, red, err
	}
	return eps, tc, red, nil
}
