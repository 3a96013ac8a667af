package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/benchreport"
)

// chartStyle is how one implementation is drawn and named in the legend.
type chartStyle struct {
	impl  string // benchkit impl name, or the Java impl name
	label string
	line  draw.LineStyle
	glyph draw.GlyphStyle
}

func rgb(r, g, b uint8) color.Color { return color.RGBA{R: r, G: g, B: b, A: 255} }

func lineStyle(c color.Color, width float64, dashes ...float64) draw.LineStyle {
	ls := draw.LineStyle{Color: c, Width: vg.Points(width)}
	for _, d := range dashes {
		ls.Dashes = append(ls.Dashes, vg.Points(d))
	}
	return ls
}

func glyphStyle(c color.Color, shape draw.GlyphDrawer, radius float64) draw.GlyphStyle {
	return draw.GlyphStyle{Color: c, Shape: shape, Radius: vg.Points(radius)}
}

// chartStyles lists the implementations of the chart in legend order.
// msgaudit's own audits are saturated colours and filled marks, the audit
// itself a thick solid line; the floors are grey, thin and dashed with
// hollow marks; the baselines are orange and brown; ActiveMQ is red.
var chartStyles = []chartStyle{
	{"audit", "audit.Audit (unsynchronized)", lineStyle(rgb(0, 70, 180), 2.5), glyphStyle(rgb(0, 70, 180), draw.CircleGlyph{}, 3.5)},
	{"locked", "audit.Locked (one mutex)", lineStyle(rgb(0, 140, 70), 1.5), glyphStyle(rgb(0, 140, 70), draw.PyramidGlyph{}, 5)},
	{"sharded", "audit.Sharded (locked shards)", lineStyle(rgb(130, 40, 170), 1.5), glyphStyle(rgb(130, 40, 170), draw.BoxGlyph{}, 4)},
	{"connaudit", "connaudit.Audit (destination routing + audit)", lineStyle(rgb(0, 150, 170), 1.5), glyphStyle(rgb(0, 150, 170), draw.CircleGlyph{}, 5)},
	{"floor-parse", "floor-parse: parse the id + map lookup + bit", lineStyle(rgb(70, 70, 70), 1, 5, 3), glyphStyle(rgb(70, 70, 70), draw.SquareGlyph{}, 5.5)},
	{"floor-map", "floor-map: map lookup of a pre-split key + bit", lineStyle(rgb(120, 120, 120), 1, 5, 3), glyphStyle(rgb(120, 120, 120), draw.RingGlyph{}, 3.5)},
	{"floor-bit", "floor-bit: bare bit test-and-set", lineStyle(rgb(160, 160, 160), 1, 1.5, 2), glyphStyle(rgb(160, 160, 160), draw.TriangleGlyph{}, 3.5)},
	{"map", "map baseline: map[string]struct{} of full ids", lineStyle(rgb(230, 120, 0), 1.2, 6, 2, 1.5, 2), glyphStyle(rgb(230, 120, 0), draw.TriangleGlyph{}, 4)},
	{"lru", "lru baseline: golang-lru keyed by full id", lineStyle(rgb(140, 80, 30), 1.2, 2, 2), glyphStyle(rgb(140, 80, 30), draw.PlusGlyph{}, 4.5)},
	{"activemq-nosync", "ActiveMQMessageAuditNoSync (Java)", draw.LineStyle{}, glyphStyle(rgb(210, 0, 0), draw.CrossGlyph{}, 6)},
	{"activemq-sync", "ActiveMQMessageAudit (Java, synchronized)", draw.LineStyle{}, glyphStyle(rgb(210, 0, 0), draw.RingGlyph{}, 6)},
}

// chartDrawOrder draws the audit after the floors and baselines so that
// nothing covers it, and floor-parse (which costs about the same) last of
// the lines, thin and dashed, so that the audit's line shows through it.
var chartDrawOrder = []string{"map", "lru", "floor-bit", "floor-map", "locked", "sharded", "connaudit", "audit", "floor-parse",
	"activemq-sync", "activemq-nosync"}

// inOrder is the workload the chart draws (benchkit.InOrder): every id
// new, each producer's sequence numbers in order.
const inOrder = "inorder"

// yAxisLabel is the y axis of both panels.
const yAxisLabel = "ns per check (lower is better; log scale)"

// chartPanel is one of the chart's two sweeps.
type chartPanel struct {
	title, xLabel string
	series        map[string]plotter.XYs // impl → points, sorted by X
}

