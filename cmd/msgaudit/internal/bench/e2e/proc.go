package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat and
// /proc/stat. The kernel exports them in USER_HZ whatever its internal HZ,
// and USER_HZ is 100 on every architecture Go runs Linux on (it is what
// sysconf(_SC_CLK_TCK) returns; golang.org/x/sys/unix has no sysconf). One
// tick is 10 ms, the resolution of every process figure.
const clockTicks = 100

// procStat is what one /proc/<pid>/stat line says about a process.
type procStat struct {
	pid   int
	comm  string // the executable's name as the kernel keeps it (at most 15 bytes)
	ppid  int
	ticks uint64 // utime + stime of every thread, in clockTicks; children not included
	start uint64 // start time after boot, in clockTicks: with pid, names the process
}

// errProcStat reports a /proc/<pid>/stat line that cannot be parsed.
var errProcStat = errors.New("malformed /proc/<pid>/stat")

// parseProcStat parses a /proc/<pid>/stat line: "pid (comm) state ppid …",
// where comm may hold spaces and parentheses, so the fields after it start
// at the last ')'. utime and stime are fields 14 and 15 and starttime is 22,
// counting pid as 1 (proc(5)).
func parseProcStat(b []byte) (procStat, error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("%w: no (comm)", errProcStat)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil || pid <= 0 {
		return procStat{}, fmt.Errorf("%w: pid %q", errProcStat, bytes.TrimSpace(b[:open]))
	}
	f := strings.Fields(string(b[end+1:])) // f[0] is field 3, state
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("%w: %d fields after comm, want at least 20", errProcStat, len(f))
	}
	num := func(i int) (uint64, error) {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: field %d: %v", errProcStat, i+3, err)
		}
		return v, nil
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil || ppid < 0 {
		return procStat{}, fmt.Errorf("%w: ppid %q", errProcStat, f[1])
	}
	utime, err := num(11)
	if err != nil {
		return procStat{}, err
	}
	stime, err := num(12)
	if err != nil {
		return procStat{}, err
	}
	start, err := num(19)
	if err != nil {
		return procStat{}, err
	}
	if utime+stime < utime {
		return procStat{}, fmt.Errorf("%w: utime %d + stime %d overflows", errProcStat, utime, stime)
	}
	return procStat{pid: pid, comm: string(b[open+1 : end]), ppid: ppid, ticks: utime + stime, start: start}, nil
}

// procKey names a process across two snapshots: a pid the kernel reused
// in between has another start time.
type procKey struct {
	pid   int
	start uint64
}

// procSnapshot is the CPU time of every process at one moment.
type procSnapshot struct {
	procs map[procKey]procStat
	ppid  map[int]int // pid → parent pid
	took  time.Duration
}

// readProcs reads /proc/<pid>/stat of every process; ok is false where
// there is no /proc. A process that ends while it is read is left out.
func readProcs() (s *procSnapshot, ok bool) {
	t0 := time.Now()
	d, err := os.Open("/proc")
	if err != nil {
		return nil, false
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, false
	}
	s = &procSnapshot{procs: make(map[procKey]procStat, len(names)), ppid: make(map[int]int, len(names))}
	buf := make([]byte, 4096)
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		b, err := readInto(buf, "/proc/"+name+"/stat")
		if err != nil {
			continue
		}
		ps, err := parseProcStat(b)
		if err != nil {
			continue
		}
		s.procs[procKey{ps.pid, ps.start}] = ps
		s.ppid[ps.pid] = ps.ppid
	}
	if len(s.procs) == 0 {
		return nil, false
	}
	s.took = time.Since(t0)
	return s, true
}

// readInto reads a small file into buf (a /proc/<pid>/stat line is well
// under 1 KiB) and returns what it read.
func readInto(buf []byte, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Read(buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// cpuStat is the aggregate "cpu" line of /proc/stat, in clockTicks.
type cpuStat struct {
	busy, total uint64
}

// parseCPULine parses /proc/stat's first line, "cpu user nice system idle
// iowait irq softirq steal guest guest_nice": busy is
// user+nice+system+irq+softirq+steal, total adds idle and iowait (guest and
// guest_nice are already counted in user and nice). Kernels before 2.6.33
// give fewer fields; the missing ones count as 0.
func parseCPULine(line string) (cpuStat, error) {
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return cpuStat{}, fmt.Errorf("/proc/stat: first line %q is not the aggregate cpu line", line)
	}
	var v [8]uint64
	for i := range v {
		if 1+i >= len(f) {
			break
		}
		n, err := strconv.ParseUint(f[1+i], 10, 64)
		if err != nil {
			return cpuStat{}, fmt.Errorf("/proc/stat: cpu field %d: %v", i+1, err)
		}
		v[i] = n
	}
	user, nice, system, idle, iowait, irq, softirq, steal := v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]
	busy := user + nice + system + irq + softirq + steal
	return cpuStat{busy: busy, total: busy + idle + iowait}, nil
}

