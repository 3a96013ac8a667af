package redisstore

import (
	"context"
	"crypto/tls"
	"log/slog"
)

// logRedisTLS warns once at open when a TLS configuration does not verify
// the server (rediss://…?skip_verify=true).
func logRedisTLS(ctx context.Context, log *slog.Logger, t *tls.Config, red string) {
	if log != nil && t != nil && t.InsecureSkipVerify {
		log.WarnContext(ctx, "idempotency: Redis TLS does not verify the server (skip_verify); anyone on the path can read and forge the store's traffic",
			"url", red)
	}
}
