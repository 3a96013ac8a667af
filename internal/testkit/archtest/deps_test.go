package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/acemq/msgaudit"

// heavy are the dependencies a program pays for only when it imports a
// backend or an exporter: the database drivers, the Prometheus client and
// OpenTelemetry (packages oteltrace and otelmetric).
var heavy = []string{
	"github.com/jackc/pgx/",
	"github.com/redis/go-redis/",
	"modernc.org/sqlite",
	"github.com/prometheus/",
	"go.opentelemetry.io/",
}

// light are the packages that must not depend on any of heavy, directly
// or through another package.
var light = []string{
	"msgid", "bitsetbin", "audit", "connaudit",
	"idempotency", "metadata",
	"receiver", "inbox",
	"internal/metricnames", // the names both exporters read: neither client
	"stompconsumer", "rabbitconsumer", "natsconsumer",
}

// layers ranks every package of the module (paths relative to the
// module). A package may import a module package of a strictly lower rank
// only; see docs/architecture.md for what each layer is.
var layers = map[string]float64{
	// Helpers that import nothing of the module.
	"internal/redact": 0, "internal/nilcheck": 0, "internal/snapframe": 0, "internal/schemereg": 0,
	"internal/tlsconf": 0, "internal/testkit/testenv": 0, "internal/testkit/tcpproxy": 0,
	"internal/testkit/readmecheck": 0, "internal/testkit/testsummary": 0, "internal/testkit/archtest": 0, "internal/testkit/apitest": 0,
	"internal/testkit/testwait": 0, "internal/testkit/logbuf": 0, "internal/testkit/stompsub": 0, "internal/keyjoin": 0, "internal/copysig": 0, "internal/pgtable": 0,
	"internal/admission": 0, "internal/copyhdr": 0, "internal/storelat": 0, "internal/purgeloop": 0, "internal/sqldb": 0, "internal/logkey": 0,
	"internal/outboxid": 0.1, // imports keyjoin
	// Test helpers on top of testenv.
	"internal/testkit/pgrestart": 0.5,
	// Core: msgid → bitsetbin → audit → connaudit.
	"msgid": 1.0, "bitsetbin": 1.1, "audit": 1.2, "audit/audittest": 1.25, "connaudit": 1.3,
	// Store interfaces, their memory stores and conformance suites.
	"idempotency": 2, "metadata": 2,
	"internal/claimkit":     2.2,  // tokens, the two-state TryClaim and the checks the backends share
	"internal/claimsql":     2.25, // confirm, release, is-confirmed and the purge of the SQL stores
	"internal/metasql":      2.3,  // the SQL metadata stores' operations, once for every dialect
	"idempotency/storetest": 2.5, "metadata/storetest": 2.5,
	// The pipeline.
	"receiver": 3,
	// The metrics both exporters export and the fields they read, and
	// the known snapshots their tests read.
	"internal/metricnames": 3.1, "internal/testkit/metricfixture": 3.1,
	// What the transports share beside the pipeline.
	"internal/consumerkit": 3.2,
	// The transactional inbox (database/sql, no driver).
	"internal/inboxsql": 3.5, "internal/inboxlane": 3.5, "internal/inboxcore": 3.6, "inbox": 4,
	// The transactional outbox, beside the inbox whose dialects it shares.
	"outbox": 4.2,
	// Backends: one driver each, never each other.
	"internal/metaurl":              4.5,
	"internal/storeconn":            4.5,
	"internal/redisconn":            4.5,
	"internal/pgpooler":             4.5,
	"internal/mysqlurl":             4.5,
	"internal/sqldb/pgxdb":          4.5,
	"internal/testkit/storetestkit": 4.5,
	"idempotency/sqlitestore":       5, "idempotency/redisstore": 5, "idempotency/pgstore": 5, "idempotency/mysqlstore": 5,
	"metadata/sqlitemeta": 5, "metadata/redismeta": 5, "metadata/pgmeta": 5, "metadata/mysqlmeta": 5,
	"inbox/pgxinbox": 5,
	// Exporters, modules of their own: the Prometheus collectors
	// (promexport/go.mod) read the pipeline's counters and the transports'
	// counters as plain structs, so below the transports; the tracing
	// module (oteltrace/go.mod), a receiver.Observer; and the metrics
	// module (otelmetric/go.mod), the same metrics as promexport.
	"promexport": 3.5, "oteltrace": 3.5, "otelmetric": 3.5,
	// Transports.
	"stompconsumer": 6, "rabbitconsumer": 6, "natsconsumer": 6,
	// Tools.
	"internal/testkit/crashtest": 9, "internal/testkit/failovertest": 9, "internal/testkit/chaintest": 9,
	// The tools' module (cmd/msgaudit/go.mod): the command and what only
	// it uses; the bench chart is a module of its own
	// (cmd/msgaudit/benchchart/go.mod) that reads the bench report.
	"cmd/msgaudit/internal/benchreport": 7.5, "cmd/msgaudit/internal/benchkit": 8, "cmd/msgaudit/internal/tune": 9, "cmd/msgaudit/internal/bench": 9,
	"cmd/msgaudit/internal/brokermodel": 9, "cmd/msgaudit/internal/bench/e2e": 9,
	"cmd/msgaudit/internal/bench/e2e/cmd/e2e": 9.5, "cmd/msgaudit/internal/bench/lone": 9,
	"cmd/msgaudit": 10, "cmd/msgaudit/benchchart": 10,
}