// readCPUStat reads /proc/stat's aggregate line; ok is false where there is
// none.
func readCPUStat() (cpuStat, bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuStat{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return cpuStat{}, false
	}
	c, err := parseCPULine(sc.Text())
	return c, err == nil
}

// delta returns the CPU ticks each process of end spent since start: all of
// them for a process not in start (it began in between), none for one
// not in end (it ended in between: what it spent after start is lost).
func delta(start, end *procSnapshot) map[procKey]uint64 {
	out := make(map[procKey]uint64, len(end.procs))
	for k, e := range end.procs {
		var before uint64
		if s, ok := start.procs[k]; ok {
			before = s.ticks
		}
		if e.ticks > before {
			out[k] = e.ticks - before
		}
	}
	return out
}

// server names the processes of one role (the broker, the store's server):
// the ones listening on a TCP port, with their descendants, or, when no
// listener was found, every process named comm.
type server struct {
	comm string
	pids []int // the listeners; nil: attribute by comm
}

// servers are the servers of a variant's store, inbox and effect.
type servers []*server

// owns reports whether one of ss owns the process pid.
func (ss servers) owns(s *procSnapshot, pid int, comm string) bool {
	for _, sv := range ss {
		if sv.owns(s, pid, comm) {
			return true
		}
	}
	return false
}

// pids returns the listeners of every server, nil when none was found.
func (ss servers) pids() []int {
	var out []int
	for _, sv := range ss {
		out = append(out, sv.pids...)
	}
	return out
}

// owns reports whether the process pid (named comm), in snapshot s, is the
// server's: a listener, a descendant of one, or, by name, named comm.
func (sv *server) owns(s *procSnapshot, pid int, comm string) bool {
	if sv == nil {
		return false
	}
	if sv.pids == nil {
		return comm == sv.comm
	}
	for range 64 { // a parent chain is short; the bound guards against a cycle across pid reuse
		if slices.Contains(sv.pids, pid) {
			return true
		}
		parent, ok := s.ppid[pid]
		if !ok || parent <= 1 || parent == pid {
			return false
		}
		pid = parent
	}
	return false
}

// findServer returns the server of comm listening on port on this machine:
// the processes holding a listening TCP socket on that port, or, where they
// cannot be found (no /proc, another host, no permission to read other
// processes' descriptors), every process named comm.
func findServer(comm string, port int) *server {
	sv := &server{comm: comm}
	if port > 0 {
		sv.pids = listenerPIDs(port)
	}
	return sv
}

// listenerPIDs returns the processes holding a listening TCP socket (IPv4
// or IPv6) on port, from /proc/net/tcp{,6} and /proc/<pid>/fd; nil when
// none is found.
func listenerPIDs(port int) []int {
	inodes := map[string]bool{}
	for _, path := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, ino := range listeningInodes(string(b), port) {
			inodes["socket:["+ino+"]"] = true
		}
	}
	if len(inodes) == 0 {
		return nil
	}
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	var pids []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		fds, err := os.ReadDir("/proc/" + name + "/fd")
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink("/proc/" + name + "/fd/" + fd.Name()); err == nil && inodes[l] {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// listeningInodes returns the socket inodes of the LISTEN sockets on port in
// a /proc/net/tcp or tcp6 table ("sl local_address rem_address st … inode",
// local_address "ADDR:PORT" in hex, st 0A for LISTEN).
func listeningInodes(table string, port int) []string {
	var out []string
	for i, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 10 || f[3] != "0A" {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(p) == port {
			out = append(out, f[9])
		}
	}
	return out
}

// addrPort returns the port of a "host:port" address, or 0.
func addrPort(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// urlPort returns the port of a URL, def when it names none, or 0 when it
// does not parse (a key=value PostgreSQL DSN, say).
func urlPort(raw string, def int) int {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return 0
	}
	if u.Port() == "" {
		return def
	}
	n, _ := strconv.Atoi(u.Port())
	return n
}
