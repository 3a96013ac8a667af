package receiver_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/metadata"
	"github.com/acemq/msgaudit/metadata/pgmeta"
	"github.com/acemq/msgaudit/metadata/redismeta"
	"github.com/acemq/msgaudit/metadata/sqlitemeta"
	"github.com/acemq/msgaudit/receiver"
)

// mdLine is a line of a file, as a file-tailing adapter would deliver it:
// its own message id, the file name and the line number in headers.
func mdLine(file string, line int) *receiver.Message {
	return &receiver.Message{
		Key:         "ID:tail-" + file + ":" + strconv.Itoa(line) + ":" + strconv.FormatInt(time.Now().UnixNano(), 10),
		Destination: "/queue/lines",
		Headers:     map[string]string{"file": file, "line": strconv.Itoa(line)},
	}
}

// mdLines is Spring's compareValues example: key = file name, value = line
// number, accept only a line above the stored one.
func mdLines(t testing.TB, s metadata.Store) *receiver.MetadataSelector {
	t.Helper()
	sel, err := receiver.NewMetadataSelector(s, receiver.MetadataOptions{
		Key:     receiver.KeyFunc(receiver.HeaderValue("file")),
		Value:   receiver.IntHeader("line"),
		Compare: receiver.IntGreater,
	})
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

func mdReceiver(t testing.TB, mod func(*receiver.Config), sel ...receiver.Selector) *receiver.Receiver {
	t.Helper()
	cfg := receiver.Config{Selectors: sel, MaxAttempts: 3}
	if mod != nil {
		mod(&cfg)
	}
	r, err := receiver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mdValue(t testing.TB, s metadata.Store, key string) string {
	t.Helper()
	v, ok, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return "(absent)"
	}
	return v
}

// TestMetadataCompareValues is Spring's example: lines at or below the
// stored line are rejected, higher ones accepted and stored, and a new
// selector on the same store (a restart) carries on where the old one
// stopped — for memory and for an SQLite file closed and reopened.
func TestMetadataCompareValues(t *testing.T) {
	t.Parallel()
	type step struct {
		file   string
		line   int
		accept bool
	}
	before := []step{
		{"a.txt", 1, true}, {"a.txt", 2, true}, {"a.txt", 2, false}, {"a.txt", 1, false},
		{"a.txt", 5, true}, {"b.txt", 1, true}, {"a.txt", 4, false}, {"b.txt", 1, false},
	}
	after := []step{ // after the restart
		{"a.txt", 3, false}, {"a.txt", 5, false}, {"a.txt", 6, true}, {"b.txt", 2, true}, {"a.txt", 6, false},
	}
	// open returns a store and a restart function that returns the store
	// a restarted consumer would use: for SQLite the file closed and
	// reopened; for memory (which lives only as long as its process) the
	// same object, so only the selector and receiver are new.
	backends := []struct {
		name string
		open func(t *testing.T) (s metadata.StoreCloser, restart func(metadata.StoreCloser) metadata.StoreCloser)
	}{
		{"memory", func(t *testing.T) (metadata.StoreCloser, func(metadata.StoreCloser) metadata.StoreCloser) {
			return metadata.NewMemory(), func(s metadata.StoreCloser) metadata.StoreCloser { return s }
		}},
		{"sqlite", func(t *testing.T) (metadata.StoreCloser, func(metadata.StoreCloser) metadata.StoreCloser) {
			path := filepath.Join(t.TempDir(), "lines.db")
			open := func() metadata.StoreCloser {
				s, err := sqlitemeta.Open(context.Background(), path, sqlitemeta.Options{})
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			return open(), func(old metadata.StoreCloser) metadata.StoreCloser {
				if err := old.Close(); err != nil {
					t.Fatal(err)
				}
				return open()
			}
		}},
	}
	for _, be := range backends {
		t.Run("store="+be.name, func(t *testing.T) {
			t.Parallel()
			s, restart := be.open(t)
			run := func(r *receiver.Receiver, steps []step) {
				t.Helper()
				for i, st := range steps {
					ran := false
					res := r.Process(bg, mdLine(st.file, st.line), func(context.Context, *receiver.Message) error {
						ran = true
						return nil
					})
					if res.Action != receiver.Ack || ran != st.accept || res.Duplicate == st.accept {
						t.Fatalf("step %d %s:%d: result %+v ran %v; want accept=%v", i, st.file, st.line, res, ran, st.accept)
					}
					if !st.accept && res.Reason != "metadata" {
						t.Fatalf("step %d: rejection reason %q; want metadata", i, res.Reason)
					}
				}
			}
			run(mdReceiver(t, nil, mdLines(t, s)), before)
			if got := mdValue(t, s, "a.txt"); got != "5" {
				t.Fatalf("stored a.txt = %s; want 5", got)
			}
			// Restart: a new selector and receiver on the same store.
			s2 := restart(s)
			defer s2.Close()
			run(mdReceiver(t, nil, mdLines(t, s2)), after)
			if a, b := mdValue(t, s2, "a.txt"), mdValue(t, s2, "b.txt"); a != "6" || b != "2" {
				t.Fatalf("after restart stored a=%s b=%s; want 6, 2", a, b)
			}
		})
	}
}

// TestMetadataRejectionPolicies runs a metadata rejection through each of
// the receiver's duplicate policies and through Wrap.
func TestMetadataRejectionPolicies(t *testing.T) {
	t.Parallel()
	var hooked atomic.Value
	cases := []struct {
		name    string
		mod     func(*receiver.Config)
		action  receiver.Action
		reason  string
		ran     bool
		marked  bool
		hook    bool
		wrapErr error
	}{
		{name: "drop", action: receiver.Ack, reason: "metadata", wrapErr: receiver.ErrDuplicate},
		{name: "dead-letter", mod: func(c *receiver.Config) { c.Duplicates = receiver.DuplicateDeadLetter },
			action: receiver.DeadLetter, reason: "duplicate:metadata", wrapErr: receiver.ErrDeadLetter},
		{name: "deliver-marked", mod: func(c *receiver.Config) { c.Duplicates = receiver.DuplicateDeliver },
			action: receiver.Ack, reason: "metadata", ran: true, marked: true},
		{name: "hook", mod: func(c *receiver.Config) {
			c.Duplicates = receiver.DuplicateHook
			c.OnDuplicate = func(_ context.Context, m *receiver.Message, reason string) {
				hooked.Store(m.Header("file") + ":" + m.Header("line") + "/" + reason)
			}
		}, action: receiver.Ack, reason: "metadata", hook: true, wrapErr: receiver.ErrDuplicate},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := metadata.NewMemory()
			r := mdReceiver(t, tc.mod, mdLines(t, s))
			var calls []bool // m.Duplicate per handler call
			h := func(_ context.Context, m *receiver.Message) error {
				calls = append(calls, m.Duplicate)
				return nil
			}
			if res := r.Process(bg, mdLine("f", 7), h); res.Action != receiver.Ack || res.Duplicate {
				t.Fatalf("first line 7: %+v", res)
			}
			m := mdLine("f", 7) // the same line again, another message id
			res := r.Process(bg, m, h)
			if res.Action != tc.action || res.Reason != tc.reason || !res.Duplicate || res.Ran != tc.ran {
				t.Fatalf("rejected line: %+v", res)
			}
			if !strings.HasSuffix(res.Trace, " metadata:not-newer") {
				t.Errorf("verdict %q", res.Trace)
			}
			wantCalls := 1
			if tc.ran {
				wantCalls = 2
			}
			if len(calls) != wantCalls || calls[0] {
				t.Fatalf("handler calls %v; want %d, first unmarked", calls, wantCalls)
			}
			if tc.marked && (!calls[1] || m.Header("duplicate") != "true") {
				t.Errorf("duplicate not marked: %+v", m)
			}
			if tc.hook {
				if v, _ := hooked.Load().(string); v != "f:7/metadata" {
					t.Errorf("hook saw %q", v)
				}
			}
			err := r.Wrap(h)(bg, mdLine("f", 6))
			if tc.wrapErr == nil && err != nil || tc.wrapErr != nil && !errors.Is(err, tc.wrapErr) {
				t.Fatalf("Wrap: %v; want %v", err, tc.wrapErr)
			}
			if got := receiver.ActionOf(err); got != tc.action {
				t.Fatalf("ActionOf = %v; want %v", got, tc.action)
			}
			if got := mdValue(t, s, "f"); got != "7" {
				t.Fatalf("stored %s; want 7 (rejections change nothing)", got)
			}
		})
	}
}

