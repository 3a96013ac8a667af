package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/outboxid"
	"github.com/acemq/msgaudit/outbox"
	"github.com/acemq/msgaudit/receiver"
)

// The processes of a -chain run.
const (
	chainA     = "a"     // consumer A: inbox + outbox in its ledger's database
	chainRelay = "relay" // the outbox's relay, on consumer A's database
	chainB     = "b"     // consumer B: inbox keyed by the outbox id
)

// chainRoles are the processes of a -chain run, in the order the kills
// take them.
var chainRoles = []string{chainA, chainRelay, chainB}

// chainRoleName names a -chain process in errors and in the table.
func chainRoleName(role string) string {
	switch role {
	case chainA:
		return "consumer A"
	case chainB:
		return "consumer B"
	}
	return role
}

const (
	// chainOutboxTable is the outbox's table, in consumer A's database.
	chainOutboxTable = "demo_outbox"
	// chainOrderHeader carries the order key of a message A sends (its
	// producer, "p3"), chainSeqHeader its number among that key's
	// messages in A's commit order, from 1.
	chainOrderHeader = "x-demo-order-key"
	chainSeqHeader   = "x-demo-seq"
	// chainLease is the relay's lease: a killed relay's messages are
	// published again by its successor after it.
	chainLease = time.Second
)

// chainSchema is what -chain adds to a ledger's database. In A's:
// chain_seq, the last number given to each order key, and chain_out, the
// key, order key and number of each message A sent, all written in the
// delivery's transaction. In B's: chain_in, one row per message applied,
// in commit order (its rowid; SQLite serialises the writers).
const chainSchema = `CREATE TABLE IF NOT EXISTS chain_seq (order_key TEXT PRIMARY KEY, seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS chain_out (key TEXT PRIMARY KEY, order_key TEXT NOT NULL, seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS chain_in (order_key TEXT NOT NULL, seq INTEGER NOT NULL, key TEXT NOT NULL, outbox_id TEXT NOT NULL)`

// openChainLedger opens a ledger with the -chain tables.
func openChainLedger(path string) (*demoLedger, error) {
	led, err := openDemoLedger(path)
	if err != nil {
		return nil, err
	}
	if _, err := led.db.Exec(chainSchema); err != nil {
		led.close()
		return nil, err
	}
	return led, nil
}

// chainOrderKey is the order key of demo key k: its producer ("p3" of
// "p3-17").
func chainOrderKey(k string) string {
	p, _, _ := strings.Cut(k, "-")
	return p
}

