//go:build unix

package crashtest

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Gauge slots of the file a child shares with its parent.
const (
	// gaugeEffect counts deliveries whose effect is being written or
	// written but not yet recorded as done (inbox: not committed; external
	// store: not confirmed; no store: the handler has not returned).
	gaugeEffect = iota
	// gaugeSettled counts deliveries settled by the durable tier and not
	// yet acknowledged.
	gaugeSettled
	// gaugeCalls counts handler calls since the child started.
	gaugeCalls
	gaugeSlots
)

// gauges are int64 counters in a file mapped into the child and the
// parent alike. The child updates them atomically; the parent reads them
// while the child is frozen by SIGSTOP, so what it reads is the state the
// SIGKILL that follows lands in.
type gauges struct {
	mem []byte
}

// openGauges maps the gauge file at path, creating it zeroed when create
// is set.
func openGauges(path string, create bool) (*gauges, error) {
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, fmt.Errorf("crashtest: gauges: %w", err)
	}
	defer f.Close()
	size := 8 * gaugeSlots
	if create {
		if err := f.Truncate(int64(size)); err != nil {
			return nil, fmt.Errorf("crashtest: gauges: %w", err)
		}
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("crashtest: gauges: mmap %s: %w", path, err)
	}
	return &gauges{mem: mem}, nil
}

func (g *gauges) slot(i int) *int64 { return (*int64)(unsafe.Pointer(&g.mem[8*i])) }

// add adds d to slot i.
func (g *gauges) add(i int, d int64) { atomic.AddInt64(g.slot(i), d) }

// load reads slot i.
func (g *gauges) load(i int) int64 { return atomic.LoadInt64(g.slot(i)) }

// reset zeroes every slot (before a child is started again).
func (g *gauges) reset() {
	for i := range gaugeSlots {
		atomic.StoreInt64(g.slot(i), 0)
	}
}

// close unmaps the file.
func (g *gauges) close() error { return syscall.Munmap(g.mem) }
