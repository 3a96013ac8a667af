// Package sqlitestore is the SQLite backend of package idempotency: an
// embedded, durable store in one file (modernc.org/sqlite, pure Go), the
// default for one machine.
//
// Importing it registers the "sqlite" scheme with idempotency.Open:
//
//	import _ "github.com/acemq/msgaudit/idempotency/sqlitestore"
//
//	s, err := idempotency.Open(ctx, "sqlite:/var/lib/app/idem.db", idempotency.Options{})
//
// sqlite:PATH and sqlite://PATH name the file PATH (sqlite:///abs/x.db is
// /abs/x.db). Open opens a file directly.
//
// # Durability
//
// The file is always in WAL mode; the synchronous setting decides when a
// commit reaches the disk. SQLite's documentation (the synchronous pragma,
// https://www.sqlite.org/pragma.html#pragma_synchronous, and
// https://www.sqlite.org/wal.html) states that a committed transaction
// survives a crash of the application whatever the setting, and that in WAL
// mode synchronous=NORMAL keeps the database consistent but may roll back
// the most recent commits after a power loss or an operating-system crash,
// because the WAL is synced only at checkpoints; FULL syncs the WAL at
// every commit, so a commit survives a power loss too.
//
//   - synchronous=normal (SyncNormal, the default): a Confirm that returned
//     survives the process being killed (SIGKILL, a panic, an OOM kill),
//     which TestSQLiteSIGKILLKeepsCommits checks. After a power loss or an
//     OS crash the last confirmations may be forgotten (and claims taken
//     back): the work they covered happened elsewhere and is kept, so a
//     later delivery of one of those messages is not recognised as a
//     duplicate and its work runs again: at-least-once, on power loss or
//     OS crash only.
//   - synchronous=full (SyncFull): a Confirm that returned survives a power
//     loss as well, at the cost of one disk sync per commit (per batch with
//     ConfirmBatch).
//
// Choose it with Options.Synchronous or in the path or URL:
//
//	s, err := idempotency.Open(ctx, "sqlite:///var/lib/app/idem.db?synchronous=full", idempotency.Options{})
//
// Any other value, or two settings that disagree, makes Open fail. The
// older form _pragma=synchronous(NORMAL) or (FULL) is read the same way.
package sqlitestore

import (
	"context"
	"fmt"
	"strings"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/redact"
)

func init() { idempotency.Register("sqlite", openURL) }

// openURL is idempotency.Open's entry for sqlite: URLs.
func openURL(ctx context.Context, rawURL string, o idempotency.Options) (idempotency.Store, error) {
	_, rest, _ := strings.Cut(rawURL, ":")
	path := strings.TrimPrefix(rest, "//")
	if path == "" {
		return nil, fmt.Errorf("%w: %q: sqlite needs a file path", idempotency.ErrUnsupportedURL, redact.URL(rawURL))
	}
	s, err := Open(ctx, path, Options{Options: o})
	if err != nil {
		return nil, err
	}
	return s, nil
}
