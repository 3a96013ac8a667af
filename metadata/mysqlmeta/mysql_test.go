package mysqlmeta_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/acemq/msgaudit/internal/mysqlurl"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/metadata"
	"github.com/acemq/msgaudit/metadata/mysqlmeta"
	"github.com/acemq/msgaudit/metadata/storetest"
)

func testURL(t testing.TB) string {
	t.Helper()
	return testenv.Getenv(t, "MSGAUDIT_MYSQL_URL", "the MySQL metadata tests need a MySQL or MariaDB server")
}

func openDB(t testing.TB) *sql.DB {
	t.Helper()
	cfg, err := mysqlurl.Config(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// newTable returns a table name of the test's own, dropped when it ends.
func newTable(t testing.TB, db *sql.DB) string {
	t.Helper()
	table := "mdtest_" + storetestkit.Hex(6)
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + table) })
	return table
}

// TestConformance runs the metadata conformance suite on MariaDB; every
// reopen is a new Store that migrates again (idempotent).
func TestConformance(t *testing.T) {
	db := openDB(t)
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		table := newTable(t, db)
		return func(t *testing.T) metadata.Store {
			s, err := mysqlmeta.New(context.Background(), db, mysqlmeta.Options{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			return s
		}
	})
}

// TestOpenURL: metadata.Open reaches the backend through the mysql
// scheme with the table from msgaudit_table; keys that a collation would
// fold stay apart; a MyISAM table and bad names are refused; errors never
// show the password.
func TestOpenURL(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	table := newTable(t, db)
	s, err := metadata.Open(ctx, storetestkit.WithQuery(testURL(t), "msgaudit_table="+table))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range []string{"k", "K", "k "} {
		if _, stored, err := s.PutIfAbsent(ctx, k, "v-"+k); err != nil || !stored {
			t.Fatalf("PutIfAbsent(%q) = %v, %v; want stored", k, stored, err)
		}
	}
	myisam := newTable(t, db)
	if _, err := db.Exec("CREATE TABLE " + myisam + " (k VARBINARY(512) NOT NULL PRIMARY KEY, v MEDIUMBLOB NOT NULL, updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=MyISAM"); err != nil {
		t.Fatal(err)
	}
	if _, err := metadata.Open(ctx, storetestkit.WithQuery(testURL(t), "msgaudit_table="+myisam)); !errors.Is(err, metadata.ErrInvalidName) || !strings.Contains(err.Error(), "MyISAM") {
		t.Errorf("Open on a MyISAM table = %v; want ErrInvalidName naming the engine", err)
	}
	for _, name := range []string{"a b", "x`; DROP TABLE y", "a.b.c"} {
		if _, err := mysqlmeta.New(ctx, db, mysqlmeta.Options{Table: name}); !errors.Is(err, metadata.ErrInvalidName) {
			t.Errorf("New with table %q = %v; want ErrInvalidName", name, err)
		}
	}
	for _, raw := range []string{"mysql://app:Sup3rSecret@127.0.0.1:1/test?timeout=1s", "mysql://app:Sup3rSecret@h/test?timeout=bad"} {
		_, err := metadata.Open(ctx, raw)
		if err == nil || strings.Contains(err.Error(), "Sup3rSecret") {
			t.Errorf("Open(%q) = %v; want an error without the password", raw, err)
		}
	}
}
