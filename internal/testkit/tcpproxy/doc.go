// Package tcpproxy is a fault-injection TCP proxy for tests and the msgaudit
// demo. It listens on a loopback port (127.0.0.1:0), forwards every accepted
// connection to one upstream address, and lets the caller break things on
// purpose: Cut drops every live connection (the broker sees a client that
// vanished), SetDown refuses new connections, and Close stops it all.
// With Options.TLS the proxy terminates TLS in front of a plain upstream.
// With Options.Split and Options.Filter it cuts what clients send into
// frames and can drop one, or cut the connection exactly at one (a STOMP
// COMMIT, say).
//
// It is not a production proxy: it listens on loopback only, has no limits
// beyond a filtered frame's 64 MiB, and looks at nothing a client sends
// unless a Filter is set.
//
// Concurrency: every method of Proxy is safe for concurrent use. Close waits
// until every goroutine the proxy started has returned, and may be called
// more than once.
package tcpproxy
