package main

import (
	"os/exec"
	"strings"
	"testing"
)

// chartOnly are the modules only the bench chart (the benchchart module)
// uses: the plotting library, its fonts, its LaTeX and PDF renderers and
// the image packages they bring.
var chartOnly = []string{"gonum.org/", "codeberg.org/go-fonts/", "codeberg.org/go-latex/", "codeberg.org/go-pdf/",
	"git.sr.ht/~sbinet/", "github.com/ajstarks/svgo", "github.com/golang/freetype", "golang.org/x/image"}

// TestCommandLinksNoChart: the msgaudit command (demo, bench, tune) links
// none of the chart's modules, so a first "go run ./cmd/msgaudit demo"
// neither downloads nor compiles them.
func TestCommandLinksNoChart(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := map[string]bool{}
	for _, m := range strings.Fields(string(out)) {
		for _, c := range chartOnly {
			if strings.HasPrefix(m, c) && !seen[m] {
				seen[m] = true
				t.Errorf("the msgaudit command links module %s, which only the bench chart needs", m)
			}
		}
	}
}
