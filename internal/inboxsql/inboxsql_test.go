package inboxsql

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"pgregory.net/rapid"
)

// TestStorageKeyInjective: two different values never share a stored
// form, verbatim and hashed ones included, and a stored form is never
// longer than max or a hashed key.
func TestStorageKeyInjective(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		max := rapid.IntRange(1, 80).Draw(t, "max")
		gen := rapid.OneOf(
			rapid.String(),
			rapid.StringN(0, 200, -1),
			rapid.Custom(func(t *rapid.T) string { return idempotency.HashedKeyPrefix + rapid.String().Draw(t, "rest") }),
			rapid.Custom(func(t *rapid.T) string { return StorageKey(rapid.StringN(81, 120, -1).Draw(t, "long"), 1) }),
		)
		a, b := gen.Draw(t, "a"), gen.Draw(t, "b")
		sa, sb := StorageKey(a, max), StorageKey(b, max)
		if a != b && sa == sb {
			t.Fatalf("%q and %q share the stored form %q", a, b, sa)
		}
		if a == b && sa != sb {
			t.Fatalf("%q stored two ways", a)
		}
		if len(sa) > max && len(sa) != idempotency.HashedKeyLength {
			t.Fatalf("stored form of %q is %d bytes (max %d)", a, len(sa), max)
		}
	})
	if got := StorageKey("plain", 16); got != "plain" {
		t.Errorf("a short key is stored as %q", got)
	}
	if got := StorageKey(strings.Repeat("x", 17), 16); !strings.HasPrefix(got, idempotency.HashedKeyPrefix) {
		t.Errorf("a long key is stored as %q", got)
	}
}

// TestBuild: table names are validated and quoted, and schema-qualified
// names put the SQLite index in the schema.
func TestBuild(t *testing.T) {
	for _, c := range []struct {
		table    string
		postgres bool
		ok       bool
		create   string // in the index statement
	}{
		{"", true, true, `"msgaudit_inbox_recorded_at_idx" ON "msgaudit_inbox"`},
		{"audit.inbox", true, true, `"inbox_recorded_at_idx" ON "audit"."inbox"`},
		{"audit.inbox", false, true, `"audit"."inbox_recorded_at_idx" ON "inbox"`},
		{"Mixed_Case1", false, true, `"Mixed_Case1_recorded_at_idx" ON "Mixed_Case1"`},
		{strings.Repeat("a", 47), true, true, ""},
		{strings.Repeat("a", 48), true, false, ""},
		{"a.b.c", true, false, ""},
		{`x"; DROP TABLE y; --`, true, false, ""},
		{"1abc", false, false, ""},
	} {
		st, err := Build(c.table, c.postgres)
		if (err == nil) != c.ok {
			t.Errorf("Build(%q) error %v; want ok=%v", c.table, err, c.ok)
			continue
		}
		if c.create != "" && !strings.Contains(st.Create[1], c.create) {
			t.Errorf("Build(%q, postgres=%v) index statement %q; want it to contain %q", c.table, c.postgres, st.Create[1], c.create)
		}
	}
}

type stateErr string

func (e stateErr) Error() string    { return "sqlstate " + string(e) }
func (e stateErr) SQLState() string { return string(e) }

// TestBatchLimits: zero means the default, negative is an error, anything
// else is kept.
func TestBatchLimits(t *testing.T) {
	l, m, g, err := BatchLimits(0, 0, 0)
	if err != nil || l != DefaultLanes || m != DefaultMaxBatch || g != DefaultLinger {
		t.Errorf("BatchLimits(0, 0, 0) = %d, %d, %v, %v; want the defaults", l, m, g, err)
	}
	if l, m, g, err := BatchLimits(3, 1, time.Second); err != nil || l != 3 || m != 1 || g != time.Second {
		t.Errorf("BatchLimits(3, 1, 1s) = %d, %d, %v, %v", l, m, g, err)
	}
	for _, c := range []struct {
		lanes, maxBatch int
		linger          time.Duration
		want            string
	}{{-1, 0, 0, "Lanes"}, {0, -1, 0, "MaxBatch"}, {0, 0, -1, "Linger"}} {
		if _, _, _, err := BatchLimits(c.lanes, c.maxBatch, c.linger); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("BatchLimits(%d, %d, %v) = %v; want an error naming %s", c.lanes, c.maxBatch, c.linger, err, c.want)
		}
	}
}

// TestBroken: only SQLSTATE 25P02 (in failed transaction) is Broken;
// 40001 and 40P01 are Conflicts.
func TestBroken(t *testing.T) {
	for _, c := range []struct {
		err              error
		broken, conflict bool
	}{
		{stateErr("25P02"), true, false},
		{fmt.Errorf("wrapped: %w", stateErr("25P02")), true, false},
		{stateErr("40001"), false, true},
		{stateErr("40P01"), false, true},
		{stateErr("23505"), false, false},
		{errors.New("plain"), false, false},
	} {
		if got := Broken(c.err); got != c.broken {
			t.Errorf("Broken(%v) = %v; want %v", c.err, got, c.broken)
		}
		if got := Conflict(c.err); got != c.conflict {
			t.Errorf("Conflict(%v) = %v; want %v", c.err, got, c.conflict)
		}
	}
}

// TestGuard: when ctx ends while op runs, Guard calls cancel (the
// server-side cancel) and op's own context stays alive; op ending on its
// own needs no cancel.
func TestGuard(t *testing.T) {
	ctx, end := context.WithCancel(context.Background())
	cancelled := make(chan struct{})
	err := Guard(ctx, func(context.Context) error {
		close(cancelled)
		return nil
	}, func(octx context.Context) error {
		end()
		select {
		case <-cancelled: // the "server" cancels the statement
		case <-time.After(10 * time.Second):
			return errors.New("no server-side cancel")
		}
		if octx.Err() != nil {
			return errors.New("op's context was cancelled with the caller's")
		}
		return errors.New("canceled on the server")
	})
	if err == nil || err.Error() != "canceled on the server" {
		t.Errorf("Guard = %v; want the statement's own error", err)
	}
	calls := 0
	if err := Guard(context.Background(), func(context.Context) error { calls++; return nil }, func(context.Context) error { return nil }); err != nil || calls != 0 {
		t.Errorf("Guard without an end = %v, %d cancels; want nil, 0", err, calls)
	}
	live, stop := context.WithCancel(context.Background())
	defer stop()
	if err := Guard(live, func(context.Context) error { calls++; return nil }, func(context.Context) error { return nil }); err != nil || calls != 0 {
		t.Errorf("Guard of a statement that ends first = %v, %d cancels; want nil, 0", err, calls)
	}
}
