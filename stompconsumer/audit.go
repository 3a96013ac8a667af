package stompconsumer

import "github.com/acemq/msgaudit/receiver"

// defaultAudit returns the connection audit used when Config.Audit is nil.
func defaultAudit() (receiver.Auditor, error) {
	return nil, nil
}