type pkg struct {
	ImportPath string
	Imports    []string
	Module     *struct{ Path string }
	Standard   bool
}

// list runs go list -deps -json on patterns and returns the packages by
// import path.
func list(t *testing.T, patterns ...string) map[string]*pkg {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	cmd := exec.Command(gobin, append([]string{"list", "-deps", "-json=ImportPath,Imports,Module,Standard"}, patterns...)...)
	cmd.Dir = "../../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	pkgs := map[string]*pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs[p.ImportPath] = &p
	}
	return pkgs
}

// chain returns the import path from root to target ("a → b → c"), or ""
// when root does not reach target.
func chain(pkgs map[string]*pkg, root, target string) string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == target {
			var path []string
			for p := target; p != ""; p = prev[p] {
				path = append(path, p)
			}
			for i, j := 0, len(path)-1; i < j; i, j = i+1, j-1 {
				path[i], path[j] = path[j], path[i]
			}
			return strings.Join(path, " → ")
		}
		p := pkgs[cur]
		if p == nil {
			continue
		}
		for _, imp := range p.Imports {
			if _, seen := prev[imp]; !seen {
				prev[imp] = cur
				queue = append(queue, imp)
			}
		}
	}
	return ""
}

// TestLightPackagesLinkNoDriver: the pipeline, the transports and the
// core link no database driver and no Prometheus client; those come only
// with the backend and exporter packages a program imports.
func TestLightPackagesLinkNoDriver(t *testing.T) {
	var patterns []string
	for _, p := range light {
		patterns = append(patterns, module+"/"+p)
	}
	pkgs := list(t, patterns...)
	for _, p := range light {
		root := module + "/" + p
		if pkgs[root] == nil {
			t.Errorf("go list did not report %s", root)
			continue
		}
		var bad []string
		for path := range pkgs {
			for _, h := range heavy {
				if strings.HasPrefix(path, h) {
					if c := chain(pkgs, root, path); c != "" {
						bad = append(bad, c)
					}
				}
			}
		}
		sort.Strings(bad)
		// One chain per heavy dependency is enough to find the culprit.
		shown := map[string]bool{}
		for _, c := range bad {
			for _, h := range heavy {
				if strings.Contains(c, h) && !shown[h] {
					shown[h] = true
					t.Errorf("%s depends on %s: %s", p, strings.TrimSuffix(h, "/"), c)
				}
			}
		}
	}
}

// brokerClients are the broker client libraries; a program links one only
// through the transport it imports.
var brokerClients = []string{
	"github.com/go-stomp/",
	"github.com/rabbitmq/amqp091-go",
	"github.com/nats-io/",
}

// TestExporterLinksNoTransport: promexport and otelmetric export the
// transports' counters from receiver.TransportStats, so a program that
// scrapes the pipeline (or a RabbitMQ consumer) does not link go-stomp,
// nor amqp091-go. Neither links the other's client: promexport no
// OpenTelemetry, otelmetric no Prometheus.
func TestExporterLinksNoTransport(t *testing.T) {
	for exporter, other := range map[string]string{"promexport": "go.opentelemetry.io/", "otelmetric": "github.com/prometheus/"} {
		root := module + "/" + exporter
		pkgs := list(t, root)
		if pkgs[root] == nil {
			t.Fatalf("go list did not report %s", root)
		}
		for path := range pkgs {
			for _, c := range append(brokerClients, other) {
				if strings.HasPrefix(path, c) {
					t.Errorf("%s depends on %s: %s", exporter, path, chain(pkgs, root, path))
				}
			}
			for _, tr := range []string{module + "/stompconsumer", module + "/rabbitconsumer", module + "/natsconsumer"} {
				if path == tr {
					t.Errorf("%s depends on a transport: %s", exporter, chain(pkgs, root, path))
				}
			}
		}
	}
}

