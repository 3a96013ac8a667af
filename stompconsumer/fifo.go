package stompconsumer

import "sync"

// fifo is the unbounded queue between a subscription's reader and its
// workers. The reader must never block: go-stomp delivers every frame of a
// connection through one goroutine, so a reader stuck on busy workers would
// stall the RECEIPTs and heart-beats of the whole connection (and ACKs
// queued behind them). The broker's prefetch bounds what can be queued.
type fifo struct {
	mu     sync.Mutex
	cond   *sync.Cond
	items  []*delivery
	head   int
	closed bool
}

func newFIFO() *fifo {
	q := &fifo{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// push appends d; it reports false (and does not queue d) once closed.
func (q *fifo) push(d *delivery) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	q.items = append(q.items, d)
	q.cond.Signal()
	return true
}

// pop waits for the next delivery; ok is false once the queue is closed.
// Deliveries still queued at close are not returned: they were never
// processed and the broker sends them again.
func (q *fifo) pop() (d *delivery, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for !q.closed && q.head == len(q.items) {
		q.cond.Wait()
	}
	if q.closed {
		return nil, false
	}
	d = q.items[q.head]
	q.items[q.head] = nil
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	return d, true
}

// close stops the queue and returns how many queued deliveries it dropped.
func (q *fifo) close() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0
	}
	q.closed = true
	n := len(q.items) - q.head
	q.items, q.head = nil, 0
	q.cond.Broadcast()
	return n
}
