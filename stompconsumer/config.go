package stompconsumer

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/internal/tlsconf"
)

// Defaults for the zero fields of Config.
const (
	DefaultPrefetch        = 100
	DefaultConcurrency     = 1
	DefaultConnectRetries  = 5
	DefaultConnectTimeout  = 10 * time.Second
	DefaultHeartBeat       = 15 * time.Second
	DefaultShutdownTimeout = 30 * time.Second
	DefaultMaxHeaderBytes  = 64 << 10
	DefaultMaxBodyBytes    = 16 << 20
	DefaultDeadLetter      = "/queue/ActiveMQ.DLQ"
)

// Headers this package writes on the copies it sends, besides the
// receiver's receiver.HeaderOriginalKey ("x-original-key", the key a copy
// is audited under), receiver.HeaderAttempts ("x-attempts", the attempts
// already made) and receiver.HeaderDeadLetterReason ("x-dead-letter-reason").
const (
	// HeaderOriginalDestination is the destination a dead-lettered message
	// was consumed from.
	HeaderOriginalDestination = "x-original-destination"
	// HeaderRequeues counts hand-backs of a delivery whose outcome was
	// unknown (its original in flight here or on another consumer, or the
	// store unable to answer). They are not failures and do not count as
	// attempts.
	HeaderRequeues = "x-requeues"
	// HeaderRetryReason is the Result.Reason of the attempt a retry copy
	// follows ("handler-error", "panic", "in-flight", "store-error", ...).
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
	fmt.Fprintf(&b, " Subscriptions:%v Prefetch:%d Concurrency:%d InFlight:%d MaxAttempts:%d", dests, c.Prefetch, c.Concurrency, c.InFlight, c.MaxAttempts)
	fmt.Fprintf(&b, " ConnectRetries:%d HeartBeat:%v DeadLetterDestination:%q KeyHeader:%q Store:%t MemoryOnly:%t}",
		c.ConnectRetries, c.HeartBeat, c.DeadLetterDestination, c.KeyHeader, c.Store != nil, c.MemoryOnly)
	return b.String()
}

// GoString redacts like String, so %#v does not print the passcode either.
func (c Config) GoString() string { return c.String() }

// Format makes every verb (%v, %+v, %#v, %s, %q) print the redacted String.
func (c Config) Format(f fmt.State, verb rune) { redact.Format(f, verb, c.String()) }

// nopLogger returns a logger that discards everything.
func nopLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// String describes the consumer by its configuration, redacted as
// Config.String redacts it: the consumer's unexported fields (the
// configuration, the dialer, the redactor) would otherwise print the
// passcode raw under %+v.
func (c *Consumer) String() string { return "stompconsumer.Consumer{" + c.cfg.String() + "}" }

// GoString redacts like String.
func (c *Consumer) GoString() string { return c.String() }

// Format makes every verb print the redacted String.
func (c *Consumer) Format(f fmt.State, verb rune) { redact.Format(f, verb, c.String()) }
