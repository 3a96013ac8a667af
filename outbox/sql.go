package outbox

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/inboxsql"
)

// statements is the outbox's SQL for one table in one dialect. Times are
// Unix microseconds of the writer's clock. A row's state is 0 pending, 1
// sent, 2 parked.
type statements struct {
	dialect inbox.Dialect
	table   string
	name    string // unquoted
	schema  string // unquoted, "" when unqualified
	probe   string
	create  []string
	// lockKey serialises the sends of one order key until commit, so the
	// seq order of a key's rows is their commit order ($1 the key); ""
	// on SQLite, whose writers are serialised anyway.
	lockKey string
	// insert takes id, destination, headers, body, order key (NULL for
	// none), created.
	insert string
	// claim selects up to $2 rows due by $1, at most one per order key
	// (its oldest pending), skipping rows another relay is claiming.
	claim string
	// backlog returns pending rows, the oldest pending creation time,
	// the rows kept, the oldest sent row's time.
	backlog string
	// purge deletes up to $2 rows sent before $1.
	purge string
	// parked counts the parked rows.
	parked string
}

// p returns placeholder n (from 1) in the dialect.
func (s *statements) p(n int) string {
	if s.dialect == inbox.PostgreSQL {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// in returns " IN (…)" with placeholders first..first+n-1.
func (s *statements) in(first, n int) string {
	var b strings.Builder
	b.WriteString(" IN (")
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s.p(first + i))
	}
	b.WriteByte(')')
	return b.String()
}

// DefaultTable is the outbox table's name when Options.Table is "".
const defaultTable = "msgaudit_outbox"

