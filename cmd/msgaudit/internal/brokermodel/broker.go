package brokermodel

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/acemq/msgaudit/msgid"
)

// DLQ is the dead-letter queue, ActiveMQ's shared default.
const DLQ = "/queue/ActiveMQ.DLQ"

// DefaultPrefetch is the prefetch of a subscription that asks for none,
// ActiveMQ's STOMP default.
const DefaultPrefetch = 1000

// HeaderOriginalDestination is added to a dead-lettered copy.
const HeaderOriginalDestination = "original-destination"

// Options configure a Broker. The zero value is usable.
type Options struct {
	// Host and Port go into message ids; defaults "model" and 61613.
	Host string
	Port int
	// Clock stamps ids and message timestamps; nil means time.Now.
	Clock func() time.Time
	// ReplayWindow is how many recent deliveries per queue Replay can copy;
	// 0 means 4096.
	ReplayWindow int
	// OnReceive, if set, is called (without the broker's lock) each time a
	// delivery is handed to the application by Receive, before Receive
	// returns it. Tests cut connections from here to lose a delivery
	// mid-flight.
	OnReceive func(c *Conn, d *Delivery)
}

// Stats are the broker's counters.
type Stats struct {
	Sent         uint64 // messages accepted (committed SENDs), replays excluded
	Delivered    uint64 // deliveries dispatched to subscriptions (prefetch included)
	Redelivered  uint64 // of which with Redelivered=true
	Acked        uint64
	Nacked       uint64
	DeadLettered uint64 // persistent messages NACKed into the DLQ
	Discarded    uint64 // non-persistent messages NACKed away, or lost in a restart
	Replayed     uint64 // copies enqueued by Replay
	Cuts         uint64 // connections cut (Cut, CutAll, Restart)
	Requeued     uint64 // unacked deliveries returned to their queue on disconnect
}

// Broker is the model. Create it with New.
type Broker struct {
	mu       sync.Mutex
	opts     Options
	gen      *msgid.Generator
	instance uint64
	queues   map[string]*queue
	conns    map[*Conn]struct{}
	nextConn uint64
	nextAck  uint64
	nextOrd  uint64
	closed   bool
	stats    Stats
}

type message struct {
	id          string
	dest        string
	headers     map[string]string
	body        []byte
	persistent  bool
	timestamp   time.Time
	redelivered bool
	ord         uint64 // enqueue order, to requeue in order
}

type queue struct {
	name    string
	pending []*message
	subs    []*Subscription
	rr      int
	recent  []*message // ring of recent deliveries for Replay
	rnext   int
	unacked int
}

