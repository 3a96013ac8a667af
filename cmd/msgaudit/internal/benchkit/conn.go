package benchkit

import (
	"github.com/acemq/msgaudit/audit"
	"github.com/acemq/msgaudit/connaudit"
)

// benchDestination is the one queue the connection-audit target checks.
var benchDestination = connaudit.Destination{Kind: connaudit.Queue, Name: "bench"}

const benchConsumer = "ID:host-41234-1700000000000-1:1:1:1"

type connTarget struct{ a *connaudit.Audit }

func newConnAudit(o *Ops) (Target, error) {
	a, err := connaudit.New(connaudit.Options{Depth: o.Depth, MaxProducers: o.Producers})
	return connTarget{a}, err
}

func (t connTarget) Pass(ops []Op) int {
	n := 0
	for i := range ops {
		if v, _ := t.a.Check(benchConsumer, benchDestination, ops[i].ID); v == audit.Duplicate {
			n++
		}
	}
	return n
}

func (t connTarget) Check(op *Op) bool {
	v, _ := t.a.Check(benchConsumer, benchDestination, op.ID)
	return v == audit.Duplicate
}

var _ ConcurrentTarget = connTarget{}
