package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/brokermodel"
	"pgregory.net/rapid"
)

// wireFixture is a broker model served on a unix socket, with n messages
// queued on /queue/w.
func wireFixture(t *testing.T, n int) (*brokermodel.Broker, *modelServer, string) {
	t.Helper()
	b := brokermodel.New(brokermodel.Options{})
	t.Cleanup(b.Close)
	path := filepath.Join(t.TempDir(), "broker.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := serveModel(b, ln)
	t.Cleanup(srv.Close)
	p, err := b.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range n {
		if _, err := p.Send("/queue/w", fmt.Appendf(nil, "m%d", i), brokermodel.SendOptions{Persistent: true,
			Headers: map[string]string{"i": fmt.Sprint(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	return b, srv, path
}

// next returns the client's next delivery, failing the test if none comes
// within a deadline.
func next(t *testing.T, c *modelClient) *wireFrame {
	t.Helper()
	select {
	case f, ok := <-c.frames:
		if !ok {
			t.Fatal("the connection ended instead of delivering a message")
		}
		return f
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery within 10s")
	}
	return nil
}

// waitDepth waits until dest's pending and in-flight counts are as given.
func waitDepth(t *testing.T, b *brokermodel.Broker, dest string, pending, inFlight int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, f := b.Depth(dest)
		if p == pending && f == inFlight {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: depth %d pending, %d in flight after 10s; want %d, %d", dest, p, f, pending, inFlight)
		}
		time.Sleep(time.Millisecond)
	}
}

func waitClosed(t *testing.T, c *modelClient) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the client's connection did not end within 10s")
	}
}

// TestWireRedelivery: what a connection did not acknowledge comes back with
// the redelivered flag and its id when the connection closes, however it
// closes; what it acknowledged does not.
func TestWireRedelivery(t *testing.T) {
	for _, end := range []string{"client closes", "parent cuts", "bad frame"} {
		t.Run(end, func(t *testing.T) {
			b, srv, path := wireFixture(t, 4)
			ctx := context.Background()
			c, err := dialModel(ctx, path, "/queue/w", 10)
			if err != nil {
				t.Fatal(err)
			}
			ids := map[string]bool{}
			var tags []uint64
			for range 4 {
				f := next(t, c)
				if f.Redelivered {
					t.Fatalf("first delivery marked redelivered: %+v", f)
				}
				ids[f.ID] = true
				tags = append(tags, f.Tag)
			}
			// Ack the first two.
			for _, tag := range tags[:2] {
				if err := c.ack(tag); err != nil {
					t.Fatal(err)
				}
			}
			waitDepth(t, b, "/queue/w", 0, 2)
			switch end {
			case "client closes":
				c.Close()
			case "parent cuts":
				if n := srv.Cut(); n != 1 {
					t.Fatalf("Cut cut %d connections, want 1", n)
				}
			case "bad frame":
				if err := c.wc.send(&wireFrame{Op: "nonsense"}); err != nil {
					t.Fatal(err)
				}
			}
			waitClosed(t, c)
			if c.ack(tags[2]) == nil {
				t.Error("ack on an ended connection returned no error")
			}
			waitDepth(t, b, "/queue/w", 2, 0)
			c2, err := dialModel(ctx, path, "/queue/w", 10)
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			for range 2 {
				f := next(t, c2)
				if !f.Redelivered || !ids[f.ID] {
					t.Errorf("redelivery %+v: want redelivered=true and an id delivered before", f)
				}
				if err := c2.ack(f.Tag); err != nil {
					t.Fatal(err)
				}
			}
			waitDepth(t, b, "/queue/w", 0, 0)
			if st := b.Stats(); st.Redelivered != 2 || st.Delivered != 6 {
				t.Errorf("broker stats %+v: want 6 delivered, 2 redelivered", st)
			}
		})
	}
}

// TestWireDeadLetter: a dead letter is a copy in the DLQ and the ack of the
// original, together; an ack of a tag already settled is ignored.
func TestWireDeadLetter(t *testing.T) {
	b, _, path := wireFixture(t, 1)
	c, err := dialModel(context.Background(), path, "/queue/w", 10)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f := next(t, c)
	if err := c.deadLetter(f.Tag, map[string]string{"why": "test"}, f.Body); err != nil {
		t.Fatal(err)
	}
	if err := c.ack(f.Tag); err != nil { // stale: ignored
		t.Fatal(err)
	}
	waitDepth(t, b, "/queue/w", 0, 0)
	waitDepth(t, b, brokermodel.DLQ, 1, 0)
	dl := b.Browse(brokermodel.DLQ)
	if len(dl) != 1 || dl[0].Headers["why"] != "test" || string(dl[0].Body) != "m0" {
		t.Fatalf("DLQ holds %+v", dl)
	}
	if c.closed() {
		t.Fatal("a stale ack ended the connection")
	}
}

// TestWirePrefetch: a connection holds at most its prefetch unacknowledged.
func TestWirePrefetch(t *testing.T) {
	b, _, path := wireFixture(t, 5)
	c, err := dialModel(context.Background(), path, "/queue/w", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f := next(t, c)
	next(t, c)
	waitDepth(t, b, "/queue/w", 3, 2)
	if err := c.ack(f.Tag); err != nil {
		t.Fatal(err)
	}
	next(t, c)
	waitDepth(t, b, "/queue/w", 2, 2)
}

// srvConns returns the model connections s serves now.
func srvConns(s *modelServer) map[*brokermodel.Conn]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[*brokermodel.Conn]bool{}
	for c := range s.conns {
		out[c] = true
	}
	return out
}

// TestWireProperty drives a served broker model through random receives,
// acks, stale acks, client closes and parent cuts, against a simple model:
// an acknowledged message is never delivered again, a message is held at
// most once at a time, one delivered before comes back marked redelivered,
// a connection holds min(prefetch, unacknowledged) deliveries, and at the
// end every message was acknowledged exactly once.
func TestWireProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 8).Draw(rt, "n")
		prefetch := rapid.IntRange(1, 4).Draw(rt, "prefetch")
		b, srv, path := wireFixture(t, n)
		ctx := context.Background()
		dial := func() *modelClient {
			c, err := dialModel(ctx, path, "/queue/w", prefetch)
			if err != nil {
				rt.Fatal(err)
			}
			return c
		}
		c := dial()
		defer func() { c.Close() }()
		held := map[uint64]string{} // tag -> id, received on c and not acked
		heldIDs := map[string]bool{}
		acked := map[string]bool{}
		seen := map[string]bool{}
		var ackedTags []uint64
		recv := func() {
			var f *wireFrame
			select {
			case f = <-c.frames:
			case <-time.After(10 * time.Second):
				rt.Fatalf("no delivery within 10s (held %d, acked %d of %d, prefetch %d)", len(held), len(acked), n, prefetch)
			}
			if f == nil {
				rt.Fatal("the connection ended instead of delivering")
				return
			}
			switch {
			case acked[f.ID]:
				rt.Fatalf("acknowledged message %s delivered again", f.ID)
			case heldIDs[f.ID]:
				rt.Fatalf("message %s delivered twice on one connection", f.ID)
			case seen[f.ID] && !f.Redelivered:
				rt.Fatalf("message %s delivered again without the redelivered flag", f.ID)
			}
			seen[f.ID] = true
			held[f.Tag], heldIDs[f.ID] = f.ID, true
		}
		// settled waits until the server has processed every ack sent.
		settled := func() {
			want := min(prefetch, n-len(acked))
			deadline := time.Now().Add(10 * time.Second)
			for {
				p, fl := b.Depth("/queue/w")
				if fl == want && p == n-len(acked)-want {
					return
				}
				if time.Now().After(deadline) {
					rt.Fatalf("depth %d pending, %d in flight after 10s; want %d in flight of %d unacked", p, fl, want, n-len(acked))
				}
				time.Sleep(time.Millisecond)
			}
		}
		ops := map[string]func(*rapid.T){
			"receive": func(rt *rapid.T) {
				if len(held) >= min(prefetch, n-len(acked)) {
					rt.Skip("nothing more to receive")
				}
				recv()
			},
			"ack": func(rt *rapid.T) {
				if len(held) == 0 {
					rt.Skip("nothing held")
				}
				tags := make([]uint64, 0, len(held))
				for tag := range held {
					tags = append(tags, tag)
				}
				slices.Sort(tags)
				tag := rapid.SampledFrom(tags).Draw(rt, "tag")
				if err := c.ack(tag); err != nil {
					rt.Fatal(err)
				}
				id := held[tag]
				delete(held, tag)
				delete(heldIDs, id)
				acked[id] = true
				ackedTags = append(ackedTags, tag)
			},
			"stale ack": func(rt *rapid.T) {
				if len(ackedTags) == 0 {
					rt.Skip("nothing acked")
				}
				if err := c.ack(rapid.SampledFrom(ackedTags).Draw(rt, "stale")); err != nil {
					rt.Fatal(err)
				}
			},
			"close": func(rt *rapid.T) {
				settled()
				old := srvConns(srv)
				if rapid.Bool().Draw(rt, "cut") {
					srv.Cut()
				} else {
					c.Close()
				}
				select {
				case <-c.done:
				case <-time.After(10 * time.Second):
					srv.mu.Lock()
					conns := len(srv.conns)
					srv.mu.Unlock()
					p, fl := b.Depth("/queue/w")
					rt.Fatalf("the connection did not end within 10s (server connections %d, depth %d, %d)", conns, p, fl)
				}
				c = dial()
				// Wait until the server has let the old connection go and
				// taken the new one, so a later cut finds it.
				deadline := time.Now().Add(10 * time.Second)
				for {
					now := srvConns(srv)
					_, fl := b.Depth("/queue/w")
					fresh := len(now) == 1
					for c := range now {
						fresh = fresh && !old[c]
					}
					if fresh && fl == min(prefetch, n-len(acked)) {
						break
					}
					if time.Now().After(deadline) {
						rt.Fatalf("after a reconnect: %d server connections, %d in flight after 10s", len(now), fl)
					}
					time.Sleep(time.Millisecond)
				}
				clear(held)
				clear(heldIDs)
				ackedTags = nil // tags are per connection
			},
		}
		rt.Repeat(ops)
		// Drain: receive and ack the rest.
		for len(acked) < n {
			for len(held) < min(prefetch, n-len(acked)) {
				recv()
			}
			for tag, id := range held {
				if err := c.ack(tag); err != nil {
					rt.Fatal(err)
				}
				acked[id] = true
			}
			clear(held)
			clear(heldIDs)
		}
		settled()
		if p, fl := b.Depth("/queue/w"); p != 0 || fl != 0 || len(acked) != n {
			rt.Fatalf("end: %d pending, %d in flight, %d of %d acked", p, fl, len(acked), n)
		}
	})
}
