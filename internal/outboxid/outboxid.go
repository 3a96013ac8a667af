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

// delivery is the incoming delivery an inbox handler runs for, and the
// number of sends made in this run.
type delivery struct {
	ns, key string
	sends   atomic.Uint64
}

type ctxKey struct{}

// With returns ctx carrying the delivery (namespace, key) of one handler
// run: each run starts counting its sends at zero.
func With(ctx context.Context, ns, key string) context.Context {
	return context.WithValue(ctx, ctxKey{}, &delivery{ns: ns, key: key})
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
