package main

// The demo's consumer is a child process the parent kills with SIGKILL, so
// anything that must outlive it lives in the parent: the broker model, the
// producers, the fault plan and the final accounting. The parent serves the
// broker model to the child over a small protocol on a unix socket in the
// run's temporary directory, and the child reports its counters over a
// second socket.
//
// # The broker socket (model runs only)
//
// Each connection to it is one brokermodel connection. When the socket
// closes — the child stopped, was killed, or the parent cut it — the model
// connection is cut: every delivery not yet acknowledged, prefetched ones
// included, is redelivered with the redelivered flag, exactly as a broker
// treats a lost connection.
//
// Frames are JSON objects, one per line (wireFrame). Child to parent:
//
//	{"op":"subscribe","dest":D,"prefetch":N}          subscribe to queue D (once per connection)
//	{"op":"ack","tag":T}                               acknowledge delivery T
//	{"op":"deadletter","tag":T,"headers":H,"body":B}  one transaction: a copy to the DLQ, and the ack of T
//	{"op":"send","tag":T,"dest":D,"headers":H,"body":B} send a persistent message to queue D (the -chain relay)
//
// Parent to child:
//
//	{"op":"deliver","tag":T,"id":I,"dest":D,"redelivered":R,"ts":U,"headers":H,"body":B}
//	{"op":"receipt","tag":T,"id":I}                    the message of send T is stored, as message id I
//
// Tags are per connection (a send's tag is the sender's own numbering). An
// ack or dead letter of an unknown tag (one already settled) is ignored, as
// a broker ignores a stale ack. A receipt is sent only once the model holds
// the message: a sender that reads none (its connection died first) sends
// again. An unknown op or a malformed frame ends the connection.
//
// # The control socket
//
// One connection per child, opened at its start. The child sends
// {"op":"stats","stats":S} with its cumulative counters every
// demoStatsEvery and once more before a graceful exit; the parent sends
// {"op":"stop"} to ask for a graceful stop. A child whose control
// connection closes (the parent is gone) exits at once.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/brokermodel"
	"github.com/acemq/msgaudit/internal/outboxid"
)

// demoStatsEvery is how often a child reports its counters. A killed child's
// counters are known as of its last report.
const demoStatsEvery = 20 * time.Millisecond

// wireFrame is one frame of either socket; Op says which fields are used.
type wireFrame struct {
	Op          string            `json:"op"`
	Tag         uint64            `json:"tag,omitempty"`
	Dest        string            `json:"dest,omitempty"`
	Prefetch    int               `json:"prefetch,omitempty"`
	ID          string            `json:"id,omitempty"`
	Redelivered bool              `json:"redelivered,omitempty"`
	Timestamp   int64             `json:"ts,omitempty"` // Unix nanoseconds
	Headers     map[string]string `json:"headers,omitempty"`
	Body        []byte            `json:"body,omitempty"`
	Stats       *demoStats        `json:"stats,omitempty"`
}

// demoStats are a child's cumulative counters.
type demoStats struct {
	Delivered, Redelivered                      uint64
	DupAudit, DupStore, DupInFlight, DupOther   uint64
	Retries, Failures, Panics, DeadLettered     uint64
	Reconnects, AckLost, StoreCalls, StoreNanos uint64
	AppliedAgain                                uint64 // duplicates handed to the handler (-guard none)
}

func (s *demoStats) add(o demoStats) {
	s.Delivered += o.Delivered
	s.Redelivered += o.Redelivered
	s.DupAudit += o.DupAudit
	s.DupStore += o.DupStore
	s.DupInFlight += o.DupInFlight
	s.DupOther += o.DupOther
	s.Retries += o.Retries
	s.Failures += o.Failures
	s.Panics += o.Panics
	s.DeadLettered += o.DeadLettered
	s.Reconnects += o.Reconnects
	s.AckLost += o.AckLost
	s.StoreCalls += o.StoreCalls
	s.StoreNanos += o.StoreNanos
	s.AppliedAgain += o.AppliedAgain
}

// wireConn writes and reads frames on one socket. Writes are serialized;
// reads belong to one goroutine.
type wireConn struct {
	nc  net.Conn
	dec *json.Decoder
	mu  sync.Mutex
	w   *bufio.Writer
	enc *json.Encoder
}

func newWireConn(nc net.Conn) *wireConn {
	w := bufio.NewWriter(nc)
	return &wireConn{nc: nc, dec: json.NewDecoder(bufio.NewReader(nc)), w: w, enc: json.NewEncoder(w)}
}

