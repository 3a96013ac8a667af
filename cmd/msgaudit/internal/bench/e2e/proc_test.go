package e2e

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// statLine renders a /proc/<pid>/stat line with the given fields (the
// others as a real one has them).
func statLine(pid int, comm string, ppid int, utime, stime, start uint64) string {
	return fmt.Sprintf("%d (%s) S %d %d %d 0 -1 4194560 1530 0 0 0 %d %d 0 0 20 0 4 0 %d 1277952 420 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0",
		pid, comm, ppid, pid, pid, utime, stime, start)
}

// TestParseProcStat checks the fields taken from /proc/<pid>/stat lines,
// comm with spaces and parentheses included, and that malformed lines are
// errors.
func TestParseProcStat(t *testing.T) {
	real := "23241 (cat) R 23239 23239 18284 0 -1 4194304 99 0 0 0 7 3 0 0 20 0 1 0 196772 3133440 381 18446744073709551615 94703738576896 94703738596777 140734725011792 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 94703738612784 94703738614400 94704251346944 140734725020341 140734725020361 140734725020361 140734725021675 0\n"
	tests := []struct {
		name, line string
		want       procStat
		wantErr    bool
	}{
		{"real line", real, procStat{23241, "cat", 23239, 10, 196772}, false},
		{"space in comm", statLine(7, "Web Content", 1, 100, 50, 9), procStat{7, "Web Content", 1, 150, 9}, false},
		{"parentheses in comm", statLine(8, "a) S 1 (b", 2, 1, 2, 3), procStat{8, "a) S 1 (b", 2, 3, 3}, false},
		{"comm is )", statLine(9, ")", 0, 0, 0, 0), procStat{9, ")", 0, 0, 0}, false},
		{"empty comm", statLine(10, "", 1, 5, 5, 1), procStat{10, "", 1, 10, 1}, false},
		{"kernel thread, large times", statLine(2, "kworker/1:1H-kb", 0, 1<<40, 1<<40, 12), procStat{2, "kworker/1:1H-kb", 0, 1 << 41, 12}, false},
		{"no parentheses", "12 cat R 1 1 1", procStat{}, true},
		{"no closing parenthesis", "12 (cat R 1 1 1", procStat{}, true},
		{"closing before opening", "12 )cat( R 1", procStat{}, true},
		{"too few fields", "12 (cat) R 1 1 1 0 -1 4194304 99 0 0 0 7 3", procStat{}, true},
		{"bad pid", strings.Replace(statLine(1, "x", 0, 1, 1, 1), "1 (x)", "x1 (x)", 1), procStat{}, true},
		{"zero pid", statLine(0, "x", 0, 1, 1, 1), procStat{}, true},
		{"negative utime", strings.Replace(statLine(5, "x", 1, 424242, 1, 1), "424242", "-1", 1), procStat{}, true},
		{"overflowing times", statLine(5, "x", 1, 1<<63, 1<<63, 1), procStat{}, true},
		{"empty", "", procStat{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseProcStat([]byte(tt.line))
			if tt.wantErr {
				if !errors.Is(err, errProcStat) {
					t.Fatalf("parseProcStat(%q) = %+v, %v; want an errProcStat", tt.line, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parseProcStat(%q) = %+v, %v; want %+v", tt.line, got, err, tt.want)
			}
		})
	}
}

// FuzzProcStat checks that parseProcStat never panics on any input, and
// that a line rendered from any comm and times parses back to them.
func FuzzProcStat(f *testing.F) {
	f.Add([]byte(statLine(1, "systemd", 0, 12, 30, 1)), "java", uint64(9920), uint64(120), uint64(5))
	f.Add([]byte("2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 1 0 0 20 0 1 0 2 0 0"), "a (b) c", uint64(0), uint64(0), uint64(0))
	f.Add([]byte("3 ((()) R"), ")) ((", uint64(1)<<63, uint64(1)<<63, uint64(7))
	f.Add([]byte(""), "", uint64(1), uint64(2), uint64(3))
	f.Fuzz(func(t *testing.T, raw []byte, comm string, utime, stime, start uint64) {
		if ps, err := parseProcStat(raw); err == nil {
			// A parsed line had a (comm) and a positive pid.
			if ps.pid <= 0 || !strings.Contains(string(raw), "("+ps.comm+")") {
				t.Fatalf("parseProcStat(%q) = %+v", raw, ps)
			}
		}
		line := statLine(4242, comm, 17, utime, stime, start)
		ps, err := parseProcStat([]byte(line))
		if utime+stime < utime {
			if err == nil {
				t.Fatalf("parseProcStat(%q) = %+v, want an overflow error", line, ps)
			}
			return
		}
		// Every byte of comm survives, spaces and parentheses included.
		want := procStat{4242, comm, 17, utime + stime, start}
		if err != nil || ps != want {
			t.Fatalf("parseProcStat(%q) = %+v, %v; want %+v", line, ps, err, want)
		}
	})
}

// TestParseCPULine checks the busy and total ticks of /proc/stat's
// aggregate line.
func TestParseCPULine(t *testing.T) {
	for _, tt := range []struct {
		line        string
		busy, total uint64
		wantErr     bool
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice
		{"cpu  86647 1 27936 268159 3099 2 3058 1232 500 7", 86647 + 1 + 27936 + 2 + 3058 + 1232, 86647 + 1 + 27936 + 2 + 3058 + 1232 + 268159 + 3099, false},
		{"cpu 10 0 5 100", 15, 115, false}, // an old kernel: no iowait and later
		{"cpu0 1 2 3 4 5", 0, 0, true},
		{"intr 1 2 3 4 5", 0, 0, true},
		{"cpu 1 2 x 4 5", 0, 0, true},
		{"cpu 1 2", 0, 0, true},
	} {
		got, err := parseCPULine(tt.line)
		if (err != nil) != tt.wantErr || (!tt.wantErr && (got.busy != tt.busy || got.total != tt.total)) {
			t.Errorf("parseCPULine(%q) = %+v, %v; want busy %d, total %d, error %v", tt.line, got, err, tt.busy, tt.total, tt.wantErr)
		}
	}
}

// TestListeningInodes checks that only LISTEN sockets on the port are
// found, in /proc/net/tcp and tcp6 notation.
func TestListeningInodes(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1628 00000000:0000 0A 00000000:00000000 00:00000000 00000000   106        0 5350 1 0000000065270d90 100 0 0 10 0
   1: 0100007F:F0FD 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 40158 1 00000000b4a5fd3b 100 0 0 10 0
   2: 0100007F:F0FD 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 40200 1 00000000b4a5fd3b 100 0 0 10 0
   3: 00000000000000000000000001000000:F0FD 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 40159 1 0 100 0 0 10 0
`
	if got := strings.Join(listeningInodes(table, 61693), ","); got != "40158,40159" {
		t.Errorf("port 61693: inodes %q, want the two LISTEN sockets 40158,40159 (not the established 40200)", got)
	}
	if got := strings.Join(listeningInodes(table, 5672), ","); got != "5350" {
		t.Errorf("port 5672: inodes %q, want 5350", got)
	}
	if got := listeningInodes(table, 6379); got != nil {
		t.Errorf("port 6379: inodes %q, want none", got)
	}
	if got, want := addrPort("127.0.0.1:61613"), 61613; got != want {
		t.Errorf("addrPort = %d, want %d", got, want)
	}
	for _, tt := range []struct {
		url  string
		def  int
		want int
	}{
		{"amqp://guest:guest@127.0.0.1:5673/", 5672, 5673},
		{"redis://127.0.0.1/0", 6379, 6379},
		{"host=localhost port=5432", 5432, 0},
	} {
		if got := urlPort(tt.url, tt.def); got != tt.want {
			t.Errorf("urlPort(%q, %d) = %d, want %d", tt.url, tt.def, got, tt.want)
		}
	}
}

// snap builds a snapshot from processes.
func snap(ps ...procStat) *procSnapshot {
	s := &procSnapshot{procs: map[procKey]procStat{}, ppid: map[int]int{}, took: time.Millisecond}
	for _, p := range ps {
		s.procs[procKey{p.pid, p.start}] = p
		s.ppid[p.pid] = p.ppid
	}
	return s
}

// TestMachineCPU checks the attribution of the CPU spent between two
// snapshots: the broker's listener and its descendants, the store's, this
// process left out, processes that start, end or reuse a pid in between.
func TestMachineCPU(t *testing.T) {
	const self = 500
	p0 := snap(
		procStat{100, "java", 1, 1000, 10},      // the broker: +300
		procStat{101, "java", 1, 50, 11},        // another ActiveMQ: +20, other
		procStat{200, "postgres", 1, 70, 12},    // postmaster: +10
		procStat{201, "postgres", 200, 400, 13}, // a backend: +150
		procStat{202, "postgres", 200, 90, 14},  // a backend that ends in between: lost
		procStat{300, "sh", 1, 5, 15},           // ends; its pid is reused by another process
		procStat{self, "e2e.test", 1, 9000, 16}, // this process: left out
		procStat{600, "kworker/0:1", 2, 40, 17}, // unchanged
		procStat{700, "postgres", 1, 1000, 18},  // another PostgreSQL cluster: other
	)
	p1 := snap(
		procStat{100, "java", 1, 1300, 10},
		procStat{101, "java", 1, 70, 11},
		procStat{200, "postgres", 1, 80, 12},
		procStat{201, "postgres", 200, 550, 13},
		procStat{203, "postgres", 200, 25, 30}, // a backend that started in between: all of it
		procStat{300, "sh", 1, 8, 31},          // the reused pid: all of it, other
		procStat{self, "e2e.test", 1, 9999, 16},
		procStat{600, "kworker/0:1", 2, 40, 17},
		procStat{700, "postgres", 1, 1001, 18},
	)
	s0, s1 := cpuStat{busy: 1000, total: 4000}, cpuStat{busy: 1600, total: 5000}
	broker := &server{comm: "java", pids: []int{100}}
	store := servers{{comm: "postgres", pids: []int{200}}}
	const msgs = 1000
	us := func(ticks float64) float64 { return ticks * 1e6 / clockTicks / msgs } // ticks → µs per message
	m := machineCPU(p0, p1, s0, s1, broker, store, self, msgs)
	if m.Store == nil {
		t.Fatal("by port: no store figure")
	}
	if m.Broker != us(300) || *m.Store != us(10+150+25) || m.Other != us(20+8+1) || m.BusyPct != 60 {
		t.Errorf("by port: broker %v, store %v, other %v, busy %v%%; want %v, %v, %v, 60%%",
			m.Broker, *m.Store, m.Other, m.BusyPct, us(300), us(185), us(29))
	}
	if got, want := m.ByName["e2e.test"], us(999); got != want {
		t.Errorf("ByName[this process] = %v, want %v", got, want)
	}

	// By name, every java and every postgres counts; no store, no figure.
	m = machineCPU(p0, p1, s0, s1, &server{comm: "java"}, servers{{comm: "postgres"}}, self, msgs)
	if m.Broker != us(320) || *m.Store != us(10+150+25+1) || m.Other != us(8) {
		t.Errorf("by name: broker %v, store %v, other %v; want %v, %v, %v", m.Broker, *m.Store, m.Other, us(320), us(186), us(8))
	}
	// Two servers (a store and an effect's database): both count.
	m = machineCPU(p0, p1, s0, s1, broker, servers{store[0], {comm: "postgres", pids: []int{700}}}, self, msgs)
	if *m.Store != us(10+150+25+1) || m.Other != us(20+8) || !slices.Equal(m.StorePIDs, []int{200, 700}) {
		t.Errorf("two servers: store %v, other %v, pids %v; want %v, %v, [200 700]", *m.Store, m.Other, m.StorePIDs, us(186), us(28))
	}
	m = machineCPU(p0, p1, s0, s1, broker, nil, self, msgs)
	if m.Store != nil || m.Other != us(20+8+10+150+25+1) {
		t.Errorf("no store server: store %v, other %v; want nil, %v", m.Store, m.Other, us(214))
	}
}

// TestReadProcs reads this machine's /proc: this process must be there
// with its name, and its CPU time must grow with work done.
func TestReadProcs(t *testing.T) {
	s0, ok := readProcs()
	if !ok {
		t.Skip("no /proc here")
	}
	if _, ok := readCPUStat(); !ok {
		t.Fatal("/proc/<pid>/stat readable but /proc/stat not")
	}
	self := os.Getpid()
	find := func(s *procSnapshot) procStat {
		for k, p := range s.procs {
			if k.pid == self {
				return p
			}
		}
		t.Fatalf("this process (pid %d) is not in the snapshot of %d processes", self, len(s.procs))
		return procStat{}
	}
	me0 := find(s0)
	comm, _ := os.ReadFile("/proc/self/comm")
	if me0.comm != strings.TrimSpace(string(comm)) {
		t.Errorf("comm %q, want %q", me0.comm, strings.TrimSpace(string(comm)))
	}
	for t0 := time.Now(); time.Since(t0) < 50*time.Millisecond; { // spin: 5 ticks at least
	}
	s1, _ := readProcs()
	if me1 := find(s1); me1.ticks < me0.ticks+2 {
		t.Errorf("CPU ticks %d, then %d after 50 ms of spinning", me0.ticks, me1.ticks)
	}
	t.Logf("%d processes read in %v", len(s1.procs), s1.took)
}

// BenchmarkReadProcs measures one reading of every process, which happens
// just before the clock starts and just after it stops.
func BenchmarkReadProcs(b *testing.B) {
	if _, ok := readProcs(); !ok {
		b.Skip("no /proc here")
	}
	n := 0
	for b.Loop() {
		s, _ := readProcs()
		n = len(s.procs)
	}
	b.ReportMetric(float64(n), "processes")
}

// BenchmarkListenerPIDs measures finding a server by its port, once per
// measurement before pre-loading.
func BenchmarkListenerPIDs(b *testing.B) {
	for b.Loop() {
		listenerPIDs(61613)
	}
}
