// Package pgtable holds what the PostgreSQL idempotency store, metadata
// store and inbox share about their table: the schemas they refuse by
// name, and the check of the table a name resolved to once it exists.
// It imports no driver; each caller runs Query its own way.
package pgtable

import (
	"fmt"
	"regexp"
)

// TempSchema matches the schemas private to a session (pg_temp, its
// numbered forms, their TOAST schemas), in any case: a table there is not
// shared by the connections of a pool, nor by two consumers, and goes
// with its connection.
var TempSchema = regexp.MustCompile(`(?i)^pg_(toast_)?temp(_[0-9]+)?$`)

// Query returns the schema and the persistence (pg_class.relpersistence:
// p permanent, u unlogged, t temporary) of the table that $1, the table's
// name as the statements write it (quoted, schema optional), resolves to
// on the connection that runs it, through that connection's search_path;
// no row when it resolves to nothing. Run it on the connection, and in
// the transaction, that created the table.
const Query = `SELECT n.nspname::text, c.relpersistence::text
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = pg_catalog.to_regclass($1)`

// Check returns an error unless the table named table (for messages),
// found by Query in schema with persistence, is an ordinary permanent
// table. A temporary table (an unqualified name resolved through a
// search_path that starts with pg_temp) holds rows private to one
// connection that vanish with it; an unlogged table is emptied by crash
// recovery and is not copied to standbys. Either way recorded keys are
// lost and a redelivery is applied again. found is false when Query
// returned no row.
func Check(table string, found bool, schema, persistence string) error {
	switch {
	case !found:
		return fmt.Errorf("table %s does not resolve to a table once created (check search_path)", table)
	case persistence == "t":
		return fmt.Errorf("table %s resolved to %s, a temporary schema (check search_path, which URL options can set): its rows would belong to one connection and vanish with it, and a redelivery on another connection or after a restart would be applied again", table, schema)
	case persistence == "u":
		return fmt.Errorf("table %s (schema %s) is unlogged: PostgreSQL empties it after a crash and does not copy it to standbys, so recorded keys would be lost; make it logged (ALTER TABLE ... SET LOGGED)", table, schema)
	case persistence != "p":
		return fmt.Errorf("table %s (schema %s) has persistence %q, want a permanent table", table, schema, persistence)
	}
	return nil
}
