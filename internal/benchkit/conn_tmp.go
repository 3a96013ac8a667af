//go:build !connready

package benchkit

// connReady is false until the connaudit package lands.
const connReady = false

func newConnAudit(*Ops) (Target, error) { panic("unreachable") }