// TestMetadataPutIfAbsent: without Compare the first value per key wins and
// every later message of the key is rejected, whatever its value.
func TestMetadataPutIfAbsent(t *testing.T) {
	t.Parallel()
	s := metadata.NewMemory()
	sel, err := receiver.NewMetadataSelector(s, receiver.MetadataOptions{Key: receiver.KeyFunc(receiver.HeaderValue("file"))})
	if err != nil {
		t.Fatal(err)
	}
	r := mdReceiver(t, nil, sel)
	at := time.UnixMilli(1_700_000_000_123)
	for i, tc := range []struct {
		file   string
		ts     time.Time
		header string
		accept bool
		value  string
	}{
		{"a", at, "", true, "1700000000123"},
		{"a", at.Add(time.Second), "", false, "1700000000123"},
		{"a", at.Add(-time.Second), "", false, "1700000000123"},
		{"b", time.Time{}, "42", true, "42"}, // the timestamp header wins over m.Timestamp
		{"b", at, "43", false, "42"},
	} {
		m := mdLine(tc.file, i)
		m.Timestamp = tc.ts
		if tc.header != "" {
			m.Headers[receiver.TimestampHeader] = tc.header
		}
		res := r.Process(bg, m, okHandler)
		if res.Action != receiver.Ack || res.Duplicate == tc.accept {
			t.Fatalf("step %d: %+v; want accept=%v", i, res, tc.accept)
		}
		if !tc.accept && !strings.HasSuffix(res.Trace, " metadata:exists") {
			t.Errorf("step %d verdict %q", i, res.Trace)
		}
		if got := mdValue(t, s, tc.file); got != tc.value {
			t.Fatalf("step %d: stored %s; want %s", i, got, tc.value)
		}
	}
}

