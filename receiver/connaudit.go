package receiver

import (
	"strings"
	"sync"

	"github.com/acemq/msgaudit/bitsetbin"
	"github.com/acemq/msgaudit/connaudit"
)

// maxCachedDestinations bounds ConnAudit's cache of parsed destination
// names; names beyond it are parsed on every call.
const maxCachedDestinations = 4096

// ConnAudit adapts a connection audit to Auditor. Destinations are parsed
// with connaudit.ParseDestination ("/queue/a", "/topic/b", ...); a name
// without a leading '/' (an AMQP queue name) is a queue. An unparseable
// destination is an error, which the memory selector treats like an
// unparseable id (durable tier only, or dead-letter without one).
func ConnAudit(a *connaudit.Audit) Auditor {
	return &connAuditor{a: a}
}

type connAuditor struct {
	a     *connaudit.Audit
	mu    sync.RWMutex
	dests map[string]connaudit.Destination
}

func (c *connAuditor) dest(s string) (connaudit.Destination, error) {
	c.mu.RLock()
	d, ok := c.dests[s]
	c.mu.RUnlock()
	if ok {
		return d, nil
	}
	var err error
	switch {
	case s == "":
		// The zero destination: connaudit records nothing for it.
	case !strings.HasPrefix(s, "/"):
		d = connaudit.Destination{Kind: connaudit.Queue, Name: s}
	default:
		if d, err = connaudit.ParseDestination(s); err != nil {
			return d, err
		}
	}
	c.mu.Lock()
	if c.dests == nil {
		c.dests = make(map[string]connaudit.Destination)
	}
	if len(c.dests) < maxCachedDestinations {
		c.dests[s] = d
	}
	c.mu.Unlock()
	return d, nil
}

// Check records id in the audit of (consumer, destination).
func (c *connAuditor) Check(consumer, destination, id string) (bitsetbin.Verdict, error) {
	d, err := c.dest(destination)
	if err != nil {
		return bitsetbin.TooOld, err
	}
	return c.a.Check(consumer, d, id)
}

// Rollback clears id in the audit of (consumer, destination).
func (c *connAuditor) Rollback(consumer, destination, id string) error {
	d, err := c.dest(destination)
	if err != nil {
		return err
	}
	return c.a.Rollback(consumer, d, id)
}
