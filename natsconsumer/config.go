package natsconsumer

import (
	"crypto/tls"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/acemq/msgaudit/internal/consumerkit"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/internal/tlsconf"
	"github.com/acemq/msgaudit/outbox"
	"github.com/acemq/msgaudit/receiver"
	"github.com/nats-io/nats.go"
)

// Defaults for the zero fields of Config (each field's documentation
// says its default).
const (
	defaultConcurrency     = 1
	defaultAckWait         = 30 * time.Second
	defaultConnectTimeout  = 10 * time.Second
	defaultHeartbeat       = 10 * time.Second
	defaultShutdownTimeout = 30 * time.Second
	defaultMaxRequeueDelay = 5 * time.Second
	defaultMaxAttempts     = 5 // receiver.Config.MaxAttempts's default
	minAckWait             = time.Second
)

// Headers this package writes on a dead-letter record, besides
// "x-dead-letter-reason" (Result.Reason), "x-attempts" (Result.Attempt)
// and "x-original-key" (the delivery's idempotency key).
const (
	// HeaderOriginalStream names the stream the message was consumed from.
	HeaderOriginalStream = "x-original-stream"
	// HeaderOriginalSubject is the subject the message was published to.
	HeaderOriginalSubject = "x-original-subject"
	// HeaderOriginalSequence is the message's stream sequence.
	HeaderOriginalSequence = "x-original-sequence"
	// HeaderOriginalMsgID is the publisher's Nats-Msg-Id, as it set it,
	// when it set one (the record's own Nats-Msg-Id is
	// "msgaudit-dlq:<stream>#<consumer>:<sequence>").
	HeaderOriginalMsgID = "x-original-msg-id"
)

// Config configures a Consumer. The zero value of every field means its
// default; URL, Stream, Consumer, Handler and DeadLetterSubject are
// required, and so is the choice of durability in Pipeline: a Store, an
// Inbox, or MemoryOnly.
//
// Config implements fmt.Formatter and String: printing it with any verb
// masks the user information (user names, passwords, tokens) of URL.
type Config struct {
	// URL is the server, "nats://[user:pass@]host:4222" or "tls://…"
	// (TLS), or a comma-separated list of a cluster's servers. Credentials
	// come from the URL; they are never logged and never appear in an
	// error. A '/', '?', '#', '@', ',' or '%' in a user name, password or
	// token must be percent-encoded (%2F %3F %23 %40 %2C %25): New refuses
	// a raw one, which would cut the secret and take the rest for a host.
	URL string

	// TLS is the client TLS configuration (cloned per connection).
	// CAFile, CertFile/KeyFile and ServerName, when set, are applied on
	// top of it (or of a default config); ServerName defaults to the
	// URL's host. Setting any of them makes the connection use TLS.
	TLS                                   *tls.Config
	CAFile, CertFile, KeyFile, ServerName string

	// Stream is the JetStream stream to consume. It must exist: a missing
	// stream makes Run return an error wrapping ErrNoStream (not
	// retried).
	Stream string

	// Consumer is the durable name of the stream's pull consumer. Run
	// creates it, or updates it, on every connection with explicit
	// acknowledgements, AckWait, FilterSubjects and no delivery limit of
	// its own (MaxDeliver -1: the pipeline bounds attempts and
	// dead-letters, so the server never drops a message silently).
	// Processes that share the name compete for the messages; each other
	// durable name receives every message of the stream.
	Consumer string

	// FilterSubjects restricts the consumer to these subjects of the
	// stream; default: all. More than one needs nats-server 2.10.
	FilterSubjects []string

	// Handler processes each message, wrapped in the duplicate pipeline.
	Handler receiver.Handler

	// Concurrency is the number of handlers running at once; default 1.
	Concurrency int

	// InFlight is the number of deliveries the consumer holds at once:
	// each pull request asks for the free places only, so no message
	// waits in a client buffer while its AckWait runs, and up to InFlight
	// deliveries are claimed in the store (or the inbox) ahead while at
	// most Concurrency handlers run. Default: Concurrency, which handles
	// the messages in stream order when Concurrency is 1. A value below
	// Concurrency is an error from New.
	InFlight int

	// AckWait is how long the server waits for a delivery's
	// acknowledgement before it delivers the message again; default 30s,
	// at least 1s. While a delivery is in the pipeline (its handler
	// running, or waiting for a handler) the consumer tells the server it
	// is in progress every AckWait/4, so a slow handler keeps its
	// delivery.
	AckWait time.Duration

	// ReconnectBackoff spaces reconnect attempts, at start and after a
	// connection loss; its zero fields mean 100ms doubling to 10s, with
	// full jitter. (The delay before a failed delivery comes back is
	// Pipeline.Backoff.)
	ReconnectBackoff receiver.Backoff

	// ConnectRetries bounds the start. By default (zero or negative) Run
	// keeps trying to connect until ctx is done, with ReconnectBackoff
	// between attempts. With n > 0, Run returns ErrConnect when the first
	// attempt and n retries have failed. Each failed attempt is logged at
	// warn level. Refused credentials (ErrRejected), a certificate that
	// fails verification (ErrTLS) and a missing stream (ErrNoStream) end
	// Run at once. After the first connection the client reconnects until
	// ctx is done. ConnectTimeout bounds one attempt, and a request to
	// the server (creating the consumer, a dead-letter publish, a Term);
	// default 10s.
	ConnectRetries int
	ConnectTimeout time.Duration

	// Heartbeat is the client's ping interval: a connection that answers
	// no ping for two intervals is taken as lost. Default 10s.
	Heartbeat time.Duration

	// ShutdownTimeout is how long a graceful stop lets running handlers
	// finish after Run's context is cancelled before their context is
	// cancelled too; default 30s.
	ShutdownTimeout time.Duration

	// ConnectionName is the connection's name as the server shows it.
	ConnectionName string

	// Pipeline configures the duplicate pipeline the consumer builds (with
	// receiver.New) and owns. Durability is required there: Store (an
	// idempotency store shared by competing consumers and surviving
	// restarts), Inbox (a transactional inbox: Handler gets its
	// transaction through inbox.Handler or pgxinbox.Handler) or
	// MemoryOnly: true (duplicates absorbed only while this process runs;
	// Run logs this guarantee once at start). The consumer fills in what
	// only it knows: Audit when nil (a connaudit.Audit with its defaults,
	// owned by the Consumer so it survives reconnects, auditing the keys
	// "seq:<stream>:<sequence>": one producer per stream with the stream
	// sequence as its sequence), Handlers (Concurrency), MaxAttempts when
	// zero (5) and the zero fields of Backoff, which gives the delay of
	// the NakWithDelay that hands a failed delivery back: 100ms doubling
	// to 5s, with full jitter. Logger receives the consumer's logs too
	// (nil discards them), with the URL's secrets redacted. Its invalid
	// settings are errors from New.
	Pipeline receiver.Config

	// Outbox, when set, makes Run run its relay (outbox.Outbox.Run) beside
	// the handlers: it publishes what they sent with Outbox.Send, once
	// committed, on a connection of its own (NewPublisher with this
	// Config), and stops when Run returns, after the handlers. Messages
	// the relay has not sent by then wait in the table for the next relay.
	Outbox *outbox.Outbox

	// DeadLetterSubject receives a record of each dead-lettered message
	// (published with JetStream, its PubAck awaited before the original is
	// terminated). A stream must capture it: Run checks that one does
	// (ErrNoStream). New refuses a subject FilterSubjects match, and Run
	// a subject the consumed stream captures when the consumer reads it
	// (no FilterSubjects, or one that matches it): ErrConfig.
	DeadLetterSubject string
}

