package readmecheck

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// block is one ```go block of a Markdown file.
type block struct {
	file string // the Markdown file, relative to the module root
	line int    // line of the block's first line of code, from 1
	code string
}

// goBlocks returns the ```go blocks of a Markdown document.
func goBlocks(md []byte) ([]block, error) {
	var (
		blocks []block
		cur    *block
		body   strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(md))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && trimmed == "```go":
			cur = &block{line: n + 1}
			body.Reset()
		case cur != nil && trimmed == "```":
			cur.code = body.String()
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(line)
			body.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: ```go block never closed", cur.line-1)
	}
	return blocks, nil
}

// imports are the packages a README block may use by their package name;
// the generated file imports those a block names.
var imports = map[string]string{
	"audit": "github.com/acemq/msgaudit/audit", "connaudit": "github.com/acemq/msgaudit/connaudit",
	"idempotency": "github.com/acemq/msgaudit/idempotency", "metadata": "github.com/acemq/msgaudit/metadata",
	"msgid": "github.com/acemq/msgaudit/msgid", "receiver": "github.com/acemq/msgaudit/receiver",
	"rabbitconsumer": "github.com/acemq/msgaudit/rabbitconsumer", "stompconsumer": "github.com/acemq/msgaudit/stompconsumer",
	"natsconsumer": "github.com/acemq/msgaudit/natsconsumer",
	"nats":         "github.com/nats-io/nats.go", "jetstream": "github.com/nats-io/nats.go/jetstream",
	"amqp":  "github.com/rabbitmq/amqp091-go",
	"inbox": "github.com/acemq/msgaudit/inbox", "pgxinbox": "github.com/acemq/msgaudit/inbox/pgxinbox",
	"outbox":      "github.com/acemq/msgaudit/outbox",
	"sqlitestore": "github.com/acemq/msgaudit/idempotency/sqlitestore",
	"redisstore":  "github.com/acemq/msgaudit/idempotency/redisstore",
	"pgstore":     "github.com/acemq/msgaudit/idempotency/pgstore",
	"sqlitemeta":  "github.com/acemq/msgaudit/metadata/sqlitemeta",
	"redismeta":   "github.com/acemq/msgaudit/metadata/redismeta",
	"pgmeta":      "github.com/acemq/msgaudit/metadata/pgmeta",
	"promexport":  "github.com/acemq/msgaudit/promexport", "prometheus": "github.com/prometheus/client_golang/prometheus",
	"oteltrace": "github.com/acemq/msgaudit/oteltrace", "otel": "go.opentelemetry.io/otel", "otelmetric": "github.com/acemq/msgaudit/otelmetric",
	"sql": "database/sql", "pgx": "github.com/jackc/pgx/v5", "pgxpool": "github.com/jackc/pgx/v5/pgxpool",
	"context": "context", "errors": "errors", "fmt": "fmt", "os": "os", "slog": "log/slog", "time": "time",
}

var qualified = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.[A-Za-z_]`)

// prelude declares what the documents' snippets take as given: the
// application's own functions and values, named as the README names them.
const prelude = `package readmegen

import (
	"context"
	"database/sql"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/receiver"
	"github.com/acemq/msgaudit/stompconsumer"
	"github.com/nats-io/nats.go"
)

// apply and handle are the application's message handlers.
func apply(ctx context.Context, m *receiver.Message) error  { return nil }
func handle(ctx context.Context, m *receiver.Message) error { return nil }

// saveOrder is the application's own work on a message's key and body.
func saveOrder(ctx context.Context, key string, body []byte) error { return nil }

// credit is an inbox handler: it writes the message's effect through tx.
func credit(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return nil }

// work is the application's work for one claimed message.
func work(ctx context.Context) error { return nil }

var (
	msgID, id string                // a message id
	body      []byte                // a message body
	store     idempotency.Store     // the store opened in "Idempotency stores"
	c         *stompconsumer.Consumer // the consumer built in "Embedding the STOMP consumer"
	ib        *inbox.Inbox            // the inbox opened in the quick start
	db        *sql.DB                 // the database opened in the quick start
	nc        *nats.Conn              // a NATS connection, from nats.Connect
)

var _, _, _, _, _, _ = apply, handle, saveOrder, work, msgID, body
var _, _, _, _, _, _, _ = id, store, c, credit, ib, db, nc
`