// send writes one frame and flushes it.
func (c *wireConn) send(f *wireFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enc.Encode(f); err != nil {
		return err
	}
	return c.w.Flush()
}

// recv reads the next frame.
func (c *wireConn) recv() (*wireFrame, error) {
	f := new(wireFrame)
	if err := c.dec.Decode(f); err != nil {
		return nil, err
	}
	return f, nil
}

func (c *wireConn) Close() error { return c.nc.Close() }

// modelServer serves a broker model on a listener (the broker socket).
type modelServer struct {
	b  *brokermodel.Broker
	ln net.Listener

	mu    sync.Mutex
	conns map[*brokermodel.Conn]*wireConn
	// roles says what each connection did: "sub:" and the queue it
	// subscribed to, or "send" once it sent; "" before either.
	roles map[*brokermodel.Conn]string
	wg    sync.WaitGroup

	sends   atomic.Uint64   // messages stored for senders
	resends atomic.Uint64   // of which with an outbox id already stored
	ids     map[string]bool // outbox ids stored, under mu
}

// serveModel starts serving b on ln; Close stops.
func serveModel(b *brokermodel.Broker, ln net.Listener) *modelServer {
	s := &modelServer{b: b, ln: ln, conns: map[*brokermodel.Conn]*wireConn{}, roles: map[*brokermodel.Conn]string{}, ids: map[string]bool{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.serve(nc) }()
		}
	}()
	return s
}

// Cut cuts every served connection, as a network failure would, and
// returns how many were cut.
func (s *modelServer) Cut() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c, wc := range s.conns {
		if s.b.Cut(c) {
			n++
		}
		wc.Close()
	}
	return n
}

// setRole records what connection c does (see roles).
func (s *modelServer) setRole(c *brokermodel.Conn, role string) {
	s.mu.Lock()
	s.roles[c] = role
	s.mu.Unlock()
}

// live returns how many served connections have role.
func (s *modelServer) live(role string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c := range s.conns {
		if s.roles[c] == role {
			n++
		}
	}
	return n
}

// waitGone waits until no served connection has role (a killed process's
// connections are cut once the parent reads the end of its socket, and
// what they had not acknowledged is back on the queue), for at most 5s.
func (s *modelServer) waitGone(ctx context.Context, role string) error {
	deadline := time.Now().Add(5 * time.Second)
	for s.live(role) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("the broker model still serves a connection of %s 5s after its process ended", role)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}

// stored counts a message stored for a sender, and a resend when its
// outbox id was stored before.
func (s *modelServer) stored(headers map[string]string) {
	s.sends.Add(1)
	id := headers[outboxid.Header]
	if id == "" {
		return
	}
	s.mu.Lock()
	again := s.ids[id]
	s.ids[id] = true
	s.mu.Unlock()
	if again {
		s.resends.Add(1)
	}
}

// Close stops accepting, closes every connection and waits for them.
func (s *modelServer) Close() {
	s.ln.Close()
	s.Cut()
	s.wg.Wait()
}

func (s *modelServer) serve(nc net.Conn) {
	wc := newWireConn(nc)
	defer wc.Close()
	conn, err := s.b.Connect()
	if err != nil {
		return
	}
	s.mu.Lock()
	s.conns[conn] = wc
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		// The socket is gone, whatever the reason: the model connection
		// is lost with it, and what it had not acknowledged comes back.
		s.b.Cut(conn)
		cancel()
		wc.Close()
		wg.Wait()
		s.mu.Lock()
		delete(s.conns, conn)
		delete(s.roles, conn)
		s.mu.Unlock()
	}()
	var dmu sync.Mutex
	deliveries := map[uint64]*brokermodel.Delivery{}
	take := func(tag uint64) *brokermodel.Delivery {
		dmu.Lock()
		defer dmu.Unlock()
		d := deliveries[tag]
		delete(deliveries, tag)
		return d
	}
	subscribed := false
	for {
		f, err := wc.recv()
		if err != nil {
			return
		}
		switch f.Op {
		case "subscribe":
			if subscribed {
				return
			}
			subscribed = true
			sub, err := conn.Subscribe(f.Dest, f.Prefetch)
			if err != nil {
				return
			}
			s.setRole(conn, "sub:"+f.Dest)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for tag := uint64(1); ; tag++ {
					d, err := sub.Receive(ctx)
					if err != nil {
						return
					}
					dmu.Lock()
					deliveries[tag] = d
					dmu.Unlock()
					if wc.send(&wireFrame{Op: "deliver", Tag: tag, ID: d.MessageID, Dest: d.Destination,
						Redelivered: d.Redelivered, Timestamp: d.Timestamp.UnixNano(), Headers: d.Headers, Body: d.Body}) != nil {
						wc.Close() // the reader sees it and cuts the connection
						return
					}
				}
			}()
		case "ack":
			if d := take(f.Tag); d != nil {
				_ = conn.Ack(d)
			}
		case "deadletter":
			d := take(f.Tag)
			if d == nil {
				continue
			}
			tx, err := conn.Begin()
			if err == nil {
				_, err = tx.Send(brokermodel.DLQ, f.Body, brokermodel.SendOptions{Persistent: true, Headers: f.Headers})
			}
			if err == nil {
				err = tx.Ack(d)
			}
			if err == nil {
				err = tx.Commit()
			}
			if err != nil {
				return
			}
		case "send":
			if subscribed {
				return // the demo's senders do not consume
			}
			s.setRole(conn, "send")
			id, err := conn.Send(f.Dest, f.Body, brokermodel.SendOptions{Persistent: true, Headers: f.Headers})
			if err != nil {
				return
			}
			s.stored(f.Headers)
			if wc.send(&wireFrame{Op: "receipt", Tag: f.Tag, ID: id}) != nil {
				return
			}
		default:
			return
		}
	}
}

