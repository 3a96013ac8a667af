package bench_test

import (
	"flag"
	"testing"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/benchkit"
)

func init() {
	flag.IntVar(&benchkit.ShardedShards, "shards", 0, "shard count of the sharded target (0: audit.NewSharded's default)")
}

// BenchmarkCheck runs the full matrix (internal/benchkit.Matrix): ours,
// the baselines and the floors on every workload, the depth and producer
// sweeps, and the concurrent audits with 1 and GOMAXPROCS goroutines.
//
//	go test -run='^$' -bench=Check ./cmd/msgaudit/internal/bench/
func BenchmarkCheck(b *testing.B) {
	for _, c := range benchkit.Matrix(benchkit.Full) {
		f, err := c.Bench()
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.Name(), f)
	}
}

// BenchmarkMemory reports the heap each structure retains after GC, per
// producer and per tracked id (internal/benchkit.MeasureMemory); ns/op is
// meaningless here. The measurement runs once per case, whatever b.N.
func BenchmarkMemory(b *testing.B) {
	for _, c := range benchkit.MemMatrix(benchkit.Full) {
		var r *benchkit.MemResult
		b.Run(c.Name(), func(b *testing.B) {
			if r == nil {
				m, err := benchkit.MeasureMemory(c)
				if err != nil {
					b.Fatal(err)
				}
				r = &m
			}
			for range b.N {
			}
			b.ReportMetric(r.BytesPerProducer, "bytes/producer")
			b.ReportMetric(r.BytesPerID, "bytes/id")
		})
	}
}
