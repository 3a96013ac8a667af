package mysqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"slices"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/claimkit"
)

// batchItem is one entry of a batch: its position and storage key.
type batchItem struct {
	i  int
	sk string
}

// lockOrder returns the valid entries of a batch sorted by storage key,
// then by position (so the first of equal keys runs first, as in slice
// order), and calls bad for each invalid one. Visiting the rows in one
// order for every batch means two batches never hold one row each of
// two the other wants.
func (s *Store) lockOrder(n int, key func(int) idempotency.Key, bad func(int, error)) []batchItem {
	items := make([]batchItem, 0, n)
	for i := range n {
		sk, err := s.g.StorageKey(key(i))
		if err != nil {
			bad(i, err)
			continue
		}
		items = append(items, batchItem{i, sk})
	}
	slices.SortFunc(items, func(a, b batchItem) int {
		return cmp.Or(cmp.Compare(a.sk, b.sk), cmp.Compare(a.i, b.i))
	})
	return items
}

// TryClaimBatch implements idempotency.BatchStore: the keys are claimed
// in one transaction, so the batch costs one COMMIT (one redo-log flush)
// instead of one per key. Its row locks are held until that COMMIT and
// are taken in storage-key order (each key's answer is still the one slice
// order gives: only earlier entries of the same key bear on it), so
// batches do not deadlock each other. A failed batch (a deadlock with
// another kind of transaction, error 1213, included) returns the error;
// its claims were rolled back.
func (s *Store) TryClaimBatch(ctx context.Context, keys []idempotency.Key, res []idempotency.ClaimResult) error {
	if len(res) != len(keys) {
		return errors.New("idempotency: mysql try-claim-batch: len(res) != len(keys)")
	}
	if err := s.g.Begin(ctx); err != nil {
		return err
	}
	for i := range res {
		res[i] = idempotency.ClaimResult{}
	}
	items := s.lockOrder(len(keys), func(i int) idempotency.Key { return keys[i] }, func(i int, err error) { res[i].Err = err })
	start := time.Now()
	return s.inTx(ctx, "try-claim-batch", func(tx *sql.Tx) error {
		for _, it := range items {
			r := &res[it.i]
			token := claimkit.NewToken()
			if _, err := tx.ExecContext(ctx, s.sqlClaim, it.sk, token, s.claimUS); err != nil {
				return err
			}
			var (
				state, owner string
				live         bool
			)
			// A locking read: under REPEATABLE READ a plain SELECT reads
			// the snapshot of the batch's first read, which misses a row
			// another transaction committed since (the one the claim
			// above waited for).
			err := tx.QueryRowContext(ctx, s.sqlState+` FOR UPDATE`, it.sk).Scan(&state, &owner, &live)
			switch {
			case err != nil:
				return err
			case owner == token && state == "claimed":
				r.Outcome = idempotency.Claimed
				r.Claim = idempotency.Claim{Key: keys[it.i], Token: token, Expires: start.Add(s.o.ClaimTTL)}
			case state == "confirmed" && live:
				r.Outcome = idempotency.AlreadyConfirmed
			default:
				r.Outcome = idempotency.InProgress
			}
		}
		return nil
	})
}

// ConfirmBatch implements idempotency.BatchStore: one transaction, its
// rows locked in storage-key order; errs[i] is ErrClaimLost for a claim
// the row no longer holds.
func (s *Store) ConfirmBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	return s.settleBatch(ctx, "confirm-batch", s.sqlConfirm, true, claims, errs)
}

// ReleaseBatch implements idempotency.BatchStore: one transaction, its
// rows locked in storage-key order; errs[i] is ErrClaimLost for a claim
// the row no longer holds.
func (s *Store) ReleaseBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	return s.settleBatch(ctx, "release-batch", s.sqlRelease, false, claims, errs)
}

func (s *Store) settleBatch(ctx context.Context, op, q string, retain bool, claims []idempotency.Claim, errs []error) error {
	if len(errs) != len(claims) {
		return errors.New("idempotency: mysql " + op + ": len(errs) != len(claims)")
	}
	if err := s.g.Begin(ctx); err != nil {
		return err
	}
	for i := range errs {
		errs[i] = nil
	}
	items := s.lockOrder(len(claims), func(i int) idempotency.Key { return claims[i].Key }, func(i int, err error) { errs[i] = err })
	return s.inTx(ctx, op, func(tx *sql.Tx) error {
		for _, it := range items {
			c := claims[it.i]
			if c.Token == "" {
				errs[it.i] = idempotency.ErrClaimLost
				continue
			}
			args := []any{it.sk, c.Token}
			if retain {
				args = append([]any{s.retainUS}, args...)
			}
			r, err := tx.ExecContext(ctx, q, args...)
			if err != nil {
				return err
			}
			n, err := r.RowsAffected()
			if err != nil {
				return err
			}
			if n != 1 {
				errs[it.i] = idempotency.ErrClaimLost
			}
		}
		return nil
	})
}

// inTx runs f in a transaction and commits it; any error rolls it back
// and is returned wrapped.
func (s *Store) inTx(ctx context.Context, op string, f func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.g.Error(ctx, op, err)
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return s.g.Error(ctx, op, err)
	}
	if err := tx.Commit(); err != nil {
		return s.g.Error(ctx, op, err)
	}
	return nil
}
