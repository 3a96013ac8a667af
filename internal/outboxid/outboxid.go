// Package outboxid derives the ids of outgoing messages and carries the
// incoming delivery an outbox Send derives them from.
//
// An id sent from an inbox handler is a hash of the delivery's namespace,
// its idempotency key and the send's position in the handler's run, so a
// handler run again after a rollback, and a relay's resend, carry the same
// id. Any other send gets a random id, recorded with the row.
package outboxid

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sync/atomic"

	"github.com/acemq/msgaudit/internal/keyjoin"
)

// Header is the STOMP header that carries an outgoing message's id; the
// STOMP consumer takes it, domain-separated by Key, as the message's
// idempotency key in place of the broker's message-id (which changes on
// every resend).
const Header = "msgaudit-outbox-id"

// MaxLen is the longest id a consumer takes from Header.
const MaxLen = 128

// Key is the idempotency key a consumer derives from an outbox id: tagged,
// so no broker-assigned id (an ActiveMQ message-id starts "ID:") equals it.
func Key(id string) string { return keyjoin.Tag("outbox", id) }

// Valid reports whether id can be a message's outbox id: 1 to MaxLen
// bytes of printable ASCII other than ':' (STOMP escapes it), as Derive
// and Random write them.
func Valid(id string) bool {
	if len(id) == 0 || len(id) > MaxLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' || c == ':' || c == '\\' {
			return false
		}
	}
	return true
}

// delivery is the incoming delivery an inbox handler runs for, the
// number of sends made in this run, and the delivery's W3C trace context.
type delivery struct {
	ns, key       string
	sends         atomic.Uint64
	parent, state string
}

type ctxKey struct{}

// With returns ctx carrying the delivery (namespace, key) of one handler
// run, each run counting its sends from zero, and the trace context of
// headers (traceparent and tracestate) when it is well formed.
func With(ctx context.Context, ns, key string, headers map[string]string) context.Context {
	d := &delivery{ns: ns, key: key}
	if p := headers["traceparent"]; TraceParent(p) {
		d.parent = p
		if s := headers["tracestate"]; len(s) <= 512 && printable(s) {
			d.state = s
		}
	}
	return context.WithValue(ctx, ctxKey{}, d)
}

// Trace returns the trace context of the delivery ctx carries: its
// traceparent ("" when none) and tracestate.
func Trace(ctx context.Context) (parent, state string) {
	if d, _ := ctx.Value(ctxKey{}).(*delivery); d != nil {
		return d.parent, d.state
	}
	return "", ""
}

// TraceParent reports whether s is a W3C traceparent of version 00:
// "00-" 32 hex digits "-" 16 hex digits "-" 2 hex digits.
func TraceParent(s string) bool {
	if len(s) != 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return false
	}
	for i := 3; i < 55; i++ {
		if i == 35 || i == 52 {
			continue
		}
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// printable reports whether s is printable ASCII.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// Next returns the id of the next send of the handler run ctx carries, or
// a random id when ctx carries none.
func Next(ctx context.Context) string {
	d, _ := ctx.Value(ctxKey{}).(*delivery)
	if d == nil {
		return Random()
	}
	return Derive(d.ns, d.key, d.sends.Add(1)-1)
}

// Derive is the id of send number pos (from 0) of the run of delivery
// (ns, key): "d-" and 32 hex digits of a SHA-256 over the length-prefixed
// parts, so no two (ns, key, pos) share an input.
func Derive(ns, key string, pos uint64) string {
	h := sha256.New()
	var n [8]byte
	for _, s := range []string{ns, key} {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	binary.BigEndian.PutUint64(n[:], pos)
	h.Write(n[:])
	var sum [sha256.Size]byte
	return "d-" + hex.EncodeToString(h.Sum(sum[:0])[:16])
}

// Random is a fresh random id: "r-" and 32 hex digits.
func Random() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "r-" + hex.EncodeToString(b[:])
}
