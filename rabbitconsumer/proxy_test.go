package rabbitconsumer

import (
	"crypto/tls"
	"testing"

	"github.com/acemq/msgaudit/internal/testkit/tcpproxy"
)

// newProxy forwards TCP connections from 127.0.0.1:0 to upstream. Cut
// closes every live connection, which the broker sees as a dropped client:
// it requeues everything unacknowledged on it. With a TLS config the proxy
// terminates TLS (an amqps:// endpoint in front of a plain broker). It is
// closed with the test.
func newProxy(t testing.TB, upstream string, tc *tls.Config) *tcpproxy.Proxy {
	t.Helper()
	p, err := tcpproxy.New(upstream, tcpproxy.Options{TLS: tc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}
