// Package storetest is the conformance suite every metadata.Store backend
// runs: semantics of Get, PutIfAbsent, Replace and (when implemented)
// Remove, argument checks, a
// cancelled context, reopening, races between concurrent callers, and a
// property test against a map.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/metadata"
	"pgregory.net/rapid"
)

// Opener opens a store on one isolated namespace (a key prefix, table or
// file). Every call returns a new Store object on the same data, as a
// restarted process would; the opener arranges closing with t.Cleanup.
type Opener func(t *testing.T) metadata.Store

// Run runs the suite. newNamespace creates a fresh namespace for one
// subtest (and registers its removal with t.Cleanup) and returns an Opener
// for it. Subtests run in parallel.
func Run(t *testing.T, newNamespace func(t *testing.T) Opener) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, open Opener)
	}{
		{"GetMissing", testGetMissing},
		{"PutIfAbsent", testPutIfAbsent},
		{"Replace", testReplace},
		{"EmptyValue", testEmptyValue},
		{"BinarySafe", testBinarySafe},
		{"LongKeys", testLongKeys},
		{"InvalidArguments", testInvalidArguments},
		{"CancelledContext", testCancelledContext},
		{"Reopen", testReopen},
		{"Remove", testRemove},
		{"RaceRemoveReplace", testRaceRemoveReplace},
		{"RacePutIfAbsent", testRacePutIfAbsent},
		{"RaceReplaceStep", testRaceReplaceStep},
		{"RaceIncrement", testRaceIncrement},
		{"Model", testModel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newNamespace(t))
		})
	}
}

// caseDeadline ends the context of a case's store calls (each helper call
// below gets callDeadline), and waitDeadline bounds each wait for a case's
// goroutines: a store that hangs fails the case, naming the call or the
// goroutines, instead of hanging the package. Limits for slow, shared
// machines, not expectations.
const (
	caseDeadline = 3 * time.Minute
	callDeadline = time.Minute
	waitDeadline = 2 * time.Minute
)

// callContext is the context of one helper's store call.
func callContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), callDeadline)
}

func get(t testing.TB, s metadata.Store, key string) (string, bool) {
	t.Helper()
	ctx, cancel := callContext()
	defer cancel()
	v, ok, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return v, ok
}

func put(t testing.TB, s metadata.Store, key, value string) (string, bool) {
	t.Helper()
	ctx, cancel := callContext()
	defer cancel()
	prev, stored, err := s.PutIfAbsent(ctx, key, value)
	if err != nil {
		t.Fatalf("PutIfAbsent(%q, %q): %v", key, value, err)
	}
	return prev, stored
}

func replace(t testing.TB, s metadata.Store, key, old, new string) bool {
	t.Helper()
	ctx, cancel := callContext()
	defer cancel()
	ok, err := s.Replace(ctx, key, old, new)
	if err != nil {
		t.Fatalf("Replace(%q, %q, %q): %v", key, old, new, err)
	}
	return ok
}

func wantValue(t testing.TB, s metadata.Store, key, want string) {
	t.Helper()
	v, ok := get(t, s, key)
	if !ok || v != want {
		t.Fatalf("Get(%q) = %q, %v; want %q, true", key, v, ok, want)
	}
}

func wantAbsent(t testing.TB, s metadata.Store, key string) {
	t.Helper()
	if v, ok := get(t, s, key); ok {
		t.Fatalf("Get(%q) = %q, true; want absent", key, v)
	}
}

func testGetMissing(t *testing.T, open Opener) {
	s := open(t)
	wantAbsent(t, s, "missing")
}

func testPutIfAbsent(t *testing.T, open Opener) {
	s := open(t)
	if prev, stored := put(t, s, "k", "v1"); !stored || prev != "" {
		t.Fatalf("first PutIfAbsent = %q, %v; want \"\", true", prev, stored)
	}
	if prev, stored := put(t, s, "k", "v2"); stored || prev != "v1" {
		t.Fatalf("second PutIfAbsent = %q, %v; want \"v1\", false", prev, stored)
	}
	wantValue(t, s, "k", "v1")
	if _, stored := put(t, s, "k2", "w"); !stored {
		t.Fatal("PutIfAbsent on another key not stored")
	}
	wantValue(t, s, "k", "v1")
	wantValue(t, s, "k2", "w")
}

