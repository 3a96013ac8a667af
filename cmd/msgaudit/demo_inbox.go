package main

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/receiver"
)

// demoInboxTable is the inbox's table, in the ledger's database.
const demoInboxTable = "demo_inbox"

// setupInbox puts the transactional inbox in the ledger's own database
// after the audit: the handler applies the ledger row in the inbox's
// transaction, so the row and the key commit together or not at all.
func (c *demoConsumer) setupInbox(ctx context.Context, rc *receiver.Config) error {
	// Each running delivery holds one connection from the inbox's Select
	// to its settlement.
	c.ledger.db.SetMaxOpenConns(c.cfg.Workers + 1)
	ib, err := inbox.New(ctx, c.ledger.db, inbox.Options{Dialect: inbox.SQLite, Table: demoInboxTable, Metrics: c.metrics})
	if err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	rc.Inbox = ib
	c.handler = inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		key, err := c.fault(m)
		if err != nil || key == "" {
			return err
		}
		return c.ledger.apply(ctx, tx, key, m.Key)
	})
	return nil
}