// TestMetadataFailureUndo: a failed or abandoned delivery's write is undone
// so its redelivery is judged as if it never ran.
func TestMetadataFailureUndo(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	deferAll := receiver.SelectorFunc{Label: "later", Func: func(context.Context, *receiver.Message) (receiver.Verdict, string, error) {
		return receiver.Defer, "later-defer", nil
	}}
	cases := []struct {
		name    string
		seed    string // stored value before; "" = absent
		line    int
		later   bool // a later selector defers (Abandoned)
		handler receiver.Handler
		action  receiver.Action
		after   string
	}{
		{"failed-replace-restores", "2", 3, false, failing(boom), receiver.Requeue, "2"},
		{"failed-first-put-removes", "", 3, false, failing(boom), receiver.Requeue, "(absent)"},
		{"panic-restores", "2", 3, false, func(context.Context, *receiver.Message) error { panic("x") }, receiver.Requeue, "2"},
		{"abandoned-restores", "2", 3, true, okHandler, receiver.Requeue, "2"},
		{"abandoned-first-put-removes", "", 3, true, okHandler, receiver.Requeue, "(absent)"},
		{"success-keeps", "2", 3, false, okHandler, receiver.Ack, "3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := metadata.NewMemory()
			if tc.seed != "" {
				s.PutIfAbsent(bg, "f", tc.seed)
			}
			sel := mdLines(t, s)
			sels := []receiver.Selector{sel}
			if tc.later {
				sels = append(sels, deferAll)
			}
			r := mdReceiver(t, nil, sels...)
			m := mdLine("f", tc.line)
			if res := r.Process(bg, m, tc.handler); res.Action != tc.action {
				t.Fatalf("result %+v; want %v", res, tc.action)
			}
			if got := mdValue(t, s, "f"); got != tc.after {
				t.Fatalf("stored %s; want %s", got, tc.after)
			}
			if tc.action == receiver.Requeue {
				if st := sel.Stats(); st.Undone != 1 {
					t.Fatalf("stats %+v; want one undo", st)
				}
				if tc.later {
					return
				}
				// The redelivery runs and is stored.
				if res := r.Process(bg, m, okHandler); res.Action != receiver.Ack || res.Duplicate {
					t.Fatalf("redelivery: %+v", res)
				}
				if got := mdValue(t, s, "f"); got != strconv.Itoa(tc.line) {
					t.Fatalf("after redelivery stored %s", got)
				}
			}
		})
	}
}

// noRemove hides the Remover of a store.
type noRemove struct{ metadata.Store }