func build(d inbox.Dialect, table string) (*statements, error) {
	if table == "" {
		table = defaultTable
	}
	kind := map[inbox.Dialect]inboxsql.Kind{inbox.PostgreSQL: inboxsql.Postgres, inbox.SQLite: inboxsql.SQLite, inbox.MySQL: inboxsql.MySQL}[d]
	t, q, schema, name, err := inboxsql.Table(table, kind)
	if err != nil {
		return nil, err
	}
	s := &statements{dialect: d, table: t, name: name, schema: schema}
	idx := func(suffix string) string { return q(name + suffix) }
	pending := ` WHERE o.state = 0 AND o.due <= ` + s.p(1) + `
  AND (o.order_key IS NULL OR NOT EXISTS (SELECT 1 FROM ` + t + ` p WHERE p.order_key = o.order_key AND p.state = 0 AND p.seq < o.seq))
ORDER BY o.seq LIMIT ` + s.p(2)
	size := "length(o.body)"
	if d == inbox.PostgreSQL {
		size = "octet_length(o.body)"
	}
	// The bodies come in a second query (bodies), of the rows a claim
	// keeps within its byte budget.
	cols := `SELECT o.seq, o.id, o.destination, o.headers, ` + size + `, o.order_key, o.attempts FROM ` + t + ` o`
	s.purge = `DELETE FROM ` + t + ` WHERE seq IN (SELECT seq FROM ` + t + ` WHERE state = 1 AND done < ` + s.p(1) + ` ORDER BY done LIMIT ` + s.p(2) + `)`
	s.parked = `SELECT count(*) FROM ` + t + ` WHERE state = 2`
	switch d {
	case inbox.PostgreSQL:
		s.probe = `SELECT current_setting('server_version_num')`
		s.create = []string{
			`CREATE TABLE IF NOT EXISTS ` + t + ` (
	seq         bigserial PRIMARY KEY,
	id          text      NOT NULL UNIQUE,
	destination text      NOT NULL,
	headers     text      NOT NULL,
	body        bytea     NOT NULL,
	order_key   text,
	created     bigint    NOT NULL,
	state       smallint  NOT NULL DEFAULT 0,
	due         bigint    NOT NULL DEFAULT 0,
	lease       text,
	attempts    integer   NOT NULL DEFAULT 0,
	done        bigint,
	reason      text
)`,
			`CREATE INDEX IF NOT EXISTS ` + idx("_pending_idx") + ` ON ` + t + ` (seq) WHERE state = 0`,
			`CREATE INDEX IF NOT EXISTS ` + idx("_key_idx") + ` ON ` + t + ` (order_key, seq) WHERE state = 0 AND order_key IS NOT NULL`,
			`CREATE INDEX IF NOT EXISTS ` + idx("_done_idx") + ` ON ` + t + ` (state, done)`,
		}
		// Two-key advisory locks: the first key, a hash of the table,
		// keeps them apart from one-key advisory locks and from other
		// outbox tables.
		s.lockKey = `SELECT pg_advisory_xact_lock(hashtext('msgaudit outbox ` + t + `'), hashtext($1))`
		s.insert = `INSERT INTO ` + t + ` (id, destination, headers, body, order_key, created) VALUES ($1, $2, $3, $4, $5, $6)`
		s.claim = cols + pending + ` FOR UPDATE OF o SKIP LOCKED`
		s.backlog = `SELECT (SELECT count(*) FROM ` + t + ` WHERE state = 0),
  (SELECT min(created) FROM ` + t + ` WHERE state = 0),
  (SELECT CASE WHEN c.reltuples > 0 THEN c.reltuples::bigint ELSE (SELECT count(*) FROM (SELECT 1 FROM ` + t + ` LIMIT 10000) n) END FROM pg_class c WHERE c.oid = $1::regclass),
  (SELECT min(done) FROM ` + t + ` WHERE state = 1)`
	case inbox.MySQL:
		s.probe = `SELECT @@version`
		s.create = []string{
			`CREATE TABLE IF NOT EXISTS ` + t + ` (
	seq         BIGINT          NOT NULL AUTO_INCREMENT PRIMARY KEY,
	id          VARBINARY(128)  NOT NULL,
	destination VARBINARY(1024) NOT NULL,
	headers     MEDIUMBLOB      NOT NULL,
	body        LONGBLOB        NOT NULL,
	order_key   VARBINARY(1024),
	created     BIGINT          NOT NULL,
	state       TINYINT         NOT NULL DEFAULT 0,
	due         BIGINT          NOT NULL DEFAULT 0,
	lease       VARBINARY(64),
	attempts    INT             NOT NULL DEFAULT 0,
	done        BIGINT,
	reason      BLOB,
	UNIQUE KEY ` + idx("_id_idx") + ` (id),
	KEY ` + idx("_pending_idx") + ` (state, seq),
	KEY ` + idx("_key_idx") + ` (order_key, state, seq),
	KEY ` + idx("_done_idx") + ` (state, done)
) ENGINE=InnoDB`,
			`CREATE TABLE IF NOT EXISTS ` + q(name+"_keys") + ` (
	order_key VARBINARY(1024) NOT NULL PRIMARY KEY,
	sends     BIGINT          NOT NULL
) ENGINE=InnoDB`,
		}
		if schema != "" {
			s.create[1] = strings.Replace(s.create[1], q(name+"_keys"), q(schema)+"."+q(name+"_keys"), 1)
		}
		keys := q(name + "_keys")
		if schema != "" {
			keys = q(schema) + "." + keys
		}
		// The row lock of the key's row is held until commit.
		s.lockKey = `INSERT INTO ` + keys + ` (order_key, sends) VALUES (?, 1) ON DUPLICATE KEY UPDATE sends = sends + 1`
		s.insert = `INSERT INTO ` + t + ` (id, destination, headers, body, order_key, created) VALUES (?, ?, ?, ?, ?, ?)`
		s.claim = cols + pending + ` FOR UPDATE SKIP LOCKED`
		s.purge = `DELETE FROM ` + t + ` WHERE state = 1 AND done < ? ORDER BY done LIMIT ?`
		s.backlog = `SELECT (SELECT count(*) FROM ` + t + ` WHERE state = 0),
  (SELECT min(created) FROM ` + t + ` WHERE state = 0),
  (SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ?),
  (SELECT min(done) FROM ` + t + ` WHERE state = 1)`
	case inbox.SQLite:
		sidx := func(suffix string) string {
			if schema != "" {
				return q(schema) + "." + idx(suffix)
			}
			return idx(suffix)
		}
		s.probe = `SELECT sqlite_version()`
		s.create = []string{
			`CREATE TABLE IF NOT EXISTS ` + t + ` (
	seq         INTEGER PRIMARY KEY AUTOINCREMENT,
	id          TEXT    NOT NULL UNIQUE,
	destination TEXT    NOT NULL,
	headers     TEXT    NOT NULL,
	body        BLOB    NOT NULL,
	order_key   TEXT,
	created     INTEGER NOT NULL,
	state       INTEGER NOT NULL DEFAULT 0,
	due         INTEGER NOT NULL DEFAULT 0,
	lease       TEXT,
	attempts    INTEGER NOT NULL DEFAULT 0,
	done        INTEGER,
	reason      TEXT
)`,
			`CREATE INDEX IF NOT EXISTS ` + sidx("_pending_idx") + ` ON ` + q(name) + ` (state, seq)`,
			`CREATE INDEX IF NOT EXISTS ` + sidx("_key_idx") + ` ON ` + q(name) + ` (order_key, state, seq)`,
			`CREATE INDEX IF NOT EXISTS ` + sidx("_done_idx") + ` ON ` + q(name) + ` (state, done)`,
		}
		s.insert = `INSERT INTO ` + t + ` (id, destination, headers, body, order_key, created) VALUES (?, ?, ?, ?, ?, ?)`
		s.claim = cols + pending
		s.backlog = `SELECT (SELECT count(*) FROM ` + t + ` WHERE state = 0),
  (SELECT min(created) FROM ` + t + ` WHERE state = 0),
  (SELECT max(seq) - min(seq) + 1 FROM ` + t + `),
  (SELECT min(done) FROM ` + t + ` WHERE state = 1)`
	default:
		return nil, fmt.Errorf("unknown dialect %v", d)
	}
	return s, nil
}

