#!/usr/bin/env bash
# compare.sh runs ActiveMQ's Java audit (cmd/msgaudit/internal/bench/java/AuditBench.java on
# Debian's libactivemq-java) and msgaudit's Go benchmarks on the same
# workload (64 producers, depth 2048: in-order new ids, and a replay of the
# last 1000 ids per producer), back to back, and prints the ratios.
#
#   cmd/msgaudit/internal/bench/compare.sh            # RUNS=9 WARMUP=10 Java runs, COUNT=5 Go runs
#   COUNT=10 cmd/msgaudit/internal/bench/compare.sh
#
# Needs java, javac and libactivemq-java (apt-get install libactivemq-java).
# Each figure is the best of its runs; "speedup" = Java ns/op ÷ Go ns/op.
set -euo pipefail
cd "$(dirname "$0")/../.." # the tools module, cmd/msgaudit

jars=/usr/share/java/activemq-client.jar:/usr/share/java/geronimo-jms_1.1_spec.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-nop.jar
for j in ${jars//:/ }; do
	[ -f "$j" ] || { echo "compare.sh: $j missing (apt-get install libactivemq-java)" >&2; exit 1; }
done
command -v javac >/dev/null || { echo "compare.sh: javac not found" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
javac -cp "$jars" -d "$tmp" internal/bench/java/AuditBench.java

echo "# Java: ActiveMQ audits, one JVM each" >&2
for impl in activemq-nosync activemq-sync; do
	java -Xms256m -Xmx1g -cp "$tmp:$jars" AuditBench -impl "$impl" -runs "${RUNS:-9}" -warmup "${WARMUP:-10}"
done | tee "$tmp/java.txt" >&2

echo "# Go: go test -bench, count ${COUNT:-5}" >&2
go test -run='^$' -count="${COUNT:-5}" -benchmem \
	-bench='^BenchmarkCheck$/^workload=(inorder|replay)$/^depth=2048$/^producers=64$/^impl=(audit|locked|sharded|connaudit|floor-map|map|lru)$' \
	./internal/bench/ | tee "$tmp/go.txt" >&2

awk '
	# name without the -GOMAXPROCS suffix -> best ns/op
	/^BenchmarkCheck\// {
		name = $1; sub(/-[0-9]+$/, "", name); sub(/^BenchmarkCheck\//, "", name)
		ns = $3 + 0
		if (!(name in best) || ns < best[name]) best[name] = ns
		if (!(name in seen)) { seen[name] = 1; order[n++] = name }
	}
	END {
		printf "%-70s %10s %12s %10s\n", "case (best of runs)", "ns/op", "vs ActiveMQ", "speedup"
		for (i = 0; i < n; i++) {
			name = order[i]
			if (name ~ /impl=activemq/) continue
			split(name, f, "/")
			java = "activemq-nosync"
			if (name ~ /impl=(locked|sharded|connaudit)/) java = "activemq-sync"
			jn = f[1] "/" f[2] "/" f[3] "/impl=" java
			if (jn in best) printf "%-70s %10.1f %12s %9.2fx\n", name, best[name], java, best[jn] / best[name]
			else printf "%-70s %10.1f %12s %10s\n", name, best[name], "-", "-"
		}
		for (i = 0; i < n; i++) if (order[i] ~ /impl=activemq/) printf "%-70s %10.1f\n", order[i], best[order[i]]
	}
' "$tmp/java.txt" "$tmp/go.txt"