// connDefaults checks the connection fields of c (URL) and fills in the
// defaults of ReconnectBackoff, ConnectTimeout and Heartbeat.
func (c Config) connDefaults() (Config, error) {
	if c.URL == "" {
		return c, fmt.Errorf("%w: no URL", ErrConfig)
	}
	for _, u := range splitURLs(c.URL) {
		if err := checkURL(u); err != nil {
			return c, err
		}
	}
	c.ReconnectBackoff = consumerkit.WithDefaults(c.ReconnectBackoff, 100*time.Millisecond, 10*time.Second, 1)
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = defaultConnectTimeout
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = defaultHeartbeat
	}
	return c, nil
}

// withDefaults fills the zero fields of c and validates it.
func (c Config) withDefaults() (Config, error) {
	c, err := c.connDefaults()
	if err != nil {
		return c, err
	}
	if c.Stream == "" {
		return c, fmt.Errorf("%w: no Stream", ErrConfig)
	}
	if strings.ContainsAny(c.Stream, " \t\r\n.*>/\\") {
		return c, fmt.Errorf("%w: Stream %q: a stream name holds no whitespace, '.', '*', '>', '/' or '\\'", ErrConfig, c.Stream)
	}
	if c.Consumer == "" {
		return c, fmt.Errorf("%w: no Consumer (the durable name of the stream's pull consumer)", ErrConfig)
	}
	if strings.ContainsAny(c.Consumer, " \t\r\n.*>/\\") {
		return c, fmt.Errorf("%w: Consumer %q: a durable name holds no whitespace, '.', '*', '>', '/' or '\\'", ErrConfig, c.Consumer)
	}
	if c.Handler == nil {
		return c, fmt.Errorf("%w: nil Handler", ErrConfig)
	}
	if c.DeadLetterSubject == "" {
		return c, fmt.Errorf("%w: no DeadLetterSubject (a subject a stream captures, where dead-letter records go)", ErrConfig)
	}
	if !validSubject(c.DeadLetterSubject, false) {
		return c, fmt.Errorf("%w: DeadLetterSubject %q is not a subject one can publish to", ErrConfig, c.DeadLetterSubject)
	}
	for _, f := range c.FilterSubjects {
		if !validSubject(f, true) {
			return c, fmt.Errorf("%w: FilterSubjects: %q is not a subject", ErrConfig, f)
		}
		if subjectMatches(f, c.DeadLetterSubject) {
			return c, fmt.Errorf("%w: DeadLetterSubject %q matches FilterSubjects %q: dead letters would come back to this consumer", ErrConfig, c.DeadLetterSubject, f)
		}
	}
	if c.Concurrency <= 0 {
		c.Concurrency = defaultConcurrency
	}
	switch {
	case c.InFlight < 0:
		return c, fmt.Errorf("%w: negative InFlight %d", ErrConfig, c.InFlight)
	case c.InFlight == 0:
		c.InFlight = c.Concurrency
	case c.InFlight < c.Concurrency:
		return c, fmt.Errorf("%w: InFlight %d below Concurrency %d: a handler slot could never be used", ErrConfig, c.InFlight, c.Concurrency)
	}
	if c.AckWait == 0 {
		c.AckWait = defaultAckWait
	}
	if c.AckWait < minAckWait {
		return c, fmt.Errorf("%w: AckWait %v below %v", ErrConfig, c.AckWait, minAckWait)
	}
	if c.Pipeline.MaxAttempts == 0 {
		c.Pipeline.MaxAttempts = defaultMaxAttempts
	}
	c.Pipeline.Backoff = consumerkit.WithDefaults(c.Pipeline.Backoff, 100*time.Millisecond, defaultMaxRequeueDelay, 1)
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = defaultShutdownTimeout
	}
	return c, nil
}