// generate writes the package the blocks compile in, prelude (a Go file of
// package readmegen) beside them: each block is the body of its own
// function, with a //line directive so that errors point at README.md.
func generate(dir, prelude string, blocks []block) error {
	var b strings.Builder
	b.WriteString("package readmegen\n\nimport (\n")
	used := map[string]bool{"context": true}
	for _, bl := range blocks {
		for _, m := range qualified.FindAllStringSubmatch(bl.code, -1) {
			if _, ok := imports[m[1]]; ok {
				used[m[1]] = true
			}
		}
	}
	names := make([]string, 0, len(used))
	for n := range used {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(&b, "\t%q\n", imports[n])
	}
	b.WriteString(")\n\n")
	for _, n := range names {
		x := anyExported(n)
		if x == "" {
			return fmt.Errorf("readmecheck: add an exported name of package %s to anyExported", n)
		}
		fmt.Fprintf(&b, "var _ = %s.%s\n", n, x)
	}
	for i, bl := range blocks {
		end := "\treturn nil\n"
		if endsInReturn(bl.code) {
			end = "" // a return nil after it would be unreachable
		}
		fmt.Fprintf(&b, "\nfunc readmeBlock%d(ctx context.Context) error {\n//line %s:%d\n%s%s}\n", i, bl.file, bl.line, bl.code, end)
	}
	if err := os.WriteFile(filepath.Join(dir, "prelude.go"), []byte(prelude), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "blocks.go"), []byte(b.String()), 0o644)
}

