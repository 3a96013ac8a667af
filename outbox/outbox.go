package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/claimkit"
	"github.com/acemq/msgaudit/internal/outboxid"
	"github.com/acemq/msgaudit/internal/purgeloop"
)

// Limits of what Send accepts.
const (
	maxDestination = 1024
	maxOrderKey    = 1024
	maxHeaderBytes = 64 << 10
	maxBody        = 16 << 20
)

// Defaults of Options.
const (
	defaultMaxAttempts = 5
	defaultConcurrency = 32
	defaultLease       = 30 * time.Second
	// poll is how often an idle relay looks for rows it was not told
	// about (committed by another process).
	poll = 100 * time.Millisecond
	// claimBatch is the most rows one claim takes.
	claimBatch = 256
)

// claimBytes is the most body and header bytes one claim holds in
// memory (at least one row whatever its size); a variable for the tests.
var claimBytes int64 = 32 << 20

// Options configures an Outbox. The zero value of every field but Dialect
// is a usable default.
type Options struct {
	// Dialect is the database's: inbox.PostgreSQL, inbox.SQLite or
	// inbox.MySQL (MySQL and MariaDB). Required.
	Dialect inbox.Dialect
	// Table is the outbox table, [schema.]name; default "msgaudit_outbox".
	// New creates it when it is missing (on MySQL also Table+"_keys",
	// which serialises the sends of one order key).
	Table string
	// Retention is how long a sent row is kept before a purge may delete
	// it; default 24h (the stores' default retention).
	Retention time.Duration
	// PurgeInterval, when > 0, starts a purge of the rows sent more than
	// Retention ago every PurgeInterval; Close stops it. Off by default.
	// Parked rows are never purged.
	PurgeInterval time.Duration
	// MaxAttempts is how many times the broker may refuse a message
	// (Publisher's ErrRefused) before the relay parks it; default 5. A
	// transient failure (a lost connection, a broker that does not answer)
	// is retried without limit and never parks a message.
	MaxAttempts int
	// Concurrency is how many messages a relay (Run) publishes at once;
	// default 32. Messages with the same OrderKey are never in flight
	// together.
	Concurrency int
	// Lease is how long a relay owns the rows it took: a relay killed
	// while publishing leaves them to another relay (or itself, restarted)
	// once Lease has passed, and they are sent again with the same ids.
	// Default 30s; at least 1s. The publishes of one claim must end within
	// Lease/2 of it (a slower one is cancelled and retried), so the relay
	// marks its rows before another may take them.
	Lease time.Duration
	// Logger receives the relay's warnings (a parked message, a failing
	// database); nil is silent.
	Logger *slog.Logger
}

// Tx is the transaction Send records a message in: a *sql.Tx, or a pgx
// transaction through pgxinbox.OutboxTx.
type Tx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// ErrConfig is returned by New for invalid Options or a database that
// does not fit them, and by Send for a message it cannot record.
var ErrConfig = errors.New("outbox: invalid configuration")

// Outbox records outgoing messages in the sender's transaction (Send) and
// publishes them once committed (Run). It is safe for concurrent use.
type Outbox struct {
	db    *sql.DB
	o     Options
	s     *statements
	log   *slog.Logger
	wake  chan struct{}
	purge *purgeloop.Loop

	purged purgeloop.Counters
	mu     sync.Mutex // guards closed
	closed bool
}

// New returns an Outbox on db, creating its table when missing. db stays
// the caller's; Close does not close it. With Options.PurgeInterval set
// it starts the automatic purge.
func New(ctx context.Context, db *sql.DB, o Options) (*Outbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrConfig)
	}
	switch o.Dialect {
	case inbox.PostgreSQL, inbox.SQLite, inbox.MySQL:
	case 0:
		return nil, fmt.Errorf("%w: Options.Dialect is required (inbox.PostgreSQL, inbox.SQLite or inbox.MySQL)", ErrConfig)
	default:
		return nil, fmt.Errorf("%w: unknown dialect %v", ErrConfig, o.Dialect)
	}
	switch {
	case o.Retention < 0:
		return nil, fmt.Errorf("%w: negative Retention %v", ErrConfig, o.Retention)
	case o.PurgeInterval < 0:
		return nil, fmt.Errorf("%w: negative PurgeInterval %v", ErrConfig, o.PurgeInterval)
	case o.MaxAttempts < 0:
		return nil, fmt.Errorf("%w: negative MaxAttempts %d", ErrConfig, o.MaxAttempts)
	case o.Concurrency < 0:
		return nil, fmt.Errorf("%w: negative Concurrency %d", ErrConfig, o.Concurrency)
	case o.Lease < 0 || (o.Lease > 0 && o.Lease < time.Second):
		return nil, fmt.Errorf("%w: Lease %v (want 0 for the default, or at least 1s)", ErrConfig, o.Lease)
	}
	if o.Retention == 0 {
		o.Retention = claimkit.DefaultRetention
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = defaultMaxAttempts
	}
	if o.Concurrency == 0 {
		o.Concurrency = defaultConcurrency
	}
	if o.Lease == 0 {
		o.Lease = defaultLease
	}
	s, err := build(o.Dialect, o.Table)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if o.Table == "" {
		o.Table = defaultTable
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var probe string
	if err := db.QueryRowContext(ctx, s.probe).Scan(&probe); err != nil {
		return nil, fmt.Errorf("%w: the database does not answer as %v: %v", ErrConfig, o.Dialect, err)
	}
	if err := create(ctx, db, s); err != nil {
		return nil, fmt.Errorf("outbox: creating table %s: %w", o.Table, err)
	}
	ob := &Outbox{db: db, o: o, s: s, log: log, wake: make(chan struct{}, 1)}
	ob.purge = purgeloop.Start(o.PurgeInterval, "outbox "+o.Table, log, func(ctx context.Context) (int64, error) {
		return ob.purgeBefore(ctx, time.Now().Add(-o.Retention), purgeloop.Server)
	})
	return ob, nil
}