// splitURLs splits a comma-separated server list.
func splitURLs(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// checkURL refuses a server URL nats.go could not use, and one whose
// user information holds a raw '/', '?', '#' or '@': url.Parse would end
// the host early and take the rest of a password or token for the host
// (which it then looks up in DNS and quotes in errors), a path or a
// query. (A raw ',' splits the list and leaves a part that is no URL; a
// raw '%' is an invalid escape.) None of the errors quotes the URL.
func checkURL(raw string) error {
	if _, rest, ok := strings.Cut(raw, "://"); ok {
		if at := strings.LastIndexByte(rest, '@'); at >= 0 && strings.ContainsAny(rest[:at], "/?#@") {
			return fmt.Errorf("%w: a URL of the list holds a raw '/', '?', '#' or '@' in its user name, password or token; %s", ErrConfig, encodeHint)
		}
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%w: a URL of the list cannot be parsed (want nats://host:port or tls://host:port, servers separated by ','); %s", ErrConfig, encodeHint)
	}
	switch u.Scheme {
	case "nats", "tls":
	default:
		return fmt.Errorf("%w: URL %s: scheme %q (want nats:// or tls://)", ErrConfig, Config{URL: raw}.redactedURL(), u.Scheme)
	}
	return nil
}

// encodeHint tells how to write a user name, password or token that
// holds a character URLs reserve.
const encodeHint = "percent-encode '/', '?', '#', '@', ',', ':', '%' and spaces in a user name, password or token (%2F %3F %23 %40 %2C %3A %25 %20)"

// validSubject reports whether s is a NATS subject: dot-separated
// non-empty tokens without whitespace; with wildcards, '*' as a token
// and '>' as the last one.
func validSubject(s string, wildcards bool) bool {
	if s == "" {
		return false
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		if t == "" || strings.ContainsAny(t, " \t\r\n") {
			return false
		}
		if strings.ContainsAny(t, "*>") {
			if !wildcards || (t != "*" && t != ">") || (t == ">" && i != len(toks)-1) {
				return false
			}
		}
	}
	return true
}

// subjectMatches reports whether the filter f (wildcards allowed)
// matches the literal subject s.
func subjectMatches(f, s string) bool {
	ft, st := strings.Split(f, "."), strings.Split(s, ".")
	for i, t := range ft {
		if t == ">" {
			return len(st) > i
		}
		if i >= len(st) || (t != "*" && t != st[i]) {
			return false
		}
	}
	return len(ft) == len(st)
}

// tlsConfig builds the client TLS configuration from Config.TLS and the
// file fields (nil: plain TCP, or nats.go's default for a tls:// URL).
func (c *Config) tlsConfig() (*tls.Config, error) {
	t, err := tlsconf.Build(c.TLS, tlsconf.Files{CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile, ServerName: c.ServerName})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return t, nil
}

// redactedURL is URL with the user information of every server masked:
// everything between "://" and the last '@' of each server's URL. When
// the list does not split cleanly into such URLs (a server without
// "://", a raw '/', '?', '#' or '@' in user information, or one without
// user information before one with it, which is what a raw ',' in a
// password gives), everything between the first "://" and the last '@'
// of the whole list is masked: where a secret ends is then a guess.
func (c Config) redactedURL() string {
	us := splitURLs(c.URL)
	sawPlain := false
	for i, raw := range us {
		_, rest, ok := strings.Cut(raw, "://")
		at := strings.LastIndexByte(rest, '@')
		if !ok || (at >= 0 && (sawPlain || strings.ContainsAny(rest[:at], "/?#@"))) {
			return maskUserinfo(c.URL)
		}
		sawPlain = sawPlain || at < 0
		us[i] = maskUserinfo(raw)
	}
	return strings.Join(us, ",")
}

// maskUserinfo replaces everything between the first "://" (or the start)
// and the last '@' of s with redact.Mask.
func maskUserinfo(s string) string {
	start := 0
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + 3
	}
	at := strings.LastIndexByte(s, '@')
	if at < start {
		return s
	}
	return s[:start] + redact.Mask + s[at:]
}

// secrets returns the passwords and tokens of URL, for the redactor of
// logs and errors, and the text between the first "://" and the last '@'
// of the whole list.
func (c Config) secrets() []string {
	us := splitURLs(c.URL)
	out := redact.URLSecrets(us...)
	for _, raw := range us {
		if u, err := url.Parse(raw); err == nil && u.User != nil {
			if _, ok := u.User.Password(); !ok && u.User.Username() != "" {
				out = append(out, u.User.Username())
			}
		}
	}
	if _, rest, ok := strings.Cut(c.URL, "://"); ok {
		if at := strings.LastIndexByte(rest, '@'); at > 0 {
			out = append(out, rest[:at])
		}
	}
	return out
}

// String describes the configuration with every secret redacted: the
// passwords and tokens of URL never appear. %v, %+v, %#v and %s of a
// Config use it.
func (c Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "natsconsumer.Config{URL:%s Stream:%q Consumer:%q FilterSubjects:%q", c.redactedURL(), c.Stream, c.Consumer, c.FilterSubjects)
	if c.TLS != nil || c.CAFile != "" || c.CertFile != "" || c.ServerName != "" {
		fmt.Fprintf(&b, " TLS:{custom:%t CAFile:%q CertFile:%q ServerName:%q}", c.TLS != nil, c.CAFile, c.CertFile, c.ServerName)
	}
	fmt.Fprintf(&b, " Concurrency:%d InFlight:%d AckWait:%v MaxAttempts:%d ConnectRetries:%d Heartbeat:%v",
		c.Concurrency, c.InFlight, c.AckWait, c.Pipeline.MaxAttempts, c.ConnectRetries, c.Heartbeat)
	fmt.Fprintf(&b, " Store:%t Inbox:%t MemoryOnly:%t Namespace:%q DeadLetterSubject:%q}",
		c.Pipeline.Store != nil, c.Pipeline.Inbox != nil, c.Pipeline.MemoryOnly, c.Pipeline.Namespace, c.DeadLetterSubject)
	return b.String()
}

