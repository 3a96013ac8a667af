// AuditBench measures ActiveMQ Classic's client message audit
// (org.apache.activemq.ActiveMQMessageAuditNoSync and its synchronised
// subclass ActiveMQMessageAudit) on the same workloads as msgaudit's Go
// benchmarks, so the two can be compared in one run on one machine
// (cmd/msgaudit/internal/bench/compare.sh, "msgaudit bench").
//
// Workloads (defined identically in internal/benchkit/workload.go):
//
//   Producer p (1-based) has the key "ID:host-41234-1700000000000-1:1:1:<p>";
//   its n-th message id is "<key>:<n>", n from 1 (decimal, no leading zeros).
//
//   inorder  R rounds; round r checks "<key p>:<r>" for p = 1..P in turn
//            (round-robin), R = max(1, 262144/P), so every check is a new id.
//            Before timing, every producer is created with "<key p>:0" so the
//            timed part measures steady-state checks, not producer creation.
//            Each timed run uses a fresh audit.
//   replay   the audit is first fed the whole inorder stream (untimed); the
//            timed part then checks the last K = min(1000, depth) ids of every
//            producer again, round-robin (for k = R-K+1..R, p = 1..P), so
//            every check is a duplicate. Passes repeat over the same ids.
//
// Output: one benchstat-compatible line per (impl, workload) with the best
// run's ns/op, the median run's ns/op, B/op (from the thread's allocated-byte
// counter over the best-of runs) and the duplicates seen per pass, and a
// "# check" line per workload saying whether the duplicate count matched
// the expectation (inorder 0, replay all).
//
// Build and run (see cmd/msgaudit/internal/bench/compare.sh):
//
//   javac -cp /usr/share/java/activemq-client.jar -d /tmp/ab AuditBench.java
//   java -cp /tmp/ab:/usr/share/java/activemq-client.jar:... AuditBench \
//        -producers 64 -depth 2048 -runs 7 -warmup 5
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.activemq.ActiveMQMessageAudit;
import org.apache.activemq.ActiveMQMessageAuditNoSync;

public final class AuditBench {
    static final String KEY_PREFIX = "ID:host-41234-1700000000000-1:1:1:";
    static final int TOTAL_IDS = 262144;
    static final int REPLAY = 1000;

    interface Checker {
        boolean isDuplicate(String id);
    }

    static String key(int p) {
        return KEY_PREFIX + p;
    }

    static String id(int p, long seq) {
        return KEY_PREFIX + p + ":" + seq;
    }

    static int rounds(int producers) {
        return Math.max(1, TOTAL_IDS / producers);
    }

    static String[] inorder(int producers) {
        int r = rounds(producers);
        String[] ids = new String[r * producers];
        int i = 0;
        for (int s = 1; s <= r; s++) {
            for (int p = 1; p <= producers; p++) {
                ids[i++] = id(p, s);
            }
        }
        return ids;
    }

    static String[] warm(int producers) {
        String[] ids = new String[producers];
        for (int p = 1; p <= producers; p++) {
            ids[p - 1] = id(p, 0);
        }
        return ids;
    }

    static String[] replay(int producers, int depth) {
        int r = rounds(producers);
        int k = Math.min(Math.min(REPLAY, depth), r);
        String[] ids = new String[k * producers];
        int i = 0;
        for (int s = r - k + 1; s <= r; s++) {
            for (int p = 1; p <= producers; p++) {
                ids[i++] = id(p, s);
            }
        }
        return ids;
    }

    static Checker newAudit(String impl, int depth, int producers) {
        if (impl.equals("activemq-nosync")) {
            ActiveMQMessageAuditNoSync a = new ActiveMQMessageAuditNoSync(depth, producers);
            return a::isDuplicate;
        }
        if (impl.equals("activemq-sync")) {
            ActiveMQMessageAudit a = new ActiveMQMessageAudit(depth, producers);
            return a::isDuplicate;
        }
        throw new IllegalArgumentException("unknown impl " + impl);
    }

