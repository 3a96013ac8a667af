package natsconsumer

import (
	"github.com/acemq/msgaudit/bitsetbin"
	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/msgid"
	"github.com/acemq/msgaudit/receiver"
)

// defaultAudit returns the audit used when Config.Pipeline.Audit is nil:
// a connaudit.Audit with its defaults, owned by the Consumer so it
// survives reconnects. The default keys "<stream>:<sequence>" fit it
// natively: one producer per stream, the stream sequence as its
// sequence, so the bit window absorbs redeliveries in O(1).
func defaultAudit() (receiver.Auditor, error) {
	a, err := connaudit.New(connaudit.Options{})
	if err != nil {
		return nil, err
	}
	return keyAudit{a: receiver.ConnAudit(a), ca: a}, nil
}

// keyAudit audits the keys of the "<producer>:<sequence>" form and lets
// the others (a publisher's Nats-Msg-Id, any string) through as new and
// unrecorded: the pipeline's in-flight and completed tables and its
// durable tier track those. Without it a free-form Nats-Msg-Id would be a
// malformed id to the audit, which dead-letters it when no durable tier
// follows (MemoryOnly).
type keyAudit struct {
	a  receiver.Auditor
	ca *connaudit.Audit
}

// AuditStats reports the audit's counters to the receiver's Metrics.
func (k keyAudit) AuditStats() connaudit.Stats { return k.ca.Stats() }

func (k keyAudit) Check(consumer, destination, id string) (bitsetbin.Sighting, error) {
	if _, _, err := msgid.Split(id); err != nil {
		return bitsetbin.FirstSeen, nil
	}
	return k.a.Check(consumer, destination, id)
}

func (k keyAudit) Rollback(consumer, destination, id string) error {
	if _, _, err := msgid.Split(id); err != nil {
		return nil
	}
	return k.a.Rollback(consumer, destination, id)
}
