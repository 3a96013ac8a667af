package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/sqlitestore"
	"github.com/acemq/msgaudit/idempotency/storetest"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// sqlitePaths remembers which file each test store was opened on, so the
// restart case can reopen it.
var sqlitePaths sync.Map // idempotency.Store → string

func openSQLiteTest(t *testing.T, path string, o idempotency.Options) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), path, sqlitestore.Options{Options: o})
	if err != nil {
		t.Fatalf("sqlitestore.Open: %v", err)
	}
	sqlitePaths.Store(idempotency.Store(s), path)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestSQLiteConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		return openSQLiteTest(t, filepath.Join(t.TempDir(), "idem.db"), o)
	}, storetest.Capabilities{
		Reopen: func(t *testing.T, old idempotency.Store, o idempotency.Options) idempotency.Store {
			path, ok := sqlitePaths.Load(old)
			if !ok {
				t.Fatal("reopen: unknown store")
			}
			return openSQLiteTest(t, path.(string), o)
		},
	})
}

// TestSQLiteBacklog runs the backlog cases.
func TestSQLiteBacklog(t *testing.T) {
	t.Parallel()
	storetest.RunBacklog(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		return openSQLiteTest(t, filepath.Join(t.TempDir(), "idem.db"), o)
	}, storetest.Capabilities{})
}

// TestSQLiteBusy holds the database's write lock from another connection:
// the store's operations time out with an error, never a verdict, and
// work again once the lock is gone.
func TestSQLiteBusy(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	path := filepath.Join(t.TempDir(), "busy.db")
	s := openSQLiteTest(t, path+"?_pragma=busy_timeout(50)", idempotency.Options{})
	k := idempotency.Key{Namespace: "q", ID: "m1"}

	other, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	o, c, err := s.TryClaim(ctx, k)
	if err == nil || o != 0 || c != (idempotency.Claim{}) {
		t.Fatalf("TryClaim under a foreign write lock = %v, %+v, %v; want an error and zero values", o, c, err)
	}
	if errors.Is(err, idempotency.ErrClaimLost) || errors.Is(err, idempotency.ErrInvalidKey) {
		t.Fatalf("TryClaim under a foreign write lock: %v, a verdict", err)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if o, _, err := s.TryClaim(ctx, k); err != nil || o != idempotency.Claimed {
		t.Fatalf("TryClaim after the lock = %v, %v; want claimed", o, err)
	}
}

// TestSQLitePurge deletes expired rows in batches and leaves live ones.
func TestSQLitePurge(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	clock := storetest.NewFakeClock(time.Unix(1e9, 0))
	o := idempotency.Options{ClaimTTL: time.Minute, Retention: time.Hour, Clock: clock}
	s := openSQLiteTest(t, filepath.Join(t.TempDir(), "purge.db"), o)
	key := func(i int) idempotency.Key { return idempotency.Key{Namespace: "q", ID: strconv.Itoa(i)} }
	// 0..249 claimed (expire after a minute), 250..499 confirmed (an hour).
	for i := range 500 {
		_, c, err := s.TryClaim(ctx, key(i))
		if err != nil {
			t.Fatal(err)
		}
		if i >= 250 {
			if err := s.Confirm(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n, err := s.Purge(ctx, 100); err != nil || n != 0 {
		t.Fatalf("Purge with nothing expired = %d, %v; want 0", n, err)
	}
	clock.Advance(2 * time.Minute)
	if n, err := s.Purge(ctx, 100); err != nil || n != 250 {
		t.Fatalf("Purge of expired claims = %d, %v; want 250", n, err)
	}
	if o, _, err := s.TryClaim(ctx, key(300)); err != nil || o != idempotency.AlreadyConfirmed {
		t.Fatalf("confirmed key after purge = %v, %v", o, err)
	}
	clock.Advance(2 * time.Hour)
	if n, err := s.Purge(ctx, 0); err != nil || n != 250 {
		t.Fatalf("Purge of expired confirmations = %d, %v; want 250", n, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Purge(cancelled, 10); !errors.Is(err, context.Canceled) {
		t.Fatalf("Purge with a cancelled context: %v", err)
	}
}

// TestSQLiteTwoHandlesOneFile: two stores on one file (as two processes
// would have) race on the same keys; each key has exactly one winner and
// each sees the other's confirmations.
func TestSQLiteTwoHandlesOneFile(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	path := filepath.Join(t.TempDir(), "shared.db")
	stores := []*sqlitestore.Store{openSQLiteTest(t, path, idempotency.Options{}), openSQLiteTest(t, path, idempotency.Options{})}
	const keys, perStore = 100, 4
	var wins [keys]atomic.Int32
	var wg sync.WaitGroup
	for _, s := range stores {
		for range perStore {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range keys {
					k := idempotency.Key{Namespace: "q", ID: strconv.Itoa(i)}
					o, c, err := s.TryClaim(ctx, k)
					if err != nil {
						t.Errorf("TryClaim: %v", err)
						return
					}
					if o == idempotency.Claimed {
						wins[i].Add(1)
						if err := s.Confirm(ctx, c); err != nil {
							t.Errorf("Confirm: %v", err)
							return
						}
					}
				}
			}()
		}
	}
	testwait.Group(t, &wg, time.Minute, "the end of the 8 claiming goroutines on two handles")
	for i := range keys {
		if n := wins[i].Load(); n != 1 {
			t.Fatalf("key %d: %d winners across two handles, want 1", i, n)
		}
		for _, s := range stores {
			if ok, err := s.IsConfirmed(ctx, idempotency.Key{Namespace: "q", ID: strconv.Itoa(i)}); err != nil || !ok {
				t.Fatalf("key %d: IsConfirmed = %v, %v", i, ok, err)
			}
		}
	}
}

// TestSQLiteWAL: the file is in WAL mode (a persistent setting, so a plain
// second handle reads it back).
func TestSQLiteWAL(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "wal.db")
	openSQLiteTest(t, path, idempotency.Options{})
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v; want wal", mode, err)
	}
}
