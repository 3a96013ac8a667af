package bench

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// JavaSource is cmd/msgaudit/internal/bench/java/AuditBench.java, embedded so that
// "msgaudit bench" can compile and run it from any directory.
//
//go:embed java/AuditBench.java
var JavaSource string

// ErrNoJava is returned by RunJava (and JavaOptions.Check) when java,
// javac or the ActiveMQ client jar is missing.
var ErrNoJava = errors.New("bench: java, javac or the ActiveMQ client jar not found")

// DefaultJars is the class path of Debian's libactivemq-java and the few
// jars the audit needs at run time (javax.jms for class loading, slf4j for
// IdGenerator's logger).
var DefaultJars = []string{
	"/usr/share/java/activemq-client.jar",
	"/usr/share/java/geronimo-jms_1.1_spec.jar",
	"/usr/share/java/slf4j-api.jar",
	"/usr/share/java/slf4j-nop.jar",
}

// JavaImpls are the ActiveMQ audits AuditBench measures.
var JavaImpls = []string{"activemq-nosync", "activemq-sync"}

// JavaOptions configures RunJava. Zero values mean the defaults.
type JavaOptions struct {
	// Java and Javac are the commands; default "java" and "javac".
	Java, Javac string
	// Jars is the class path; default DefaultJars.
	Jars []string
	// Producers and Depth size the workloads; default 64 and 2048.
	Producers, Depth int
	// Runs are timed, after Warmup untimed runs; default 9 and 10.
	Runs, Warmup int
	// Impls to measure, each in its own JVM; default JavaImpls.
	Impls []string
	// JVMArgs are passed to java before the class; default a 1 GiB heap.
	JVMArgs []string
}

func (o JavaOptions) withDefaults() JavaOptions {
	if o.Java == "" {
		o.Java = "java"
	}
	if o.Javac == "" {
		o.Javac = "javac"
	}
	if o.Jars == nil {
		o.Jars = DefaultJars
	}
	if o.Producers == 0 {
		o.Producers = 64
	}
	if o.Depth == 0 {
		o.Depth = 2048
	}
	if o.Runs == 0 {
		o.Runs = 9
	}
	if o.Warmup == 0 {
		o.Warmup = 10
	}
	if o.Impls == nil {
		o.Impls = JavaImpls
	}
	if o.JVMArgs == nil {
		o.JVMArgs = []string{"-Xms256m", "-Xmx1g"}
	}
	return o
}

// Check reports whether the commands and jars are there (ErrNoJava
// otherwise).
func (o JavaOptions) Check() error {
	o = o.withDefaults()
	for _, c := range []string{o.Java, o.Javac} {
		if _, err := exec.LookPath(c); err != nil {
			return fmt.Errorf("%w: %v", ErrNoJava, err)
		}
	}
	for _, j := range o.Jars {
		if _, err := os.Stat(j); err != nil {
			return fmt.Errorf("%w: %v (apt-get install libactivemq-java)", ErrNoJava, err)
		}
	}
	return nil
}

// JavaResult is one line of AuditBench's output.
type JavaResult struct {
	// Name is the benchmark name, in the Go suite's form:
	// "workload=inorder/depth=2048/producers=64/impl=activemq-nosync".
	Name               string
	Impl               string
	Workload           string
	Depth, Producers   int
	N                  int
	NsPerOp            float64 // best run
	MedianNsPerOp      float64
	BytesPerOp         float64
	Duplicates, Expect int
	DuplicatesCorrect  bool
	checkSeen          bool
}

// RunJava compiles AuditBench into a temporary directory and runs it, one
// JVM per impl, returning its results. A duplicate count that differs from
// the expectation is reported in JavaResult.DuplicatesCorrect and as an
// error.
func RunJava(ctx context.Context, o JavaOptions) ([]JavaResult, error) {
	o = o.withDefaults()
	if err := o.Check(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "msgaudit-java-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "AuditBench.java")
	if err := os.WriteFile(src, []byte(JavaSource), 0o644); err != nil {
		return nil, err
	}
	cp := strings.Join(o.Jars, string(os.PathListSeparator))
	if out, err := exec.CommandContext(ctx, o.Javac, "-cp", cp, "-d", dir, src).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("bench: javac: %v: %s", err, out)
	}
	var all []JavaResult
	for _, impl := range o.Impls {
		args := append([]string{}, o.JVMArgs...)
		args = append(args, "-cp", dir+string(os.PathListSeparator)+cp, "AuditBench",
			"-producers", strconv.Itoa(o.Producers), "-depth", strconv.Itoa(o.Depth),
			"-runs", strconv.Itoa(o.Runs), "-warmup", strconv.Itoa(o.Warmup), "-impl", impl)
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, o.Java, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		runErr := cmd.Run()
		rs, perr := ParseJavaOutput(stdout.String())
		all = append(all, rs...)
		if runErr != nil {
			return all, fmt.Errorf("bench: java AuditBench -impl %s: %v: %s", impl, runErr, strings.TrimSpace(stderr.String()))
		}
		if perr != nil {
			return all, perr
		}
	}
	return all, nil
}

// ParseJavaOutput parses AuditBench's output: benchmark lines and the
// "# check" line after each.
func ParseJavaOutput(out string) ([]JavaResult, error) {
	var rs []JavaResult
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "BenchmarkCheck/"):
			f := strings.Fields(line)
			if len(f) != 8 || f[3] != "ns/op" || f[5] != "median-ns/op" || f[7] != "B/op" {
				return rs, fmt.Errorf("bench: unexpected AuditBench line %q", line)
			}
			r := JavaResult{Name: strings.TrimPrefix(f[0], "BenchmarkCheck/")}
			for _, kv := range strings.Split(r.Name, "/") {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "impl":
					r.Impl = v
				case "workload":
					r.Workload = v
				case "depth":
					r.Depth, _ = strconv.Atoi(v)
				case "producers":
					r.Producers, _ = strconv.Atoi(v)
				}
			}
			var errs [4]error
			r.N, errs[0] = strconv.Atoi(f[1])
			r.NsPerOp, errs[1] = strconv.ParseFloat(f[2], 64)
			r.MedianNsPerOp, errs[2] = strconv.ParseFloat(f[4], 64)
			r.BytesPerOp, errs[3] = strconv.ParseFloat(f[6], 64)
			if err := errors.Join(errs[:]...); err != nil {
				return rs, fmt.Errorf("bench: AuditBench line %q: %w", line, err)
			}
			rs = append(rs, r)
		case strings.HasPrefix(line, "# check "):
			if len(rs) == 0 {
				return rs, fmt.Errorf("bench: AuditBench check line before any result: %q", line)
			}
			r := &rs[len(rs)-1]
			for _, kv := range strings.Fields(strings.TrimPrefix(line, "# check ")) {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "duplicates":
					r.Duplicates, _ = strconv.Atoi(v)
				case "expected":
					r.Expect, _ = strconv.Atoi(v)
				}
			}
			r.DuplicatesCorrect = strings.HasSuffix(line, " OK")
			r.checkSeen = true
			if !r.DuplicatesCorrect {
				return rs, fmt.Errorf("bench: ActiveMQ %s on %s found %d duplicates, expected %d", r.Impl, r.Workload, r.Duplicates, r.Expect)
			}
		}
	}
	for _, r := range rs {
		if !r.checkSeen {
			return rs, fmt.Errorf("bench: AuditBench printed no check line for %s", r.Name)
		}
	}
	return rs, sc.Err()
}
