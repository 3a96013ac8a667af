// Package bench holds msgaudit's benchmark suite and the Java program that
// measures ActiveMQ's own audit on the same workloads.
//
// The benchmarks (bench_test.go) run the matrix of internal/benchkit:
// ours (audit.Audit, audit.Locked, audit.Sharded, connaudit.Audit), the
// baselines users write by hand (an exact map of full ids trimmed to the
// window per producer; golang-lru/v2 keyed by full id) and the floor (a
// bare bit test-and-set; a map lookup of the producer key plus that bit),
// on pre-built workloads (in order, replay of the last 1000 per producer,
// out of order within the window, producer churn beyond the cap, random
// jumps), over depth 64 … 1<<20 and 1 … 1024 producers, plus the
// concurrent audits with 1 and GOMAXPROCS goroutines and the heap each
// structure retains:
//
//	go test -run='^$' -bench=. ./cmd/msgaudit/internal/bench/
//
// java/AuditBench.java runs ActiveMQMessageAuditNoSync and
// ActiveMQMessageAudit from Debian's libactivemq-java on the same ids;
// compare.sh runs both back to back and prints the ratios, and
// "msgaudit bench" does all of it with a table, JSON and a chart.
//
// The package's exported API (RunJava, JavaSource) is what "msgaudit
// bench" uses to run the Java program; it is safe for concurrent use.
package bench
