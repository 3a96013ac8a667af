package stompconsumer

import (
	"testing"

	"github.com/acemq/msgaudit/internal/testkit/tcpproxy"
)

// proxy is a TCP forwarder between the consumer and the broker. Cut closes
// every live connection (both sides), which the broker sees as a dropped
// client: it redelivers everything unacknowledged, prefetched messages
// included. SetDown(true) refuses new connections until SetDown(false).
type proxy = tcpproxy.Proxy

// newProxy listens on 127.0.0.1:0 and forwards to upstream. It is closed
// with the test.
func newProxy(t testing.TB, upstream string) *proxy {
	t.Helper()
	p, err := tcpproxy.New(upstream, tcpproxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}
