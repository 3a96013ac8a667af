package stompconsumer

import (
	"context"
	"errors"
	"github.com/acemq/msgaudit/internal/testkit/logbuf"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/sqlitestore"
	"github.com/acemq/msgaudit/receiver"
)

// TestStoreChoice: running without a durable store is an explicit choice
// (MemoryOnly), never the silent meaning of a nil Store.
func TestStoreChoice(t *testing.T) {
	t.Parallel()
	var nilSQLite *sqlitestore.Store // what an unchecked Open error can leave in a variable
	var nilStore idempotency.Store   // what `store, _ := idempotency.Open(…)` leaves on an error
	mem := memStore(t, idempotency.Options{})
	defer mem.Close()
	for _, tt := range []struct {
		name       string
		store      idempotency.Store
		memoryOnly bool
		want       string // "" = New succeeds
	}{
		{"nil store, no choice", nilStore, false, "no Store, Inbox or Selectors"},
		{"typed-nil store", nilSQLite, false, "Store is a nil *sqlitestore.Store"},
		{"typed-nil store and MemoryOnly", nilSQLite, true, "Store is a nil *sqlitestore.Store"},
		{"store and MemoryOnly", mem, true, "MemoryOnly set together with a Store or an Inbox"},
		{"store", mem, false, ""},
		{"MemoryOnly", nil, true, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(Config{
				Addresses:     []string{"h:1"},
				Subscriptions: []Subscription{{Destination: "/queue/a", Handler: nopHandler}},
				Pipeline:      receiver.Config{Store: tt.store, MemoryOnly: tt.memoryOnly}})
			if tt.want == "" {
				if err != nil || c == nil {
					t.Fatalf("New: %v, want a consumer", err)
				}
				return
			}
			if !errors.Is(err, ErrConfig) || c != nil {
				t.Fatalf("New = %v, %v; want ErrConfig", c, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %q does not say %q", err, tt.want)
			}
		})
	}
}

// TestGuaranteeLogged: a MemoryOnly consumer says once, at its first Run,
// that its duplicate detection does not survive a restart; one with a
// store says that it does.
func TestGuaranteeLogged(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: Run fails fast with ErrConnect
	mem := memStore(t, idempotency.Options{})
	defer mem.Close()
	for _, tt := range []struct {
		name       string
		store      idempotency.Store
		memoryOnly bool
		want       string
	}{
		{"memory only", nil, true, "level=WARN msg=\"stompconsumer: memory-only duplicate detection (Pipeline.MemoryOnly): duplicates are absorbed while this process runs, across reconnects; after a restart, or on another consumer, a redelivery of finished work is applied again\""},
		{"durable", mem, false, "level=INFO msg=\"stompconsumer: durable duplicate detection: finished work is recognised across restarts"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs logbuf.Buffer
			c, err := New(Config{
				Addresses:      []string{addr},
				ConnectRetries: 1,
				ConnectTimeout: time.Second,
				Subscriptions:  []Subscription{{Destination: "/queue/a", Handler: nopHandler}},
				Pipeline:       receiver.Config{Logger: debugLogger(&logs), Store: tt.store, MemoryOnly: tt.memoryOnly}})
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := c.Run(ctx)
				cancel()
				if !errors.Is(err, ErrConnect) {
					t.Fatalf("Run against a closed port: %v, want ErrConnect", err)
				}
			}
			if n := strings.Count(logs.String(), tt.want); n != 1 {
				t.Fatalf("guarantee logged %d times over two runs, want once:\n%s", n, logs.String())
			}
		})
	}
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
