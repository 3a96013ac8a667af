package main

import (
	"context"
	"database/sql"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the ledger's database/sql driver
)

// demoLedger is the demo's effect: an SQLite table with a UNIQUE key, one
// row per applied message. Applying a message a second time fails the
// constraint; the demo then records the extra application in a second
// table, so "applied twice" survives the consumer being killed, and is
// read back by the parent at the end.
type demoLedger struct {
	db *sql.DB
}

// demoLedgerDSN opens path in WAL mode. synchronous=NORMAL survives the
// death of a process (a SIGKILL), not of the machine, which is what the
// demo injects; the file is deleted at exit anyway.
func demoLedgerDSN(path string) string {
	return "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(10000)&_txlock=immediate"
}

func openDemoLedger(path string) (*demoLedger, error) {
	db, err := sql.Open("sqlite", demoLedgerDSN(path))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1) // one writer; Go queues the others instead of SQLite busy-waiting
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS ledger (
		key TEXT NOT NULL UNIQUE, message_id TEXT NOT NULL, applied_at INTEGER NOT NULL);
	CREATE TABLE IF NOT EXISTS ledger_again (
		key TEXT NOT NULL, message_id TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		db.Close()
		return nil, err
	}
	return &demoLedger{db: db}, nil
}

// apply records key's effect, in tx when it is not nil (the inbox's
// transaction), else in a transaction of its own. A second application is
// recorded in ledger_again, in the same transaction, and not returned as
// an error: the effect already happened, retrying cannot undo it.
func (l *demoLedger) apply(ctx context.Context, tx *sql.Tx, key, id string) (err error) {
	if tx == nil {
		if tx, err = l.db.BeginTx(ctx, nil); err != nil {
			return err
		}
		defer func() {
			if err != nil {
				_ = tx.Rollback()
				return
			}
			err = tx.Commit()
		}()
	}
	now := time.Now().UnixNano()
	_, err = tx.ExecContext(ctx, `INSERT INTO ledger (key, message_id, applied_at) VALUES (?, ?, ?)`, key, id, now)
	if err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed") {
		_, err = tx.ExecContext(ctx, `INSERT INTO ledger_again (key, message_id, applied_at) VALUES (?, ?, ?)`, key, id, now)
	}
	return err
}

// count returns the number of distinct keys applied.
func (l *demoLedger) count(ctx context.Context) (int64, error) {
	var n int64
	err := l.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM ledger`).Scan(&n)
	return n, err
}

// twice returns the number of applications beyond the first of a key.
func (l *demoLedger) twice(ctx context.Context) (int64, error) {
	var n int64
	err := l.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM ledger_again`).Scan(&n)
	return n, err
}

// keys returns the applied keys.
func (l *demoLedger) keys(ctx context.Context) (map[string]bool, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT key FROM ledger`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out[k] = true
	}
	return out, rows.Err()
}

func (l *demoLedger) close() { l.db.Close() }