// Format makes every verb (%#v included) print the redacted String.
func (c Config) Format(f fmt.State, verb rune) { redact.Format(f, verb, c.String()) }

// String describes the consumer by its configuration, redacted as
// Config.String redacts it.
func (c *Consumer) String() string { return "natsconsumer.Consumer{" + c.cfg.String() + "}" }

// Format makes every verb (%#v included) print the redacted String.
func (c *Consumer) Format(f fmt.State, verb rune) { redact.Format(f, verb, c.String()) }

// natsOptions are the client options of every connection.
func (c *Consumer) natsOptions() []nats.Option {
	return append(connOptions(c.cfg, c.tls),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { c.lose(err) }),
		nats.ReconnectHandler(func(*nats.Conn) { c.regain() }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.log.Warn("natsconsumer: client error", "err", c.red.Error(err))
		}))
}

// connOptions are the options of a connection with the connection fields
// of cfg (ConnectTimeout, ReconnectBackoff, Heartbeat, ConnectionName)
// and tc: it reconnects for ever.
func connOptions(cfg Config, tc *tls.Config) []nats.Option {
	opts := []nats.Option{
		nats.Timeout(cfg.ConnectTimeout),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(func(attempts int) time.Duration { return cfg.ReconnectBackoff.Delay(max(attempts-1, 0)) }),
		nats.PingInterval(cfg.Heartbeat),
		nats.MaxPingsOutstanding(2),
		nats.NoCallbacksAfterClientClose(),
	}
	if cfg.ConnectionName != "" {
		opts = append(opts, nats.Name(cfg.ConnectionName))
	}
	if tc != nil {
		opts = append(opts, nats.Secure(tc.Clone()))
	}
	return opts
}