// endsInReturn reports whether the block's last top-level statement is a
// return: the last unindented line that does not just close brackets.
func endsInReturn(code string) bool {
	lines := strings.Split(strings.TrimRight(code, "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := lines[i]
		if l == "" || l[0] == ' ' || l[0] == '\t' || l[0] == '/' || l[0] == '}' || l[0] == ')' {
			continue
		}
		return l == "return" || strings.HasPrefix(l, "return ")
	}
	return false
}

// anyExported names an exported identifier of each importable package, so
// an import no block uses still compiles.
func anyExported(pkg string) string {
	return map[string]string{
		"audit": "New", "connaudit": "New", "idempotency": "Open", "metadata": "Open", "msgid": "Split",
		"receiver": "New", "rabbitconsumer": "New", "stompconsumer": "New", "natsconsumer": "New", "amqp": "Dial",
		"nats": "Connect", "jetstream": "New",
		"inbox": "New", "pgxinbox": "New", "outbox": "New", "sql": "Open", "pgx": "Connect", "pgxpool": "New",
		"context": "Background", "errors": "New", "fmt": "Sprint", "os": "Getenv", "slog": "Default", "time": "Now",
		"sqlitestore": "Open", "redisstore": "New", "pgstore": "New", "sqlitemeta": "Open", "redismeta": "New", "pgmeta": "New",
		"promexport": "Receiver", "prometheus": "NewRegistry", "oteltrace": "New", "otel": "GetTracerProvider", "otelmetric": "Receiver",
	}[pkg]
}

// goDeadline bounds each go command the test runs (they compile the module,
// slowly on a shared machine): a hung one is killed and fails the test.
const goDeadline = 5 * time.Minute

// killed says why a go command run with ctx failed when ctx ended it.
func killed(ctx context.Context) string {
	if ctx.Err() != nil {
		return fmt.Sprintf(" (killed: it did not finish within %v)", goDeadline)
	}
	return ""
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	ctx := testwait.Context(t, goDeadline)
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v%s", err, killed(ctx))
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// check compiles and vets the blocks of the Markdown files docs (paths
// relative to the module root), together in one package, and reports
// every discarded error. It returns the problems found, one per line. A
// file without blocks is skipped; none at all is a failure.
func check(t *testing.T, root string, docs ...string) []string {
	t.Helper()
	var blocks []block
	for _, doc := range docs {
		blocks = append(blocks, readBlocks(t, root, doc)...)
	}
	if len(blocks) == 0 {
		t.Fatalf("%s: no ```go blocks", strings.Join(docs, ", "))
	}
	return checkBlocks(t, root, prelude, blocks)
}

// readBlocks returns the ```go blocks of the Markdown file doc (a path
// relative to the module root).
func readBlocks(t *testing.T, root, doc string) []block {
	t.Helper()
	md, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	bs, err := goBlocks(md)
	if err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	for i := range bs {
		bs[i].file = doc
	}
	return bs
}

// checkBlocks compiles and vets blocks with prelude beside them (see check).
func checkBlocks(t *testing.T, root, prelude string, blocks []block) []string {
	t.Helper()
	// Inside the module, so the blocks import its packages; the leading
	// underscore keeps ./... patterns away from it.
	dir, err := os.MkdirTemp(root, "_readmecheck-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := generate(dir, prelude, blocks); err != nil {
		t.Fatal(err)
	}
	rel := "./" + filepath.Base(dir)
	ctx := testwait.Context(t, goDeadline)
	vet := exec.CommandContext(ctx, "go", "vet", rel)
	vet.Dir = root
	if out, err := vet.CombinedOutput(); err != nil {
		return []string{fmt.Sprintf("go vet of %d Markdown blocks: %v%s\n%s", len(blocks), err, killed(ctx), out)}
	}
	return discardedErrors(t, root, rel)
}

// discardedErrors type-checks the generated package against its
// dependencies' export data and reports each call whose error result is
// dropped: a call used as a statement, or an error assigned to _. Deferred
// calls (defer x.Close()) are allowed.
func discardedErrors(t *testing.T, root, pkg string) []string {
	t.Helper()
	ctx := testwait.Context(t, goDeadline)
	list := exec.CommandContext(ctx, "go", "list", "-export", "-deps", "-f", "{{if .Export}}{{.ImportPath}}={{.Export}}{{end}}", pkg)
	list.Dir = root
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list -export: %v%s", err, killed(ctx))
	}
	exports := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if p, f, ok := strings.Cut(l, "="); ok {
			exports[p] = f
		}
	}
	fset := token.NewFileSet()
	dir := filepath.Join(root, pkg)
	var files []*ast.File
	for _, name := range []string{"prelude.go", "blocks.go"} {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	lookup := func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", lookup)}
	if _, err := conf.Check("readmegen", fset, files, info); err != nil {
		t.Fatalf("type-check of the generated package: %v", err)
	}
	errType := types.Universe.Lookup("error").Type()
	results := func(call ast.Expr) []types.Type {
		tv, ok := info.Types[call]
		if !ok {
			return nil
		}
		if tup, ok := tv.Type.(*types.Tuple); ok {
			r := make([]types.Type, tup.Len())
			for i := range r {
				r[i] = tup.At(i).Type()
			}
			return r
		}
		return []types.Type{tv.Type}
	}
	var problems []string
	report := func(n ast.Node, what string) {
		problems = append(problems, fmt.Sprintf("%s: %s", fset.Position(n.Pos()), what))
	}
	ast.Inspect(files[1], func(n ast.Node) bool {
		switch s := n.(type) {
		case *ast.DeferStmt:
			return false
		case *ast.ExprStmt:
			if call, ok := s.X.(*ast.CallExpr); ok && slices.ContainsFunc(results(call), func(t types.Type) bool { return types.Identical(t, errType) }) {
				report(s, "the error this call returns is not checked")
			}
		case *ast.AssignStmt:
			var rt []types.Type
			if len(s.Rhs) == 1 && len(s.Lhs) > 1 {
				rt = results(s.Rhs[0])
			} else {
				for _, r := range s.Rhs {
					rt = append(rt, info.Types[r].Type)
				}
			}
			for i, l := range s.Lhs {
				if id, ok := l.(*ast.Ident); ok && id.Name == "_" && i < len(rt) && rt[i] != nil && types.Identical(rt[i], errType) {
					report(l, "an error is assigned to _")
				}
			}
		}
		return true
	})
	return problems
}

// TestReadmeBlocksCompile: every ```go block of README.md compiles (as the
// body of a function with ctx in scope and the names the prelude
// declares), passes go vet, and checks every error it gets.
func TestReadmeBlocksCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a package with go vet")
	}
	root := moduleRoot(t)
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md", "CONTRIBUTING.md", "SECURITY.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	for _, p := range check(t, root, files...) {
		t.Error(p)
	}
}

