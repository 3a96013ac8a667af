package pgstore

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgconn"
)

// tlsMode names the TLS behaviour of a parsed pgx configuration, as
// libpq's sslmode names it: "disable" (plaintext), "allow" (plaintext,
// then TLS), "prefer" (TLS without verifying the server, then plaintext:
// pgx's default when the URL names no sslmode), "require" (TLS without
// verifying the server), "verify-ca" (the chain is verified, not the host
// name) or "verify-full" (chain and host name: the recommended setting).
func tlsMode(cfg *pgconn.Config) string {
	plainFallback, tlsFallback := false, false
	for _, f := range cfg.Fallbacks {
		if f.TLSConfig == nil {
			plainFallback = true
		} else {
			tlsFallback = true
		}
	}
	t := cfg.TLSConfig
	switch {
	case t == nil && tlsFallback:
		return "allow"
	case t == nil:
		return "disable"
	case t.InsecureSkipVerify && t.VerifyPeerCertificate == nil && plainFallback:
		return "prefer"
	case t.InsecureSkipVerify && t.VerifyPeerCertificate == nil:
		return "require"
	case t.InsecureSkipVerify:
		return "verify-ca"
	}
	return "verify-full"
}

// logPostgresTLS logs the effective TLS mode once at open: at info for
// verify-full and verify-ca, as a warning otherwise, since the server is
// not authenticated (and prefer falls back to plaintext silently).
func logPostgresTLS(ctx context.Context, log *slog.Logger, cfg *pgconn.Config, red string) {
	if log == nil {
		return
	}
	mode := tlsMode(cfg)
	switch mode {
	case "verify-full", "verify-ca":
		log.InfoContext(ctx, "idempotency: PostgreSQL TLS", "url", red, "sslmode", mode)
	default:
		log.WarnContext(ctx, "idempotency: PostgreSQL connection does not verify the server; use sslmode=verify-full",
			"url", red, "sslmode", mode, "plaintext_possible", mode == "disable" || mode == "allow" || mode == "prefer")
	}
}
