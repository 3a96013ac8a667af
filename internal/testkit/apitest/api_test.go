package apitest

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/build"
	"go/doc"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/acemq/msgaudit"

var update = flag.Bool("update", false, "rewrite the api/ files from the code")

// TestAPI compares the exported API of every public package with its file
// in api/ and fails on any difference, listing the lines added and removed.
func TestAPI(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	apis, err := moduleAPI(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(apis) == 0 {
		t.Fatal("no public package found under " + root)
	}
	dir := filepath.Join(root, "api")
	if *update {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]bool{}
	total := 0
	defer func() { t.Logf("%-28s %4d identifiers", "all public packages", total) }()
	for _, rel := range slices.Sorted(maps.Keys(apis)) {
		lines := apis[rel]
		file := filepath.Join(dir, filepath.FromSlash(rel)+".txt")
		want[file] = true
		got := strings.Join(lines, "\n") + "\n"
		ids, fields := count(lines)
		total += ids
		t.Logf("%-28s %4d identifiers %4d struct fields", rel, ids, fields)
		if *update {
			if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		old, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%s: no API file for this package (%v); run go test ./internal/testkit/apitest -update and review the new file", rel, err)
			continue
		}
		if d := diff(strings.Split(strings.TrimSuffix(string(old), "\n"), "\n"), lines); d != "" {
			t.Errorf("the exported API of %s differs from api/%s.txt:\n%s\nif the change is intended, run go test ./internal/testkit/apitest -update and commit the file", rel, rel, d)
		}
	}
	if *update {
		return
	}
	// A file whose package is gone is stale.
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !want[p] {
			t.Errorf("%s has no public package any more; run go test ./internal/testkit/apitest -update", p)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// count returns how many identifiers (funcs, types, methods, consts,
// vars) and exported struct fields the lines declare.
func count(lines []string) (ids, fields int) {
	for _, l := range lines {
		switch {
		case strings.Contains(l, " struct, "):
			fields++
		case !strings.Contains(l, " interface, "):
			ids++
		}
	}
	return ids, fields
}

// diff lists the lines only in old (-) and only in new (+).
func diff(old, new []string) string {
	in := func(s []string) map[string]bool {
		m := make(map[string]bool, len(s))
		for _, l := range s {
			m[l] = true
		}
		return m
	}
	o, n := in(old), in(new)
	var b strings.Builder
	for _, l := range old {
		if !n[l] {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range new {
		if !o[l] {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}

// libraryModules are the nested modules that are part of the library's
// public API (their module path is the library's plus their directory).
var libraryModules = map[string]bool{"oteltrace": true, "otelmetric": true, "promexport": true}

// moduleAPI returns the API lines of every public package under root,
// keyed by the package's directory relative to root. Public means: not
// under internal/ or cmd/, not a command, not in a nested module other
// than libraryModules, not testdata.
func moduleAPI(root string) (map[string][]string, error) {
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		name := d.Name()
		if rel != "." {
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" ||
				rel == "internal" || rel == "cmd" || rel == "api" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && !libraryModules[rel] {
				return filepath.SkipDir // a module of its own
			}
		}
		lines, err := packageAPI(p, path(rel))
		if err != nil {
			return err
		}
		if lines != nil {
			out[rel] = lines
		}
		return nil
	})
	return out, err
}

func path(rel string) string {
	if rel == "." {
		return module
	}
	return module + "/" + rel
}

// packageAPI returns the sorted API lines of the package in dir, or nil
// when dir holds no importable package.
func packageAPI(dir, importPath string) ([]string, error) {
	bp, err := build.ImportDir(dir, 0)
	if err != nil {
		var none *build.NoGoError
		if errors.As(err, &none) {
			return nil, nil
		}
		return nil, err
	}
	if bp.Name == "main" {
		return nil, nil
	}
	fset := token.NewFileSet()
	files := make([]*ast.File, 0, len(bp.GoFiles))
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	var lines []string
	{
		dp, err := doc.NewFromFiles(fset, files, importPath)
		if err != nil {
			return nil, err
		}
		w := &writer{fset: fset, prefix: "pkg " + importPath + ", "}
		w.values("const", dp.Consts)
		w.values("var", dp.Vars)
		for _, f := range dp.Funcs {
			w.fn("func", f)
		}
		for _, ty := range dp.Types {
			w.typ(ty)
		}
		lines = append(lines, w.lines...)
	}
	if lines == nil {
		return nil, nil
	}
	slices.Sort(lines)
	return slices.Compact(lines), nil
}

type writer struct {
	fset   *token.FileSet
	prefix string
	lines  []string
}

func (w *writer) add(format string, args ...any) {
	w.lines = append(w.lines, w.prefix+fmt.Sprintf(format, args...))
}

// node prints n as gofmt would, on one line.
func (w *writer) node(n any) string {
	var b bytes.Buffer
	if err := printer.Fprint(&b, w.fset, n); err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// fields prints a parameter or result list as its types alone: names
// change without changing the API.
func (w *writer) fields(fl *ast.FieldList) string {
	if fl == nil {
		return ""
	}
	var parts []string
	for _, f := range fl.List {
		ty := w.node(f.Type)
		for range max(len(f.Names), 1) {
			parts = append(parts, ty)
		}
	}
	return strings.Join(parts, ", ")
}

// signature prints a function type without the func keyword.
func (w *writer) signature(ft *ast.FuncType) string {
	s := "(" + w.fields(ft.Params) + ")"
	if ft.Results != nil && len(ft.Results.List) > 0 {
		r := w.fields(ft.Results)
		if len(ft.Results.List) == 1 && len(ft.Results.List[0].Names) <= 1 {
			s += " " + r
		} else {
			s += " (" + r + ")"
		}
	}
	return s
}

func (w *writer) typeParams(fl *ast.FieldList) string {
	if fl == nil || len(fl.List) == 0 {
		return ""
	}
	var parts []string
	for _, f := range fl.List {
		var names []string
		for _, n := range f.Names {
			names = append(names, n.Name)
		}
		parts = append(parts, strings.Join(names, ", ")+" "+w.node(f.Type))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func (w *writer) fn(kind string, f *doc.Func) {
	ft := f.Decl.Type
	if f.Decl.Recv != nil && len(f.Decl.Recv.List) > 0 {
		w.add("method (%s) %s%s", w.node(f.Decl.Recv.List[0].Type), f.Name, w.signature(ft))
		return
	}
	w.add("%s %s%s%s", kind, f.Name, w.typeParams(ft.TypeParams), w.signature(ft))
}

// values prints each exported name of const and var groups, with its
// type where the source states it (carried down a const group as Go
// carries it); values are not recorded.
func (w *writer) values(kind string, vs []*doc.Value) {
	for _, v := range vs {
		var carried string
		for _, s := range v.Decl.Specs {
			vs := s.(*ast.ValueSpec)
			ty := ""
			switch {
			case vs.Type != nil:
				ty = w.node(vs.Type)
			case kind == "const" && len(vs.Values) == 0:
				ty = carried
			case len(vs.Values) > 0:
				ty = w.guess(vs.Values[0])
			}
			if kind == "const" && (vs.Type != nil || len(vs.Values) > 0) {
				carried = ty
			}
			for _, n := range vs.Names {
				if !n.IsExported() {
					continue
				}
				if ty == "" {
					w.add("%s %s", kind, n.Name)
				} else {
					w.add("%s %s %s", kind, n.Name, ty)
				}
			}
		}
	}
}

// guess names the type of an untyped declaration's value where the
// source makes it plain: an error constructor, a conversion, a composite
// literal or an address of one. Otherwise it returns "".
func (w *writer) guess(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.CallExpr:
		switch w.node(e.Fun) {
		case "errors.New", "fmt.Errorf":
			return "error"
		}
		if len(e.Args) == 1 {
			if id, ok := e.Fun.(*ast.Ident); ok && ast.IsExported(id.Name) {
				return id.Name // a conversion to a type of the package
			}
		}
	case *ast.CompositeLit:
		if e.Type != nil {
			return w.node(e.Type)
		}
	case *ast.UnaryExpr:
		if e.Op == token.AND {
			if t := w.guess(e.X); t != "" {
				return "*" + t
			}
		}
	}
	return ""
}

func (w *writer) typ(t *doc.Type) {
	ts := t.Decl.Specs[0].(*ast.TypeSpec)
	for _, s := range t.Decl.Specs {
		if s.(*ast.TypeSpec).Name.Name == t.Name {
			ts = s.(*ast.TypeSpec)
		}
	}
	name := t.Name + w.typeParams(ts.TypeParams)
	switch u := ts.Type.(type) {
	case *ast.StructType:
		w.add("type %s struct", name)
		for _, f := range u.Fields.List {
			if len(f.Names) == 0 {
				if n := embeddedName(f.Type); ast.IsExported(n) {
					w.add("type %s struct, embedded %s", t.Name, w.node(f.Type))
				}
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					w.add("type %s struct, %s %s", t.Name, n.Name, w.node(f.Type))
				}
			}
		}
	case *ast.InterfaceType:
		w.add("type %s interface", name)
		for _, m := range u.Methods.List {
			if len(m.Names) == 0 {
				w.add("type %s interface, embedded %s", t.Name, w.node(m.Type))
				continue
			}
			for _, n := range m.Names {
				if ft, ok := m.Type.(*ast.FuncType); ok && n.IsExported() {
					w.add("type %s interface, %s%s", t.Name, n.Name, w.signature(ft))
				}
			}
		}
	default:
		if ts.Assign.IsValid() {
			w.add("type %s = %s", name, w.node(ts.Type))
		} else {
			w.add("type %s %s", name, w.node(ts.Type))
		}
	}
	w.values("const", t.Consts)
	w.values("var", t.Vars)
	for _, f := range t.Funcs {
		w.fn("func", f)
	}
	for _, m := range t.Methods {
		w.fn("method", m)
	}
}

// embeddedName is the type name of an embedded field: T, *T, pkg.T.
func embeddedName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return embeddedName(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	case *ast.IndexExpr:
		return embeddedName(e.X)
	case *ast.IndexListExpr:
		return embeddedName(e.X)
	}
	return ""
}

// TestWriter pins the line format on a small package.
func TestWriter(t *testing.T) {
	dir := t.TempDir()
	src := `package p

import "errors"

// Kind is a kind.
type Kind int

const (
	A Kind = iota
	B
	c
)

const Max = 10

var ErrX = errors.New("x")

type Opts struct {
	Depth, Width int
	hidden       bool
	Embedded
}

type Embedded struct{}

type I interface {
	Do(ctx int, s string) (n int, err error)
	fmtStringer
}

type fmtStringer interface{ String() string }

func New(o Opts) (*Opts, error) { return nil, nil }

func (o *Opts) Run(a, b int) error { return nil }

func Map[K comparable, V any](m map[K]V) []K { return nil }

type Alias = Opts
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := packageAPI(dir, "example.com/p")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"pkg example.com/p, const A Kind",
		"pkg example.com/p, const B Kind",
		"pkg example.com/p, const Max",
		"pkg example.com/p, func Map[K comparable, V any](map[K]V) []K",
		"pkg example.com/p, func New(Opts) (*Opts, error)",
		"pkg example.com/p, method (*Opts) Run(int, int) error",
		"pkg example.com/p, type Alias = Opts",
		"pkg example.com/p, type Embedded struct",
		"pkg example.com/p, type I interface",
		"pkg example.com/p, type I interface, Do(int, string) (int, error)",
		"pkg example.com/p, type Kind int",
		"pkg example.com/p, type Opts struct",
		"pkg example.com/p, type Opts struct, Depth int",
		"pkg example.com/p, type Opts struct, Width int",
		"pkg example.com/p, type Opts struct, embedded Embedded",
		"pkg example.com/p, var ErrX error",
	}
	if d := diff(want, got); d != "" {
		t.Errorf("API lines differ from the expected:\n%s", d)
	}
}
