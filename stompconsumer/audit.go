package stompconsumer

import (
	"strings"

	"github.com/acemq/msgaudit/bitsetbin"
	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/internal/outboxid"
	"github.com/acemq/msgaudit/receiver"
)

// defaultAudit returns the connection audit used when Config.Audit is nil:
// a connaudit.Audit with its defaults (depth 2048, 64 producers, 1000
// destinations and 1000 topic consumers), owned by the Consumer so it
// survives reconnects.
func defaultAudit() (receiver.Auditor, error) {
	a, err := connaudit.New(connaudit.Options{})
	if err != nil {
		return nil, err
	}
	return outboxAudit{a: receiver.ConnAudit(a), ca: a}, nil
}

// outboxKeyPrefix starts every key derived from an outbox id.
var outboxKeyPrefix = outboxid.Key("")

// outboxAudit audits the broker's message-ids and lets the outbox keys
// ("outbox:<id>", random or hashed ids in no producer sequence) through
// as new and unrecorded: the pipeline's in-flight and completed tables and
// its durable tier track those. To the audit they would be malformed ids,
// dead-lettered when no durable tier follows (MemoryOnly).
type outboxAudit struct {
	a  receiver.Auditor
	ca *connaudit.Audit
}

// AuditStats reports the audit's counters to the receiver's Metrics.
func (k outboxAudit) AuditStats() connaudit.Stats { return k.ca.Stats() }

// Unwrap returns the adapter it wraps, which the receiver binds to its
// logger and clock (its producer-churn warnings).
func (k outboxAudit) Unwrap() receiver.Auditor { return k.a }

func (k outboxAudit) Check(consumer, destination, id string) (bitsetbin.Sighting, error) {
	if strings.HasPrefix(id, outboxKeyPrefix) {
		return bitsetbin.FirstSeen, nil
	}
	return k.a.Check(consumer, destination, id)
}

func (k outboxAudit) Rollback(consumer, destination, id string) error {
	if strings.HasPrefix(id, outboxKeyPrefix) {
		return nil
	}
	return k.a.Rollback(consumer, destination, id)
}