// TestLayers: every package of the module has a layer, and imports module
// packages of lower layers only.
func TestLayers(t *testing.T) {
	pkgs := list(t, module+"/...")
	rel := func(path string) (string, bool) {
		if path == module {
			return "", true
		}
		r, ok := strings.CutPrefix(path, module+"/")
		return r, ok
	}
	for path, p := range pkgs {
		from, ok := rel(path)
		if !ok || p.Standard {
			continue
		}
		lf, known := layers[from]
		if !known {
			t.Errorf("package %s has no layer: add it to layers here and to docs/architecture.md", from)
			continue
		}
		for _, imp := range p.Imports {
			to, ok := rel(imp)
			if !ok {
				continue
			}
			lt, known := layers[to]
			if known && lt >= lf {
				t.Errorf("%s (layer %v) imports %s (layer %v): a package may import lower layers only", from, lf, to, lt)
			}
		}
	}
	for name := range layers {
		if pkgs[module+"/"+name] == nil {
			t.Errorf("layers names %s, which go list does not know: remove it", name)
		}
	}
	if t.Failed() {
		t.Logf("%d packages checked", len(pkgs))
	}
}

// toolOnly are modules only the tools' modules (cmd/msgaudit, and
// cmd/msgaudit/benchchart for the charts) may require: the charts, the
// progress bar and the terminal check of the command.
var toolOnly = []string{"gonum.org/", "github.com/schollz/progressbar", "golang.org/x/term"}

// tracingOnly are modules only the OpenTelemetry modules (oteltrace,
// otelmetric) may require.
var tracingOnly = []string{"go.opentelemetry.io/"}

// prometheusOnly are modules only the exporters' modules (promexport, and
// otelmetric for its OpenTelemetry-to-Prometheus bridge) may require.
var prometheusOnly = []string{"github.com/prometheus/"}

// TestLibraryRequiresNoToolDependency: the library's go.mod requires none
// of the tools' dependencies, no OpenTelemetry module and no Prometheus
// module (directly or indirectly, tests included), so a program that
// imports the library never has them in its module graph.
func TestLibraryRequiresNoToolDependency(t *testing.T) {
	gomod, err := os.ReadFile("../../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(gomod), "\n") {
		for _, m := range toolOnly {
			if strings.Contains(line, m) {
				t.Errorf("the library's go.mod requires a tool's dependency: %s (it belongs in cmd/msgaudit/go.mod)", strings.TrimSpace(line))
			}
		}
		for _, m := range tracingOnly {
			if strings.Contains(line, m) {
				t.Errorf("the library's go.mod requires an OpenTelemetry module: %s (it belongs in oteltrace/go.mod or otelmetric/go.mod)", strings.TrimSpace(line))
			}
		}
		for _, m := range prometheusOnly {
			if strings.Contains(line, m) {
				t.Errorf("the library's go.mod requires a Prometheus module: %s (it belongs in promexport/go.mod)", strings.TrimSpace(line))
			}
		}
	}
}

// TestLibraryLinksNoPrometheus: no package of the library's module (./...
// stops at the nested modules) links a Prometheus module; the collectors
// are in the promexport module.
func TestLibraryLinksNoPrometheus(t *testing.T) {
	pkgs := list(t, "./...")
	var roots []string
	for path, p := range pkgs {
		if p.Module != nil && p.Module.Path == module {
			roots = append(roots, path)
		}
	}
	if len(roots) == 0 {
		t.Fatal("go list reported no package of the library's module")
	}
	sort.Strings(roots)
	linked := false // one chain is enough to find the culprit
	for path, p := range pkgs {
		if p.Module != nil && p.Module.Path != module {
			if p.Module.Path == module+"/promexport" {
				t.Errorf("the library's module imports package %s of the promexport module", path)
			}
		}
		for _, h := range prometheusOnly {
			if linked || !strings.HasPrefix(path, h) {
				continue
			}
			for _, r := range roots {
				if c := chain(pkgs, r, path); c != "" {
					t.Errorf("the library's module links %s: %s", path, c)
					linked = true
					break
				}
			}
		}
	}
}
