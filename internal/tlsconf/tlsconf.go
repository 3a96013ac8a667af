// Package tlsconf builds a *tls.Config from the TLS options every
// connection of msgaudit takes: a base config, a CA file, a client
// certificate and key, and a server name.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Files are the file-based TLS options.
type Files struct {
	CAFile, CertFile, KeyFile, ServerName string
}

// Build returns nil (plain TCP) when neither base nor any field of f is set.
// Otherwise it returns a clone of base (or a TLS 1.2+ config) with the CA
// file's certificates as RootCAs, the client certificate appended and the
// server name set. Errors name the option at fault.
func Build(base *tls.Config, f Files) (*tls.Config, error) {
	if base == nil && f == (Files{}) {
		return nil, nil
	}
	var t *tls.Config
	if base != nil {
		t = base.Clone()
	} else {
		t = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("CAFile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CAFile %s: no PEM certificate found", f.CAFile)
		}
		t.RootCAs = pool
	}
	if f.CertFile != "" || f.KeyFile != "" {
		if f.CertFile == "" || f.KeyFile == "" {
			return nil, errors.New("CertFile and KeyFile must be set together")
		}
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		t.Certificates = append(t.Certificates, cert)
	}
	if f.ServerName != "" {
		t.ServerName = f.ServerName
	}
	return t, nil
}

// Permanent reports whether a TLS handshake error is one that retrying
// cannot fix: a certificate that fails verification on either side (an
// alert from the peer included), or a peer that does not speak TLS at all.
// A dropped connection or a cancelled context is not permanent.
func Permanent(err error) bool {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
		recordHdr tls.RecordHeaderError
		alert     tls.AlertError
	)
	return errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.As(err, &verify) || errors.As(err, &recordHdr) || errors.As(err, &alert)
}
