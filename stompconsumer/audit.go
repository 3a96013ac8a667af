package stompconsumer

import (
	"github.com/acemq/msgaudit/connaudit"
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
	return receiver.ConnAudit(a), nil
}
