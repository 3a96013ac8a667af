package idempotency_test

import (
	"errors"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/storetest"
)

func TestMemoryConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		return memStore(t, o)
	}, storetest.Capabilities{})
}

// TestMemoryBacklog runs the backlog cases.
func TestMemoryBacklog(t *testing.T) {
	t.Parallel()
	storetest.RunBacklog(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		return memStore(t, o)
	}, storetest.Capabilities{})
}

// TestMemoryRunBatch runs the batch cases through their own entry point.
func TestMemoryRunBatch(t *testing.T) {
	t.Parallel()
	storetest.RunBatch(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		return memStore(t, o)
	}, storetest.Capabilities{})
}

// memStore returns a Memory with options o, failing tb if NewMemory refuses
// them.
func memStore(tb testing.TB, o idempotency.Options) *idempotency.Memory {
	tb.Helper()
	m, err := idempotency.NewMemory(o)
	if err != nil {
		tb.Fatalf("NewMemory(%+v): %v", o, err)
	}
	return m
}

// group returns s wrapped by Group with options o, failing tb if Group
// refuses them.
func group(tb testing.TB, s idempotency.Store, o idempotency.GroupOptions) idempotency.Store {
	tb.Helper()
	g, err := idempotency.Group(s, o)
	if err != nil {
		tb.Fatalf("Group(%+v): %v", o, err)
	}
	return g
}

// TestConstructorsRefuseNegativeOptions: NewMemory and Group return an
// error wrapping ErrOptions for every negative option, and accept the
// zero options.
func TestConstructorsRefuseNegativeOptions(t *testing.T) {
	t.Parallel()
	newMemory := func(o idempotency.Options) error {
		m, err := idempotency.NewMemory(o)
		if m != nil && err != nil {
			t.Errorf("NewMemory(%+v) returned a store with its error", o)
		}
		return err
	}
	newGroup := func(o idempotency.GroupOptions) error {
		g, err := idempotency.Group(memStore(t, idempotency.Options{}), o)
		if g != nil && err != nil {
			t.Errorf("Group(%+v) returned a store with its error", o)
		}
		return err
	}
	for _, c := range []struct {
		name string
		err  error
	}{
		{"ClaimTTL", newMemory(idempotency.Options{ClaimTTL: -time.Second})},
		{"Retention", newMemory(idempotency.Options{Retention: -time.Nanosecond})},
		{"MaxKeyLength", newMemory(idempotency.Options{MaxKeyLength: -1})},
		{"MaxBatch", newGroup(idempotency.GroupOptions{MaxBatch: -1})},
		{"Linger", newGroup(idempotency.GroupOptions{Linger: -time.Nanosecond})},
		{"Timeout", newGroup(idempotency.GroupOptions{Timeout: -time.Second})},
	} {
		if !errors.Is(c.err, idempotency.ErrOptions) {
			t.Errorf("negative %s: error %v, want ErrOptions", c.name, c.err)
		}
	}
	if err := newMemory(idempotency.Options{}); err != nil {
		t.Errorf("NewMemory with zero Options: %v", err)
	}
	if err := newGroup(idempotency.GroupOptions{}); err != nil {
		t.Errorf("Group with zero GroupOptions: %v", err)
	}
}
