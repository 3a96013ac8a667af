package sqlitestore

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/acemq/msgaudit/idempotency"
)

// Synchronous is the durability of a commit: the SQLite synchronous
// setting the store's connection runs with (the file is always in WAL
// mode). See the package documentation for what each guarantees.
type Synchronous uint8

const (
	// SyncNormal (the default) syncs the WAL to disk only at checkpoints:
	// a commit survives a crash of the process (even SIGKILL), but a power
	// loss or an operating-system crash may undo the last commits.
	SyncNormal Synchronous = iota + 1
	// SyncFull syncs the WAL at every commit: a commit survives a power
	// loss too, at the cost of one disk sync per transaction.
	SyncFull
)

// String returns "normal" or "full", the value of the synchronous
// parameter of a path or URL.
func (m Synchronous) String() string {
	switch m {
	case SyncNormal:
		return "normal"
	case SyncFull:
		return "full"
	}
	return fmt.Sprintf("synchronous(%d)", uint8(m))
}

// pragma is the modernc.org/sqlite DSN parameter that sets m.
func (m Synchronous) pragma() string { return "synchronous(" + strings.ToUpper(m.String()) + ")" }

// parseSynchronous reads a synchronous value: "normal" or "full" in any
// case, or SQLite's numbers for them (1, 2).
func parseSynchronous(v string) (Synchronous, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "normal", "1":
		return SyncNormal, nil
	case "full", "2":
		return SyncFull, nil
	}
	return 0, fmt.Errorf("idempotency: sqlite: synchronous=%q: want normal or full", v)
}

// Options configures a SQLite store. The zero value means every default.
type Options struct {
	// Options are the settings every store shares.
	idempotency.Options
	// Synchronous is the durability of a commit (see the package
	// documentation). Zero means SyncNormal, unless the path sets it; a
	// synchronous parameter in the path must agree with a non-zero value.
	Synchronous Synchronous
}

// dsn builds the modernc.org/sqlite DSN for path (a file name, optionally
// followed by "?" and parameters) and returns it with the synchronous
// setting the connection will run with. The path's parameters are
// modernc.org/sqlite's, plus synchronous=normal|full; a pragma the path
// sets replaces the store's default for it (journal_mode WAL,
// busy_timeout 5000 ms). The synchronous setting may come from
// Options.Synchronous, from synchronous= or from _pragma=synchronous(...);
// values other than normal and full, or sources that disagree, are an
// error.
func dsn(path string, opts Options) (string, string, Synchronous, error) {
	file, query, _ := strings.Cut(path, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", "", 0, fmt.Errorf("idempotency: sqlite %s: parameters: %w", file, err)
	}
	sync := opts.Synchronous
	if sync != 0 && sync != SyncNormal && sync != SyncFull {
		return "", "", 0, fmt.Errorf("idempotency: sqlite: %v: want SyncNormal or SyncFull", sync)
	}
	set := func(v, from string) error {
		m, err := parseSynchronous(v)
		if err != nil {
			return err
		}
		if sync != 0 && sync != m {
			return fmt.Errorf("idempotency: sqlite: %s asks for synchronous %s, but %s was already asked for", from, m, sync)
		}
		sync = m
		return nil
	}
	for _, v := range q["synchronous"] {
		if err := set(v, "synchronous="+v); err != nil {
			return "", "", 0, err
		}
	}
	delete(q, "synchronous")
	var pragmas []string
	named := map[string]bool{}
	for _, p := range q["_pragma"] {
		name, arg, _ := strings.Cut(p, "(")
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "synchronous" {
			if err := set(strings.TrimSuffix(arg, ")"), "_pragma="+p); err != nil {
				return "", "", 0, err
			}
			continue
		}
		named[name] = true
		pragmas = append(pragmas, p)
	}
	if sync == 0 {
		sync = SyncNormal
	}
	if !named["journal_mode"] {
		pragmas = append(pragmas, "journal_mode(WAL)")
	}
	if !named["busy_timeout"] {
		pragmas = append(pragmas, "busy_timeout(5000)")
	}
	q["_pragma"] = append(pragmas, sync.pragma())
	return file, file + "?" + q.Encode(), sync, nil
}
