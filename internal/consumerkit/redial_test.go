package consumerkit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/acemq/msgaudit/receiver"
)

// TestRedial: a connection is dialled once and reused; after Drop the
// next Get dials again; a failed dial is not repeated within its backoff;
// Close closes the connection and ends every later Get.
func TestRedial(t *testing.T) {
	type conn struct{ n int }
	var dials, closes int
	fail := false
	r := NewRedial(func(context.Context) (*conn, error) {
		dials++
		if fail {
			return nil, errors.New("down")
		}
		return &conn{dials}, nil
	}, func(*conn) { closes++ }, receiver.Backoff{Initial: time.Hour, Max: time.Hour})
	ctx := context.Background()
	a, err := r.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := r.Get(ctx); b != a || dials != 1 {
		t.Fatalf("second Get: %v after %d dials; want the first connection, 1 dial", b, dials)
	}
	r.Drop(a)
	r.Drop(a) // already dropped: left alone
	if closes != 1 {
		t.Fatalf("%d closes after Drop, want 1", closes)
	}
	fail = true
	if _, err := r.Get(ctx); err == nil || dials != 2 {
		t.Fatalf("Get with the broker down: %v after %d dials; want an error, 2 dials", err, dials)
	}
	fail = false
	if _, err := r.Get(ctx); err == nil || dials != 2 {
		t.Fatalf("Get within the backoff: %v after %d dials; want the last error, no dial", err, dials)
	}
	r.retryAt = time.Now() // the backoff has passed
	c, err := r.Get(ctx)
	if err != nil || c == a || dials != 3 {
		t.Fatalf("Get after the backoff: %v, %v after %d dials; want a new connection", c, err, dials)
	}
	r.Close()
	if _, err := r.Get(ctx); !errors.Is(err, ErrClosed) || closes != 2 {
		t.Fatalf("Get after Close: %v, %d closes; want ErrClosed, 2", err, closes)
	}
}