// create runs the schema statements in one transaction on PostgreSQL,
// serialised with other creators, and one by one elsewhere; a statement
// racing another process's CREATE is tried a second time.
func create(ctx context.Context, db *sql.DB, s *statements) error {
	if s.dialect != inbox.PostgreSQL {
		for _, q := range s.create {
			if _, err := db.ExecContext(ctx, q); err != nil {
				if _, err2 := db.ExecContext(ctx, q); err2 != nil {
					return err
				}
			}
		}
		return nil
	}
	var err error
	for range 2 {
		if err = createTx(ctx, db, s); err == nil {
			return nil
		}
	}
	return err
}

func createTx(ctx context.Context, db *sql.DB, s *statements) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	for _, q := range append([]string{`SELECT pg_advisory_xact_lock(hashtext('msgaudit outbox create'))`}, s.create...) {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Close stops the automatic purge and wakes the relays to stop; it closes
// nothing else (the database is the caller's, and Run returns when its
// context ends). It always returns nil.
func (ob *Outbox) Close() error {
	ob.mu.Lock()
	ob.closed = true
	ob.mu.Unlock()
	ob.purge.Stop()
	return nil
}

// check validates m as Send records it.
func check(m *Message) error {
	switch {
	case m.Destination == "":
		return fmt.Errorf("%w: empty Destination", ErrConfig)
	case len(m.Destination) > maxDestination:
		return fmt.Errorf("%w: Destination of %d bytes (at most %d)", ErrConfig, len(m.Destination), maxDestination)
	case !printable(m.Destination):
		return fmt.Errorf("%w: Destination is not printable UTF-8 (control characters would break a frame)", ErrConfig)
	case len(m.OrderKey) > maxOrderKey:
		return fmt.Errorf("%w: OrderKey of %d bytes (at most %d)", ErrConfig, len(m.OrderKey), maxOrderKey)
	case len(m.Body) > maxBody:
		return fmt.Errorf("%w: Body of %d bytes (at most %d)", ErrConfig, len(m.Body), maxBody)
	}
	if m.OrderKey != "" && (!utf8.ValidString(m.OrderKey) || strings.IndexByte(m.OrderKey, 0) >= 0) {
		return fmt.Errorf("%w: OrderKey is not UTF-8 without NUL", ErrConfig)
	}
	n := 0
	for k, v := range m.Headers {
		n += len(k) + len(v)
		switch {
		case k == "" || !printable(k) || strings.ContainsAny(k, ":") || !utf8.ValidString(v) || strings.ContainsAny(v, "\x00\r\n"):
			return fmt.Errorf("%w: header %.64q: names must be printable without ':', values UTF-8 without NUL, CR or LF", ErrConfig, k)
		case strings.EqualFold(k, outboxid.Header):
			return fmt.Errorf("%w: header %q is the outbox's own", ErrConfig, k)
		}
	}
	if n > maxHeaderBytes {
		return fmt.Errorf("%w: headers of %d bytes (at most %d)", ErrConfig, n, maxHeaderBytes)
	}
	return nil
}

// printable reports whether s is valid UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < ' ' || r == 0x7f {
			return false
		}
	}
	return true
}

