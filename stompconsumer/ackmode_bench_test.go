package stompconsumer

import (
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
)

// BenchmarkAckModes measures, against the real broker, what acknowledging
// costs per message in each STOMP way of doing it, one consumer goroutine,
// prefetch 50, b.N persistent messages of 200 bytes pre-loaded (outside the
// timing); the clock stops at the DISCONNECT receipt, which ActiveMQ sends
// after processing every frame before it:
//
//   - individual: ack:client-individual, one ACK per message (what the
//     consumer does);
//   - tx-k: ack:client-individual, the ACKs of k messages in one
//     transaction (BEGIN, k ACKs, COMMIT);
//   - cumulative-k: ack:client, one ACK per k messages, which acknowledges
//     every message delivered on the subscription before it.
//
// Run it with a fixed count: go test -run '^$' -bench AckModes
// -benchtime 5000x ./stompconsumer.
func BenchmarkAckModes(b *testing.B) {
	addr := stompAddr(b)
	for _, mode := range []struct {
		name string
		ack  stomp.AckMode
		k    int
		tx   bool
	}{
		{"individual", stomp.AckClientIndividual, 1, false},
		{"tx-10", stomp.AckClientIndividual, 10, true},
		{"tx-25", stomp.AckClientIndividual, 25, true},
		{"cumulative-10", stomp.AckClient, 10, false},
		{"cumulative-25", stomp.AckClient, 25, false},
	} {
		b.Run(mode.name, func(b *testing.B) {
			q := "/queue/" + uniq("msgaudit.ackbench")
			body := make([]byte, 200)
			for i := range body {
				body[i] = 'a' + byte(i%26)
			}
			p := quietDial(b, addr)
			for i := range b.N {
				opts := []func(*frame.Frame) error{stomp.SendOpt.Header("persistent", "true")}
				if i == b.N-1 {
					opts = append(opts, stomp.SendOpt.Receipt)
				}
				if err := p.Send(q, "application/octet-stream", body, opts...); err != nil {
					b.Fatal(err)
				}
			}
			_ = p.Disconnect()
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			c := quietDial(b, addr)
			sub, err := c.Subscribe(q, mode.ack, stomp.SubscribeOpt.Header("activemq.prefetchSize", "50"))
			if err != nil {
				b.Fatal(err)
			}
			var tx *stomp.Transaction
			for i := range b.N {
				m, ok := <-sub.C
				if !ok || m.Err != nil {
					b.Fatalf("message %d: %v", i, m.Err)
				}
				last := i == b.N-1 || (i+1)%mode.k == 0
				switch {
				case mode.tx:
					if tx == nil {
						if tx, err = c.BeginWithError(); err != nil {
							b.Fatal(err)
						}
					}
					if err := tx.Ack(m); err != nil {
						b.Fatal(err)
					}
					if last {
						if err := tx.Commit(); err != nil {
							b.Fatal(err)
						}
						tx = nil
					}
				case mode.ack == stomp.AckClient:
					if last {
						if err := c.Ack(m); err != nil {
							b.Fatal(err)
						}
					}
				default:
					if err := c.Ack(m); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := c.Disconnect(); err != nil { // waits for the receipt
				b.Fatal(err)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
			if left := leftOn(b, addr, q); left != 0 {
				b.Fatalf("%d messages left unacknowledged", left)
			}
		})
	}
}

// quietLogger discards go-stomp's log lines (it logs every subscription a
// DISCONNECT ends), which would break the benchmark's output lines.
type quietLogger struct{}

func (quietLogger) Debugf(string, ...any)   {}
func (quietLogger) Infof(string, ...any)    {}
func (quietLogger) Warningf(string, ...any) {}
func (quietLogger) Errorf(string, ...any)   {}
func (quietLogger) Debug(string)            {}
func (quietLogger) Info(string)             {}
func (quietLogger) Warning(string)          {}
func (quietLogger) Error(string)            {}

// quietDial is rawDial without go-stomp's logging.
func quietDial(t testing.TB, addr string) *stomp.Conn {
	t.Helper()
	c, err := stomp.Dial("tcp", addr, stomp.ConnOpt.AcceptVersion(stomp.V12), stomp.ConnOpt.HeartBeat(0, 0),
		stomp.ConnOpt.Logger(quietLogger{}))
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	return c
}

// leftOn consumes what is left on dest (waiting 300 ms of quiet) and
// returns how many messages it found.
func leftOn(t testing.TB, addr, dest string) int {
	t.Helper()
	c := quietDial(t, addr)
	defer c.Disconnect()
	sub, err := c.Subscribe(dest, stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		select {
		case m, ok := <-sub.C:
			if !ok || m.Err != nil {
				t.Fatalf("checking %s: subscription ended", dest)
			}
			n++
		case <-time.After(300 * time.Millisecond):
			return n
		}
	}
}
