package mysqlstore_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/mysqlstore"
	"github.com/acemq/msgaudit/idempotency/storetest"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// testURL returns MSGAUDIT_MYSQL_URL, skipping the test when it is unset
// (failing it in CI).
func testURL(t testing.TB) string {
	t.Helper()
	return testenv.Getenv(t, "MSGAUDIT_MYSQL_URL", "the MySQL store tests need a MySQL or MariaDB server")
}

func suffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// openDB opens the test server's database directly.
func openDB(t testing.TB) *sql.DB {
	t.Helper()
	u, err := url.Parse(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg := mysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", u.Host, strings.TrimPrefix(u.Path, "/")
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// newStore opens a store on a table of its own through the URL, dropped at
// cleanup.
func newStore(t *testing.T, o idempotency.Options) (*mysqlstore.Store, string) {
	t.Helper()
	table := "msgaudit_idem_test_" + suffix()
	db := openDB(t)
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + table) })
	s, err := mysqlstore.Open(testwait.Context(t, time.Minute), storetestkit.WithQuery(testURL(t), "msgaudit_table="+table), mysqlstore.Options{Options: o})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, table
}

// TestMySQLBacklog runs the backlog cases, every store on its own table.
func TestMySQLBacklog(t *testing.T) {
	storetest.RunBacklog(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		s, _ := newStore(t, o)
		return s
	}, storetest.Capabilities{ServerTime: true, RenewedLooksNew: true})
}

// TestMySQLConformance runs the stores' conformance suite on MariaDB.
func TestMySQLConformance(t *testing.T) {
	raw := testURL(t)
	var tables sync.Map // store → its table
	storetest.Run(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		s, table := newStore(t, o)
		tables.Store(s, table)
		return s
	}, storetest.Capabilities{
		ServerTime: true,
		Reopen: func(t *testing.T, old idempotency.Store, o idempotency.Options) idempotency.Store {
			table, ok := tables.Load(old)
			if !ok {
				t.Fatalf("Reopen of a store the test did not open: %T", old)
			}
			s, err := mysqlstore.Open(testwait.Context(t, time.Minute), storetestkit.WithQuery(raw, "msgaudit_table="+table.(string)), mysqlstore.Options{Options: o})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			return s
		},
		Unreachable: func(t *testing.T, o idempotency.Options) idempotency.Store {
			cfg := mysql.NewConfig()
			cfg.User, cfg.Net, cfg.Addr, cfg.DBName = "root", "tcp", storetestkit.ClosedAddr(t), "test"
			cfg.Timeout = 5 * time.Second
			conn, err := mysql.NewConnector(cfg)
			if err != nil {
				t.Fatal(err)
			}
			db := sql.OpenDB(conn)
			t.Cleanup(func() { _ = db.Close() })
			s, err := mysqlstore.New(context.Background(), db, mysqlstore.Options{Options: o, Table: "t"})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}

// TestMySQLRefuses: a MyISAM table, a key length over the column and a
// bad table name are refused.
func TestMySQLRefuses(t *testing.T) {
	db := openDB(t)
	ctx := testwait.Context(t, time.Minute)
	table := "msgaudit_idem_myisam_" + suffix()
	if _, err := db.Exec("CREATE TABLE " + table + " (`key` VARBINARY(255) NOT NULL PRIMARY KEY, state VARCHAR(9) NOT NULL, owner VARBINARY(64) NULL, expires_at BIGINT NOT NULL) ENGINE=MyISAM"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + table) })
	s, err := mysqlstore.New(ctx, db, mysqlstore.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); !errors.Is(err, idempotency.ErrOptions) || !strings.Contains(err.Error(), "MyISAM") {
		t.Errorf("Migrate on a MyISAM table = %v; want ErrOptions naming the engine", err)
	}
	if _, err := mysqlstore.New(ctx, db, mysqlstore.Options{Options: idempotency.Options{MaxKeyLength: 1025}}); !errors.Is(err, idempotency.ErrOptions) {
		t.Errorf("New with MaxKeyLength 1025 = %v; want ErrOptions", err)
	}
	for _, name := range []string{"a b", "x`; DROP TABLE y", strings.Repeat("t", 49), "a.b.c"} {
		if _, err := mysqlstore.New(ctx, db, mysqlstore.Options{Table: name}); !errors.Is(err, idempotency.ErrOptions) {
			t.Errorf("New with table %q = %v; want ErrOptions", name, err)
		}
	}
}

// TestMySQLOpenURL: idempotency.Open reaches the backend through the
// mysql scheme, and errors never show the password.
func TestMySQLOpenURL(t *testing.T) {
	ctx := testwait.Context(t, time.Minute)
	table := "msgaudit_idem_url_" + suffix()
	db := openDB(t)
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + table) })
	s, err := idempotency.Open(ctx, storetestkit.WithQuery(testURL(t), "msgaudit_table="+table), idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*mysqlstore.Store); !ok {
		t.Fatalf("idempotency.Open(mysql://...) = %T; want *mysqlstore.Store", s)
	}
	for _, raw := range []string{
		"mysql://app:Sup3rSecret@127.0.0.1:1/test?timeout=1s",
		"mysql://app:Sup3rSecret@127.0.0.1:1/test?bogus_param=%zz",
		"mysql://app:Sup3rSecret@/test",
	} {
		_, err := mysqlstore.Open(ctx, raw, mysqlstore.Options{})
		if err == nil {
			t.Errorf("Open(%q) succeeded", raw)
			continue
		}
		if strings.Contains(err.Error(), "Sup3rSecret") {
			t.Errorf("Open error shows the password: %v", err)
		}
	}
}