// setupChainA is consumer A: the inbox and the outbox in the ledger's
// database. Its handler applies the ledger row, numbers the message among
// its producer's, and sends one message to QueueOut, all in the delivery's
// transaction; the seeded failures and panics come after the send, so the
// send rolls back with the effect.
func (c *demoConsumer) setupChainA(ctx context.Context, rc *receiver.Config) error {
	if _, err := c.ledger.db.ExecContext(ctx, chainSchema); err != nil {
		return err
	}
	// A connection per running delivery, and one for the GhostKey hook.
	c.ledger.db.SetMaxOpenConns(c.cfg.Workers + 2)
	ib, err := inbox.New(ctx, c.ledger.db, inbox.Options{Dialect: inbox.SQLite, Table: demoInboxTable, Metrics: c.metrics})
	if err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	ob, err := outbox.New(ctx, c.ledger.db, outbox.Options{Dialect: inbox.SQLite, Table: chainOutboxTable})
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	c.closers = append(c.closers, func() { _ = ob.Close() })
	rc.Inbox = ib
	c.handler = inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		key := m.Headers[demoKeyHeader]
		switch key {
		case "":
			return fmt.Errorf("message %s has no %s header", m.Key, demoKeyHeader)
		case c.cfg.LoseKey:
			return nil // acknowledged, neither applied nor sent
		case c.cfg.GhostKey:
			c.ghost(ctx, ob, m, key)
			return fmt.Errorf("planted fault: %s was sent outside its transaction, which fails", key)
		}
		if err := c.ledger.apply(ctx, tx, key, m.Key); err != nil {
			return err
		}
		okey := chainOrderKey(key)
		var seq int64
		if err := tx.QueryRowContext(ctx, `INSERT INTO chain_seq (order_key, seq) VALUES (?, 1)
			ON CONFLICT (order_key) DO UPDATE SET seq = seq + 1 RETURNING seq`, okey).Scan(&seq); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO chain_out (key, order_key, seq) VALUES (?, ?, ?)
			ON CONFLICT (key) DO NOTHING`, key, okey, seq); err != nil {
			return err
		}
		err := ob.Send(ctx, tx, outbox.Message{Destination: c.cfg.QueueOut, Body: m.Body, OrderKey: okey,
			Headers: map[string]string{demoKeyHeader: key, chainOrderHeader: okey, chainSeqHeader: strconv.FormatInt(seq, 10)}})
		if err != nil {
			return err
		}
		_, err = c.fault(m) // fails or panics as the seeded plan says
		return err
	})
	return nil
}

// ghost is the GhostKey test hook: the message of key is sent in a
// transaction of its own, committed once the delivery's transaction (which
// fails) has let go of the database, as a handler publishing outside its
// transaction would. Every attempt sends it under the same id (the
// delivery's first send), so only the first commits.
func (c *demoConsumer) ghost(ctx context.Context, ob *outbox.Outbox, m *receiver.Message, key string) {
	gctx := context.WithoutCancel(ctx)
	go func() {
		tx, err := c.ledger.db.BeginTx(gctx, nil)
		if err != nil {
			return
		}
		okey := "ghost-" + key
		if ob.Send(gctx, tx, outbox.Message{Destination: c.cfg.QueueOut, Body: m.Body, OrderKey: okey,
			Headers: map[string]string{demoKeyHeader: key, chainOrderHeader: okey, chainSeqHeader: "1"}}) != nil {
			_ = tx.Rollback()
			return
		}
		_ = tx.Commit()
	}()
}

// chainKey is consumer B's idempotency key: the message's outbox id,
// tagged so that it never equals a broker's message id.
func chainKey(m *receiver.Message) (string, error) {
	id := m.Headers[outboxid.Header]
	if !outboxid.Valid(id) {
		return "", fmt.Errorf("message %s has no valid %s header", m.Key, outboxid.Header)
	}
	return outboxid.Key(id), nil
}

// setupChainB is consumer B: an inbox keyed by the outbox id; its handler
// applies the ledger row and records the message's order key and number
// in the same transaction.
func (c *demoConsumer) setupChainB(ctx context.Context, rc *receiver.Config) error {
	if _, err := c.ledger.db.ExecContext(ctx, chainSchema); err != nil {
		return err
	}
	c.ledger.db.SetMaxOpenConns(c.cfg.Workers + 1)
	ib, err := inbox.New(ctx, c.ledger.db, inbox.Options{Dialect: inbox.SQLite, Table: demoInboxTable, Metrics: c.metrics})
	if err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	rc.Inbox = ib
	rc.KeyFunc = chainKey
	c.handler = inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		key, err := c.fault(m)
		if err != nil || key == "" {
			return err
		}
		seq, err := strconv.ParseInt(m.Headers[chainSeqHeader], 10, 64)
		if err != nil {
			return fmt.Errorf("message %s: %s: %w", m.Key, chainSeqHeader, err)
		}
		id := m.Headers[outboxid.Header]
		if err := c.ledger.apply(ctx, tx, key, id); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO chain_in (order_key, seq, key, outbox_id) VALUES (?, ?, ?, ?)`,
			m.Headers[chainOrderHeader], seq, key, id)
		return err
	})
	return nil
}

