//go:build !connready

package benchkit

import "errors"

func newConnAudit(o *Ops) (Target, error) { return nil, errors.New("connaudit not ready") }