// chartData picks the inorder results of the depth sweep (at the main
// producer count) and of the producer sweep (at the main depth), and
// ActiveMQ's points, for every implementation of chartStyles.
func chartData(rep *benchreport.Report) (byDepth, byProd chartPanel) {
	byDepth = chartPanel{
		title:  fmt.Sprintf("by depth (%d producers)", benchreport.MainProducers),
		xLabel: "depth: sequence numbers remembered per producer",
		series: map[string]plotter.XYs{},
	}
	byProd = chartPanel{
		title:  fmt.Sprintf("by producers (depth %d)", benchreport.MainDepth),
		xLabel: "producers tracked",
		series: map[string]plotter.XYs{},
	}
	add := func(impl string, depth, producers int, ns float64) {
		if ns <= 0 {
			return
		}
		if producers == benchreport.MainProducers {
			byDepth.series[impl] = append(byDepth.series[impl], plotter.XY{X: float64(depth), Y: ns})
		}
		if depth == benchreport.MainDepth {
			byProd.series[impl] = append(byProd.series[impl], plotter.XY{X: float64(producers), Y: ns})
		}
	}
	for _, r := range rep.Results {
		if r.Workload == inOrder && r.Goroutines == 0 && r.Error == "" {
			add(r.Impl, r.Depth, r.Producers, r.NsPerOp)
		}
	}
	for _, j := range rep.Java {
		if j.Workload == inOrder {
			add(j.Impl, j.Depth, j.Producers, j.NsPerOp)
		}
	}
	for _, p := range []chartPanel{byDepth, byProd} {
		for impl, xys := range p.series {
			if _, ok := styleOf(impl); !ok {
				delete(p.series, impl)
				continue
			}
			sortXY(xys)
		}
	}
	return byDepth, byProd
}

func styleOf(impl string) (chartStyle, bool) {
	for _, s := range chartStyles {
		if s.impl == impl {
			return s, true
		}
	}
	return chartStyle{}, false
}

// yRange is the smallest and largest ns/op of both panels, so that both
// share one fitted y axis.
func yRange(panels ...chartPanel) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, p := range panels {
		for _, xys := range p.series {
			for _, xy := range xys {
				lo, hi = min(lo, xy.Y), max(hi, xy.Y)
			}
		}
	}
	return lo, hi
}

