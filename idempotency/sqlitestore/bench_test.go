package sqlitestore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/sqlitestore"
	"github.com/acemq/msgaudit/idempotency/storetest"
)

func openBench(b *testing.B, sync sqlitestore.Synchronous) *sqlitestore.Store {
	b.Helper()
	s, err := sqlitestore.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), sqlitestore.Options{Synchronous: sync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

var benchSyncs = []sqlitestore.Synchronous{sqlitestore.SyncNormal, sqlitestore.SyncFull}

// BenchmarkSQLiteTryClaimConfirm: pairs on a file in b.TempDir(), one
// transaction per call, with synchronous=NORMAL (the default: the WAL
// syncs only at checkpoints) and FULL (a disk sync per commit: two per
// pair).
func BenchmarkSQLiteTryClaimConfirm(b *testing.B) {
	for _, sync := range benchSyncs {
		for _, g := range []int{1, 16} {
			b.Run(fmt.Sprintf("sync=%s/goroutines=%d", sync, g), func(b *testing.B) {
				storetest.BenchPairs(b, openBench(b, sync), g, 0, nil)
			})
		}
	}
}

// BenchmarkSQLiteBatch: the same pairs through TryClaimBatch and
// ConfirmBatch, size keys per transaction (ns/op is per key); size=1
// measures the batch path's own overhead against the single calls.
func BenchmarkSQLiteBatch(b *testing.B) {
	for _, sync := range benchSyncs {
		for _, size := range []int{1, 10, 64} {
			b.Run(fmt.Sprintf("sync=%s/size=%d", sync, size), func(b *testing.B) {
				storetest.BenchBatchPairs(b, openBench(b, sync), size)
			})
		}
	}
}

// BenchmarkSQLiteTryClaimDuplicate: TryClaim of a confirmed key (one read).
func BenchmarkSQLiteTryClaimDuplicate(b *testing.B) {
	s, err := sqlitestore.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), sqlitestore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	storetest.BenchDuplicate(b, s)
}

// BenchmarkSQLiteGrouped: single-key pairs from 16 or 64 goroutines
// through idempotency.Group (default options), which turns the calls that
// meet into TryClaimBatch and ConfirmBatch calls, as the receiver does for
// a BatchStore.
func BenchmarkSQLiteGrouped(b *testing.B) {
	for _, sync := range benchSyncs {
		for _, g := range []int{16, 64} {
			b.Run(fmt.Sprintf("sync=%s/goroutines=%d", sync, g), func(b *testing.B) {
				s, err := idempotency.Group(openBench(b, sync), idempotency.GroupOptions{})
				if err != nil {
					b.Fatal(err)
				}
				storetest.BenchPairs(b, s, g, 0, nil)
			})
		}
	}
}
