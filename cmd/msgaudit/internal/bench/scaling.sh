#!/usr/bin/env bash
# scaling.sh measures how Sharded's throughput scales from one goroutine to
# GOMAXPROCS, in N fresh processes (default 10). Each process draws new hash
# keys, so its 64 producers land in different shards: where producers of
# different goroutines share a shard, their checks contend for its lock and
# its cache lines, and the ratio depends on how many such pairs there are.
# It prints one line per process and the spread.
#
#   cmd/msgaudit/internal/bench/scaling.sh                   # default shards
#   SHARDS=4096 cmd/msgaudit/internal/bench/scaling.sh       # NewSharded(o, 4096)
#   N=20 BENCHTIME=1s cmd/msgaudit/internal/bench/scaling.sh
#
# Not run in CI. Run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/../.." # the tools module, cmd/msgaudit
N=${N:-10}
BENCHTIME=${BENCHTIME:-500ms}
SHARDS=${SHARDS:-0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/bench.test" ./internal/bench/
g=$(nproc)
printf "%-4s %12s %12s %8s\n" run "1 goroutine" "$g goroutines" speedup
for i in $(seq "$N"); do
	"$tmp/bench.test" -test.run='^$' -test.benchtime="$BENCHTIME" -shards="$SHARDS" \
		-test.bench='BenchmarkCheck/^workload=replay$/^depth=2048$/^producers=64$/^impl=sharded$/^goroutines=' |
		awk -v run="$i" '/goroutines=1-/ {one=$3} /goroutines=[2-9]/ {par=$3}
			END {printf "%-4s %9s ns %9s ns %7.2fx\n", run, one, par, one/par}'
done | tee "$tmp/runs"
awk '{print $6+0}' "$tmp/runs" | sort -n | awk '{r[NR]=$1} END {
	printf "speedup: min %.2fx, median %.2fx, max %.2fx over %d processes\n", r[1], (NR%2 ? r[(NR+1)/2] : (r[NR/2]+r[NR/2+1])/2), r[NR], NR}'
