package sqlitestore_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/sqlitestore"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// TestSQLiteSynchronousSetting: the synchronous setting from the default,
// the option, the path's synchronous= parameter or its
// _pragma=synchronous(...), and the errors Open gives for bad or
// contradicting values.
func TestSQLiteSynchronousSetting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	normal, full := sqlitestore.SyncNormal, sqlitestore.SyncFull
	for _, tc := range []struct {
		name, query string
		sync        sqlitestore.Synchronous
		want        sqlitestore.Synchronous
		wantErr     string
	}{
		{name: "default", want: sqlitestore.SyncNormal},
		{name: "option full", sync: full, want: sqlitestore.SyncFull},
		{name: "option normal", sync: normal, want: sqlitestore.SyncNormal},
		{name: "param full", query: "synchronous=full", want: sqlitestore.SyncFull},
		{name: "param FULL", query: "synchronous=FULL", want: sqlitestore.SyncFull},
		{name: "param normal", query: "synchronous=normal", want: sqlitestore.SyncNormal},
		{name: "param 2", query: "synchronous=2", want: sqlitestore.SyncFull},
		{name: "pragma", query: "_pragma=synchronous(NORMAL)", want: sqlitestore.SyncNormal},
		{name: "pragma full", query: "_pragma=synchronous(full)&_pragma=busy_timeout(100)", want: sqlitestore.SyncFull},
		{name: "param and option agree", query: "synchronous=full", sync: full, want: sqlitestore.SyncFull},
		{name: "param off", query: "synchronous=off", wantErr: `synchronous="off": want normal or full`},
		{name: "param extra", query: "synchronous=extra", wantErr: `synchronous="extra"`},
		{name: "param empty", query: "synchronous=", wantErr: `synchronous="": want normal or full`},
		{name: "pragma off", query: "_pragma=synchronous(OFF)", wantErr: `synchronous="OFF"`},
		{name: "param and option differ", query: "synchronous=normal", sync: full, wantErr: "synchronous=normal asks for synchronous normal, but full"},
		{name: "param twice differ", query: "synchronous=normal&synchronous=full", wantErr: "asks for synchronous full, but normal"},
		{name: "option bad", sync: 7, wantErr: "synchronous(7): want SyncNormal or SyncFull"},
		{name: "bad query", query: "synchronous=%zz", wantErr: "parameters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.db")
			if tc.query != "" {
				path += "?" + tc.query
			}
			s, err := sqlitestore.Open(ctx, path, sqlitestore.Options{Synchronous: tc.sync})
			if tc.wantErr != "" {
				if err == nil {
					s.Close()
					t.Fatalf("Open(%q) succeeded; want an error containing %q", path, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Open(%q) = %v; want an error containing %q", path, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(%q): %v", path, err)
			}
			defer s.Close()
			if got := s.Synchronous(); got != tc.want {
				t.Fatalf("Synchronous() = %v, want %v", got, tc.want)
			}
		})
	}
	// The URL form.
	s, err := idempotency.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "u.db")+"?synchronous=full", idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.(*sqlitestore.Store).Synchronous(); got != sqlitestore.SyncFull {
		t.Fatalf("sqlite URL with synchronous=full: Synchronous() = %v", got)
	}
	if _, err := idempotency.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "v.db")+"?synchronous=fast", idempotency.Options{}); err == nil || !strings.Contains(err.Error(), `synchronous="fast"`) {
		t.Fatalf("sqlite URL with synchronous=fast: %v, want the bad value named", err)
	}
}

