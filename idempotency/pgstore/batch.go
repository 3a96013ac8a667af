package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/claimkit"
)

// Store is an idempotency.BatchStore.
var _ idempotency.BatchStore = (*Store)(nil)

// Outcome codes of sqlTryClaimBatch.
const (
	batchClaimed    = 1
	batchConfirmed  = 2
	batchInProgress = 3
)

// deadlockRetries is how many times a batch statement that PostgreSQL
// aborted as a deadlock victim is sent again. Batches lock their rows in
// key order (see buildBatchSQL), so a deadlock needs a plan that visits
// rows out of that order; an aborted statement changed nothing, so sending
// it again is safe.
const deadlockRetries = 3

// buildBatchSQL writes the batch statements. $1 is a text[] of distinct
// storage keys in ascending order, $2 a text[] of owner tokens of the same
// length, $3 a duration in microseconds, as in buildSQL.
//
// Each batch is one statement, so one round trip and (when it writes) one
// commit for the whole batch; the statement is atomic, so a batch that
// fails changes nothing.
//
// Lock order: the keys arrive sorted and every statement visits them in
// that order (the insert's SELECT says ORDER BY), so two batches that share
// keys take their row locks in the same order and wait for each other
// instead of deadlocking. Single-key statements hold at most one row lock
// and cannot close a cycle.
func (p *Store) buildBatchSQL() {
	t := p.table
	// The same CTE as sqlTryClaim, over every key at once: old is the
	// snapshot's rows of the batch's keys, ins claims the keys that are new
	// or expired there (and not taken meanwhile: ON CONFLICT ... WHERE
	// re-checks the newest row version). The final SELECT answers every
	// input key once, by its ordinal, with exactly sqlTryClaim's reasoning:
	// claimed only when ins wrote it, confirmed only for a confirmation
	// retained at now(), in-progress otherwise (a live claim, or a row
	// committed after the snapshot that ins found live).
	//
	// The keys must be distinct: ON CONFLICT DO UPDATE cannot touch one
	// row twice in one statement. TryClaimBatch removes repeats first.
	p.sqlTryClaimBatch = `WITH input AS (
  SELECT k.key, k.owner, k.ord FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(key, owner, ord)
), old AS (
  SELECT key, state, expires_at FROM ` + t + ` WHERE key = ANY($1::text[])
), ins AS (
  INSERT INTO ` + t + ` AS tgt (key, state, owner, expires_at, updated_at)
  SELECT i.key, 'claimed', i.owner, now() + $3::bigint * interval '1 microsecond', now()
  FROM input i
  WHERE NOT EXISTS (SELECT 1 FROM old WHERE old.key = i.key AND old.expires_at > now())
  ORDER BY i.ord
  ON CONFLICT (key) DO UPDATE
  SET state = 'claimed', owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at
  WHERE tgt.expires_at <= now()
  RETURNING tgt.key, tgt.expires_at
)
SELECT i.ord,
  CASE WHEN ins.key IS NOT NULL THEN ` + fmt.Sprint(batchClaimed) + `
       WHEN old.state = 'confirmed' AND old.expires_at > now() THEN ` + fmt.Sprint(batchConfirmed) + `
       ELSE ` + fmt.Sprint(batchInProgress) + ` END,
  ins.expires_at
FROM input i
LEFT JOIN ins ON ins.key = i.key
LEFT JOIN old ON old.key = i.key
ORDER BY i.ord`

	// Confirm and release every (key, owner) pair whose row still holds
	// that owner's live claim, as sqlConfirm and sqlRelease do for one;
	// RETURNING names the pairs that did. The pairs must be distinct (a
	// row joined twice is changed once and reported once).
	//
	// The lease test reads expires_at - now() > interval '0', not
	// expires_at > now(): the same test, but one the expires_at index
	// cannot answer. Without statistics PostgreSQL guesses that a third
	// of the rows are live, and with a batch of a few dozen keys it
	// then prefers walking that index over every live row (all of them,
	// in a store that retains its confirmations) to probing the primary
	// key once per key.
	p.sqlConfirmBatch = `UPDATE ` + t + ` AS tgt
SET state = 'confirmed', owner = NULL, expires_at = now() + $3::bigint * interval '1 microsecond', updated_at = now()
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS c(key, owner, ord)
WHERE tgt.key = c.key AND tgt.owner = c.owner AND tgt.state = 'claimed' AND tgt.expires_at - now() > interval '0'
RETURNING c.ord`

	p.sqlReleaseBatch = `DELETE FROM ` + t + ` AS tgt
USING unnest($1::text[], $2::text[]) WITH ORDINALITY AS c(key, owner, ord)
WHERE tgt.key = c.key AND tgt.owner = c.owner AND tgt.state = 'claimed' AND tgt.expires_at - now() > interval '0'
RETURNING c.ord`
}