// New returns an empty broker.
func New(o Options) *Broker {
	if o.Host == "" {
		o.Host = "model"
	}
	if o.Port == 0 {
		o.Port = 61613
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.ReplayWindow <= 0 {
		o.ReplayWindow = 4096
	}
	b := &Broker{opts: o, queues: map[string]*queue{}, conns: map[*Conn]struct{}{}}
	b.gen = b.newGenerator()
	return b
}

func (b *Broker) newGenerator() *msgid.Generator {
	return msgid.NewGenerator(msgid.GeneratorOptions{Host: b.opts.Host, Port: b.opts.Port, Clock: b.opts.Clock, Instance: b.instance})
}

func checkDest(dest string) error {
	if !strings.HasPrefix(dest, "/queue/") || len(dest) == len("/queue/") {
		return fmt.Errorf("%w: %q", ErrDestination, dest)
	}
	return nil
}

func (b *Broker) queue(dest string) *queue {
	q := b.queues[dest]
	if q == nil {
		q = &queue{name: dest}
		b.queues[dest] = q
	}
	return q
}

// Conn is one client connection. It sends as one producer (its first SEND
// picks the producer key) and holds subscriptions.
type Conn struct {
	b        *Broker
	id       uint64
	producer *msgid.Producer
	subs     map[*Subscription]struct{}
	closed   bool
	nextSub  int
}

// Connect opens a connection.
func (b *Broker) Connect() (*Conn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	b.nextConn++
	c := &Conn{b: b, id: b.nextConn, subs: map[*Subscription]struct{}{}}
	b.conns[c] = struct{}{}
	return c, nil
}

// ID returns the connection's number.
func (c *Conn) ID() uint64 { return c.id }

// Closed reports whether c was closed or cut.
func (c *Conn) Closed() bool {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	return c.closed
}

// SendOptions are the optional parts of a SEND.
type SendOptions struct {
	// Headers are custom headers; they survive delivery, redelivery and
	// the DLQ. A "message-id" header is overwritten, as ActiveMQ does.
	Headers map[string]string
	// Persistent marks the message persistent (persistent:true): a NACK
	// dead-letters it instead of discarding it, and it survives Restart.
	Persistent bool
}

func (c *Conn) nextID() string {
	if c.producer == nil {
		c.producer = c.b.gen.NewProducer()
	}
	return c.producer.Next()
}

func (c *Conn) newMessage(dest string, body []byte, o SendOptions) *message {
	h := maps.Clone(o.Headers)
	delete(h, "message-id")
	return &message{id: c.nextID(), dest: dest, headers: h, body: slices.Clone(body), persistent: o.Persistent,
		timestamp: c.b.opts.Clock()}
}

// Send enqueues a message and returns its id.
func (c *Conn) Send(dest string, body []byte, o SendOptions) (string, error) {
	if err := checkDest(dest); err != nil {
		return "", err
	}
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.closed {
		return "", ErrDisconnected
	}
	m := c.newMessage(dest, body, o)
	b.enqueue(m, false)
	b.stats.Sent++
	return m.id, nil
}

func (b *Broker) enqueue(m *message, front bool) {
	q := b.queue(m.dest)
	b.nextOrd++
	m.ord = b.nextOrd
	if front {
		q.pending = append([]*message{m}, q.pending...)
	} else {
		q.pending = append(q.pending, m)
	}
	b.dispatch(q)
}

// Subscription is a queue subscription with client-individual acks.
type Subscription struct {
	c        *Conn
	q        *queue
	name     string
	prefetch int
	buf      []*Delivery          // dispatched, not yet received by the application
	unacked  map[string]*Delivery // by ack id: dispatched, not acked (buf included)
	notify   chan struct{}
	closed   bool
}

// Delivery is one delivery of a message to a subscription.
type Delivery struct {
	// MessageID is the message's stable id.
	MessageID string
	// Destination is the queue it was delivered from.
	Destination string
	// Headers are a copy of the message's headers.
	Headers map[string]string
	// Body is a copy of the payload.
	Body []byte
	// Redelivered is true when the broker delivered the message before
	// (or it is a failover replay copy marked so).
	Redelivered bool
	// Persistent is the message's persistence.
	Persistent bool
	// Timestamp is when the message was sent.
	Timestamp time.Time
	// AckID is new on every delivery, like the STOMP 1.2 ack header.
	AckID string
	// Subscription names the subscription.
	Subscription string

	sub *Subscription
	msg *message
}

// Subscribe subscribes to a queue with a prefetch (0 = DefaultPrefetch).
func (c *Conn) Subscribe(dest string, prefetch int) (*Subscription, error) {
	if err := checkDest(dest); err != nil {
		return nil, err
	}
	if prefetch <= 0 {
		prefetch = DefaultPrefetch
	}
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.closed {
		return nil, ErrDisconnected
	}
	c.nextSub++
	s := &Subscription{c: c, q: b.queue(dest), name: "sub-" + strconv.Itoa(c.nextSub), prefetch: prefetch,
		unacked: map[string]*Delivery{}, notify: make(chan struct{}, 1)}
	c.subs[s] = struct{}{}
	s.q.subs = append(s.q.subs, s)
	b.dispatch(s.q)
	return s, nil
}

// dispatch moves pending messages to subscriptions with prefetch room,
// round-robin. Called with b.mu held.
func (b *Broker) dispatch(q *queue) {
	for len(q.pending) > 0 && len(q.subs) > 0 {
		var s *Subscription
		for i := 0; i < len(q.subs); i++ {
			cand := q.subs[(q.rr+i)%len(q.subs)]
			if len(cand.unacked) < cand.prefetch {
				s = cand
				q.rr = (q.rr + i + 1) % len(q.subs)
				break
			}
		}
		if s == nil {
			return
		}
		m := q.pending[0]
		q.pending[0] = nil
		q.pending = q.pending[1:]
		b.nextAck++
		d := &Delivery{MessageID: m.id, Destination: m.dest, Headers: maps.Clone(m.headers), Body: slices.Clone(m.body),
			Redelivered: m.redelivered, Persistent: m.persistent, Timestamp: m.timestamp,
			AckID: "ack-" + strconv.FormatUint(b.nextAck, 10), Subscription: s.name, sub: s, msg: m}
		s.unacked[d.AckID] = d
		q.unacked++
		s.buf = append(s.buf, d)
		b.stats.Delivered++
		if m.redelivered {
			b.stats.Redelivered++
		}
		b.remember(q, m)
		select {
		case s.notify <- struct{}{}:
		default:
		}
	}
}

func (b *Broker) remember(q *queue, m *message) {
	if len(q.recent) < b.opts.ReplayWindow {
		q.recent = append(q.recent, m)
		return
	}
	q.recent[q.rnext] = m
	q.rnext = (q.rnext + 1) % len(q.recent)
}

// Receive returns the next delivery, waiting for one until ctx is done. It
// returns ErrDisconnected once the subscription's connection is closed or
// cut, or the subscription is unsubscribed.
func (s *Subscription) Receive(ctx context.Context) (*Delivery, error) {
	b := s.c.b
	for {
		b.mu.Lock()
		if s.closed {
			b.mu.Unlock()
			return nil, ErrDisconnected
		}
		if len(s.buf) > 0 {
			d := s.buf[0]
			s.buf[0] = nil
			s.buf = s.buf[1:]
			b.mu.Unlock()
			if b.opts.OnReceive != nil {
				b.opts.OnReceive(s.c, d)
			}
			return d, nil
		}
		b.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Name returns the subscription's name.
func (s *Subscription) Name() string { return s.name }

// Unsubscribe ends the subscription; its unacked deliveries are redelivered.
func (s *Subscription) Unsubscribe() error {
	b := s.c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.closed {
		return ErrDisconnected
	}
	b.dropSub(s)
	return nil
}

// dropSub closes s and requeues its unacked deliveries in their original
// order at the front of the queue, marked redelivered. b.mu held.
func (b *Broker) dropSub(s *Subscription) {
	s.closed = true
	delete(s.c.subs, s)
	q := s.q
	q.subs = slices.DeleteFunc(q.subs, func(x *Subscription) bool { return x == s })
	if len(q.subs) > 0 {
		q.rr %= len(q.subs)
	} else {
		q.rr = 0
	}
	back := make([]*message, 0, len(s.unacked))
	for _, d := range s.unacked {
		back = append(back, d.msg)
	}
	q.unacked -= len(s.unacked)
	s.unacked, s.buf = nil, nil
	slices.SortFunc(back, func(a, b *message) int { return cmpOrd(a.ord, b.ord) })
	for _, m := range back {
		m.redelivered = true
	}
	b.stats.Requeued += uint64(len(back))
	q.pending = append(back, q.pending...)
	select {
	case s.notify <- struct{}{}:
	default:
	}
	b.dispatch(q)
}

func cmpOrd(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// take removes d from its subscription's unacked set. b.mu held.
func (c *Conn) take(d *Delivery) error {
	if c.closed {
		return ErrDisconnected
	}
	s := d.sub
	if s == nil || s.c != c || s.closed || s.unacked[d.AckID] != d {
		return fmt.Errorf("%w: %s (%s)", ErrUnknownAck, d.AckID, d.MessageID)
	}
	delete(s.unacked, d.AckID)
	s.q.unacked--
	if i := slices.Index(s.buf, d); i >= 0 {
		s.buf = slices.Delete(s.buf, i, i+1)
	}
	return nil
}

// Ack acknowledges d (client-individual).
func (c *Conn) Ack(d *Delivery) error {
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := c.take(d); err != nil {
		return err
	}
	b.stats.Acked++
	b.dispatch(d.sub.q)
	return nil
}

// Nack is ActiveMQ's STOMP NACK: a poison ack, not a retry. A persistent
// message goes to DLQ (same id and headers, plus original-destination); a
// non-persistent one is discarded.
func (c *Conn) Nack(d *Delivery) error {
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := c.take(d); err != nil {
		return err
	}
	b.stats.Nacked++
	b.poison(d.msg)
	b.dispatch(d.sub.q)
	return nil
}

func (b *Broker) poison(m *message) {
	if !m.persistent {
		b.stats.Discarded++
		return
	}
	h := maps.Clone(m.headers)
	if h == nil {
		h = map[string]string{}
	}
	h[HeaderOriginalDestination] = m.dest
	b.stats.DeadLettered++
	b.enqueue(&message{id: m.id, dest: DLQ, headers: h, body: m.body, persistent: true, timestamp: m.timestamp}, false)
}

// Close disconnects gracefully: every unacked delivery is redelivered.
// Open transactions are discarded.
func (c *Conn) Close() error {
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.closed {
		return ErrDisconnected
	}
	b.drop(c)
	return nil
}

func (b *Broker) drop(c *Conn) {
	c.closed = true
	delete(b.conns, c)
	for s := range c.subs {
		b.dropSub(s)
	}
}

// Cut models an abrupt connection loss (TCP reset, broker failover): the
// broker redelivers everything unacked, and the client's next operation on
// c — an in-flight ack included — fails with ErrDisconnected.
func (b *Broker) Cut(c *Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.closed {
		return false
	}
	b.stats.Cuts++
	b.drop(c)
	return true
}

// CutAll cuts every connection and returns how many.
func (b *Broker) CutAll() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for c := range b.conns {
		b.stats.Cuts++
		b.drop(c)
		n++
	}
	return n
}

// Replay enqueues, at the front of dest, copies of up to n of its most
// recently delivered messages — acked or still in flight — with their
// original ids, as a failover reconnect replays messages the client
// already had. redelivered sets the copies' flag. It returns how many
// copies it enqueued.
func (b *Broker) Replay(dest string, n int, redelivered bool) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[dest]
	if q == nil || n <= 0 {
		return 0
	}
	// Newest first: walk the ring backwards from the slot before rnext.
	var picked []*message
	for i := 1; i <= len(q.recent) && len(picked) < n; i++ {
		m := q.recent[(q.rnext-i+len(q.recent))%len(q.recent)]
		picked = append(picked, m)
	}
	slices.Reverse(picked)
	copies := make([]*message, len(picked))
	for i, m := range picked {
		b.nextOrd++
		copies[i] = &message{id: m.id, dest: m.dest, headers: maps.Clone(m.headers), body: m.body,
			persistent: m.persistent, timestamp: m.timestamp, redelivered: redelivered, ord: b.nextOrd}
	}
	q.pending = append(copies, q.pending...)
	b.stats.Replayed += uint64(len(copies))
	b.dispatch(q)
	return len(copies)
}

// Restart models a broker restart: every connection is cut, pending
// non-persistent messages are lost (unacked ones too), and message ids
// start new producer keys.
func (b *Broker) Restart() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for c := range b.conns {
		b.stats.Cuts++
		b.drop(c)
	}
	for _, q := range b.queues {
		kept := q.pending[:0]
		for _, m := range q.pending {
			if m.persistent {
				kept = append(kept, m)
			} else {
				b.stats.Discarded++
			}
		}
		clear(q.pending[len(kept):])
		q.pending = kept
		q.recent, q.rnext = nil, 0
	}
	b.instance++
	b.gen = b.newGenerator()
}

// Close cuts every connection and refuses new ones.
func (b *Broker) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for c := range b.conns {
		b.drop(c)
	}
	b.closed = true
}

