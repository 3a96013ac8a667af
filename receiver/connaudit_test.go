package receiver_test

import (
	"context"
	"testing"

	"github.com/acemq/msgaudit/bitsetbin"
	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/receiver"
)

func TestConnAudit(t *testing.T) {
	t.Parallel()
	ca, err := connaudit.New(connaudit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := receiver.ConnAudit(ca)
	const id = "ID:vm-40067-1796041229942-3:3:-1:1:1"
	for _, tc := range []struct {
		consumer, dest, id string
		want               bitsetbin.Sighting
		err                bool
	}{
		{"c1", "/queue/a", id, bitsetbin.FirstSeen, false},
		{"c2", "/queue/a", id, bitsetbin.Duplicate, false}, // queues: shared by consumers
		{"c1", "/topic/t", id, bitsetbin.FirstSeen, false},
		{"c2", "/topic/t", id, bitsetbin.FirstSeen, false}, // topics: per consumer
		{"c1", "/topic/t", id, bitsetbin.Duplicate, false},
		{"c1", "orders", id, bitsetbin.FirstSeen, false}, // an AMQP queue name
		{"c2", "orders", id, bitsetbin.Duplicate, false},
		{"c1", "/queue/a", "not-an-id", 0, true},
		{"c1", "/bogus/x", id, 0, true},
		{"c1", "", id, bitsetbin.FirstSeen, false},
		{"c1", "", id, bitsetbin.FirstSeen, false}, // nothing recorded without a destination
	} {
		v, err := a.Check(tc.consumer, tc.dest, tc.id)
		if (err != nil) != tc.err || (!tc.err && v != tc.want) {
			t.Errorf("Check(%q, %q, %q) = %v, %v; want %v, err %v", tc.consumer, tc.dest, tc.id, v, err, tc.want, tc.err)
		}
	}
	if err := a.Rollback("c9", "/queue/a", id); err != nil {
		t.Fatal(err)
	}
	if v, _ := a.Check("c1", "/queue/a", id); v != bitsetbin.FirstSeen {
		t.Fatalf("after rollback: %v", v)
	}
	if err := a.Rollback("c1", "/bogus/x", id); err == nil {
		t.Fatal("rollback on a bad destination")
	}

	// The whole pipeline over the real audit, with a snapshot restore.
	r, _ := receiver.New(receiver.Config{MemoryOnly: true, Audit: a})
	m := func() *receiver.Message {
		return &receiver.Message{Key: "ID:p-1-2-0:1:5", Destination: "/queue/orders"}
	}
	if res := r.Process(context.Background(), m(), okHandler); res.Action != receiver.Ack || res.Duplicate {
		t.Fatal(res)
	}
	snap, err := ca.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	ca2, _ := connaudit.New(connaudit.Options{})
	if err := ca2.UnmarshalBinary(snap); err != nil {
		t.Fatal(err)
	}
	r2, _ := receiver.New(receiver.Config{MemoryOnly: true, Audit: receiver.ConnAudit(ca2)})
	if res := r2.Process(context.Background(), m(), okHandler); !res.Duplicate || res.Reason != "audit" {
		t.Fatalf("restored audit: %+v", res)
	}
}
