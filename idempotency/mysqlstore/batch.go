package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/claimkit"
)

// TryClaimBatch implements idempotency.BatchStore: the keys are claimed
// in slice order in one transaction, so the batch costs one COMMIT (one
// redo-log flush) instead of one per key. Its row locks are held until
// that COMMIT. A failed batch (a deadlock with another batch, error 1213,
// included) returns the error; its claims were rolled back.
func (s *Store) TryClaimBatch(ctx context.Context, keys []idempotency.Key, res []idempotency.ClaimResult) error {
	if len(res) != len(keys) {
		return errors.New("idempotency: mysql try-claim-batch: len(res) != len(keys)")
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	start := time.Now()
	return s.inTx(ctx, "try-claim-batch", func(tx *sql.Tx) error {
		for i, k := range keys {
			res[i] = idempotency.ClaimResult{}
			sk, err := s.storageKey(k)
			if err != nil {
				res[i].Err = err
				continue
			}
			token := claimkit.NewToken()
			if _, err := tx.ExecContext(ctx, s.sqlClaim, sk, token, s.claimUS); err != nil {
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
			err = tx.QueryRowContext(ctx, s.sqlState+` FOR UPDATE`, sk).Scan(&state, &owner, &live)
			switch {
			case err != nil:
				return err
			case owner == token && state == "claimed":
				res[i].Outcome = idempotency.Claimed
				res[i].Claim = idempotency.Claim{Key: k, Token: token, Expires: start.Add(s.o.ClaimTTL)}
			case state == "confirmed" && live:
				res[i].Outcome = idempotency.AlreadyConfirmed
			default:
				res[i].Outcome = idempotency.InProgress
			}
		}
		return nil
	})
}

// ConfirmBatch implements idempotency.BatchStore: one transaction;
// errs[i] is ErrClaimLost for a claim the row no longer holds.
func (s *Store) ConfirmBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	return s.settleBatch(ctx, "confirm-batch", s.sqlConfirm, true, claims, errs)
}

// ReleaseBatch implements idempotency.BatchStore: one transaction;
// errs[i] is ErrClaimLost for a claim the row no longer holds.
func (s *Store) ReleaseBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	return s.settleBatch(ctx, "release-batch", s.sqlRelease, false, claims, errs)
}

func (s *Store) settleBatch(ctx context.Context, op, q string, retain bool, claims []idempotency.Claim, errs []error) error {
	if len(errs) != len(claims) {
		return errors.New("idempotency: mysql " + op + ": len(errs) != len(claims)")
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	return s.inTx(ctx, op, func(tx *sql.Tx) error {
		for i, c := range claims {
			errs[i] = nil
			sk, err := s.storageKey(c.Key)
			if err != nil {
				errs[i] = err
				continue
			}
			if c.Token == "" {
				errs[i] = idempotency.ErrClaimLost
				continue
			}
			args := []any{sk, c.Token}
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
				errs[i] = idempotency.ErrClaimLost
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
		return s.opError(ctx, op, err)
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return s.opError(ctx, op, err)
	}
	if err := tx.Commit(); err != nil {
		return s.opError(ctx, op, err)
	}
	return nil
}