// Stats returns the counters.
func (b *Broker) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// Depth returns dest's pending (not yet dispatched) and in-flight
// (dispatched, not acked) counts.
func (b *Broker) Depth(dest string) (pending, inFlight int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[dest]
	if q == nil {
		return 0, 0
	}
	return len(q.pending), q.unacked
}

// Message is a copy of a pending message, returned by Browse.
type Message struct {
	ID          string
	Destination string
	Headers     map[string]string
	Body        []byte
	Persistent  bool
	Redelivered bool
	Timestamp   time.Time
}

// Browse returns copies of dest's pending messages in queue order.
func (b *Broker) Browse(dest string) []Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[dest]
	if q == nil {
		return nil
	}
	out := make([]Message, len(q.pending))
	for i, m := range q.pending {
		out[i] = Message{ID: m.id, Destination: m.dest, Headers: maps.Clone(m.headers), Body: slices.Clone(m.body),
			Persistent: m.persistent, Redelivered: m.redelivered, Timestamp: m.timestamp}
	}
	return out
}

// Tx is a transaction: its SENDs and ACKs take effect together on Commit.
type Tx struct {
	c     *Conn
	sends []*message
	acks  []*Delivery
	done  bool
}

// Begin starts a transaction on c.
func (c *Conn) Begin() (*Tx, error) {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	if c.closed {
		return nil, ErrDisconnected
	}
	return &Tx{c: c}, nil
}

