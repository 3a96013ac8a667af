// Package stompsub ends go-stomp subscriptions whose messages nobody reads
// any more, for the test harnesses and benchmarks that browse and drain
// queues over STOMP.
package stompsub

import "github.com/go-stomp/stomp/v3"

// Unsubscribe ends sub without risking go-stomp v3.1.3's hang.
// Subscription.Unsubscribe waits for the RECEIPT of its UNSUBSCRIBE, which
// reaches the subscription only after every MESSAGE the broker sent before
// it, one at a time through sub.C (16 deep); with sub.C full and unread the
// receipt never comes, and once its wait times out Unsubscribe blocks for
// good putting an error on that same channel. So sub.C is read and
// discarded until it is closed, which happens once the subscription ends
// (receipt, error or a closed connection). Discarded messages of an
// ack:auto subscription are consumed, a browse's are not consumed at all,
// and unacknowledged ones of a client-individual subscription are
// delivered again.
//
// Unsubscribe returns when sub.C is closed, even if go-stomp's Unsubscribe
// has not returned yet: that one can miss the wake-up of a receipt that
// arrives just as it starts waiting (the subscription's close does not
// take the lock its wait holds), and then returns only after its receipt
// timeout, 30 s by default, with an error, although the subscription
// ended. Its own error is returned when it comes first.
func Unsubscribe(sub *stomp.Subscription) error {
	closed := make(chan struct{})
	go func() {
		for range sub.C {
		}
		close(closed)
	}()
	done := make(chan error, 1)
	go func() { done <- sub.Unsubscribe() }()
	select {
	case err := <-done:
		return err
	case <-closed:
		select {
		case err := <-done:
			return err
		default:
			return nil
		}
	}
}
