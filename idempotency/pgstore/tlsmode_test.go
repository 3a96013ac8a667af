package pgstore

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestTLSMode: every sslmode maps back to its name, and no sslmode
// at all is pgx's prefer (TLS without verification, plaintext fallback).
func TestTLSMode(t *testing.T) {
	t.Setenv("PGSSLMODE", "")
	for _, c := range []struct{ query, want string }{
		{"", "prefer"},
		{"?sslmode=disable", "disable"},
		{"?sslmode=allow", "allow"},
		{"?sslmode=prefer", "prefer"},
		{"?sslmode=require", "require"},
		{"?sslmode=verify-full&sslrootcert=system", "verify-full"},
	} {
		cfg, err := pgconn.ParseConfig("postgres://u@db.example:5432/x" + c.query)
		if err != nil {
			t.Fatalf("%s: %v", c.query, err)
		}
		if got := tlsMode(cfg); got != c.want {
			t.Errorf("%q: %s, want %s", c.query, got, c.want)
		}
	}
	// verify-ca, as pgx builds it (its parse needs a CA file): the chain
	// is checked by a callback, the host name is not.
	ca := &pgconn.Config{TLSConfig: &tls.Config{InsecureSkipVerify: true,
		VerifyPeerCertificate: func([][]byte, [][]*x509.Certificate) error { return nil }}}
	if got := tlsMode(ca); got != "verify-ca" {
		t.Errorf("verify-ca config: %s", got)
	}
}
