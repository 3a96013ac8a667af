package idempotency_test

import (
	"testing"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/storetest"
)

func TestMemoryConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		return idempotency.NewMemory(o)
	}, storetest.Capabilities{})
}

// TestMemoryRunBatch runs the batch cases through their own entry point.
func TestMemoryRunBatch(t *testing.T) {
	t.Parallel()
	storetest.RunBatch(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		return idempotency.NewMemory(o)
	}, storetest.Capabilities{})
}