// bodies returns (seq, body) of n rows.
func (s *statements) bodies(n int) string {
	return `SELECT seq, body FROM ` + s.table + ` WHERE seq` + s.in(1, n)
}

// lease sets a claimed row's lease and due time: $1 the lease token, $2
// the time another relay may claim it, then n seqs.
func (s *statements) lease(n int) string {
	return `UPDATE ` + s.table + ` SET lease = ` + s.p(1) + `, due = ` + s.p(2) + ` WHERE state = 0 AND seq` + s.in(3, n)
}

// sent marks n rows sent: $1 the time, $2 the lease token, then n seqs.
func (s *statements) sent(n int) string {
	return `UPDATE ` + s.table + ` SET state = 1, done = ` + s.p(1) + `, lease = NULL WHERE lease = ` + s.p(2) + ` AND seq` + s.in(3, n)
}

// retry releases a row for a later attempt: due, reason, attempts to add,
// seq, lease token.
func (s *statements) retry() string {
	return `UPDATE ` + s.table + ` SET due = ` + s.p(1) + `, reason = ` + s.p(2) + `, attempts = attempts + ` + s.p(3) +
		`, lease = NULL WHERE seq = ` + s.p(4) + ` AND lease = ` + s.p(5)
}

// park parks a row: time, reason, seq, lease token.
func (s *statements) park() string {
	return `UPDATE ` + s.table + ` SET state = 2, done = ` + s.p(1) + `, reason = ` + s.p(2) +
		`, attempts = attempts + 1, lease = NULL WHERE seq = ` + s.p(3) + ` AND lease = ` + s.p(4)
}
