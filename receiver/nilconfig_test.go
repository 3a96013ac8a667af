package receiver_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/sqlitestore"
	"github.com/acemq/msgaudit/metadata"
	"github.com/acemq/msgaudit/receiver"
)

// TestNilDependenciesFailAtConstruction: a store or selector left nil by
// an ignored constructor error is rejected by New, NewWrap and the selector
// constructors, never accepted to fail (or silently run without it) at the
// first message.
func TestNilDependenciesFailAtConstruction(t *testing.T) {
	t.Parallel()
	var nilSQLite *sqlitestore.Store       // idempotency.Open's concrete types, nil
	var nilMeta *receiver.MetadataSelector // what `sel, _ := NewMetadataSelector(nil, …)` leaves
	var nilMemStore *metadata.Memory
	var nilAudit *connaudit.Audit
	for _, tt := range []struct {
		name string
		cfg  receiver.Config
		want string // in the error
	}{
		{"typed-nil store", receiver.Config{Store: nilSQLite}, "Store is a nil *sqlitestore.Store"},
		{"nil selector", receiver.Config{Selectors: []receiver.Selector{nil}}, "selector 0 is nil"},
		{"typed-nil selector", receiver.Config{Selectors: []receiver.Selector{nilMeta}}, "selector 0 is nil (*receiver.MetadataSelector"},
		{"second selector nil", receiver.Config{Selectors: []receiver.Selector{receiver.SelectorFunc{Label: "a",
			Func: func(context.Context, *receiver.Message) (receiver.Verdict, string, error) {
				return receiver.Accept, "", nil
			}}, nilMeta}}, "selector 1 is nil"},
		{"ConnAudit of a nil audit", receiver.Config{Audit: receiver.ConnAudit(nilAudit)}, "nil *connaudit.Audit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := receiver.New(tt.cfg)
			if !errors.Is(err, receiver.ErrConfig) || r != nil {
				t.Fatalf("New = %v, %v; want an ErrConfig error", r, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %q does not say %q", err, tt.want)
			}
			h, err := receiver.NewWrap(okHandler, receiver.WithConfig(tt.cfg))
			if !errors.Is(err, receiver.ErrConfig) || h != nil {
				t.Fatalf("NewWrap(WithConfig) = %v; want an ErrConfig error", err)
			}
		})
	}

	t.Run("metadata selector over a nil store", func(t *testing.T) {
		for name, st := range map[string]metadata.Store{"nil": nil, "typed nil": nilMemStore} {
			sel, err := receiver.NewMetadataSelector(st, receiver.MetadataOptions{})
			if !errors.Is(err, receiver.ErrConfig) || sel != nil {
				t.Errorf("%s: NewMetadataSelector = %v, %v; want an ErrConfig error", name, sel, err)
			}
		}
	})
	t.Run("store selector over a nil store", func(t *testing.T) {
		for name, st := range map[string]idempotency.Store{"nil": nil, "typed nil": nilSQLite} {
			sel, err := receiver.NewStoreSelector(st, receiver.StoreOptions{})
			if !errors.Is(err, receiver.ErrConfig) || sel != nil {
				t.Errorf("%s: NewStoreSelector = %v, %v; want an ErrConfig error", name, sel, err)
			}
		}
	})
	t.Run("unset store is no store", func(t *testing.T) {
		r, err := receiver.New(receiver.Config{})
		if err != nil {
			t.Fatalf("zero Config: %v", err)
		}
		if n := len(r.Selectors()); n != 1 {
			t.Fatalf("zero Config runs %d selectors, want the memory tier alone", n)
		}
	})
}

// TestWrapOptionErrors: an option given a nil dependency is an error from
// NewWrap naming the option, and a panic from Wrap; both at construction.
func TestWrapOptionErrors(t *testing.T) {
	t.Parallel()
	var nilSQLite *sqlitestore.Store
	var nilStore idempotency.Store // what `store, _ := idempotency.Open(…)` leaves on an error
	var nilMeta *receiver.MetadataSelector
	for _, tt := range []struct {
		name string
		h    receiver.Handler
		opts []receiver.Option
		want string
	}{
		{"WithStore(nil)", okHandler, []receiver.Option{receiver.WithStore(nilStore, "orders")}, "WithStore: nil store"},
		{"WithStore(typed nil)", okHandler, []receiver.Option{receiver.WithStore(nilSQLite, "orders")}, "WithStore: nil store"},
		{"WithSelectors(nil)", okHandler, []receiver.Option{receiver.WithSelectors(nil)}, "WithSelectors: selector 0 is nil"},
		{"WithSelectors(typed nil)", okHandler, []receiver.Option{receiver.WithSelectors(nilMeta)}, "WithSelectors: selector 0 is nil"},
		{"WithAudit(nil)", okHandler, []receiver.Option{receiver.WithAudit(nil)}, "WithAudit: nil auditor"},
		{"nil option", okHandler, []receiver.Option{nil}, "nil Option"},
		{"nil handler", nil, nil, "nil Handler"},
		{"bad config", okHandler, []receiver.Option{receiver.WithMaxAttempts(-1)}, "negative MaxAttempts"},
		{"first error wins", okHandler, []receiver.Option{receiver.WithStore(nilStore, ""), receiver.WithSelectors(nilMeta)}, "WithStore"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, err := receiver.NewWrap(tt.h, tt.opts...)
			if !errors.Is(err, receiver.ErrConfig) || h != nil {
				t.Fatalf("NewWrap = %v; want an ErrConfig error", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewWrap: %q does not say %q", err, tt.want)
			}
			func() {
				defer func() {
					r := recover()
					if s, _ := r.(string); !strings.Contains(s, tt.want) {
						t.Fatalf("Wrap panicked with %v; want a panic saying %q", r, tt.want)
					}
				}()
				receiver.Wrap(tt.h, tt.opts...)
			}()
		})
	}
	h, err := receiver.NewWrap(okHandler, receiver.WithStore(idempotency.NewMemory(idempotency.Options{}), "orders"))
	if err != nil || h == nil {
		t.Fatalf("NewWrap with a store: %v", err)
	}
	if err := h(bg, &receiver.Message{Key: "k", Destination: "orders"}); err != nil {
		t.Fatalf("wrapped handler: %v", err)
	}
}