// modelClient is the child's end of a broker socket connection.
type modelClient struct {
	wc     *wireConn
	frames chan *wireFrame // deliveries; closed when the connection ends
	done   chan struct{}   // closed when the connection ends
}

// dialModel connects to the broker socket at path and subscribes to dest.
func dialModel(ctx context.Context, path, dest string, prefetch int) (*modelClient, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	c := &modelClient{wc: newWireConn(nc), frames: make(chan *wireFrame, prefetch), done: make(chan struct{})}
	if err := c.wc.send(&wireFrame{Op: "subscribe", Dest: dest, Prefetch: prefetch}); err != nil {
		nc.Close()
		return nil, err
	}
	go func() {
		defer close(c.frames)
		defer close(c.done)
		for {
			f, err := c.wc.recv()
			if err != nil {
				c.wc.Close()
				return
			}
			if f.Op != "deliver" {
				c.wc.Close()
				return
			}
			c.frames <- f
		}
	}()
	return c, nil
}

// closed reports whether the connection has ended.
func (c *modelClient) closed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// ack acknowledges the delivery tagged tag. An error means the ack is lost
// with the connection (the delivery will come back).
func (c *modelClient) ack(tag uint64) error {
	if c.closed() {
		return net.ErrClosed
	}
	return c.wc.send(&wireFrame{Op: "ack", Tag: tag})
}

// deadLetter sends a copy of the delivery tagged tag to the dead-letter
// queue and acknowledges it, in one transaction.
func (c *modelClient) deadLetter(tag uint64, headers map[string]string, body []byte) error {
	if c.closed() {
		return net.ErrClosed
	}
	return c.wc.send(&wireFrame{Op: "deadletter", Tag: tag, Headers: headers, Body: body})
}

func (c *modelClient) Close() error { return c.wc.Close() }

// acceptControl waits for the next child's control connection, until ctx is
// done or exited is closed (the child died before connecting).
func acceptControl(ctx context.Context, ln net.Listener, exited <-chan struct{}) (*wireConn, error) {
	type res struct {
		nc  net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		nc, err := ln.Accept()
		ch <- res{nc, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		return newWireConn(r.nc), nil
	case <-exited:
	case <-ctx.Done():
	}
	// Unblock the Accept: a zero deadline in the past makes it return.
	if dl, ok := ln.(interface{ SetDeadline(time.Time) error }); ok {
		_ = dl.SetDeadline(time.Unix(1, 0))
	}
	r := <-ch
	if dl, ok := ln.(interface{ SetDeadline(time.Time) error }); ok {
		_ = dl.SetDeadline(time.Time{})
	}
	if r.err == nil {
		return newWireConn(r.nc), nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, errors.New("the consumer exited before connecting")
}

// readStats reads a child's control connection until it closes, keeping
// the latest counters in *last (under mu).
func readStats(wc *wireConn, mu *sync.Mutex, last *demoStats) {
	for {
		f, err := wc.recv()
		if err != nil {
			return // a killed child's stream ends anywhere
		}
		if f.Op == "stats" && f.Stats != nil {
			mu.Lock()
			*last = *f.Stats
			mu.Unlock()
		}
	}
}
