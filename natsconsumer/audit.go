package natsconsumer

import (
	"strings"

	"github.com/acemq/msgaudit/bitsetbin"
	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/msgid"
	"github.com/acemq/msgaudit/receiver"
)

// defaultAudit returns the audit used when Config.Pipeline.Audit is nil:
// a connaudit.Audit with its defaults, owned by the Consumer so it
// survives reconnects. The derived keys "seq:<stream>:<sequence>" fit it
// natively: one producer per stream, the stream sequence as its
// sequence, so the bit window absorbs redeliveries in O(1).
func defaultAudit() (receiver.Auditor, error) {
	a, err := connaudit.New(connaudit.Options{})
	if err != nil {
		return nil, err
	}
	return keyAudit{a: receiver.ConnAudit(a), ca: a}, nil
}

// keyAudit audits the derived keys ("seq:<stream>:<sequence>") and lets
// the publishers' keys ("id:<Nats-Msg-Id>", any string) through as new
// and unrecorded: the pipeline's in-flight and completed tables and its
// durable tier track those. Without it a free-form Nats-Msg-Id would be a
// malformed id to the audit, which dead-letters it when no durable tier
// follows (MemoryOnly), and a publisher's numbered ids, in no order the
// stream promises, would fall below the bit window.
type keyAudit struct {
	a  receiver.Auditor
	ca *connaudit.Audit
}

// AuditStats reports the audit's counters to the receiver's Metrics.
func (k keyAudit) AuditStats() connaudit.Stats { return k.ca.Stats() }

// Unwrap returns the adapter it wraps, which the receiver binds to its
// logger and clock (its producer-churn warnings).
func (k keyAudit) Unwrap() receiver.Auditor { return k.a }

// derived reports whether id is a key the consumer derived from a stream
// sequence, of the form the audit reads.
func derived(id string) bool {
	if !strings.HasPrefix(id, seqDomain+":") {
		return false
	}
	_, _, err := msgid.Split(id)
	return err == nil
}

func (k keyAudit) Check(consumer, destination, id string) (bitsetbin.Sighting, error) {
	if !derived(id) {
		return bitsetbin.FirstSeen, nil
	}
	return k.a.Check(consumer, destination, id)
}

func (k keyAudit) Rollback(consumer, destination, id string) error {
	if !derived(id) {
		return nil
	}
	return k.a.Rollback(consumer, destination, id)
}
