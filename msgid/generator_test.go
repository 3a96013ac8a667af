package msgid_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/msgid"
)

var fixed = func() time.Time { return time.UnixMilli(1796041243133) }

func TestGeneratorShape(t *testing.T) {
	t.Parallel()
	g := msgid.NewGenerator(msgid.GeneratorOptions{Host: "vm", Port: 39169, Clock: fixed})
	p1, p2 := g.NewProducer(), g.NewProducer()
	if p1.Key() != "ID:vm-39169-1796041243133-0:1" || p2.Key() != "ID:vm-39169-1796041243133-0:2" {
		t.Fatalf("keys %q, %q", p1.Key(), p2.Key())
	}
	for i, want := range []string{"ID:vm-39169-1796041243133-0:1:1", "ID:vm-39169-1796041243133-0:1:2"} {
		if got := p1.Next(); got != want {
			t.Fatalf("Next #%d = %q, want %q", i, got, want)
		}
	}
	if got := string(p1.AppendNext([]byte("x="))); got != "x=ID:vm-39169-1796041243133-0:1:3" {
		t.Fatalf("AppendNext = %q", got)
	}
	if got := p2.Next(); got != "ID:vm-39169-1796041243133-0:2:1" {
		t.Fatalf("p2.Next = %q", got)
	}
	id, err := msgid.Parse(p1.Next())
	if err != nil || id.Key != p1.Key() || id.Seq != 4 {
		t.Fatalf("Parse(Next) = %+v, %v", id, err)
	}
	g7 := msgid.NewGenerator(msgid.GeneratorOptions{Host: "vm", Port: 39169, Clock: fixed, Instance: 7})
	if k := g7.NewProducer().Key(); k != "ID:vm-39169-1796041243133-7:1" {
		t.Fatalf("instance 7 key %q", k)
	}
}

func TestGeneratorDefaults(t *testing.T) {
	t.Parallel()
	before := time.Now().UnixMilli()
	k := msgid.NewGenerator(msgid.GeneratorOptions{}).NewProducer().Key()
	after := time.Now().UnixMilli()
	// ID:<host>-<port>-<millis>-0:1; the host may itself contain '-'.
	rest, ok := strings.CutPrefix(k, "ID:")
	if !ok || !strings.HasSuffix(rest, "-0:1") {
		t.Fatalf("key %q", k)
	}
	f := strings.Split(strings.TrimSuffix(rest, "-0:1"), "-")
	if len(f) < 3 || f[0] == "" {
		t.Fatalf("key %q", k)
	}
	port, err1 := strconv.Atoi(f[len(f)-2])
	millis, err2 := strconv.ParseInt(f[len(f)-1], 10, 64)
	if err1 != nil || err2 != nil || port < 1024 || port > 65535 || millis < before || millis > after {
		t.Fatalf("key %q: port %d (%v), millis %d (%v)", k, port, err1, millis, err2)
	}
	for _, c := range k {
		if c >= 127 {
			t.Fatalf("key %q has a non-ASCII host", k)
		}
	}
}

// TestSanitizeHost is ActiveMQ's IdGeneratorTest.testSanitizeHostName.
func TestSanitizeHost(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"somehost.lan", "somehost.lan"},
		{"otherhost\u0E08.lan", "otherhost.lan"},
		{"héllo", "hllo"},
		{"a\x7fb", "ab"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := msgid.SanitizeHost(tt.in); got != tt.want {
			t.Errorf("SanitizeHost(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	g := msgid.NewGenerator(msgid.GeneratorOptions{Host: "\u0E08\u0E08", Port: 1, Clock: fixed})
	if k := g.NewProducer().Key(); k != "ID:localhost-1-1796041243133-0:1" {
		t.Fatalf("all-stripped host gave %q", k)
	}
}

// TestGeneratorConcurrent: many goroutines creating producers and ids get
// no duplicates (run with -race).
func TestGeneratorConcurrent(t *testing.T) {
	t.Parallel()
	g := msgid.NewGenerator(msgid.GeneratorOptions{Host: "h", Port: 5, Clock: fixed})
	shared := g.NewProducer()
	const workers, per = 8, 500
	ids := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			own := g.NewProducer()
			for range per {
				ids[w] = append(ids[w], shared.Next(), own.Next())
			}
		})
	}
	testwait.Group(t, &wg, testwait.Long, "the end of the 8 generating goroutines")
	seen := map[string]bool{}
	for _, l := range ids {
		for _, id := range l {
			if seen[id] {
				t.Fatalf("duplicate id %q", id)
			}
			seen[id] = true
			if _, _, err := msgid.Split(id); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(seen) != 2*workers*per {
		t.Fatalf("%d ids", len(seen))
	}
	if got := shared.Next(); got != shared.Key()+":"+strconv.Itoa(workers*per+1) {
		t.Fatalf("shared producer next = %q", got)
	}
}

func TestProducerAllocs(t *testing.T) {
	p := msgid.NewGenerator(msgid.GeneratorOptions{Host: "h", Port: 5, Clock: fixed}).NewProducer()
	buf := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { buf = p.AppendNext(buf[:0]) }); n != 0 {
		t.Errorf("AppendNext allocs = %v", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = p.Next() }); n > 1 {
		t.Errorf("Next allocs = %v, want ≤ 1", n)
	}
}