// batchExecMode is how the batch statements are sent on a pool whose
// connections default to exec mode def. They must be planned for the
// table as it is at each call, not once: a prepared statement's plan is
// cached, and PostgreSQL settles on a generic plan after a statement's
// first five runs. On a table created moments before (every table at
// first, and one that autovacuum has not analyzed yet), those runs see a
// few rows, and the generic plan scans the table (the claim's key =
// ANY($1)) or walks the expires_at index over every live row (the confirm
// and release) instead of probing the primary key once per key: each
// batch then costs time in proportion to the table, milliseconds at ten
// thousand rows. An unnamed statement is planned at every call with the
// table's current size (a young table's size is read from its pages), so
// the batch statements use the unnamed statement: CacheDescribe (one
// round trip, binary results) when the pool defaults to the statement
// cache, Exec when the description cache is off too. Any other default
// already uses the unnamed statement and is kept. The single-key
// statements stay prepared: an equality on the primary key is planned as
// one index probe whatever the table's statistics say.
func batchExecMode(def pgx.QueryExecMode, describeCache int) pgx.QueryExecMode {
	switch {
	case def != pgx.QueryExecModeCacheStatement:
		return def
	case describeCache > 0:
		return pgx.QueryExecModeCacheDescribe
	default:
		return pgx.QueryExecModeExec
	}
}

// batchItem is one distinct key (or claim) of a batch: its storage key,
// its owner token and the index of its first occurrence in the caller's
// slice.
type batchItem struct {
	sk, token string
	i         int
}

