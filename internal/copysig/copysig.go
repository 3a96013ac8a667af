// Package copysig authenticates the copies a consumer makes of a delivery
// (its retry copies and dead-letter records): an HMAC-SHA256, under a
// secret, of the idempotency key and the attempt count the copy carries
// and of a digest of its body. A consumer honours a carried key and
// attempt count only on a delivery whose signature verifies, so a producer
// cannot make another message's key its own (and have it taken as a
// duplicate, acknowledged unhandled), nor skip attempts; a signature moved
// onto another body does not verify.
package copysig

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"strings"
	"sync"
)

// Header carries a copy's signature.
const Header = "x-copy-signature"

// MinSecret is the shortest secret accepted, in bytes.
const MinSecret = 16

// version starts every signature and every MAC input, so a later format
// never verifies as this one.
const version = "v1"

// Signer signs and verifies copies under one secret. It is safe for
// concurrent use. Printing it never shows the secret.
type Signer struct {
	pool sync.Pool // of hash.Hash: HMAC-SHA256 under the secret
}

// New returns a Signer under secret (copied), or under 32 random bytes
// when secret is empty. A secret shorter than MinSecret is an error.
func New(secret []byte) (*Signer, error) {
	switch {
	case len(secret) == 0:
		secret = make([]byte, 32)
		_, _ = rand.Read(secret) // never fails (crypto/rand panics instead)
	case len(secret) < MinSecret:
		return nil, fmt.Errorf("copy secret is %d bytes; at least %d are needed (32 random bytes recommended)", len(secret), MinSecret)
	default:
		secret = append([]byte(nil), secret...)
	}
	s := &Signer{}
	s.pool.New = func() any { return hmac.New(sha256.New, secret) }
	return s, nil
}

// String describes the Signer without its secret.
func (s *Signer) String() string { return "copysig.Signer{secret:xxxxx}" }

// GoString is String, so %#v does not show the secret either.
func (s *Signer) GoString() string { return s.String() }

// mac returns the MAC of a copy carrying key and attempts (the header
// values as sent) with body.
func (s *Signer) mac(key, attempts string, body []byte) []byte {
	h := s.pool.Get().(hash.Hash)
	defer s.pool.Put(h)
	h.Reset()
	sum := sha256.Sum256(body)
	var b []byte
	b = append(b, version...)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(len(attempts)))
	b = append(b, attempts...)
	b = append(b, sum[:]...)
	h.Write(b)
	return h.Sum(nil)
}

// Sign returns the Header value of a copy carrying key and attempts (the
// header values as sent, "" when absent) with body.
func (s *Signer) Sign(key, attempts string, body []byte) string {
	return version + "." + base64.RawURLEncoding.EncodeToString(s.mac(key, attempts, body))
}

// Verify reports whether sig is the signature of a copy carrying key and
// attempts with body, under this Signer's secret.
func (s *Signer) Verify(sig, key, attempts string, body []byte) bool {
	enc, ok := strings.CutPrefix(sig, version+".")
	if !ok || len(enc) != base64.RawURLEncoding.EncodedLen(sha256.Size) {
		return false
	}
	got, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return false
	}
	return hmac.Equal(got, s.mac(key, attempts, body))
}