// TestSQLiteConnectionsRunTheirSynchronous opens stores with each
// durability setting, from each place it may come from, and reads PRAGMA
// synchronous on every connection the store uses: each must run with the
// setting Synchronous reports (1 normal, 2 full), never SQLite's default
// or OFF. Reading the Go-side value alone would pass a store whose
// connections ignore it.
func TestSQLiteConnectionsRunTheirSynchronous(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	open := func(path string, sync sqlitestore.Synchronous) func(t *testing.T) (*sqlitestore.Store, error) {
		return func(t *testing.T) (*sqlitestore.Store, error) {
			return sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "s.db")+path, sqlitestore.Options{Synchronous: sync})
		}
	}
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (*sqlitestore.Store, error)
		want int
	}{
		{"default", open("", 0), 1},
		{"option normal", open("", sqlitestore.SyncNormal), 1},
		{"option full", open("", sqlitestore.SyncFull), 2},
		{"param normal", open("?synchronous=normal", 0), 1},
		{"param full", open("?synchronous=full", 0), 2},
		{"pragma normal", open("?_pragma=synchronous(NORMAL)", 0), 1},
		{"pragma full", open("?_pragma=synchronous(FULL)", 0), 2},
		{"url full", func(t *testing.T) (*sqlitestore.Store, error) {
			s, err := idempotency.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "u.db")+"?synchronous=full", idempotency.Options{})
			if err != nil {
				return nil, err
			}
			return s.(*sqlitestore.Store), nil
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.open(t)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := int(s.Synchronous()); got != tc.want {
				t.Fatalf("Synchronous() = %v, want %d", s.Synchronous(), tc.want)
			}
			// Before and after the store has worked: the setting is the
			// connection's, kept for its life.
			for _, when := range []string{"after Open", "after a confirm"} {
				got, err := sqlitestore.ConnSynchronous(ctx, s)
				if err != nil {
					t.Fatal(err)
				}
				for i, v := range got {
					if v != tc.want {
						t.Fatalf("%s: connection %d runs with PRAGMA synchronous = %d, want %d (%v)", when, i, v, tc.want, s.Synchronous())
					}
				}
				k := idempotency.Key{Namespace: "sync", ID: when}
				_, c, err := s.TryClaim(ctx, k)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Confirm(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestSQLiteContextEndsLockWait: with another connection holding the
// write lock and a busy timeout of a minute, a call whose context ends
// returns the context's error long before the busy timeout, both the call
// waiting for the lock and one waiting behind it for the store's
// connection; once the lock is gone the store works.
func TestSQLiteContextEndsLockWait(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, 2*time.Minute)
	path := filepath.Join(t.TempDir(), "lock.db")
	s := openSQLiteTest(t, path+"?_pragma=busy_timeout(60000)", idempotency.Options{})
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
	start := time.Now()
	first := make(chan error, 1)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	go func() {
		res := make([]idempotency.ClaimResult, 2)
		first <- s.TryClaimBatch(short, []idempotency.Key{{Namespace: "q", ID: "1"}, {Namespace: "q", ID: "2"}}, res)
	}()
	second, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel2()
	err2 := s.ConfirmBatch(second, []idempotency.Claim{{Key: idempotency.Key{Namespace: "q", ID: "3"}, Token: "t"}}, make([]error, 1))
	err1, _ := testwait.Recv(t, first, time.Minute, "the batch waiting for the lock")
	for _, err := range []error{err1, err2} {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call under a foreign write lock: %v, want the context's deadline", err)
		}
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("calls returned after %v, a busy timeout's wait, not the context's", d)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if o, _, err := s.TryClaim(ctx, idempotency.Key{Namespace: "q", ID: "1"}); err != nil || o != idempotency.Claimed {
		t.Fatalf("TryClaim after the lock = %v, %v; want claimed (the cancelled batch claimed nothing)", o, err)
	}
}

const childEnv = "MSGAUDIT_SQLITESTORE_CHILD"

// TestSQLiteSIGKILLKeepsCommits: a child process confirms keys (single
// calls and batches) under the default synchronous=NORMAL and prints each
// key once its Confirm or ConfirmBatch has returned; the test kills it
// with SIGKILL mid-stream. Every key the child printed is confirmed in the
// file afterwards: a process crash loses no committed transaction.
func TestSQLiteSIGKILLKeepsCommits(t *testing.T) {
	if path := os.Getenv(childEnv); path != "" {
		sigkillChild(path)
		return
	}
	t.Parallel()
	ctx := testwait.Context(t, 2*time.Minute)
	path := filepath.Join(t.TempDir(), "kill.db")
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSQLiteSIGKILLKeepsCommits$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"="+path, "MSGAUDIT_SQLITESTORE_ROUND="+strconv.Itoa(round))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var printed []string
		sc := bufio.NewScanner(out)
		killAt := 200 + 150*round
		for sc.Scan() {
			printed = append(printed, sc.Text())
			if len(printed) == killAt {
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child ended with %v after %d keys, not by SIGKILL", round, err, len(printed))
		}
		s := openSQLiteTest(t, path, idempotency.Options{})
		for _, id := range printed {
			if ok, err := s.IsConfirmed(ctx, idempotency.Key{Namespace: "kill", ID: id}); err != nil || !ok {
				t.Fatalf("round %d: key %s confirmed before the SIGKILL: IsConfirmed = %v, %v", round, id, ok, err)
			}
		}
		t.Logf("round %d: %d confirmations printed before SIGKILL, all in the file", round, len(printed))
		_ = s.Close()
	}
}

// sigkillChild confirms keys until killed: pairs of single calls and
// batches of 10 in turn, printing each key after its confirm returned.
func sigkillChild(path string) {
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	w := bufio.NewWriter(os.Stdout)
	round := os.Getenv("MSGAUDIT_SQLITESTORE_ROUND")
	key := func(n int) idempotency.Key {
		return idempotency.Key{Namespace: "kill", ID: round + "-" + strconv.Itoa(n)}
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for n := 0; ; {
		if n%20 < 10 {
			_, c, err := s.TryClaim(ctx, key(n))
			if err != nil {
				fail(err)
			}
			if err := s.Confirm(ctx, c); err != nil {
				fail(err)
			}
			fmt.Fprintln(w, c.Key.ID)
			n++
		} else {
			keys := make([]idempotency.Key, 10)
			for i := range keys {
				keys[i] = key(n + i)
			}
			res := make([]idempotency.ClaimResult, len(keys))
			if err := s.TryClaimBatch(ctx, keys, res); err != nil {
				fail(err)
			}
			claims := make([]idempotency.Claim, len(keys))
			for i := range res {
				claims[i] = res[i].Claim
			}
			errs := make([]error, len(claims))
			if err := s.ConfirmBatch(ctx, claims, errs); err != nil {
				fail(err)
			}
			for i, err := range errs {
				if err != nil {
					fail(err)
				}
				fmt.Fprintln(w, keys[i].ID)
			}
			n += len(keys)
		}
		if err := w.Flush(); err != nil {
			os.Exit(0) // the parent stopped reading
		}
	}
}

// TestSQLiteInMemoryRefused: an in-memory database keeps its keys only
// while the store is open, so a redelivery after a restart would be
// applied again; Open refuses every way of asking for one, and still
// opens a file.
func TestSQLiteInMemoryRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, path := range []string{":memory:", "file::memory:", "file:m?mode=memory", "file:m?mode=memory&cache=shared"} {
		s, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded; want an in-memory error", path)
			continue
		}
		if !strings.Contains(err.Error(), "in memory") {
			t.Errorf("Open(%q) = %v; want an in-memory error", path, err)
		}
	}
	s, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "f.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}