// TryClaimBatch try-claims every key in one statement (one round trip, one
// commit when anything was claimed). res[i] is what TryClaim(keys[i]) would
// have answered had the calls run in slice order: an invalid key gets
// ErrInvalidKey in res[i].Err and is not sent; a key that repeats an
// earlier one (the same storage key) is answered AlreadyConfirmed when the
// earlier one was, and InProgress otherwise, since the earlier occurrence
// holds or was refused the claim. A non-nil error (ErrClosed, the
// context's error, a server or connection failure) means nothing was
// claimed and res is undefined.
func (p *Store) TryClaimBatch(ctx context.Context, keys []idempotency.Key, res []idempotency.ClaimResult) error {
	if len(res) != len(keys) {
		return fmt.Errorf("idempotency: postgres try-claim batch: %d results for %d keys", len(res), len(keys))
	}
	if err := p.g.Begin(ctx); err != nil {
		return err
	}
	items := make([]batchItem, 0, len(keys))
	for i, k := range keys {
		res[i] = idempotency.ClaimResult{}
		sk, err := p.g.StorageKey(k)
		if err != nil {
			res[i].Err = err
			continue
		}
		items = append(items, batchItem{sk: sk, i: i})
	}
	if len(items) == 0 {
		return nil
	}
	// Sorted by storage key, then by position: the first of equal keys is
	// the earliest occurrence, and the keys go out in lock order.
	slices.SortFunc(items, func(a, b batchItem) int {
		if c := cmp.Compare(a.sk, b.sk); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	// repeats[j] is the index of a later occurrence and the index of its
	// first; uniq holds the first occurrences.
	var repeats [][2]int
	sks := make([]string, 0, len(items))
	tokens := make([]string, 0, len(items))
	uniq := items[:0]
	for _, it := range items {
		if n := len(uniq); n > 0 && uniq[n-1].sk == it.sk {
			repeats = append(repeats, [2]int{it.i, uniq[n-1].i})
			continue
		}
		it.token = claimkit.NewToken()
		uniq = append(uniq, it)
		sks = append(sks, it.sk)
		tokens = append(tokens, it.token)
	}
	if len(uniq) == 1 {
		// One distinct key: the single-key statement, which is cheaper to
		// plan and run than the array form (what a lone message on an idle
		// consumer sends through a group-commit stage).
		it := uniq[0]
		out, expires, err := p.tryClaim(ctx, it.sk, it.token)
		if err != nil {
			return err
		}
		res[it.i].Outcome = out
		if out == idempotency.Claimed {
			res[it.i].Claim = idempotency.Claim{Key: keys[it.i], Token: it.token, Expires: expires}
		}
		answerRepeats(res, repeats)
		return nil
	}
	err := p.retryDeadlock(ctx, func() error {
		rows, err := p.pool.Query(ctx, p.sqlTryClaimBatch, p.batchMode, sks, tokens, p.claimUS)
		if err != nil {
			return err
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			var (
				ord     int64
				code    int32
				expires *time.Time
			)
			if err := rows.Scan(&ord, &code, &expires); err != nil {
				return err
			}
			if ord < 1 || ord > int64(len(uniq)) {
				return fmt.Errorf("answer for key %d of %d", ord, len(uniq))
			}
			it := uniq[ord-1]
			r := &res[it.i]
			switch code {
			case batchClaimed:
				if expires == nil {
					return errors.New("claimed without expiry")
				}
				r.Outcome = idempotency.Claimed
				r.Claim = idempotency.Claim{Key: keys[it.i], Token: it.token, Expires: *expires}
			case batchConfirmed:
				r.Outcome = idempotency.AlreadyConfirmed
			case batchInProgress:
				r.Outcome = idempotency.InProgress
			default:
				return fmt.Errorf("unexpected outcome %d", code)
			}
			n++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if n != len(uniq) {
			return fmt.Errorf("%d answers for %d keys", n, len(uniq))
		}
		return nil
	})
	if err != nil {
		return p.g.Error(ctx, "try-claim batch", err)
	}
	answerRepeats(res, repeats)
	return nil
}

// answerRepeats answers each later occurrence of a key (repeats[j][0]) as
// TryClaim would right after its first occurrence (repeats[j][1]):
// AlreadyConfirmed when that was, InProgress otherwise (the first holds
// the claim, or someone else does).
func answerRepeats(res []idempotency.ClaimResult, repeats [][2]int) {
	for _, r := range repeats {
		later, first := r[0], r[1]
		if res[first].Outcome == idempotency.AlreadyConfirmed {
			res[later].Outcome = idempotency.AlreadyConfirmed
		} else {
			res[later].Outcome = idempotency.InProgress
		}
	}
}

// ConfirmBatch confirms every claim in one statement (one round trip, one
// commit). errs[i] is what Confirm(claims[i]) would have answered in slice
// order: nil, ErrClaimLost (the row no longer holds that live claim, the
// claim has no token, or it repeats an earlier claim of the batch, which
// the earlier one already ended) or ErrInvalidKey. A non-nil error means
// the statement did not run or did not commit as far as the caller can
// know: none of the claims may be treated as confirmed.
func (p *Store) ConfirmBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	return p.settleBatch(ctx, "confirm batch", claims, errs, func(sks, tokens []string) (pgx.Rows, error) {
		return p.pool.Query(ctx, p.sqlConfirmBatch, p.batchMode, sks, tokens, p.retainUS)
	}, func(sk, token string) (pgconn.CommandTag, error) {
		return p.pool.Exec(ctx, p.sqlConfirm, p.retainUS, sk, token)
	})
}

// ReleaseBatch releases every claim in one statement, with the answers of
// Release in errs as ConfirmBatch has those of Confirm.
func (p *Store) ReleaseBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	return p.settleBatch(ctx, "release batch", claims, errs, func(sks, tokens []string) (pgx.Rows, error) {
		return p.pool.Query(ctx, p.sqlReleaseBatch, p.batchMode, sks, tokens)
	}, func(sk, token string) (pgconn.CommandTag, error) {
		return p.pool.Exec(ctx, p.sqlRelease, sk, token)
	})
}

// settleBatch runs query (sqlConfirmBatch or sqlReleaseBatch over the
// given storage keys and tokens) on the distinct valid claims, or one (the
// single-key statement) when there is only one, and fills errs.
func (p *Store) settleBatch(ctx context.Context, op string, claims []idempotency.Claim, errs []error, query func(sks, tokens []string) (pgx.Rows, error), one func(sk, token string) (pgconn.CommandTag, error)) error {
	if len(errs) != len(claims) {
		return fmt.Errorf("idempotency: postgres %s: %d error slots for %d claims", op, len(errs), len(claims))
	}
	if err := p.g.Begin(ctx); err != nil {
		return err
	}
	items := make([]batchItem, 0, len(claims))
	for i, c := range claims {
		sk, err := p.g.StorageKey(c.Key)
		switch {
		case err != nil:
			errs[i] = err
		case c.Token == "":
			errs[i] = idempotency.ErrClaimLost
		default:
			errs[i] = idempotency.ErrClaimLost // until the statement says otherwise
			items = append(items, batchItem{sk: sk, token: c.Token, i: i})
		}
	}
	if len(items) == 0 {
		return nil
	}
	slices.SortFunc(items, func(a, b batchItem) int {
		if c := cmp.Compare(a.sk, b.sk); c != 0 {
			return c
		}
		if c := cmp.Compare(a.token, b.token); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	// A repeat of the same claim keeps ErrClaimLost: the first occurrence
	// ended the claim, or found it already gone.
	sks := make([]string, 0, len(items))
	tokens := make([]string, 0, len(items))
	uniq := items[:0]
	for _, it := range items {
		if n := len(uniq); n > 0 && uniq[n-1].sk == it.sk && uniq[n-1].token == it.token {
			continue
		}
		uniq = append(uniq, it)
		sks = append(sks, it.sk)
		tokens = append(tokens, it.token)
	}
	if len(uniq) == 1 {
		tag, err := one(uniq[0].sk, uniq[0].token)
		if err != nil {
			return p.g.Error(ctx, op, err)
		}
		if tag.RowsAffected() == 1 {
			errs[uniq[0].i] = nil
		}
		return nil
	}
	var done []int // indexes into claims of the pairs the statement settled
	err := p.retryDeadlock(ctx, func() error {
		done = done[:0]
		rows, err := query(sks, tokens)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var ord int64
			if err := rows.Scan(&ord); err != nil {
				return err
			}
			if ord < 1 || ord > int64(len(uniq)) {
				return fmt.Errorf("answer for claim %d of %d", ord, len(uniq))
			}
			done = append(done, uniq[ord-1].i)
		}
		return rows.Err()
	})
	if err != nil {
		return p.g.Error(ctx, op, err)
	}
	for _, i := range done {
		errs[i] = nil
	}
	return nil
}

// retryDeadlock runs f, again when PostgreSQL aborted it as a deadlock
// victim (SQLSTATE 40P01), at most deadlockRetries more times, while ctx
// lasts.
func (p *Store) retryDeadlock(ctx context.Context, f func() error) error {
	for attempt := 0; ; attempt++ {
		err := f()
		var pe *pgconn.PgError
		if err == nil || attempt == deadlockRetries || !errors.As(err, &pe) || pe.Code != "40P01" || ctx.Err() != nil {
			return err
		}
	}
}
