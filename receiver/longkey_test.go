package receiver_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/acemq/msgaudit/internal/testkit/logbuf"
	"log/slog"
	"runtime"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/receiver"
)

// longKey is a distinct key of n bytes.
func longKey(i, n int) string {
	p := fmt.Sprintf("key-%d:", i)
	return p + strings.Repeat("x", n-len(p))
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestLongKeysBounded processes 200 deliveries with distinct 1 MiB keys,
// with the zero Config (table only), with a connection audit (which
// rejects such ids) and a store (the rejection becomes an unchecked
// bypass), and with the audit alone (they are dead-lettered). The
// completed table, the failure counts and every log line must not keep the
// keys: at most 4 MiB of heap stays after the deliveries (200 MiB did
// before keys were hashed), and no log line exceeds 2 KiB.
func TestLongKeysBounded(t *testing.T) {
	const (
		n         = 200
		keyLen    = 1 << 20
		heapBound = 4 << 20
		lineBound = 2 << 10
	)
	cases := []struct {
		name    string
		cfg     func(t *testing.T) receiver.Config
		handler func(context.Context, *receiver.Message) error
		want    receiver.Action
	}{
		{"memory only", func(*testing.T) receiver.Config { return receiver.Config{MemoryOnly: true} }, nil, receiver.Ack},
		{"audit and store", func(t *testing.T) receiver.Config {
			a, err := connaudit.New(connaudit.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return receiver.Config{Audit: receiver.ConnAudit(a), Store: memStore(t, idempotency.Options{})}
		}, nil, receiver.Ack},
		{"audit alone", func(t *testing.T) receiver.Config {
			a, err := connaudit.New(connaudit.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return receiver.Config{Audit: receiver.ConnAudit(a), MemoryOnly: true}
		}, nil, receiver.DeadLetter},
		{"failing handler", func(*testing.T) receiver.Config { return receiver.Config{MaxAttempts: 2, MemoryOnly: true} },
			func(context.Context, *receiver.Message) error { return errors.New("handler failed") }, receiver.Requeue},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs logbuf.Buffer
			cfg := c.cfg(t)
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			cfg.Duplicates = receiver.DuplicateDeadLetter
			r, err := receiver.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			h := c.handler
			if h == nil {
				h = func(context.Context, *receiver.Message) error { return nil }
			}
			before := heapInUse()
			for i := range n {
				m := &receiver.Message{Key: longKey(i, keyLen), Destination: queue}
				if res := r.Process(context.Background(), m, h); res.Action != c.want {
					t.Fatalf("delivery %d: %v (%s, %v), want %v", i, res.Action, res.Reason, res.Err, c.want)
				}
			}
			// A redelivery of the first key is still known (a duplicate
			// when it completed), so hashing did not lose it.
			m := &receiver.Message{Key: longKey(0, keyLen), Destination: queue}
			res := r.Process(context.Background(), m, h)
			if c.want == receiver.Ack && (!res.Duplicate || res.Action != receiver.DeadLetter) {
				t.Fatalf("redelivery of a completed long key: %+v, want a dead-lettered duplicate", res)
			}
			after := heapInUse()
			runtime.KeepAlive(r)
			if after > before && after-before > heapBound {
				t.Errorf("%d deliveries of %d-byte keys kept %d bytes of heap, bound %d", n+1, keyLen, after-before, heapBound)
			}
			lines := logs.Lines()
			if c.want != receiver.Ack && len(lines) == 0 {
				t.Fatal("nothing logged")
			}
			for _, l := range lines {
				if len(l) > lineBound {
					t.Fatalf("a %d-byte log line (bound %d): %.200s...", len(l), lineBound, l)
				}
			}
			t.Logf("heap +%d bytes, %d log lines", int64(after)-int64(before), len(lines))
		})
	}
}

// TestLogKey checks LogKey's documented forms.
func TestLogKey(t *testing.T) {
	short := strings.Repeat("a", receiver.MaxKeyBytes)
	if got := receiver.LogKey(short); got != short {
		t.Fatalf("a %d-byte key logged as %q", len(short), got)
	}
	long := strings.Repeat("é", receiver.MaxKeyBytes) // 2 bytes each
	got := receiver.LogKey(long + "z")
	if !strings.HasPrefix(got, strings.Repeat("é", 32)+"...(513 bytes, sha256 ") || len(got) > 200 {
		t.Fatalf("long key logged as %q", got)
	}
	if receiver.LogKey(long+"y") == got {
		t.Fatal("two long keys logged alike")
	}
}

// TestLogLinesBoundedOnHugeText sends a delivery whose destination, key and
// handler error are each 1 MiB, through a failure, the dead letter after
// MaxAttempts and a duplicate: no log line may carry any of them whole
// (the bound is a key's 256 bytes, an error's 4 KiB, plus the line's
// other fields).
func TestLogLinesBoundedOnHugeText(t *testing.T) {
	const huge, lineBound = 1 << 20, 8 << 10
	var logs logbuf.Buffer
	r, err := receiver.New(receiver.Config{MemoryOnly: true, MaxAttempts: 2, Duplicates: receiver.DuplicateDeadLetter,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	dest := "/queue/" + strings.Repeat("d", huge)
	fail := func(context.Context, *receiver.Message) error { return errors.New(strings.Repeat("e", huge)) }
	ok := func(context.Context, *receiver.Message) error { return nil }
	for attempt := 1; attempt <= 2; attempt++ {
		m := &receiver.Message{Key: longKey(1, huge), Destination: dest, Attempt: attempt}
		r.Process(context.Background(), m, fail)
	}
	for range 2 { // the second is a duplicate of finished work
		r.Process(context.Background(), &receiver.Message{Key: longKey(2, huge), Destination: dest}, ok)
	}
	r.Process(context.Background(), &receiver.Message{Destination: dest}, ok) // no key
	lines := logs.Lines()
	if len(lines) < 3 {
		t.Fatalf("%d log lines, want the failure, the dead letter and the duplicate: %q", len(lines), lines)
	}
	for _, l := range lines {
		if len(l) > lineBound {
			t.Errorf("a %d-byte log line (bound %d): %.300s...", len(l), lineBound, l)
		}
	}
}
