// Package benchkit is the benchmark matrix shared by the cmd/msgaudit/internal/bench/ suite
// ("go test -bench") and "msgaudit bench" (testing.Benchmark): the
// workloads, built before timing and defined exactly as in
// cmd/msgaudit/internal/bench/java/AuditBench.java; the implementations under test (ours, the
// baselines users write by hand, the floor); the cases and profiles; and
// the heap measurement.
//
// Concurrency: Build, Matrix, Run and MeasureMemory are safe to call from
// several goroutines, but Run and MeasureMemory measure the whole process
// (time, heap), so concurrent calls disturb each other's figures. A built
// Ops is read-only. A Target is as safe as the implementation it wraps:
// only ConcurrentTarget values may be checked from several goroutines.
package benchkit