// TestMetadataUndoSuperseded: an undo never overwrites a newer value, and a
// store that cannot delete leaves the value (counted).
func TestMetadataUndoSuperseded(t *testing.T) {
	t.Parallel()
	ctx := bg
	s := metadata.NewMemory()
	s.PutIfAbsent(ctx, "f", "2")
	sel := mdLines(t, s)
	d, err := sel.Select(ctx, mdLine("f", 3))
	if err != nil || d.Verdict != receiver.Accept {
		t.Fatal(d, err)
	}
	// Another process moves the mark on before this delivery fails.
	if ok, _ := s.Replace(ctx, "f", "3", "9"); !ok {
		t.Fatal("concurrent replace failed")
	}
	if err := d.Settle(ctx, receiver.Failed); err != nil {
		t.Fatal(err)
	}
	if got := mdValue(t, s, "f"); got != "9" {
		t.Fatalf("undo overwrote a newer value: %s", got)
	}
	if st := sel.Stats(); st.UndoSuperseded != 1 || st.Undone != 0 {
		t.Fatalf("stats %+v", st)
	}

	nr := noRemove{metadata.NewMemory()}
	sel2 := mdLines(t, nr)
	d, err = sel2.Select(ctx, mdLine("g", 1))
	if err != nil || d.Verdict != receiver.Accept {
		t.Fatal(d, err)
	}
	if err := d.Settle(ctx, receiver.Failed); err != nil {
		t.Fatal(err)
	}
	if got := mdValue(t, nr, "g"); got != "1" {
		t.Fatalf("stored %s; a store without Remove keeps the value", got)
	}
	if st := sel2.Stats(); st.UndoSuperseded != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestMetadataInFlight: a message is judged only against settled values —
// while the delivery that stored a value is in flight, others of its key
// are deferred; after it completes they are rejected, after it fails
// accepted.
func TestMetadataInFlight(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		settle receiver.Settlement
		then   receiver.Verdict
	}{
		{receiver.Completed, receiver.Reject},
		{receiver.Failed, receiver.Accept},
		{receiver.Abandoned, receiver.Accept},
	} {
		t.Run(tc.settle.String(), func(t *testing.T) {
			s := metadata.NewMemory()
			sel := mdLines(t, s)
			d1, err := sel.Select(bg, mdLine("f", 5))
			if err != nil || d1.Verdict != receiver.Accept {
				t.Fatal(d1, err)
			}
			for _, line := range []int{5, 4, 6} {
				d, err := sel.Select(bg, mdLine("f", line))
				if err != nil || d.Verdict != receiver.Defer || d.Reason != "in-flight" {
					t.Fatalf("line %d while 5 in flight: %+v, %v; want defer", line, d, err)
				}
			}
			if err := d1.Settle(bg, tc.settle); err != nil {
				t.Fatal(err)
			}
			d, err := sel.Select(bg, mdLine("f", 5))
			if err != nil || d.Verdict != tc.then {
				t.Fatalf("line 5 after %v: %+v, %v; want %v", tc.settle, d, err, tc.then)
			}
			if d.Settle != nil {
				d.Settle(bg, receiver.Completed)
			}
			if st := sel.Stats(); st.Deferred != 3 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// raceStore interleaves a write by "another consumer" just before the
// selector's first Replace: the value moved to moveTo, or removed when
// moveTo is empty.
type raceStore struct {
	metadata.Store
	once   sync.Once
	moveTo string
}

func (r *raceStore) Replace(ctx context.Context, key, old, new string) (bool, error) {
	r.once.Do(func() {
		if r.moveTo == "" { // the other consumer's undo removes the key
			r.Store.(metadata.Remover).Remove(ctx, key, old)
			return
		}
		r.Store.Replace(ctx, key, old, r.moveTo)
	})
	return r.Store.Replace(ctx, key, old, new)
}

// TestMetadataLostRace: a Replace lost to a concurrent writer is decided
// again against the value that writer stored.
func TestMetadataLostRace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		moveTo string
		want   receiver.Verdict
		after  string
	}{
		{"3", receiver.Accept, "5"}, // still newer than 3: retried and stored
		{"7", receiver.Reject, "7"}, // 7 beats 5: rejected, nothing moved back
		{"5", receiver.Reject, "5"}, // equal: not newer
		{"", receiver.Accept, "5"},  // removed meanwhile: put-if-absent again
	} {
		t.Run("moveTo="+cmp.Or(tc.moveTo, "removed"), func(t *testing.T) {
			s := &raceStore{Store: metadata.NewMemory(), moveTo: tc.moveTo}
			s.PutIfAbsent(bg, "f", "2")
			sel := mdLines(t, s)
			d, err := sel.Select(bg, mdLine("f", 5))
			if err != nil || d.Verdict != tc.want {
				t.Fatalf("%+v, %v; want %v", d, err, tc.want)
			}
			if got := mdValue(t, s, "f"); got != tc.after {
				t.Fatalf("stored %s; want %s", got, tc.after)
			}
			if st := sel.Stats(); st.CASRetries != 1 {
				t.Fatalf("stats %+v; want one CAS retry", st)
			}
		})
	}
}

// TestMetadataRace races two consumers (two selectors sharing one store)
// on the same key, step after step: each step both offer the next line and
// exactly one wins; the stored line ends at the number of steps.
func TestMetadataRace(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T) metadata.Store{
		"memory": func(t *testing.T) metadata.Store { return metadata.NewMemory() },
		"sqlite": func(t *testing.T) metadata.Store {
			s, err := sqlitemeta.Open(bg, filepath.Join(t.TempDir(), "race.db"), sqlitemeta.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
	// The shared stores of competing consumer machines, when available.
	stores["redis"] = func(t *testing.T) metadata.Store {
		return mdServiceStore(t, "MSGAUDIT_REDIS_URL", "msgaudit_prefix", "mdsel:"+mdRandom(t)+":")
	}
	stores["postgres"] = func(t *testing.T) metadata.Store {
		return mdServiceStore(t, "MSGAUDIT_POSTGRES_URL", "msgaudit_table", "mdsel_"+mdRandom(t))
	}
	for name, open := range stores {
		t.Run("store="+name, func(t *testing.T) {
			t.Parallel()
			const steps = 100
			s := open(t)
			sels := [2]*receiver.MetadataSelector{mdLines(t, s), mdLines(t, s)}
			var wins [2]int
			for i := 1; i <= steps; i++ {
				var (
					wg sync.WaitGroup
					d  [2]receiver.Decision
					e  [2]error
				)
				start := make(chan struct{})
				for g := 0; g < 2; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						d[g], e[g] = sels[g].Select(bg, mdLine("f", i))
					}()
				}
				close(start)
				waitGroup(t, &wg, testWait, fmt.Sprintf("both consumers' selectors deciding step %d", i))
				if e[0] != nil || e[1] != nil {
					t.Fatalf("step %d: %v, %v", i, e[0], e[1])
				}
				accepted := 0
				for g := 0; g < 2; g++ {
					if d[g].Verdict == receiver.Accept {
						accepted++
						wins[g]++
						if err := d[g].Settle(bg, receiver.Completed); err != nil {
							t.Fatal(err)
						}
					} else if d[g].Verdict != receiver.Reject {
						t.Fatalf("step %d: loser verdict %v; want reject", i, d[g].Verdict)
					}
				}
				if accepted != 1 {
					t.Fatalf("step %d: %d accepted; want exactly 1", i, accepted)
				}
			}
			if got := mdValue(t, s, "f"); got != strconv.Itoa(steps) {
				t.Fatalf("stored %s; want %d", got, steps)
			}
			t.Logf("wins per consumer: %v", wins)
		})
	}
}

// TestMetadataRaceOneSelector: two goroutines of one consumer racing the
// same line — exactly one is accepted, the other deferred or rejected.
func TestMetadataRaceOneSelector(t *testing.T) {
	t.Parallel()
	s := metadata.NewMemory()
	sel := mdLines(t, s)
	for i := 1; i <= 200; i++ {
		var (
			wg       sync.WaitGroup
			accepted atomic.Int32
			mu       sync.Mutex
			settles  []func(context.Context, receiver.Settlement) error
		)
		for g := 0; g < 2; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := sel.Select(bg, mdLine("f", i))
				if err != nil {
					t.Error(err)
					return
				}
				if d.Verdict == receiver.Accept {
					accepted.Add(1)
					mu.Lock()
					settles = append(settles, d.Settle)
					mu.Unlock()
				}
			}()
		}
		waitGroup(t, &wg, testWait, fmt.Sprintf("both goroutines' selections of step %d", i))
		if n := accepted.Load(); n != 1 {
			t.Fatalf("step %d: %d accepted; want 1", i, n)
		}
		for _, st := range settles {
			st(bg, receiver.Completed)
		}
	}
}