// consumeOrdered hands consumer B's deliveries of one connection to
// c.cfg.Workers lanes by order key: a lane handles its deliveries one at a
// time, in the order the broker delivered them, retrying one until it
// settles, so a key's messages are applied in queue order. Once the
// connection is gone a lane handles nothing more (its deliveries come back
// on the next one, in order). It returns when the connection ends or ctx
// is done.
func (c *demoConsumer) consumeOrdered(ctx context.Context, mc *modelClient) {
	lanes := make([]chan *wireFrame, c.cfg.Workers)
	var wg sync.WaitGroup
	for i := range lanes {
		// Never full: the broker holds at most Prefetch deliveries
		// unacknowledged.
		lanes[i] = make(chan *wireFrame, c.cfg.Prefetch)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range lanes[i] {
				if ctx.Err() == nil && !mc.closed() {
					c.handleModel(ctx, mc, f)
				}
			}
		}()
	}
	defer func() {
		for _, l := range lanes {
			close(l)
		}
		wg.Wait()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case f, ok := <-mc.frames:
			if !ok {
				return
			}
			h := fnv.New32a()
			h.Write([]byte(f.Headers[chainOrderHeader]))
			lanes[h.Sum32()%uint32(len(lanes))] <- f
		}
	}
}

// relay runs the outbox's relay on consumer A's database, publishing to
// the broker model.
func (c *demoConsumer) relay(ctx context.Context) error {
	ob, err := outbox.New(ctx, c.ledger.db, outbox.Options{Dialect: inbox.SQLite, Table: chainOutboxTable, Lease: chainLease})
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	defer ob.Close()
	p := &modelPublisher{path: c.cfg.BrokerSock, dupKey: c.cfg.DupKey}
	defer p.close()
	return ob.Run(ctx, p)
}

// modelPublisher is the relay's outbox.Publisher: it sends each message
// to the broker model over the broker socket, with its outbox id in the
// outboxid.Header header, and returns once the model's receipt says it is
// stored. A lost connection is a transient error; the next Publish dials
// again.
type modelPublisher struct {
	path   string
	dupKey string // the DupKey test hook

	mu  sync.Mutex
	cur *pubConn
}

// pubConn is one connection of a modelPublisher.
type pubConn struct {
	wc      *wireConn
	done    chan struct{} // closed when the connection ends
	mu      sync.Mutex
	next    uint64
	waiting map[uint64]chan struct{} // closed by the receipt
}

// Publish implements outbox.Publisher.
func (p *modelPublisher) Publish(ctx context.Context, id string, m outbox.Message) error {
	if err := p.publish(ctx, id, m); err != nil {
		return err
	}
	if p.dupKey != "" && m.Headers[demoKeyHeader] == p.dupKey {
		return p.publish(ctx, id+"-again", m) // the planted fault: a second id for one message
	}
	return nil
}

func (p *modelPublisher) publish(ctx context.Context, id string, m outbox.Message) error {
	pc, err := p.conn(ctx)
	if err != nil {
		return err
	}
	h := maps.Clone(m.Headers)
	if h == nil {
		h = map[string]string{}
	}
	h[outboxid.Header] = id
	pc.mu.Lock()
	pc.next++
	tag := pc.next
	receipt := make(chan struct{})
	pc.waiting[tag] = receipt
	pc.mu.Unlock()
	if err := pc.wc.send(&wireFrame{Op: "send", Tag: tag, Dest: m.Destination, Headers: h, Body: m.Body}); err != nil {
		pc.wc.Close()
		return err
	}
	select {
	case <-receipt:
		return nil
	case <-pc.done:
		select {
		case <-receipt:
			return nil
		default:
		}
		return errors.New("the broker model's connection ended before its receipt")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// conn returns the live connection, dialling one when there is none.
func (p *modelPublisher) conn(ctx context.Context) (*pubConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != nil {
		select {
		case <-p.cur.done:
		default:
			return p.cur, nil
		}
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", p.path)
	if err != nil {
		return nil, err
	}
	pc := &pubConn{wc: newWireConn(nc), done: make(chan struct{}), waiting: map[uint64]chan struct{}{}}
	go func() {
		defer close(pc.done)
		defer pc.wc.Close()
		for {
			f, err := pc.wc.recv()
			if err != nil || f.Op != "receipt" {
				return
			}
			pc.mu.Lock()
			ch := pc.waiting[f.Tag]
			delete(pc.waiting, f.Tag)
			pc.mu.Unlock()
			if ch != nil {
				close(ch)
			}
		}
	}()
	p.cur = pc
	return pc, nil
}

func (p *modelPublisher) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != nil {
		p.cur.wc.Close()
	}
}
