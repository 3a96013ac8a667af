package receiver_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/sqlitestore"
	"github.com/acemq/msgaudit/metadata"
	"github.com/acemq/msgaudit/receiver"
)

// TestNilDependenciesFailAtConstruction: a store, inbox or selector left
// nil by an ignored constructor error is rejected by New and the selector
// constructors, never accepted to fail (or silently run without it) at the
// first message.
func TestNilDependenciesFailAtConstruction(t *testing.T) {
	t.Parallel()
	var nilSQLite *sqlitestore.Store       // idempotency.Open's concrete types, nil
	var nilMeta *receiver.MetadataSelector // what `sel, _ := NewMetadataSelector(nil, …)` leaves
	var nilMemStore *metadata.Memory
	var nilAudit *connaudit.Audit
	var nilInbox *fakeInbox
	for _, tt := range []struct {
		name string
		cfg  receiver.Config
		want string // in the error
	}{
		{"typed-nil store", receiver.Config{Store: nilSQLite}, "Store is a nil *sqlitestore.Store"},
		{"typed-nil inbox", receiver.Config{Inbox: nilInbox}, "Inbox is a nil *receiver_test.fakeInbox"},
		{"nil selector", receiver.Config{Selectors: []receiver.Selector{nil}}, "selector 0 is nil"},
		{"typed-nil selector", receiver.Config{Selectors: []receiver.Selector{nilMeta}}, "selector 0 is nil (*receiver.MetadataSelector"},
		{"second selector nil", receiver.Config{Selectors: []receiver.Selector{receiver.SelectorFunc{Label: "a",
			Func: func(context.Context, *receiver.Message) (receiver.Verdict, string, error) {
				return receiver.Accept, "", nil
			}}, nilMeta}}, "selector 1 is nil"},
		{"ConnAudit of a nil audit", receiver.Config{Audit: receiver.ConnAudit(nilAudit), MemoryOnly: true}, "nil *connaudit.Audit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := receiver.New(tt.cfg)
			if !errors.Is(err, receiver.ErrConfig) || r != nil {
				t.Fatalf("New = %v, %v; want an ErrConfig error", r, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %q does not say %q", err, tt.want)
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
	t.Run("memory only is the memory tier alone", func(t *testing.T) {
		r, err := receiver.New(receiver.Config{MemoryOnly: true})
		if err != nil {
			t.Fatalf("MemoryOnly Config: %v", err)
		}
		if names := receiver.SelectorNames(r); !slices.Equal(names, []string{"memory"}) {
			t.Fatalf("MemoryOnly Config runs %v, want the memory tier alone", names)
		}
	})
}

// fakeInbox is a receiver.Inbox whose lanes are sized as the inboxes size
// theirs: to the handlers unless fixed, and whose pool allows conns
// connections (0: unlimited).
type fakeInbox struct {
	fixed, lanes, conns int
}

func (f *fakeInbox) Name() string { return "inbox" }

func (f *fakeInbox) Select(context.Context, *receiver.Message) (receiver.Decision, error) {
	return receiver.Decision{Verdict: receiver.Accept, Reason: "new", Detail: "recorded"}, nil
}

func (f *fakeInbox) SizeLanes(handlers int) int {
	f.lanes = 4 // the inbox's own default
	if f.fixed > 0 {
		f.lanes = f.fixed
	} else if handlers > 0 {
		f.lanes = handlers
	}
	return f.lanes
}

func (f *fakeInbox) MaxOpenConns() int { return f.conns }

// TestConfigChecks: New refuses, with an error wrapping ErrConfig that says
// what is wrong, every configuration that would run without the
// durability it was given (or without any chosen), or with an inbox that
// could not hold: each check in one place, whatever builds the Receiver.
func TestConfigChecks(t *testing.T) {
	t.Parallel()
	store := memStore(t, idempotency.Options{})
	defer store.Close()
	for _, tt := range []struct {
		name string
		cfg  receiver.Config
		want string // in the error; "" means accepted
	}{
		{"zero config", receiver.Config{}, "no Store, Inbox or Selectors"},
		{"memory only", receiver.Config{MemoryOnly: true}, ""},
		{"store", receiver.Config{Store: store}, ""},
		{"selectors", receiver.Config{Selectors: []receiver.Selector{&fakeInbox{}}}, ""},
		{"inbox", receiver.Config{Inbox: &fakeInbox{}, Handlers: 4}, ""},
		{"store and memory only", receiver.Config{Store: store, MemoryOnly: true}, "MemoryOnly set together with a Store or an Inbox"},
		{"inbox and memory only", receiver.Config{Inbox: &fakeInbox{}, MemoryOnly: true}, "MemoryOnly set together with a Store or an Inbox"},
		{"inbox and store", receiver.Config{Inbox: &fakeInbox{}, Store: store}, "Inbox and Store both set"},
		{"inbox with DuplicateDeliver", receiver.Config{Inbox: &fakeInbox{}, Duplicates: receiver.DuplicateDeliver}, "Inbox with DuplicateDeliver"},
		{"inbox with MissingKeyProcess", receiver.Config{Inbox: &fakeInbox{}, MissingKey: receiver.MissingKeyProcess}, "Inbox with MissingKeyProcess"},
		{"inbox lanes above handlers", receiver.Config{Inbox: &fakeInbox{fixed: 8}, Handlers: 4}, "the inbox has 8 lanes but 4 handlers can take them"},
		{"inbox lanes above the lane bound", receiver.Config{Inbox: &fakeInbox{fixed: 4}, Handlers: 8, LaneBound: 2}, "the inbox has 4 lanes but 2 handlers can take them"},
		{"inbox lanes within the lane bound", receiver.Config{Inbox: &fakeInbox{fixed: 2}, Handlers: 8, LaneBound: 2}, ""},
		{"inbox lanes above the pool", receiver.Config{Inbox: &fakeInbox{conns: 3}, Handlers: 4}, "pool allows 3 connections but the inbox has 4 lanes"},
		{"inbox without a handler bound", receiver.Config{Inbox: &fakeInbox{fixed: 8}}, ""},
		{"negative Completed", receiver.Config{MemoryOnly: true, Completed: -1}, "negative Completed"},
		{"negative LaneBound", receiver.Config{MemoryOnly: true, LaneBound: -1}, "LaneBound -1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := receiver.New(tt.cfg)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if !errors.Is(err, receiver.ErrConfig) || r != nil {
				t.Fatalf("New = %v, %v; want an ErrConfig error", r, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %q does not say %q", err, tt.want)
			}
		})
	}
	// New sizes the inbox's lanes to the handlers, at most LaneBound, and
	// puts it after the memory tier.
	ib := &fakeInbox{}
	r, err := receiver.New(receiver.Config{Inbox: ib, Handlers: 6, LaneBound: 3})
	if err != nil {
		t.Fatal(err)
	}
	if ib.lanes != 3 {
		t.Errorf("inbox sized to %d lanes, want 3", ib.lanes)
	}
	if names := receiver.SelectorNames(r); !slices.Equal(names, []string{"memory", "inbox"}) {
		t.Errorf("selectors %v, want memory then inbox", names)
	}
}

// TestWrapWithStore: a handler wrapped by a Receiver over a store
// acknowledges its first delivery.
func TestWrapWithStore(t *testing.T) {
	t.Parallel()
	r, err := receiver.New(receiver.Config{Store: memStore(t, idempotency.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Wrap(okHandler)(bg, &receiver.Message{Key: "k", Destination: "orders"}); err != nil {
		t.Fatalf("wrapped handler: %v", err)
	}
}
