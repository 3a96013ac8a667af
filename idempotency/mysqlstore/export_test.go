package mysqlstore

// PurgeSQL gives the external tests the statement of one purge batch
// (its parameter is the batch size).
func PurgeSQL(s *Store) string { return s.sqlPurge }

// IsConfirmedSQL gives the external tests the IsConfirmed statement (its
// parameter is the storage key).
func IsConfirmedSQL(s *Store) string { return s.sqlIsConfirmed }

// PurgeDone is closed once s's automatic purge goroutine has returned.
func PurgeDone(s *Store) <-chan struct{} { return s.core.PurgeDone() }

// BacklogSQL gives the external tests Backlog's statement and its
// arguments.
func BacklogSQL(s *Store) (string, []any) {
	return s.sqlBacklog, []any{s.schema, s.name, s.claimUS, s.claimUS, s.retainUS, s.claimUS}
}
