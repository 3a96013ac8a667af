package inboxsql

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/claimkit"
	"github.com/acemq/msgaudit/receiver"
	"pgregory.net/rapid"
)

// TestStorageKeyInjective: two different values never share a stored
// form, verbatim and hashed ones included, and a stored form is never
// longer than max or a hashed key.
func TestStorageKeyInjective(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		max := rapid.IntRange(1, 80).Draw(t, "max")
		gen := rapid.OneOf(
			rapid.String(),
			rapid.StringN(0, 200, -1),
			rapid.Custom(func(t *rapid.T) string { return claimkit.HashedKeyPrefix + rapid.String().Draw(t, "rest") }),
			rapid.Custom(func(t *rapid.T) string { return StorageKey(rapid.StringN(81, 120, -1).Draw(t, "long"), 1) }),
		)
		a, b := gen.Draw(t, "a"), gen.Draw(t, "b")
		sa, sb := StorageKey(a, max), StorageKey(b, max)
		if a != b && sa == sb {
			t.Fatalf("%q and %q share the stored form %q", a, b, sa)
		}
		if a == b && sa != sb {
			t.Fatalf("%q stored two ways", a)
		}
		if len(sa) > max && len(sa) != claimkit.HashedKeyLength {
			t.Fatalf("stored form of %q is %d bytes (max %d)", a, len(sa), max)
		}
	})
	if got := StorageKey("plain", 16); got != "plain" {
		t.Errorf("a short key is stored as %q", got)
	}
	if got := StorageKey(strings.Repeat("x", 17), 16); !strings.HasPrefix(got, claimkit.HashedKeyPrefix) {
		t.Errorf("a long key is stored as %q", got)
	}
}

// TestBuild: table names are validated and quoted, and schema-qualified
// names put the SQLite index in the schema.
func TestBuild(t *testing.T) {
	for _, c := range []struct {
		table    string
		postgres bool
		ok       bool
		create   string // in the index statement
	}{
		{"", true, true, `"msgaudit_inbox_recorded_at_idx" ON "msgaudit_inbox"`},
		{"audit.inbox", true, true, `"inbox_recorded_at_idx" ON "audit"."inbox"`},
		{"audit.inbox", false, true, `"audit"."inbox_recorded_at_idx" ON "inbox"`},
		{"Mixed_Case1", false, true, `"Mixed_Case1_recorded_at_idx" ON "Mixed_Case1"`},
		{strings.Repeat("a", 47), true, true, ""},
		{strings.Repeat("a", 48), true, false, ""},
		{"a.b.c", true, false, ""},
		{`x"; DROP TABLE y; --`, true, false, ""},
		{"1abc", false, false, ""},
		// A temporary schema: rows private to one connection.
		{"pg_temp.inbox", true, false, ""},
		{"PG_TEMP_3.inbox", true, false, ""},
		{"pg_toast_temp_1.inbox", true, false, ""},
		{"temp.inbox", false, false, ""},
		{"TEMPORARY.inbox", false, false, ""},
		// Ordinary schemas of the other dialect, or look-alikes.
		{"temp.inbox", true, true, ""},
		{"pg_temp.inbox", false, true, ""},
		{"pg_temporary.inbox", true, true, ""},
		{"templates.inbox", false, true, ""},
	} {
		kind := SQLite
		if c.postgres {
			kind = Postgres
		}
		st, err := Build(c.table, kind)
		if (err == nil) != c.ok {
			t.Errorf("Build(%q) error %v; want ok=%v", c.table, err, c.ok)
			continue
		}
		if c.create != "" && !strings.Contains(st.Create[1], c.create) {
			t.Errorf("Build(%q, postgres=%v) index statement %q; want it to contain %q", c.table, c.postgres, st.Create[1], c.create)
		}
	}
}

