package testwait

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeTB records Fatalf instead of ending the goroutine.
type fakeTB struct{ msgs []string }

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

func (f *fakeTB) check(t *testing.T, want string) {
	t.Helper()
	switch {
	case want == "" && len(f.msgs) != 0:
		t.Errorf("failed with %q, want no failure", f.msgs)
	case want != "" && (len(f.msgs) != 1 || !strings.Contains(f.msgs[0], want)):
		t.Errorf("failures %q, want one containing %q", f.msgs, want)
	}
}

// TestHelpers: each helper passes when the awaited thing happens and fails
// once, naming it, when it does not happen within the deadline.
func TestHelpers(t *testing.T) {
	t.Parallel()
	const short = 20 * time.Millisecond
	cases := []struct {
		name string
		run  func(tb TB)
		want string // "" for no failure
	}{
		{"Recv gets a value", func(tb TB) {
			ch := make(chan int, 1)
			ch <- 7
			if v, ok := Recv(tb, ch, Long, "the value"); v != 7 || !ok {
				t.Errorf("Recv = %d, %v; want 7, true", v, ok)
			}
		}, ""},
		{"Recv sees a close", func(tb TB) {
			ch := make(chan int)
			close(ch)
			if _, ok := Recv(tb, ch, Long, "the close"); ok {
				t.Error("Recv on a closed channel: ok = true")
			}
		}, ""},
		{"Recv times out", func(tb TB) {
			Recv(tb, make(chan int), short, "the never-sent value")
		}, "the never-sent value did not happen"},
		{"Group done", func(tb TB) {
			var wg sync.WaitGroup
			wg.Go(func() {})
			Group(tb, &wg, Long, "the one goroutine")
		}, ""},
		{"Group times out", func(tb TB) {
			var wg sync.WaitGroup
			wg.Add(1) // never Done
			Group(tb, &wg, short, "the stuck goroutine")
		}, "the stuck goroutine did not happen"},
		{"Until true", func(tb TB) {
			n := 0
			Until(tb, Long, "the third poll", func() bool { n++; return n == 3 })
		}, ""},
		{"Until times out", func(tb TB) {
			Until(tb, short, "the impossible", func() bool { return false })
		}, "the impossible did not happen"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var f fakeTB
			tc.run(&f)
			f.check(t, tc.want)
		})
	}
}

// TestContext: the context ends after its deadline and at cleanup.
func TestContext(t *testing.T) {
	t.Parallel()
	ctx := Context(t, time.Millisecond)
	if _, ok := Recv(t, ctx.Done(), Long, "the end of a 1ms context"); ok {
		t.Fatal("Done delivered a value")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v, want DeadlineExceeded", ctx.Err())
	}
	var long context.Context
	t.Run("cleanup", func(t *testing.T) { long = Context(t, time.Hour) })
	if !errors.Is(long.Err(), context.Canceled) {
		t.Fatalf("after the subtest's cleanup Err = %v, want Canceled", long.Err())
	}
}