// writeBenchPNG draws the inorder cost per check against depth and against
// producers, log scales, every implementation measured (ActiveMQ's Java
// audits when they ran), with a title, the legend beside the panels and a
// caption saying what the floors and baselines are, into a PNG file.
func writeBenchPNG(path string, rep *benchreport.Report) error {
	byDepth, byProd := chartData(rep)
	if len(byDepth.series) == 0 && len(byProd.series) == 0 {
		return fmt.Errorf("no inorder results to chart (run msgaudit bench without --run, or include workload=inorder)")
	}
	ylo, yhi := yRange(byDepth, byProd)
	single := map[string]bool{} // implementations with one point in every panel
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.TextStyle.Font.Size = vg.Points(10.5)
	legend.ThumbnailWidth = vg.Points(30)
	legend.Padding = vg.Points(3.5)
	var plots []*plot.Plot
	for _, panel := range []chartPanel{byDepth, byProd} {
		p := plot.New()
		p.Title.Text = panel.title
		p.Title.TextStyle.Font.Size = vg.Points(12)
		// The axis labels are drawn beside the panel (below): gonum centres
		// a label at the linear midpoint of the range, which on a log axis
		// is near the far end, and pads the panel as if it stuck out there.
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.Y.Min, p.Y.Max = ylo/1.35, yhi*1.35
		p.Y.Tick.Marker = oneTwoFiveTicks{}
		var xs []float64
		for _, xys := range panel.series {
			for _, xy := range xys {
				xs = append(xs, xy.X)
			}
		}
		if len(xs) > 0 {
			p.X.Min, p.X.Max = slices.Min(xs)/1.6, slices.Max(xs)*1.6
		}
		p.X.Tick.Marker = powerTicks(xs)
		grid := plotter.NewGrid()
		grid.Vertical.Color, grid.Horizontal.Color = rgb(225, 225, 225), rgb(225, 225, 225)
		p.Add(grid)
		for _, impl := range chartDrawOrder {
			xys, ok := panel.series[impl]
			if !ok {
				continue
			}
			st, _ := styleOf(impl)
			if len(xys) > 1 && st.line.Width > 0 {
				l, err := plotter.NewLine(xys)
				if err != nil {
					return err
				}
				l.LineStyle = st.line
				p.Add(l)
			}
			s, err := plotter.NewScatter(xys)
			if err != nil {
				return err
			}
			s.GlyphStyle = st.glyph
			p.Add(s)
		}
		plots = append(plots, p)
	}
	for _, st := range chartStyles {
		d, p := byDepth.series[st.impl], byProd.series[st.impl]
		if len(d) == 0 && len(p) == 0 {
			continue
		}
		line, _ := plotter.NewLine(plotter.XYs{{}, {}})
		line.LineStyle = st.line
		dot, _ := plotter.NewScatter(plotter.XYs{{}})
		dot.GlyphStyle = st.glyph
		if len(d) <= 1 && len(p) <= 1 {
			single[st.impl] = true
			legend.Add(st.label, dot)
		} else {
			legend.Add(st.label, line, dot)
		}
	}

	const w, h = 31 * vg.Centimeter, 15 * vg.Centimeter
	const titleH, captionH, legendW = 1.2 * vg.Centimeter, 2.6 * vg.Centimeter, 9.6 * vg.Centimeter
	img := vgimg.New(w, h)
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())

	txt := func(size float64, align draw.XAlignment) text.Style {
		return text.Style{Color: color.Black, Font: font.From(plot.DefaultFont, vg.Points(size)), Handler: plot.DefaultTextHandler, XAlign: align}
	}
	dc.FillText(txt(15, draw.XCenter), vg.Point{X: w / 2, Y: h - titleH + 0.35*vg.Centimeter},
		"msgaudit bench: cost of checking one new message id (inorder workload)")

	panels := draw.Crop(dc, 0, -legendW, captionH, -titleH)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Centimeter, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3}
	cs := plot.Align([][]*plot.Plot{plots}, tiles, panels)
	ylabel := txt(11, draw.XCenter)
	ylabel.YAlign = draw.YCenter
	ylabel.Rotation = math.Pi / 2
	xlabel := txt(11, draw.XCenter)
	const labelW, labelH = 0.7 * vg.Centimeter, 0.6 * vg.Centimeter
	for i, p := range plots {
		c := cs[0][i]
		p.Draw(draw.Crop(c, labelW, 0, labelH, 0))
		c.FillText(ylabel, vg.Point{X: c.Min.X + labelW/2, Y: (c.Min.Y + c.Max.Y) / 2}, yAxisLabel)
		c.FillText(xlabel, vg.Point{X: (c.Min.X + labelW + c.Max.X) / 2, Y: c.Min.Y + 0.1*vg.Centimeter}, []chartPanel{byDepth, byProd}[i].xLabel)
	}

	lc := draw.Crop(dc, w-legendW+0.4*vg.Centimeter, 0, captionH, -titleH-0.6*vg.Centimeter)
	legend.Draw(lc)

	caption := chartCaption(rep, single)
	capStyle := txt(10, draw.XLeft)
	y := captionH - 0.5*vg.Centimeter
	for _, line := range caption {
		dc.FillText(capStyle, vg.Point{X: 0.4 * vg.Centimeter, Y: y}, line)
		y -= 0.45 * vg.Centimeter
	}

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

// chartCaption says what the floors and baselines are, which marks are
// single measurements, and which run the chart shows.
func chartCaption(rep *benchreport.Report, single map[string]bool) []string {
	lines := []string{
		"Floors are lower bounds, not audits (they never slide a window or evict a producer): floor-bit only sets a bit, floor-map adds the",
		"map lookup of the producer key, floor-parse adds splitting the id string, the least a check of a string id can cost. Baselines are",
		"complete but naive: they keep every full id (map trimmed to the window per producer, lru capped at producers × depth).",
	}
	var names []string
	for _, st := range chartStyles {
		if single[st.impl] {
			names = append(names, strings.SplitN(st.label, " ", 2)[0])
		}
	}
	if len(names) > 0 {
		lines = append(lines, fmt.Sprintf("Single marks were measured at depth %d with %d producers only: %s.",
			benchreport.MainDepth, benchreport.MainProducers, strings.Join(names, ", ")))
	}
	run := fmt.Sprintf("Run: %s profile, best of %d, benchtime %s, %s, %s, GOMAXPROCS %d", rep.Profile, rep.Rounds, rep.BenchTime,
		rep.GoVersion, rep.CPU, rep.GOMAXPROCS)
	if !rep.Started.IsZero() {
		run += ", " + rep.Started.Format("2006-01-02")
	}
	return append(lines, run+".")
}

// oneTwoFiveTicks labels 1, 2 and 5 times each power of ten in the range
// (log axes whose data span less than a decade or two would otherwise get
// one label or none).
type oneTwoFiveTicks struct{}

// Ticks implements plot.Ticker.
func (oneTwoFiveTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v >= lo && v <= hi {
				ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
			}
		}
	}
	return ts
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
	xs = slices.Clone(xs)
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