func testReplace(t *testing.T, open Opener) {
	s := open(t)
	if replace(t, s, "k", "", "x") {
		t.Fatal("Replace of an absent key succeeded")
	}
	wantAbsent(t, s, "k")
	put(t, s, "k", "1")
	for _, tc := range []struct {
		old, new string
		want     bool
		after    string
	}{
		{"0", "2", false, "1"},  // wrong old
		{"", "2", false, "1"},   // empty old is not "absent"
		{"1", "2", true, "2"},   // right old
		{"1", "3", false, "2"},  // stale old
		{"2", "2", true, "2"},   // same value
		{"2", "10", true, "10"}, // longer value
		{"1", "11", false, "10"},
	} {
		if got := replace(t, s, "k", tc.old, tc.new); got != tc.want {
			t.Fatalf("Replace(k, %q, %q) = %v; want %v", tc.old, tc.new, got, tc.want)
		}
		wantValue(t, s, "k", tc.after)
	}
}

func testEmptyValue(t *testing.T, open Opener) {
	s := open(t)
	if _, stored := put(t, s, "k", ""); !stored {
		t.Fatal("PutIfAbsent of an empty value not stored")
	}
	wantValue(t, s, "k", "")
	if prev, stored := put(t, s, "k", "x"); stored || prev != "" {
		t.Fatalf("PutIfAbsent over an empty value = %q, %v; want \"\", false", prev, stored)
	}
	if !replace(t, s, "k", "", "x") {
		t.Fatal("Replace from an empty value failed")
	}
	if !replace(t, s, "k", "x", "") {
		t.Fatal("Replace to an empty value failed")
	}
	wantValue(t, s, "k", "")
}

func testBinarySafe(t *testing.T, open Opener) {
	s := open(t)
	pairs := []struct{ key, value string }{
		{"a", "plain"},
		{"a\x00", "nul in key"},
		{"\x00", "\x00\x00"},
		{"\xfe\xfd", "\xff\xfe invalid utf-8"},
		{"ключ", "значение ✓"},
		{"a:b/c d", "'; DROP TABLE x; --"},
	}
	for _, p := range pairs {
		if _, stored := put(t, s, p.key, p.value); !stored {
			t.Fatalf("PutIfAbsent(%q) not stored: keys collide", p.key)
		}
	}
	for _, p := range pairs {
		wantValue(t, s, p.key, p.value)
	}
	if !replace(t, s, "\xfe\xfd", "\xff\xfe invalid utf-8", "\x00ok") {
		t.Fatal("Replace with binary values failed")
	}
	wantValue(t, s, "\xfe\xfd", "\x00ok")
}

func testLongKeys(t *testing.T, open Opener) {
	s := open(t)
	long := strings.Repeat("k", 10<<10)
	hashedForm, err := metadata.StorageKey(long + "1")
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{
		strings.Repeat("x", metadata.MaxKeyLen),
		strings.Repeat("x", metadata.MaxKeyLen+1),
		long + "1",
		long + "2", // differs only after any plausible truncation point
		"\xff",
		"\xffshort",
		hashedForm, // a key crafted to equal another key's hashed form
	}
	for i, k := range keys {
		if prev, stored := put(t, s, k, strconv.Itoa(i)); !stored {
			t.Fatalf("key %d (len %d) collides with a stored key holding %q", i, len(k), prev)
		}
	}
	for i, k := range keys {
		wantValue(t, s, k, strconv.Itoa(i))
	}
	if !replace(t, s, long+"2", "3", "three") {
		t.Fatal("Replace on a long key failed")
	}
	wantValue(t, s, long+"2", "three")
	wantValue(t, s, long+"1", "2")
}

