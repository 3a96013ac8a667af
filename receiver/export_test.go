package receiver

import (
	"time"

	"github.com/acemq/msgaudit/idempotency"
)

// SetChurnInterval sets the shortest interval between two producer-churn
// warnings of a ConnAudit adapter (one minute otherwise), so that tests on
// a manual clock need not advance it by minutes.
func SetChurnInterval(a Auditor, d time.Duration) {
	c := a.(*connAuditor)
	c.churn.interval = d
	c.churn.poll = min(churnPoll, d)
	c.churn.next.Store(int64(c.churn.poll))
}

// InFlightCount returns the number of deliveries r's memory tier holds in
// flight.
func InFlightCount(r *Receiver) int { return r.memory.inFlightCount() }

// KeyState returns what r's memory tier knows about m's key: "in-flight",
// "done" or "unknown".
func KeyState(r *Receiver, m *Message) string { return r.memory.state(m) }

// SelectorNames returns the names of r's selectors in the order Process
// runs them.
func SelectorNames(r *Receiver) []string {
	names := make([]string, len(r.selectors))
	for i, s := range r.selectors {
		names[i] = s.Name()
	}
	return names
}

// MaxKeyBytes and LogKey expose maxKeyBytes and logKey to the tests.
const MaxKeyBytes = maxKeyBytes

// LogKey is logKey.
func LogKey(key string) string { return logKey(key) }

// StoreNamespace returns the store namespace of m under the namespace ns
// (Config.Namespace).
func StoreNamespace(ns string, m *Message) string {
	mem, err := idempotency.NewMemory(idempotency.Options{})
	if err != nil {
		panic(err)
	}
	s, err := newStoreSelector(mem, storeOptions{Namespace: ns})
	if err != nil {
		panic(err)
	}
	return s.Key(m).Namespace
}