// TestBuildMySQL: MySQL tables are quoted with backticks, temp. is an
// ordinary schema there, and the statements name the reserved word key
// quoted.
func TestBuildMySQL(t *testing.T) {
	for _, c := range []struct {
		table string
		ok    bool
		want  string // in the CREATE statement
	}{
		{"", true, "CREATE TABLE IF NOT EXISTS `msgaudit_inbox`"},
		{"app.inbox", true, "CREATE TABLE IF NOT EXISTS `app`.`inbox`"},
		{"temp.inbox", true, "`temp`.`inbox`"},
		{"x`; DROP TABLE y", false, ""},
		{strings.Repeat("a", 48), false, ""},
	} {
		st, err := Build(c.table, MySQL)
		if (err == nil) != c.ok {
			t.Errorf("Build(%q, MySQL) error %v; want ok=%v", c.table, err, c.ok)
			continue
		}
		if !c.ok {
			continue
		}
		if !strings.Contains(st.Create[0], c.want) || !strings.Contains(st.Create[0], "ENGINE=InnoDB") || !strings.Contains(st.Create[0], "VARBINARY(1024)") {
			t.Errorf("Build(%q, MySQL) CREATE %q; want %q, binary key columns and InnoDB", c.table, st.Create[0], c.want)
		}
		for _, q := range []string{st.Insert, st.Contains} {
			if !strings.Contains(q, "`key`") {
				t.Errorf("Build(%q, MySQL): %q does not quote the reserved word key", c.table, q)
			}
		}
		if strings.Contains(strings.ToUpper(st.Insert), "IGNORE") {
			t.Errorf("Build(%q, MySQL) INSERT %q: IGNORE turns every error into a warning", c.table, st.Insert)
		}
	}
}

// TestMySQLErrno: the server error number is read from go-sql-driver's
// error text, through wrapping; anything else is 0.
func TestMySQLErrno(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{errors.New("Error 1213 (40001): Deadlock found when trying to get lock; try restarting transaction"), 1213},
		{fmt.Errorf("inbox: insert: %w", errors.New("Error 1205 (HY000): Lock wait timeout exceeded; try restarting transaction")), 1205},
		{errors.New("Error 1062: Duplicate entry"), 1062},
		{errors.New("invalid connection"), 0},
		{errors.New("inbox: Error 1213 (40001): not at the start"), 0},
		{nil, 0},
	} {
		if got := MySQLErrno(c.err); got != c.want {
			t.Errorf("MySQLErrno(%v) = %d, want %d", c.err, got, c.want)
		}
	}
	if !Conflict(errors.New("Error 1213 (40001): Deadlock found")) || !Conflict(errors.New("Error 1205 (HY000): Lock wait timeout exceeded")) {
		t.Error("Conflict does not name MySQL's deadlock and lock-wait timeout")
	}
}

type stateErr string

func (e stateErr) Error() string    { return "sqlstate " + string(e) }
func (e stateErr) SQLState() string { return string(e) }

// TestBatchLimits: zero means the default, negative is an error, anything
// else is kept.
func TestBatchLimits(t *testing.T) {
	l, m, g, err := BatchLimits(0, 0, 0)
	if err != nil || l != DefaultLanes || m != DefaultMaxBatch || g != DefaultLinger {
		t.Errorf("BatchLimits(0, 0, 0) = %d, %d, %v, %v; want the defaults", l, m, g, err)
	}
	if l, m, g, err := BatchLimits(3, 1, time.Second); err != nil || l != 3 || m != 1 || g != time.Second {
		t.Errorf("BatchLimits(3, 1, 1s) = %d, %d, %v, %v", l, m, g, err)
	}
	for _, c := range []struct {
		lanes, maxBatch int
		linger          time.Duration
		want            string
	}{{-1, 0, 0, "Lanes"}, {0, -1, 0, "MaxBatch"}, {0, 0, -1, "Linger"}} {
		if _, _, _, err := BatchLimits(c.lanes, c.maxBatch, c.linger); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("BatchLimits(%d, %d, %v) = %v; want an error naming %s", c.lanes, c.maxBatch, c.linger, err, c.want)
		}
	}
}

// TestBroken: only SQLSTATE 25P02 (in failed transaction) is Broken;
// 40001 and 40P01 are Conflicts.
func TestBroken(t *testing.T) {
	for _, c := range []struct {
		err              error
		broken, conflict bool
	}{
		{stateErr("25P02"), true, false},
		{fmt.Errorf("wrapped: %w", stateErr("25P02")), true, false},
		{stateErr("40001"), false, true},
		{stateErr("40P01"), false, true},
		{stateErr("23505"), false, false},
		{errors.New("plain"), false, false},
	} {
		if got := Broken(c.err); got != c.broken {
			t.Errorf("Broken(%v) = %v; want %v", c.err, got, c.broken)
		}
		if got := Conflict(c.err); got != c.conflict {
			t.Errorf("Conflict(%v) = %v; want %v", c.err, got, c.conflict)
		}
	}
}