func testInvalidArguments(t *testing.T, open Opener) {
	s := open(t)
	ctx := testwait.Context(t, caseDeadline)
	if _, _, err := s.Get(ctx, ""); !errors.Is(err, metadata.ErrInvalidKey) {
		t.Errorf("Get(\"\") error = %v; want ErrInvalidKey", err)
	}
	if _, _, err := s.PutIfAbsent(ctx, "", "v"); !errors.Is(err, metadata.ErrInvalidKey) {
		t.Errorf("PutIfAbsent(\"\") error = %v; want ErrInvalidKey", err)
	}
	if _, err := s.Replace(ctx, "", "a", "b"); !errors.Is(err, metadata.ErrInvalidKey) {
		t.Errorf("Replace(\"\") error = %v; want ErrInvalidKey", err)
	}
	big := strings.Repeat("v", metadata.MaxValueLen+1)
	if _, _, err := s.PutIfAbsent(ctx, "big", big); !errors.Is(err, metadata.ErrInvalidValue) {
		t.Errorf("PutIfAbsent(too long) error = %v; want ErrInvalidValue", err)
	}
	wantAbsent(t, s, "big")
	max := strings.Repeat("v", metadata.MaxValueLen)
	if _, stored := put(t, s, "big", max); !stored {
		t.Fatal("PutIfAbsent of a MaxValueLen value not stored")
	}
	if _, err := s.Replace(ctx, "big", max, big); !errors.Is(err, metadata.ErrInvalidValue) {
		t.Errorf("Replace(to too long) error = %v; want ErrInvalidValue", err)
	}
	wantValue(t, s, "big", max)
}

func testCancelledContext(t *testing.T, open Opener) {
	s := open(t)
	put(t, s, "k", "1")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := s.Get(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Get error = %v; want context.Canceled", err)
	}
	if _, _, err := s.PutIfAbsent(ctx, "new", "x"); !errors.Is(err, context.Canceled) {
		t.Errorf("PutIfAbsent error = %v; want context.Canceled", err)
	}
	if _, err := s.Replace(ctx, "k", "1", "2"); !errors.Is(err, context.Canceled) {
		t.Errorf("Replace error = %v; want context.Canceled", err)
	}
	wantAbsent(t, s, "new")
	wantValue(t, s, "k", "1")
}

func testReopen(t *testing.T, open Opener) {
	s1 := open(t)
	put(t, s1, "file.txt", "41")
	s2 := open(t)
	wantValue(t, s2, "file.txt", "41")
	if !replace(t, s2, "file.txt", "41", "42") {
		t.Fatal("Replace through a second store failed")
	}
	wantValue(t, s1, "file.txt", "42")
	if replace(t, s1, "file.txt", "41", "43") {
		t.Fatal("stale Replace through the first store succeeded")
	}
}

func remover(t *testing.T, s metadata.Store) metadata.Remover {
	r, ok := s.(metadata.Remover)
	if !ok {
		t.Skipf("%T does not implement metadata.Remover", s)
	}
	return r
}