// TestMetadataBadInput: a message without a key or value can never be
// judged: dead-lettered (never dropped silently); a store error requeues.
func TestMetadataBadInput(t *testing.T) {
	t.Parallel()
	s := metadata.NewMemory()
	r := mdReceiver(t, nil, mdLines(t, s))
	for _, tc := range []struct {
		name    string
		headers map[string]string
	}{
		{"no-file", map[string]string{"line": "1"}},
		{"no-line", map[string]string{"file": "f"}},
		{"line-not-a-number", map[string]string{"file": "f", "line": "x1"}},
	} {
		m := &receiver.Message{Key: "ID:bad:" + tc.name, Destination: "/queue/lines", Headers: tc.headers}
		res := r.Process(bg, m, okHandler)
		if res.Action != receiver.DeadLetter || res.Reason != "malformed-key" || !errors.Is(res.Err, receiver.ErrBadKey) {
			t.Errorf("%s: %+v; want dead-letter malformed-key", tc.name, res)
		}
	}

	closed := metadata.NewMemory()
	closed.Close()
	r = mdReceiver(t, nil, mdLines(t, closed))
	res := r.Process(bg, mdLine("f", 1), okHandler)
	if res.Action != receiver.Requeue || !errors.Is(res.Err, metadata.ErrClosed) {
		t.Fatalf("store error: %+v; want requeue", res)
	}

	// Default value function: no timestamp at all is a bad message.
	sel, _ := receiver.NewMetadataSelector(metadata.NewMemory(), receiver.MetadataOptions{})
	if _, err := sel.Select(bg, &receiver.Message{Key: "ID:x:1"}); !errors.Is(err, receiver.ErrBadKey) {
		t.Fatalf("no timestamp: %v; want ErrBadKey", err)
	}
	if _, err := receiver.NewMetadataSelector(nil, receiver.MetadataOptions{}); !errors.Is(err, receiver.ErrConfig) {
		t.Fatalf("nil store: %v", err)
	}
}