// Send adds a SEND to the transaction; the id is assigned now (an aborted
// SEND consumes its sequence number, as on ActiveMQ) and returned.
func (t *Tx) Send(dest string, body []byte, o SendOptions) (string, error) {
	if err := checkDest(dest); err != nil {
		return "", err
	}
	b := t.c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.done {
		return "", ErrTxDone
	}
	if t.c.closed {
		return "", ErrDisconnected
	}
	m := t.c.newMessage(dest, body, o)
	t.sends = append(t.sends, m)
	return m.id, nil
}

// Ack adds an ACK of d to the transaction.
func (t *Tx) Ack(d *Delivery) error {
	b := t.c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.done {
		return ErrTxDone
	}
	if t.c.closed {
		return ErrDisconnected
	}
	t.acks = append(t.acks, d)
	return nil
}

// Commit applies every SEND and ACK of the transaction, or none: if an ACK
// no longer matches an unacked delivery of this connection, nothing is
// applied and the error wraps ErrUnknownAck.
func (t *Tx) Commit() error {
	c := t.c
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.done {
		return ErrTxDone
	}
	t.done = true
	if c.closed {
		return ErrDisconnected
	}
	seen := map[*Delivery]bool{}
	for _, d := range t.acks {
		s := d.sub
		if seen[d] || s == nil || s.c != c || s.closed || s.unacked[d.AckID] != d {
			return fmt.Errorf("%w: %s in transaction", ErrUnknownAck, d.AckID)
		}
		seen[d] = true
	}
	touched := map[*queue]bool{}
	for _, d := range t.acks {
		_ = c.take(d)
		b.stats.Acked++
		touched[d.sub.q] = true
	}
	for _, m := range t.sends {
		b.enqueue(m, false)
		b.stats.Sent++
	}
	for q := range touched {
		b.dispatch(q)
	}
	return nil
}

// Abort discards the transaction. Its ACKed deliveries stay delivered and
// unacked (no redelivery on the live subscription).
func (t *Tx) Abort() error {
	b := t.c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.done {
		return ErrTxDone
	}
	t.done = true
	t.sends, t.acks = nil, nil
	return nil
}