func testRemove(t *testing.T, open Opener) {
	s := open(t)
	r := remover(t, s)
	ctx := testwait.Context(t, caseDeadline)
	rm := func(key, value string) bool {
		t.Helper()
		ok, err := r.Remove(ctx, key, value)
		if err != nil {
			t.Fatalf("Remove(%q, %q): %v", key, value, err)
		}
		return ok
	}
	if rm("k", "") {
		t.Fatal("Remove of an absent key succeeded")
	}
	put(t, s, "k", "1")
	if rm("k", "2") {
		t.Fatal("Remove with the wrong value succeeded")
	}
	wantValue(t, s, "k", "1")
	if !rm("k", "1") {
		t.Fatal("Remove with the right value failed")
	}
	wantAbsent(t, s, "k")
	if rm("k", "1") {
		t.Fatal("second Remove succeeded")
	}
	if replace(t, s, "k", "1", "2") {
		t.Fatal("Replace of a removed key succeeded")
	}
	if _, stored := put(t, s, "k", "3"); !stored {
		t.Fatal("PutIfAbsent after Remove not stored")
	}
	wantValue(t, s, "k", "3")
	if _, err := r.Remove(ctx, "", "x"); !errors.Is(err, metadata.ErrInvalidKey) {
		t.Errorf("Remove(\"\") error = %v; want ErrInvalidKey", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.Remove(cctx, "k", "3"); !errors.Is(err, context.Canceled) {
		t.Errorf("Remove with a cancelled context = %v; want context.Canceled", err)
	}
	wantValue(t, s, "k", "3")
}

// testRaceRemoveReplace races an undo (Remove of the value) against a
// Replace of the same value: exactly one may win.
func testRaceRemoveReplace(t *testing.T, open Opener) {
	const rounds = 50
	s1, s2 := open(t), open(t)
	r := remover(t, s1)
	ctx := testwait.Context(t, caseDeadline)
	for i := 0; i < rounds; i++ {
		key := "rr-" + strconv.Itoa(i)
		put(t, s1, key, "v")
		var (
			wg                 sync.WaitGroup
			removed, replaced  bool
			errRemove, errRepl error
		)
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			removed, errRemove = r.Remove(ctx, key, "v")
		}()
		go func() {
			defer wg.Done()
			<-start
			replaced, errRepl = s2.Replace(ctx, key, "v", "w")
		}()
		close(start)
		testwait.Group(t, &wg, waitDeadline, "the end of round "+strconv.Itoa(i)+"'s racing Remove and Replace")
		if errRemove != nil || errRepl != nil {
			t.Fatalf("round %d: %v, %v", i, errRemove, errRepl)
		}
		if removed == replaced {
			t.Fatalf("round %d: removed %v, replaced %v; want exactly one", i, removed, replaced)
		}
		if replaced {
			wantValue(t, s1, key, "w")
		} else {
			wantAbsent(t, s1, key)
		}
	}
}

func testRacePutIfAbsent(t *testing.T, open Opener) {
	const keys, racers = 10, 16
	stores := []metadata.Store{open(t), open(t)}
	ctx := testwait.Context(t, caseDeadline)
	for k := 0; k < keys; k++ {
		key := "race-" + strconv.Itoa(k)
		var (
			wg      sync.WaitGroup
			winners atomic.Int32
			prevs   = make([]string, racers)
			stored  = make([]bool, racers)
			errs    = make([]error, racers)
		)
		start := make(chan struct{})
		for g := 0; g < racers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				prevs[g], stored[g], errs[g] = stores[g%2].PutIfAbsent(ctx, key, "g"+strconv.Itoa(g))
				if stored[g] {
					winners.Add(1)
				}
			}()
		}
		close(start)
		testwait.Group(t, &wg, waitDeadline, "the end of the "+strconv.Itoa(racers)+" PutIfAbsent racers on "+key)
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := winners.Load(); n != 1 {
			t.Fatalf("key %s: %d winners; want exactly 1", key, n)
		}
		v, _ := get(t, stores[0], key)
		for g := 0; g < racers; g++ {
			if !stored[g] && prevs[g] != v {
				t.Fatalf("key %s: loser %d saw prev %q; stored value is %q", key, g, prevs[g], v)
			}
			if stored[g] && v != "g"+strconv.Itoa(g) {
				t.Fatalf("key %s: winner g%d but stored value is %q", key, g, v)
			}
		}
	}
}

// testRaceReplaceStep races two callers (on two store objects, as two
// consumers would be) to replace the same old value, step after step:
// exactly one must win each step.
func testRaceReplaceStep(t *testing.T, open Opener) {
	const steps = 100
	stores := []metadata.Store{open(t), open(t)}
	put(t, stores[0], "cas", "0")
	ctx := testwait.Context(t, caseDeadline)
	var wins [2]int
	for i := 0; i < steps; i++ {
		old, next := strconv.Itoa(i), strconv.Itoa(i+1)
		var (
			wg  sync.WaitGroup
			ok  [2]bool
			err [2]error
		)
		start := make(chan struct{})
		for g := 0; g < 2; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ok[g], err[g] = stores[g].Replace(ctx, "cas", old, next)
			}()
		}
		close(start)
		testwait.Group(t, &wg, waitDeadline, "the end of step "+strconv.Itoa(i)+"'s 2 racing Replaces")
		if err[0] != nil || err[1] != nil {
			t.Fatalf("step %d: errors %v, %v", i, err[0], err[1])
		}
		if ok[0] == ok[1] {
			t.Fatalf("step %d: results %v, %v; want exactly one winner", i, ok[0], ok[1])
		}
		if ok[0] {
			wins[0]++
		} else {
			wins[1]++
		}
	}
	wantValue(t, stores[0], "cas", strconv.Itoa(steps))
	t.Logf("wins per racer over %d steps: %v", steps, wins)
}