func TestIntGreater(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		old, new string
		want     bool
	}{
		{"1", "2", true}, {"2", "2", false}, {"3", "2", false}, {"9", "10", true}, // numeric, not lexical
		{"-1", "0", true}, {"x", "2", false}, {"1", "", false}, {"1", "2.5", false},
	} {
		if got := receiver.IntGreater(tc.old, tc.new); got != tc.want {
			t.Errorf("IntGreater(%q, %q) = %v; want %v", tc.old, tc.new, got, tc.want)
		}
	}
}

func BenchmarkMetadataSelector(b *testing.B) {
	for _, mode := range []string{"compare", "put-if-absent"} {
		b.Run("store=memory/mode="+mode, func(b *testing.B) {
			s := metadata.NewMemory()
			o := receiver.MetadataOptions{Key: receiver.KeyFunc(receiver.HeaderValue("file")), Value: receiver.IntHeader("line")}
			if mode == "compare" {
				o.Compare = receiver.IntGreater
			}
			sel, _ := receiver.NewMetadataSelector(s, o)
			msgs := make([]*receiver.Message, 1024)
			for i := range msgs {
				msgs[i] = &receiver.Message{Headers: map[string]string{"file": "f", "line": strconv.Itoa(i + 1)}}
				if mode == "put-if-absent" {
					msgs[i].Headers["file"] = "f" + strconv.Itoa(i)
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if i == len(msgs) {
					b.StopTimer()
					s = metadata.NewMemory()
					sel, _ = receiver.NewMetadataSelector(s, o)
					i = 0
					b.StartTimer()
				}
				d, err := sel.Select(bg, msgs[i])
				if err != nil || d.Verdict != receiver.Accept {
					b.Fatal(d, err)
				}
				d.Settle(bg, receiver.Completed)
				i++
			}
		})
	}
}

func mdRandom(t testing.TB) string {
	return strconv.FormatUint(rand.Uint64(), 36)
}

// mdServiceStore opens a metadata store on the service named by env (a
// Redis prefix or PostgreSQL table of its own, removed at cleanup). Unset:
// skip, except under CI=true where a missing service fails.
func mdServiceStore(t *testing.T, env, param, name string) metadata.Store {
	t.Helper()
	u := testenv.Getenv(t, env, "the real service")
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	s, err := metadata.Open(bg, u+sep+param+"="+url.QueryEscape(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer s.Close()
		switch st := s.(type) {
		case *redismeta.Store:
			// The test wrote one key; Remove it by its final value.
			v, ok, err := st.Get(bg, "f")
			if err == nil && ok {
				st.Remove(bg, "f", v)
			}
		case *pgmeta.Store:
			if err := st.Drop(bg); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	return s
}
