package tlsconf_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/tlsconf"
)

// writePair writes a self-signed certificate and its key as PEM files.
func writePair(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestBuild(t *testing.T) {
	dir := t.TempDir()
	cert, key := writePair(t, dir)
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := &tls.Config{MinVersion: tls.VersionTLS13, ServerName: "base"}

	for _, tc := range []struct {
		name    string
		base    *tls.Config
		f       tlsconf.Files
		wantNil bool
		wantErr string
		check   func(t *testing.T, c *tls.Config)
	}{
		{name: "nothing set is plain TCP", wantNil: true},
		{name: "server name alone turns TLS on", f: tlsconf.Files{ServerName: "mq"}, check: func(t *testing.T, c *tls.Config) {
			if c.ServerName != "mq" || c.MinVersion != tls.VersionTLS12 {
				t.Errorf("ServerName %q MinVersion %x", c.ServerName, c.MinVersion)
			}
		}},
		{name: "base is cloned, not changed", base: base, f: tlsconf.Files{ServerName: "mq"}, check: func(t *testing.T, c *tls.Config) {
			if c == base || base.ServerName != "base" || c.ServerName != "mq" || c.MinVersion != tls.VersionTLS13 {
				t.Errorf("base changed or not cloned: %q %q", base.ServerName, c.ServerName)
			}
		}},
		{name: "CA file", f: tlsconf.Files{CAFile: cert}, check: func(t *testing.T, c *tls.Config) {
			if c.RootCAs == nil {
				t.Error("RootCAs not set")
			}
		}},
		{name: "client certificate", f: tlsconf.Files{CertFile: cert, KeyFile: key}, check: func(t *testing.T, c *tls.Config) {
			if len(c.Certificates) != 1 {
				t.Errorf("%d certificates", len(c.Certificates))
			}
		}},
		{name: "missing CA file", f: tlsconf.Files{CAFile: filepath.Join(dir, "none.pem")}, wantErr: "CAFile"},
		{name: "CA file without PEM", f: tlsconf.Files{CAFile: junk}, wantErr: "no PEM certificate"},
		{name: "certificate without key", f: tlsconf.Files{CertFile: cert}, wantErr: "set together"},
		{name: "key without certificate", f: tlsconf.Files{KeyFile: key}, wantErr: "set together"},
		{name: "bad key pair", f: tlsconf.Files{CertFile: cert, KeyFile: junk}, wantErr: "client certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tlsconf.Build(tc.base, tc.f)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (c == nil) != tc.wantNil {
				t.Fatalf("config = %v, want nil: %v", c, tc.wantNil)
			}
			if tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}

func TestPermanent(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"unknown authority", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, true},
		{"hostname", fmt.Errorf("dial: %w", x509.HostnameError{Host: "mq"}), true},
		{"alert from the peer", tls.AlertError(42), true},
		{"not TLS", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, true},
		{"connection dropped", io.EOF, false},
		{"cancelled", context.Canceled, false},
		{"timeout", fmt.Errorf("handshake: %w", os.ErrDeadlineExceeded), false},
	} {
		if got := tlsconf.Permanent(tc.err); got != tc.want {
			t.Errorf("%s: Permanent(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
