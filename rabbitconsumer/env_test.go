package rabbitconsumer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
)

// serviceURL returns the URL in the environment variable name, skipping the
// test when it is unset, except under CI=true where a missing service fails.
func serviceURL(t testing.TB, name string) string {
	t.Helper()
	return testenv.Getenv(t, name, "the real service")
}

func randomName(t testing.TB, prefix string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return prefix + hex.EncodeToString(b[:])
}

// broker is an admin connection to the test broker, straight (not through
// a proxy). Every test that needs the broker starts with newBroker, which
// skips it when the acker's unit tests have failed.
type broker struct {
	t    testing.TB
	url  string
	conn *amqp.Connection
	ch   *amqp.Channel
}

func newBroker(t testing.TB) *broker {
	t.Helper()
	if ackerBroken.Load() {
		t.Skip("the acker's unit tests failed (TestAcker*, TestTrackerCompacts): a broker test would only wait out its deadlines on a broken acker")
	}
	u := serviceURL(t, "MSGAUDIT_AMQP_URL")
	conn, err := amqp.Dial(u)
	if err != nil {
		t.Fatalf("dial %s: %v", redact.Strict(u), err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	b := &broker{t: t, url: u, conn: conn, ch: ch}
	t.Cleanup(func() { conn.Close() })
	return b
}

// queue declares a durable, non-auto-delete queue with a unique name and
// deletes it (and its dead-letter queue) when the test ends.
func (b *broker) queue(prefix string) string {
	b.t.Helper()
	q := randomName(b.t, prefix)
	if _, err := b.ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() {
		conn, err := amqp.Dial(b.url)
		if err != nil {
			b.t.Errorf("cleanup: %v", err)
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			b.t.Errorf("cleanup: %v", err)
			return
		}
		for _, name := range []string{q, q + defaultDeadLetterSuffix} {
			if _, err := ch.QueueDelete(name, false, false, false); err != nil {
				b.t.Errorf("cleanup: delete %s: %v", name, err)
			}
		}
	})
	return q
}

// publish sends a persistent message to q and waits for the confirm.
func (b *broker) publish(q string, p amqp.Publishing) {
	b.t.Helper()
	p.DeliveryMode = amqp.Persistent
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dc, err := b.ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, p)
	if err != nil {
		b.t.Fatal(err)
	}
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		b.t.Fatalf("publish not confirmed: %v %v", ok, err)
	}
}

// publishMany publishes n persistent messages to q, waiting for all the
// confirms at the end.
func (b *broker) publishMany(q string, n int, msg func(i int) amqp.Publishing) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dcs := make([]*amqp.DeferredConfirmation, 0, n)
	for i := range n {
		p := msg(i)
		p.DeliveryMode = amqp.Persistent
		dc, err := b.ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, p)
		if err != nil {
			b.t.Fatal(err)
		}
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			b.t.Fatalf("publish not confirmed: %v %v", ok, err)
		}
	}
}

// ready returns the number of ready messages in q (a fresh channel: a
// passive declare of a missing queue closes the channel).
func (b *broker) ready(q string) int {
	b.t.Helper()
	ch, err := b.conn.Channel()
	if err != nil {
		b.t.Fatal(err)
	}
	defer ch.Close()
	qi, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	return qi.Messages
}

// get fetches one message from q (auto-ack), ok false when empty.
func (b *broker) get(q string) (amqp.Delivery, bool) {
	b.t.Helper()
	ch, err := b.conn.Channel()
	if err != nil {
		b.t.Fatal(err)
	}
	defer ch.Close()
	d, ok, err := ch.Get(q, true)
	if err != nil {
		b.t.Fatal(err)
	}
	return d, ok
}

// via returns the broker URL with its host:port replaced by addr and the
// scheme by scheme.
func (b *broker) via(scheme, addr string) string {
	u, err := url.Parse(b.url)
	if err != nil {
		b.t.Fatal(err)
	}
	u.Scheme = scheme
	u.Host = addr
	return u.String()
}

// hostPort is the broker's host:port.
func (b *broker) hostPort() string {
	u, err := url.Parse(b.url)
	if err != nil {
		b.t.Fatal(err)
	}
	if u.Port() == "" {
		return u.Hostname() + ":5672"
	}
	return u.Host
}

func redisClient(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(serviceURL(t, "MSGAUDIT_REDIS_URL"))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// deletePrefix removes every Redis key under prefix.
func deletePrefix(t testing.TB, c *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("cleanup scan: %v", err)
		return
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := c.Del(ctx, keys[:n]...).Err(); err != nil {
			t.Errorf("cleanup del: %v", err)
			return
		}
		keys = keys[n:]
	}
}
