// Package mysqlstore is the MySQL and MariaDB backend of package
// idempotency (github.com/go-sql-driver/mysql): a store on one InnoDB
// table, shared by several consumer machines and kept with the server's
// clock.
//
// Importing it registers the "mysql" scheme with idempotency.Open:
//
//	import _ "github.com/acemq/msgaudit/idempotency/mysqlstore"
//
//	s, err := idempotency.Open(ctx, "mysql://app:secret@db:3306/app", idempotency.Options{})
//
// New builds a store on a *sql.DB the caller opened; Open connects from a
// URL. Keys are stored as bytes (VARBINARY), so two keys that a utf8mb4
// collation would take for one (case, trailing spaces) stay two.
//
// Like every store outside the handler's database, it cannot commit the
// handler's effect and its confirmation together: a consumer killed
// between the two applies the message again once the claim lapses. For
// effects in MySQL itself, use the transactional inbox (inbox.MySQL).
package mysqlstore

import "github.com/acemq/msgaudit/idempotency"

func init() { idempotency.Register("mysql", openURL) }
