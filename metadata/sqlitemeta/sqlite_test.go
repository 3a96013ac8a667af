package sqlitemeta_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/metadata"
	"github.com/acemq/msgaudit/metadata/sqlitemeta"
	"github.com/acemq/msgaudit/metadata/storetest"
)

// TestConformance runs the metadata conformance suite on a database file;
// every reopen is a new Store on the same file, as another process would
// have.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		path := filepath.Join(t.TempDir(), "meta.db")
		return func(t *testing.T) metadata.Store {
			s, err := sqlitemeta.Open(context.Background(), path, sqlitemeta.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	})
}

// TestNewArguments: a nil database or an empty path is refused at
// construction.
func TestNewArguments(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "1abc", "a.b.c", "a b", `a"b`, strings.Repeat("x", 64), "t"} {
		if _, err := sqlitemeta.New(context.Background(), nil, sqlitemeta.Options{Table: name}); err == nil {
			t.Errorf("sqlitemeta.New(nil db, table %q) succeeded", name)
		}
	}
	if _, err := sqlitemeta.Open(context.Background(), "", sqlitemeta.Options{}); err == nil {
		t.Error("sqlitemeta.Open(empty path) succeeded")
	}
}

func BenchmarkStore(b *testing.B) {
	ctx := context.Background()
	open := func(b *testing.B) metadata.Store {
		s, err := sqlitemeta.Open(ctx, filepath.Join(b.TempDir(), "bench.db"), sqlitemeta.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	storetest.Bench(b, open)
}

// TestTemporarySchemaRefused: a table in SQLite's temporary schema holds
// rows private to one connection that vanish when it closes, so a value
// written there is gone on reopen. New, Open's URL form and every spelling
// of the schema are refused with ErrInvalidName; the main schema is not.
func TestTemporarySchemaRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sql.Open("sqlite", filepath.Join(dir, "db.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, table := range []string{"temp.meta", "TEMP.meta", "Temp.meta", "temporary.meta", "TEMPORARY.meta"} {
		if _, err := sqlitemeta.New(context.Background(), db, sqlitemeta.Options{Table: table}); !errors.Is(err, metadata.ErrInvalidName) || !strings.Contains(err.Error(), "temporary schema") {
			t.Errorf("New(db, %q) = %v, want ErrInvalidName naming the temporary schema", table, err)
		}
		u := "sqlite:" + filepath.Join(dir, "u.db") + "?msgaudit_table=" + table
		if s, err := metadata.Open(ctx, u); !errors.Is(err, metadata.ErrInvalidName) {
			if err == nil {
				s.Close()
			}
			t.Errorf("metadata.Open(%q) = %v, want ErrInvalidName", u, err)
		}
	}
	// The main schema, named or not, keeps its values across a reopen.
	for i, table := range []string{"main.meta", "meta", "templates"} {
		u := "sqlite:" + filepath.Join(dir, fmt.Sprint("k", i, ".db")) + "?msgaudit_table=" + table
		for round := range 2 {
			s, err := metadata.Open(ctx, u)
			if err != nil {
				t.Fatalf("metadata.Open(%q): %v", u, err)
			}
			if round == 0 {
				if _, ok, err := s.PutIfAbsent(ctx, "k", "v"); err != nil || !ok {
					t.Fatalf("%s: PutIfAbsent = %v, %v", table, ok, err)
				}
			} else if v, ok, err := s.Get(ctx, "k"); err != nil || !ok || v != "v" {
				t.Fatalf("%s: after reopen Get = %q, %v, %v; want the value written", table, v, ok, err)
			}
			s.Close()
		}
	}
}

// TestTemporaryTableDoesNotShadow: on a database the application shares,
// a temporary table with the store's (unqualified) name must not take the
// store's rows: they go to the main schema and are there for every
// connection and after a reopen.
func TestTemporaryTableDoesNotShadow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "shared.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // the temporary table lives on this one connection
	if _, err := db.ExecContext(ctx, `CREATE TEMP TABLE meta (key BLOB PRIMARY KEY, value BLOB NOT NULL, updated_at INTEGER NOT NULL) WITHOUT ROWID`); err != nil {
		t.Fatal(err)
	}
	s, err := sqlitemeta.New(context.Background(), db, sqlitemeta.Options{Table: "meta"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.PutIfAbsent(ctx, "k", "v"); err != nil || !ok {
		t.Fatalf("PutIfAbsent = %v, %v", ok, err)
	}
	db.Close()
	again, err := metadata.Open(ctx, "sqlite:"+path+"?msgaudit_table=meta")
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if v, ok, err := again.Get(ctx, "k"); err != nil || !ok || v != "v" {
		t.Fatalf("after reopen Get = %q, %v, %v; the value went to the temporary table", v, ok, err)
	}
}

// TestInMemoryRefused: a database without a file (":memory:") loses its
// values with the connection, and every pooled connection has its own;
// Open and Migrate refuse it with ErrInvalidName.
func TestInMemoryRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, path := range []string{":memory:"} {
		if s, err := sqlitemeta.Open(ctx, path, sqlitemeta.Options{}); !errors.Is(err, metadata.ErrInvalidName) || !strings.Contains(err.Error(), "in memory") {
			if err == nil {
				s.Close()
			}
			t.Errorf("Open(%q) = %v; want ErrInvalidName naming the database in memory", path, err)
		}
	}
	db, err := sql.Open("sqlite", "file::memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := sqlitemeta.New(context.Background(), db, sqlitemeta.Options{Table: "meta"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); !errors.Is(err, metadata.ErrInvalidName) {
		t.Errorf("Migrate on an in-memory database = %v; want ErrInvalidName", err)
	}
}