    static long allocated() {
        return ((com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean())
                .getThreadAllocatedBytes(Thread.currentThread().getId());
    }

    static final class Run {
        double nsPerOp;
        double bytesPerOp;
        long dups;
    }

    static int sink;

    static Run runInorder(String impl, int depth, int producers, String[] warm, String[] ids) {
        Checker c = newAudit(impl, depth, producers);
        for (String w : warm) {
            c.isDuplicate(w);
        }
        long dups = 0;
        long a0 = allocated();
        long t0 = System.nanoTime();
        for (String id : ids) {
            if (c.isDuplicate(id)) {
                dups++;
            }
        }
        long t1 = System.nanoTime();
        long a1 = allocated();
        Run r = new Run();
        r.nsPerOp = (double) (t1 - t0) / ids.length;
        r.bytesPerOp = (double) (a1 - a0) / ids.length;
        r.dups = dups;
        return r;
    }

    static Run runReplay(Checker c, String[] ids, int passes) {
        long dups = 0;
        long a0 = allocated();
        long t0 = System.nanoTime();
        for (int pass = 0; pass < passes; pass++) {
            for (String id : ids) {
                if (c.isDuplicate(id)) {
                    dups++;
                }
            }
        }
        long t1 = System.nanoTime();
        long a1 = allocated();
        long n = (long) ids.length * passes;
        Run r = new Run();
        r.nsPerOp = (double) (t1 - t0) / n;
        r.bytesPerOp = (double) (a1 - a0) / n;
        r.dups = dups / passes;
        return r;
    }

    static void report(String impl, String workload, int depth, int producers, long ops,
            List<Run> runs, long wantDups) {
        Run[] sorted = runs.toArray(new Run[0]);
        Arrays.sort(sorted, (x, y) -> Double.compare(x.nsPerOp, y.nsPerOp));
        Run best = sorted[0];
        Run median = sorted[sorted.length / 2];
        boolean ok = true;
        for (Run r : runs) {
            ok &= r.dups == wantDups;
        }
        System.out.printf("BenchmarkCheck/workload=%s/depth=%d/producers=%d/impl=%s \t%d\t%.2f ns/op\t%.2f median-ns/op\t%.1f B/op%n",
                workload, depth, producers, impl, ops, best.nsPerOp, median.nsPerOp, best.bytesPerOp);
        System.out.printf("# check impl=%s workload=%s duplicates=%d expected=%d %s%n",
                impl, workload, best.dups, wantDups, ok ? "OK" : "MISMATCH");
        if (!ok) {
            mismatches++;
        }
    }

    static int mismatches;

    public static void main(String[] args) {
        int producers = 64;
        int depth = 2048;
        int runs = 7;
        int warmup = 5;
        List<String> impls = new ArrayList<>(List.of("activemq-nosync", "activemq-sync"));
        List<String> workloads = new ArrayList<>(List.of("inorder", "replay"));
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            String v = i + 1 < args.length ? args[i + 1] : null;
            switch (a) {
                case "-producers": producers = Integer.parseInt(v); i++; break;
                case "-depth": depth = Integer.parseInt(v); i++; break;
                case "-runs": runs = Integer.parseInt(v); i++; break;
                case "-warmup": warmup = Integer.parseInt(v); i++; break;
                case "-impl": impls = List.of(v.split(",")); i++; break;
                case "-workload": workloads = List.of(v.split(",")); i++; break;
                default:
                    System.err.println("usage: AuditBench [-producers N] [-depth N] [-runs N] [-warmup N] "
                            + "[-impl activemq-nosync,activemq-sync] [-workload inorder,replay]");
                    System.exit(2);
            }
        }
        if (producers < 1 || depth < 1 || runs < 1 || warmup < 0) {
            System.err.println("AuditBench: producers, depth and runs must be >= 1, warmup >= 0");
            System.exit(2);
        }
        String[] warm = warm(producers);
        String[] in = inorder(producers);
        String[] rep = replay(producers, depth);
        int passes = Math.max(1, in.length / rep.length);
        System.out.printf("# java %s, %d ids per inorder run, %d replay ids x %d passes%n",
                System.getProperty("java.version"), in.length, rep.length, passes);
        for (String impl : impls) {
            for (String w : workloads) {
                List<Run> rs = new ArrayList<>();
                if (w.equals("inorder")) {
                    for (int i = 0; i < warmup; i++) {
                        runInorder(impl, depth, producers, warm, in);
                    }
                    for (int i = 0; i < runs; i++) {
                        rs.add(runInorder(impl, depth, producers, warm, in));
                    }
                    report(impl, w, depth, producers, in.length, rs, 0);
                } else if (w.equals("replay")) {
                    Checker c = newAudit(impl, depth, producers);
                    for (String id : in) {
                        c.isDuplicate(id);
                    }
                    for (int i = 0; i < warmup; i++) {
                        runReplay(c, rep, passes);
                    }
                    for (int i = 0; i < runs; i++) {
                        rs.add(runReplay(c, rep, passes));
                    }
                    report(impl, w, depth, producers, (long) rep.length * passes, rs, rep.length);
                } else {
                    System.err.println("AuditBench: unknown workload " + w);
                    System.exit(2);
                }
            }
        }
        System.exit(mismatches == 0 ? 0 : 1);
    }
}