// testRaceIncrement has four goroutines increment one counter by
// read-modify-write with Replace, retrying on a lost race: no increment may
// be lost.
func testRaceIncrement(t *testing.T, open Opener) {
	const goroutines, each = 4, 50
	stores := []metadata.Store{open(t), open(t)}
	put(t, stores[0], "ctr", "0")
	ctx := testwait.Context(t, caseDeadline)
	var wg sync.WaitGroup
	errc := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[g%2]
			for i := 0; i < each; i++ {
				for {
					v, ok, err := s.Get(ctx, "ctr")
					if err != nil || !ok {
						errc <- fmt.Errorf("get: %v, %v", ok, err)
						return
					}
					n, _ := strconv.Atoi(v)
					won, err := s.Replace(ctx, "ctr", v, strconv.Itoa(n+1))
					if err != nil {
						errc <- err
						return
					}
					if won {
						break
					}
				}
			}
		}()
	}
	testwait.Group(t, &wg, waitDeadline, "the end of the "+strconv.Itoa(goroutines)+" incrementing goroutines")
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	wantValue(t, stores[0], "ctr", strconv.Itoa(goroutines*each))
}

// testModel checks random operation sequences against a map.
func testModel(t *testing.T, open Opener) {
	s := open(t)
	ctx := testwait.Context(t, caseDeadline)
	var run atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		ns := "m" + strconv.FormatInt(run.Add(1), 10) + "/"
		model := map[string]string{}
		keyGen := rapid.SampledFrom([]string{"a", "b", "c"})
		valGen := rapid.SampledFrom([]string{"", "1", "2", "3"})
		r, canRemove := s.(metadata.Remover)
		ops := 2
		if canRemove {
			ops = 3
		}
		n := rapid.IntRange(1, 20).Draw(rt, "ops")
		for i := 0; i < n; i++ {
			k := keyGen.Draw(rt, "key")
			switch rapid.IntRange(0, ops).Draw(rt, "op") {
			case 0:
				v, ok, err := s.Get(ctx, ns+k)
				mv, mok := model[k]
				if err != nil || v != mv || ok != mok {
					rt.Fatalf("Get(%s) = %q, %v, %v; model %q, %v", k, v, ok, err, mv, mok)
				}
			case 1:
				v := valGen.Draw(rt, "value")
				prev, stored, err := s.PutIfAbsent(ctx, ns+k, v)
				mv, mok := model[k]
				if err != nil || stored == mok || (mok && prev != mv) {
					rt.Fatalf("PutIfAbsent(%s, %q) = %q, %v, %v; model %q, %v", k, v, prev, stored, err, mv, mok)
				}
				if !mok {
					model[k] = v
				}
			case 2:
				old, new := valGen.Draw(rt, "old"), valGen.Draw(rt, "new")
				ok, err := s.Replace(ctx, ns+k, old, new)
				mv, mok := model[k]
				want := mok && mv == old
				if err != nil || ok != want {
					rt.Fatalf("Replace(%s, %q, %q) = %v, %v; model has %q, %v", k, old, new, ok, err, mv, mok)
				}
				if want {
					model[k] = new
				}
			case 3:
				v := valGen.Draw(rt, "value")
				ok, err := r.Remove(ctx, ns+k, v)
				mv, mok := model[k]
				want := mok && mv == v
				if err != nil || ok != want {
					rt.Fatalf("Remove(%s, %q) = %v, %v; model has %q, %v", k, v, ok, err, mv, mok)
				}
				if want {
					delete(model, k)
				}
			}
		}
	})
}

// Bench measures Get, Replace and PutIfAbsent on the stores open returns
// (a fresh, empty one per sub-benchmark), reporting allocations. Each
// backend package runs it from its own BenchmarkStore.
func Bench(b *testing.B, open func(b *testing.B) metadata.Store) {
	ctx := context.Background()
	b.Run("op=get", func(b *testing.B) {
		s := open(b)
		if _, _, err := s.PutIfAbsent(ctx, "k", "0"); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := s.Get(ctx, "k"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("op=replace", func(b *testing.B) {
		s := open(b)
		if _, _, err := s.PutIfAbsent(ctx, "k", "0"); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			ok, err := s.Replace(ctx, "k", strconv.Itoa(i), strconv.Itoa(i+1))
			if err != nil || !ok {
				b.Fatal(ok, err)
			}
			i++
		}
	})
	b.Run("op=put-if-absent", func(b *testing.B) {
		s := open(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, stored, err := s.PutIfAbsent(ctx, strconv.Itoa(i), "v"); err != nil || !stored {
				b.Fatal(stored, err)
			}
			i++
		}
	})
}
