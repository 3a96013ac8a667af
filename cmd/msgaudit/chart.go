package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/acemq/msgaudit/internal/benchkit"
)

// chartImpls are the lines of the chart, in legend order.
var chartImpls = []string{"audit", "floor-parse", "floor-map", "floor-bit", "map", "lru"}

// writeBenchPNG draws ns/op of the inorder workload against depth (at 64
// producers) and against producers (at depth 2048), both axes log scale,
// with ActiveMQ NoSync's point when it was measured, into a PNG file.
func writeBenchPNG(path string, rep *benchReport) error {
	byDepth := plot.New()
	byDepth.Title.Text = fmt.Sprintf("ns/op vs depth (inorder, %d producers)", benchkit.MainProducers)
	byDepth.X.Label.Text = "depth"
	byProd := plot.New()
	byProd.Title.Text = fmt.Sprintf("ns/op vs producers (inorder, depth %d)", benchkit.MainDepth)
	byProd.X.Label.Text = "producers"
	var depthX, prodX []float64
	var linesD, linesP []any
	for _, impl := range chartImpls {
		var d, p plotter.XYs
		for _, r := range rep.Results {
			if r.Impl != impl || r.Workload != string(benchkit.InOrder) || r.Goroutines != 0 || r.Error != "" || r.NsPerOp <= 0 {
				continue
			}
			if r.Producers == benchkit.MainProducers {
				d = append(d, plotter.XY{X: float64(r.Depth), Y: r.NsPerOp})
				depthX = append(depthX, float64(r.Depth))
			}
			if r.Depth == benchkit.MainDepth {
				p = append(p, plotter.XY{X: float64(r.Producers), Y: r.NsPerOp})
				prodX = append(prodX, float64(r.Producers))
			}
		}
		sortXY(d)
		sortXY(p)
		if len(d) > 0 {
			linesD = append(linesD, impl, d)
		}
		if len(p) > 0 {
			linesP = append(linesP, impl, p)
		}
	}
	if len(linesD) == 0 && len(linesP) == 0 {
		return fmt.Errorf("png: no inorder results to chart (run without --run, or include workload=inorder)")
	}
	if err := plotutil.AddLinePoints(byDepth, linesD...); err != nil {
		return err
	}
	if err := plotutil.AddLinePoints(byProd, linesP...); err != nil {
		return err
	}
	for _, j := range rep.Java {
		if j.Impl != "activemq-nosync" || j.Workload != string(benchkit.InOrder) {
			continue
		}
		for _, c := range []struct {
			p     *plot.Plot
			x     float64
			match bool
		}{
			{byDepth, float64(j.Depth), j.Producers == benchkit.MainProducers},
			{byProd, float64(j.Producers), j.Depth == benchkit.MainDepth},
		} {
			if !c.match {
				continue
			}
			s, err := plotter.NewScatter(plotter.XYs{{X: c.x, Y: j.NsPerOp}})
			if err != nil {
				return err
			}
			s.GlyphStyle.Shape = draw.CrossGlyph{}
			s.GlyphStyle.Radius = vg.Points(5)
			c.p.Add(s)
			c.p.Legend.Add("ActiveMQ NoSync (Java)", s)
		}
	}
	for _, p := range []*plot.Plot{byDepth, byProd} {
		// Headroom above the slowest line for the legend (log scale).
		p.Y.Max *= 30
		p.X.Scale = plot.LogScale{}
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Label.Text = "ns/op (log)"
		p.Legend.Top = true
		p.Legend.Left = true
		p.Add(plotter.NewGrid())
	}
	byDepth.X.Tick.Marker = powerTicks(depthX)
	byProd.X.Tick.Marker = powerTicks(prodX)

	const w, h = 28 * vg.Centimeter, 11 * vg.Centimeter
	img := vgimg.New(w, h)
	dc := draw.New(img)
	t := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Centimeter, PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3,
		PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3}
	plots := [][]*plot.Plot{{byDepth, byProd}}
	cs := plot.Align(plots, t, dc)
	byDepth.Draw(cs[0][0])
	byProd.Draw(cs[0][1])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func sortXY(v plotter.XYs) {
	slices.SortFunc(v, func(a, b plotter.XY) int {
		switch {
		case a.X < b.X:
			return -1
		case a.X > b.X:
			return 1
		}
		return 0
	})
}

// powerTicks labels exactly the measured x values.
func powerTicks(xs []float64) plot.Ticker {
	slices.Sort(xs)
	xs = slices.Compact(xs)
	var ts plot.ConstantTicks
	for _, x := range xs {
		label := strconv.FormatFloat(x, 'f', -1, 64)
		if x >= 1<<20 && int(x)%(1<<20) == 0 {
			label = strconv.Itoa(int(x)/(1<<20)) + "Mi"
		}
		ts = append(ts, plot.Tick{Value: x, Label: label})
	}
	return ts
}