// Send records m in tx, to be published once tx commits; a rolled-back tx
// sends nothing. Inside an inbox handler (tx the delivery's transaction)
// the message's id is derived from the delivery's key and the send's
// position in the handler's run, so a run redone after a rollback sends
// the same ids, and the receiving consumer absorbs a resend; in any other
// transaction it is random. Inside an inbox handler the delivery's W3C
// trace context (its traceparent and tracestate headers) is copied to m's
// headers unless m sets a traceparent, so one trace follows the chain. A message Send cannot record (an empty or
// too long destination, control characters in a header, a body over
// 16 MiB) is an error wrapping ErrConfig, and tx stays usable.
func (ob *Outbox) Send(ctx context.Context, tx Tx, m Message) error {
	switch tx := tx.(type) {
	case nil:
		return fmt.Errorf("%w: nil transaction", ErrConfig)
	case *sql.Tx:
		if tx == nil {
			return fmt.Errorf("%w: nil *sql.Tx", ErrConfig)
		}
	case *sql.DB:
		// Each statement would commit on its own: the message would leave
		// whatever became of the effect.
		return fmt.Errorf("%w: Send needs the effect's transaction, not a *sql.DB", ErrConfig)
	}
	if err := check(&m); err != nil {
		return err
	}
	h := m.Headers
	if parent, state := outboxid.Trace(ctx); parent != "" {
		if _, set := h["traceparent"]; !set {
			h = maps.Clone(h)
			if h == nil {
				h = map[string]string{}
			}
			h["traceparent"] = parent
			if state != "" {
				h["tracestate"] = state
			}
		}
	}
	if h == nil {
		h = map[string]string{}
	}
	headers, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("outbox: encoding headers: %w", err)
	}
	var key any
	if m.OrderKey != "" {
		key = m.OrderKey
		if ob.s.lockKey != "" {
			if _, err := tx.ExecContext(ctx, ob.s.lockKey, m.OrderKey); err != nil {
				return fmt.Errorf("outbox: ordering key: %w", err)
			}
		}
	}
	body := m.Body
	if body == nil {
		body = []byte{}
	}
	id := outboxid.Next(ctx)
	if _, err := tx.ExecContext(ctx, ob.s.insert, id, m.Destination, string(headers), body, key, time.Now().UnixMicro()); err != nil {
		return fmt.Errorf("outbox: recording the message: %w", err)
	}
	select {
	case ob.wake <- struct{}{}:
	default:
	}
	return nil
}

// Backlog samples the outbox: Held is the number of messages not yet sent
// (nor parked) and OldestHeld the age of the oldest of them; Rows the rows
// kept (on PostgreSQL and MySQL the database's estimate) and OldestRow
// the age of the oldest sent row the purge has not yet deleted. It is the
// sample function of promexport.Backlog and otelmetric.Backlog.
func (ob *Outbox) Backlog(ctx context.Context) (idempotency.Backlog, error) {
	var args []any
	switch ob.o.Dialect {
	case inbox.PostgreSQL:
		args = []any{ob.s.table}
	case inbox.MySQL:
		args = []any{ob.s.schema, ob.s.name}
	}
	var pending, rows, oldest, done sql.NullInt64
	if err := ob.db.QueryRowContext(ctx, ob.s.backlog, args...).Scan(&pending, &oldest, &rows, &done); err != nil {
		return idempotency.Backlog{}, fmt.Errorf("outbox: backlog: %w", err)
	}
	now := time.Now()
	age := func(v sql.NullInt64) time.Duration {
		if !v.Valid {
			return 0
		}
		return max(now.Sub(time.UnixMicro(v.Int64)), 0)
	}
	return idempotency.Backlog{Held: pending.Int64, OldestHeld: age(oldest), Rows: max(rows.Int64, pending.Int64), OldestRow: age(done)}, nil
}

// Purge deletes the rows sent before olderThan, in batches back to back;
// pending and parked rows stay.
func (ob *Outbox) Purge(ctx context.Context, olderThan time.Time) (int64, error) {
	return ob.purgeBefore(ctx, olderThan, purgeloop.Unpaced)
}

func (ob *Outbox) purgeBefore(ctx context.Context, olderThan time.Time, pace int) (n int64, err error) {
	t0 := time.Now()
	defer func() { ob.purged.Observe(n, time.Since(t0), err) }()
	const batch = 1000
	return purgeloop.Batches(ctx, batch, pace, func(ctx context.Context) (int64, error) {
		r, err := ob.db.ExecContext(ctx, ob.s.purge, olderThan.UnixMicro(), batch)
		if err != nil {
			return 0, fmt.Errorf("outbox: purge: %w", err)
		}
		return r.RowsAffected()
	})
}

// PurgeStats returns the counters of the purges, automatic and called.
func (ob *Outbox) PurgeStats() idempotency.PurgeStats {
	runs, rows, errs, busy := ob.purged.Load()
	return idempotency.PurgeStats{Runs: runs, Rows: rows, Errors: errs, Time: busy}
}
