package bench_test

import (
	"context"
	"errors"
	"testing"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/bench"
)

const sampleOutput = `# java 17.0.15, 262144 ids per inorder run, 64000 replay ids x 4 passes
BenchmarkCheck/workload=inorder/depth=2048/producers=64/impl=activemq-nosync 	262144	105.64 ns/op	158.55 median-ns/op	128.6 B/op
# check impl=activemq-nosync workload=inorder duplicates=0 expected=0 OK
BenchmarkCheck/workload=replay/depth=2048/producers=64/impl=activemq-nosync 	256000	114.52 ns/op	175.94 median-ns/op	128.0 B/op
# check impl=activemq-nosync workload=replay duplicates=64000 expected=64000 OK
`

func TestParseJavaOutput(t *testing.T) {
	t.Parallel()
	rs, err := bench.ParseJavaOutput(sampleOutput)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 {
		t.Fatalf("%d results", len(rs))
	}
	r := rs[1]
	if r.Name != "workload=replay/depth=2048/producers=64/impl=activemq-nosync" || r.Impl != "activemq-nosync" ||
		r.Workload != "replay" || r.Depth != 2048 || r.Producers != 64 || r.N != 256000 || r.NsPerOp != 114.52 ||
		r.MedianNsPerOp != 175.94 || r.BytesPerOp != 128 || r.Duplicates != 64000 || r.Expect != 64000 || !r.DuplicatesCorrect {
		t.Fatalf("%+v", r)
	}
	bad := []string{
		"BenchmarkCheck/workload=x/impl=y \t1\t2 ns/op\n",
		"BenchmarkCheck/workload=x/impl=y \t1\tfast ns/op\t3 median-ns/op\t4 B/op\n# check duplicates=0 expected=0 OK\n",
		"# check impl=a workload=b duplicates=0 expected=0 OK\n",
		"BenchmarkCheck/workload=x/impl=y \t1\t2 ns/op\t3 median-ns/op\t4 B/op\n# check impl=y workload=x duplicates=3 expected=0 MISMATCH\n",
		"BenchmarkCheck/workload=x/impl=y \t1\t2 ns/op\t3 median-ns/op\t4 B/op\n",
	}
	for _, in := range bad {
		if _, err := bench.ParseJavaOutput(in); err == nil {
			t.Errorf("accepted %q", in)
		}
	}
}

func TestJavaOptionsCheck(t *testing.T) {
	t.Parallel()
	o := bench.JavaOptions{Jars: []string{"/nonexistent/activemq-client.jar"}}
	if err := o.Check(); !errors.Is(err, bench.ErrNoJava) {
		t.Fatalf("missing jar: %v", err)
	}
	o = bench.JavaOptions{Java: "no-such-java-command"}
	if err := o.Check(); !errors.Is(err, bench.ErrNoJava) {
		t.Fatalf("missing java: %v", err)
	}
}

// TestRunJava runs the real ActiveMQ audit when Java and Debian's
// libactivemq-java are installed (an optional tool, not a service: it is
// skipped, even in CI, where they are missing).
func TestRunJava(t *testing.T) {
	o := bench.JavaOptions{Producers: 8, Depth: 2048, Runs: 1, Warmup: 1}
	if err := o.Check(); err != nil {
		t.Skip(err)
	}
	rs, err := bench.RunJava(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2*len(bench.JavaImpls) {
		t.Fatalf("%d results: %+v", len(rs), rs)
	}
	for _, r := range rs {
		if !r.DuplicatesCorrect || r.NsPerOp <= 0 || r.Producers != 8 {
			t.Errorf("%+v", r)
		}
	}
}
