package stompconsumer

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/acemq/msgaudit/internal/redact"
)

// Default ports of ActiveMQ's STOMP connectors.
const (
	defaultPort    = "61613"
	defaultTLSPort = "61612"
)

// endpoint is one parsed broker address.
type endpoint struct {
	hostport string // host:port to dial
	host     string // host alone, for the TLS server name and the STOMP host header
	tls      bool   // use TLS
	explicit bool   // the scheme said tcp/ssl explicitly (false for a bare host:port)
	login    string // from the URL's user info, if any
	passcode string // from the URL's user info, if any
}

// String returns the address without user info, safe to log.
func (e endpoint) String() string {
	if e.tls {
		return "ssl://" + e.hostport
	}
	return "tcp://" + e.hostport
}

// parseAddress parses "tcp://h:p", "stomp://h:p", "ssl://h:p",
// "stomp+ssl://h:p", "tls://h:p", "stomp+tls://h:p", "stomps://h:p" or a bare
// "h:p" / "h". A missing port is 61613 (61612 for TLS). User info
// ("tcp://user:pass@h:p") is accepted; errors never repeat it.
func parseAddress(s string) (endpoint, error) {
	var e endpoint
	s = strings.TrimSpace(s)
	if s == "" {
		return e, fmt.Errorf("%w: empty address", ErrConfig)
	}
	rest := s
	if i := strings.Index(s, "://"); i >= 0 {
		u, err := url.Parse(s)
		if err != nil {
			// url.Parse errors quote the input, which may hold a password.
			return e, fmt.Errorf("%w: address %q is not a URL", ErrConfig, redact.Strict(s))
		}
		switch strings.ToLower(u.Scheme) {
		case "tcp", "stomp":
		case "ssl", "tls", "stomp+ssl", "stomp+tls", "stomps":
			e.tls = true
		default:
			return e, fmt.Errorf("%w: address %q: unknown scheme %q (want tcp, stomp, ssl, stomp+ssl)", ErrConfig, redact.Strict(s), u.Scheme)
		}
		if u.Path != "" && u.Path != "/" {
			return e, fmt.Errorf("%w: address %q: unexpected path", ErrConfig, redact.Strict(s))
		}
		if u.User != nil {
			e.login = u.User.Username()
			e.passcode, _ = u.User.Password()
		}
		e.explicit = true
		rest = u.Host
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		// No port (or a bare IPv6 literal in brackets).
		host = strings.TrimSuffix(strings.TrimPrefix(rest, "["), "]")
		port = ""
	}
	if host == "" || strings.ContainsAny(host, "/@ ") {
		return e, fmt.Errorf("%w: address %q: missing or invalid host", ErrConfig, redact.Strict(s))
	}
	if port == "" {
		port = defaultPort
		if e.tls {
			port = defaultTLSPort
		}
	}
	e.host = host
	e.hostport = net.JoinHostPort(host, port)
	return e, nil
}
