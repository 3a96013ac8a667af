// Package pgpooler explains the one failure a transaction-mode connection
// pooler (PgBouncer before 1.21, or with max_prepared_statements = 0)
// causes with pgx's default query mode, for the PostgreSQL backends.
//
// pgx's default mode (cache_statement) prepares each statement once per
// client connection under a name ("stmtcache_…") and executes it by name
// later. A pooler in transaction mode hands each transaction to whichever
// server connection is free, so the name is prepared on one server
// connection and then used on another, where it does not exist (SQLSTATE
// 26000), or prepared again where another client connection already
// prepared it (42P05). Either way the statement fails with an error; no
// answer is ever wrong. The URL parameter default_query_exec_mode=exec
// (unnamed statements, one round trip each) makes pgx work through such a
// pooler.
package pgpooler

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Hint is the advice Explain adds to the error.
const Hint = "a transaction-mode connection pooler (such as PgBouncer) between client and server? pgx's default statement cache needs session pooling or PgBouncer >= 1.21 with max_prepared_statements > 0; otherwise add default_query_exec_mode=exec to the URL"

// Explain returns err with Hint appended when err is a server error about
// one of pgx's cached prepared statements not existing or existing
// already, the signature of a transaction-mode pooler; otherwise it
// returns err unchanged. The result still wraps err.
func Explain(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || (pe.Code != "26000" && pe.Code != "42P05") || !strings.Contains(pe.Message, "stmtcache_") {
		return err
	}
	return fmt.Errorf("%w (%s)", err, Hint)
}