// TestQuickStartStandsAlone: the README's quick start, its first Go block,
// compiles with nothing but ctx given: every name it uses, its handler
// included, is declared in it or imported, so it works as pasted into a
// function of the reader's own.
func TestQuickStartStandsAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a package with go vet")
	}
	root := moduleRoot(t)
	blocks := readBlocks(t, root, "README.md")
	if len(blocks) == 0 {
		t.Fatal("README.md: no ```go blocks")
	}
	for _, p := range checkBlocks(t, root, "package readmegen\n", blocks[:1]) {
		t.Error(p)
	}
}

// TestCheckCatchesBrokenBlocks: the check fails on a block that does not
// compile, on an ignored error and on an error assigned to _, pointing at
// the Markdown line.
func TestCheckCatchesBrokenBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a package with go vet")
	}
	root := moduleRoot(t)
	for _, tt := range []struct {
		name, md, want string
	}{
		{"does not compile", "text\n\n```go\nc, err := stompconsumer.New(stompconsumer.Config{})\nif err != nil { ... }\n```\n", "BROKEN.md:5"},
		{"unchecked error", "```go\nstore.Release(ctx, idempotency.Claim{})\n```\n", "BROKEN.md:2: the error this call returns is not checked"},
		{"error to blank", "```go\ns, _ := idempotency.Open(ctx, os.Getenv(\"REDIS_URL\"), idempotency.Options{})\ns.Close()\n```\n", "BROKEN.md:2: an error is assigned to _"},
		{"undefined name", "```go\nif err := nosuch(ctx); err != nil {\n\treturn err\n}\n```\n", "BROKEN.md:2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := os.CreateTemp(root, "_BROKEN-*.md")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(f.Name()) })
			if _, err := f.WriteString(tt.md); err != nil {
				t.Fatal(err)
			}
			f.Close()
			problems := check(t, root, filepath.Base(f.Name()))
			got := strings.ReplaceAll(strings.Join(problems, "\n"), filepath.Base(f.Name()), "BROKEN.md")
			if !strings.Contains(got, tt.want) {
				t.Fatalf("check found %q; want a problem at %q", got, tt.want)
			}
		})
	}
}

func TestEndsInReturn(t *testing.T) {
	for code, want := range map[string]bool{
		"return c.Run(ctx)\n":                      true,
		"x := 1\nreturn h(ctx, &m{\n\tA: x,\n})\n": true,
		"if err != nil {\n\treturn err\n}\n":       false,
		"return nil\n// a comment\n":               true,
		"err = c.Run(ctx)\n":                       false,
		"switch {\ncase a:\n\treturn err\n}\n":     false,
		"returned := 1\n":                          false,
	} {
		if got := endsInReturn(code); got != want {
			t.Errorf("endsInReturn(%q) = %t, want %t", code, got, want)
		}
	}
}

func TestGoBlocks(t *testing.T) {
	md := "# t\n```go\na()\n```\n\n```\nnot go\n```\n  ```go\nb()\nc()\n  ```\n"
	got, err := goBlocks([]byte(md))
	if err != nil {
		t.Fatal(err)
	}
	want := []block{{line: 3, code: "a()\n"}, {line: 10, code: "b()\nc()\n"}}
	if !slices.Equal(got, want) {
		t.Fatalf("goBlocks = %+v, want %+v", got, want)
	}
	if _, err := goBlocks([]byte("```go\nx\n")); err == nil {
		t.Fatal("an unclosed block is not an error")
	}
}