// TestGuard: when ctx ends while op runs, Guard calls cancel (the
// server-side cancel) and op's own context stays alive; op ending on its
// own needs no cancel.
func TestGuard(t *testing.T) {
	ctx, end := context.WithCancel(context.Background())
	cancelled := make(chan struct{})
	err := Guard(ctx, func(context.Context) error {
		close(cancelled)
		return nil
	}, func(octx context.Context) error {
		end()
		select {
		case <-cancelled: // the "server" cancels the statement
		case <-time.After(10 * time.Second):
			return errors.New("no server-side cancel")
		}
		if octx.Err() != nil {
			return errors.New("op's context was cancelled with the caller's")
		}
		return errors.New("canceled on the server")
	})
	if err == nil || err.Error() != "canceled on the server" {
		t.Errorf("Guard = %v; want the statement's own error", err)
	}
	calls := 0
	if err := Guard(context.Background(), func(context.Context) error { calls++; return nil }, func(context.Context) error { return nil }); err != nil || calls != 0 {
		t.Errorf("Guard without an end = %v, %d cancels; want nil, 0", err, calls)
	}
	live, stop := context.WithCancel(context.Background())
	defer stop()
	if err := Guard(live, func(context.Context) error { calls++; return nil }, func(context.Context) error { return nil }); err != nil || calls != 0 {
		t.Errorf("Guard of a statement that ends first = %v, %d cancels; want nil, 0", err, calls)
	}
}

// TestGuardWaitsForCancel: when ctx ends while op runs, Guard returns only
// after the cancel it sent was answered, however long that takes and
// however soon op returns, so the cancel cannot reach the connection's
// next statement.
func TestGuardWaitsForCancel(t *testing.T) {
	const slow = 200 * time.Millisecond // the cancel's round trip
	for _, c := range []struct {
		name string
		op   func(end context.CancelFunc) func(context.Context) error
	}{
		{"op returns as ctx ends", func(end context.CancelFunc) func(context.Context) error {
			return func(context.Context) error { end(); return nil }
		}},
		{"op fails as ctx ends", func(end context.CancelFunc) func(context.Context) error {
			return func(context.Context) error { end(); return errors.New("statement failed") }
		}},
		{"ctx ended before op", func(end context.CancelFunc) func(context.Context) error {
			return func(context.Context) error { return nil }
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, end := context.WithCancel(context.Background())
			defer end()
			if c.name == "ctx ended before op" {
				end()
			}
			var answered atomic.Bool
			cancel := func(cctx context.Context) error {
				select {
				case <-time.After(slow):
				case <-cctx.Done():
					return cctx.Err()
				}
				answered.Store(true)
				return nil
			}
			_ = Guard(ctx, cancel, c.op(end))
			if !answered.Load() {
				t.Error("Guard returned before its cancel was answered")
			}
		})
	}
}

// TestNamespacerInjective: the inbox namespaces of topic deliveries whose
// destination and consumer a plain "#" join gives one string differ, and
// an ordinary consumer name is joined as before, so recorded keys keep
// their form.
func TestNamespacerInjective(t *testing.T) {
	pairs := [][2]receiver.Message{
		{{Destination: "/topic/a#b", Consumer: "c"}, {Destination: "/topic/a", Consumer: "b#c"}},
		{{Destination: "/topic/a", Consumer: "x#c"}, {Destination: "/topic/a", Consumer: "x%23c"}},
	}
	for _, ns := range []string{"", "app"} {
		f := Namespacer(ns)
		for _, p := range pairs {
			if a, b := f(&p[0]), f(&p[1]); a == b && (ns == "" || p[0].Consumer != p[1].Consumer) {
				t.Errorf("Namespacer(%q): (%q, %q) and (%q, %q) share the namespace %q", ns, p[0].Destination, p[0].Consumer, p[1].Destination, p[1].Consumer, a)
			}
		}
	}
	if got := Namespacer("")(&receiver.Message{Destination: "/topic/t", Consumer: "sub-1"}); got != "/topic/t#sub-1" {
		t.Errorf("namespace of an ordinary consumer: %q, want /topic/t#sub-1", got)
	}
	if got := Namespacer("")(&receiver.Message{Destination: "/queue/q#1", Consumer: "a#b"}); got != "/queue/q#1" {
		t.Errorf("namespace of a queue delivery: %q, want its destination", got)
	}
}
