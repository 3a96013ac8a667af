package benchkit

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// Result is one benchmark measured by Run.
type Result struct {
	Case
	// N is the iteration count testing.Benchmark settled on; 0 when the
	// benchmark failed (Err says so).
	N           int
	NsPerOp     float64
	AllocsPerOp int64
	BytesPerOp  int64
	Err         error
}

// SetBenchTime sets the target run time of testing.Benchmark (the
// -test.benchtime flag, registered by testing.Init in a program that is
// not a test). It returns the previous value.
func SetBenchTime(d time.Duration) (string, error) {
	testing.Init()
	f := flag.Lookup("test.benchtime")
	if f == nil {
		return "", fmt.Errorf("benchkit: no test.benchtime flag")
	}
	prev := f.Value.String()
	return prev, flag.Set("test.benchtime", d.String())
}

// Run measures each case with testing.Benchmark, rounds times over the
// whole list (interleaved, so that a burst of load elsewhere on the machine
// does not hit one case every time), keeping each case's fastest round.
// It calls progress (if not nil) after each measurement, and stops early,
// returning what it has and ctx's error, when ctx is done.
func Run(ctx context.Context, cases []Case, rounds int, progress func(Result)) ([]Result, error) {
	rounds = max(rounds, 1)
	out := make([]Result, len(cases))
	benches := make([]func(*testing.B), len(cases))
	for i, c := range cases {
		out[i] = Result{Case: c}
		benches[i], out[i].Err = c.Bench()
	}
	for range rounds {
		for i := range cases {
			if err := ctx.Err(); err != nil {
				return out, err
			}
			r := &out[i]
			if r.Err == nil {
				runtime.GC()
				br := testing.Benchmark(benches[i])
				if br.N == 0 {
					r.N = 0
					r.Err = fmt.Errorf("benchkit: %s failed (run it with go test -bench to see why)", r.Name())
				} else if ns := float64(br.T.Nanoseconds()) / float64(br.N); r.N == 0 || ns < r.NsPerOp {
					r.N = br.N
					r.NsPerOp = ns
					r.AllocsPerOp = br.AllocsPerOp()
					r.BytesPerOp = br.AllocedBytesPerOp()
				}
			}
			if progress != nil {
				progress(*r)
			}
		}
	}
	return out, nil
}
