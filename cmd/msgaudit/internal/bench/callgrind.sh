#!/usr/bin/env bash
# callgrind.sh counts instructions per check with valgrind's callgrind,
# where wall-clock noise (a shared or loaded machine) hides a change.
# For each impl and workload it runs the benchmark binary twice under
# callgrind, with N1 and N2 iterations, collecting only inside the
# targets' Pass loops, and prints (Ir(N2) - Ir(N1)) / (N2 - N1): the
# setup (building and priming the target) cancels out.
#
#   cmd/msgaudit/internal/bench/callgrind.sh                          # audit, floors, baselines
#   IMPLS="audit floor-map" WORKLOADS=replay cmd/msgaudit/internal/bench/callgrind.sh
#
# Not run in CI (minutes under valgrind). Needs valgrind. The Go runtime
# needs GODEBUG=asyncpreemptoff=1 under callgrind (its preemption signals
# trip an assertion in valgrind 3.19), and runs with GOGC=off so that no
# garbage collection lands inside a timed loop (on one thread, callgrind
# would charge the collector's work to the loop).
set -euo pipefail
cd "$(dirname "$0")/../.." # the tools module, cmd/msgaudit
command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind not found" >&2; exit 1; }
IMPLS=${IMPLS:-"audit floor-parse floor-map floor-bit map lru"}
WORKLOADS=${WORKLOADS:-"inorder replay"}
N1=${N1:-200000}
N2=${N2:-1200000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/bench.test" ./internal/bench/
ir() { # impl workload n
	GOGC=off GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
		--toggle-collect='*benchkit.*Pass' "$tmp/bench.test" -test.run='^$' \
		-test.bench="^BenchmarkCheck\$/^workload=$2\$/^depth=2048\$/^producers=64\$/^impl=$1\$" \
		-test.benchtime="${3}x" >/dev/null 2>"$tmp/vg.err"
	grep -o 'Collected : [0-9]*' "$tmp/vg.err" | awk '{print $3}'
}
printf "%-10s %-10s %s\n" workload impl "instructions/check (depth 2048, 64 producers)"
for w in $WORKLOADS; do
	for impl in $IMPLS; do
		a=$(ir "$impl" "$w" "$N1")
		b=$(ir "$impl" "$w" "$N2")
		printf "%-10s %-10s %.1f\n" "$w" "$impl" "$(echo "($b - $a) / ($N2 - $N1)" | bc -l)"
	done
done
