package tune_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/benchkit"
	"github.com/acemq/msgaudit/cmd/msgaudit/internal/tune"
)

// blockingReader serves data, then blocks until released, announcing on
// blocked that it does.
type blockingReader struct {
	data    *strings.Reader
	blocked chan struct{}
	release chan struct{}
}

func (b *blockingReader) Read(p []byte) (int, error) {
	if b.data.Len() > 0 {
		return b.data.Read(p)
	}
	close(b.blocked)
	<-b.release
	return 0, io.EOF
}

// endlessTrace serves trace lines forever and cancels after limit bytes.
type endlessTrace struct {
	cancel context.CancelFunc
	served int
	limit  int
	seq    int
}

func (e *endlessTrace) Read(p []byte) (int, error) {
	if e.served >= e.limit {
		e.cancel()
	}
	n := 0
	for n+64 <= len(p) {
		e.seq++
		n += copy(p[n:], benchkit.ID(1, uint64(e.seq))+"\n")
	}
	e.served += n
	return n, nil
}

// TestReadCancelled: Read returns the context's error when it is cancelled
// while the reader blocks, and when it is cancelled amid an endless trace.
func TestReadCancelled(t *testing.T) {
	t.Parallel()
	t.Run("blocked reader", func(t *testing.T) {
		t.Parallel()
		k := benchkit.ProducerKey(1)
		r := &blockingReader{data: strings.NewReader(k + ":1\n" + k + ":2\n"), blocked: make(chan struct{}), release: make(chan struct{})}
		defer close(r.release)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := tune.Read(ctx, r, tune.ReadOptions{})
			done <- err
		}()
		<-r.blocked
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Read: %v, want context.Canceled", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Read still blocked a minute after its context was cancelled")
		}
	})
	t.Run("endless trace", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := tune.Read(ctx, &endlessTrace{cancel: cancel, limit: 1 << 20}, tune.ReadOptions{})
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Read: %v, want context.Canceled", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Read of an endless trace still running a minute after its context was cancelled")
		}
	})
}

// cancellingWriter cancels after limit bytes, and fails writes past
// 4×limit (so that a Generate that ignores the cancellation ends).
type cancellingWriter struct {
	cancel  context.CancelFunc
	written int
	limit   int
}

func (w *cancellingWriter) Write(p []byte) (int, error) {
	if w.written >= 4*w.limit {
		return 0, errors.New("written 4× past the cancellation")
	}
	w.written += len(p)
	if w.written >= w.limit {
		w.cancel()
	}
	return len(p), nil
}

// TestGenerateCancelled: Generate of a trace of 2^40 messages and as many
// producers stops with the context's error once it is cancelled, having
// written about what it had when it was.
func TestGenerateCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &cancellingWriter{cancel: cancel, limit: 1 << 20}
	st, err := tune.Generate(ctx, w, tune.GenerateOptions{Producers: 1 << 40, Count: 1 << 40})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Generate: %v after %d lines, %d bytes; want context.Canceled after about 1 MiB", err, st.Lines, w.written)
	}
	// Cancelled before it starts: nothing written.
	var b bytes.Buffer
	if _, err := tune.Generate(ctx, &b, tune.GenerateOptions{Count: 10}); !errors.Is(err, context.Canceled) || b.Len() != 0 {
		t.Fatalf("Generate after cancel: %v, %d bytes", err, b.Len())
	}
}

// TestGenerateWriteError: Generate stops at the first write error and
// returns it (it wrote on, into the failed buffer, to the end of Count).
func TestGenerateWriteError(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &cancellingWriter{cancel: func() {}, limit: 1 << 20}
	done := make(chan error, 1)
	go func() {
		_, err := tune.Generate(ctx, w, tune.GenerateOptions{Count: 1 << 40})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "written 4× past") {
			t.Fatalf("Generate: %v, want the write error", err)
		}
	case <-time.After(time.Minute):
		cancel()
		t.Fatal("Generate still writing a minute after its writer failed")
	}
}

// TestReplayCancelledDuringTheLastCells: a replay whose context is
// cancelled after every cell was handed out returns the context's error,
// not a result.
func TestReplayCancelledDuringTheLastCells(t *testing.T) {
	t.Parallel()
	var trace bytes.Buffer
	if _, err := tune.Generate(context.Background(), &trace, tune.GenerateOptions{Producers: 2, Count: 1000, RedeliveryRate: 0.1}); err != nil {
		t.Fatal(err)
	}
	tr, err := tune.Read(context.Background(), &trace, tune.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := tune.Replay(ctx, tr, tune.Options{Depths: []int{64, 128}, Caps: []int{1, 2}, Workers: 1,
		Progress: func(done, total int) {
			if done == total-1 {
				cancel()
			}
		}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Replay: %v, result %v; want context.Canceled", err, r)
	}
}
