package otelmetric_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/acemq/msgaudit/internal/metricnames"
	"github.com/acemq/msgaudit/internal/testkit/metricfixture"
	"github.com/acemq/msgaudit/otelmetric"
	"github.com/acemq/msgaudit/promexport"
	"github.com/acemq/msgaudit/receiver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// storeLatency is the histogram OpenTelemetry exports as two counters.
var storeLatency = metricnames.ReceiverStoreLatency.Name

// TestSameNamesAsPrometheus: the instruments are the metrics of
// internal/metricnames, which are the families a promexport registry
// gathers, the store latency histogram aside (its sum and count).
func TestSameNamesAsPrometheus(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promexport.Receiver(metricfixture.Snapshot, "stomp"), promexport.Transport(metricfixture.Stats, "stomp"))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var prom, table, otel []string
	for _, f := range families {
		prom = append(prom, f.GetName())
	}
	for _, m := range slices.Concat(metricnames.Receiver, metricnames.Transport) {
		table = append(table, m.Name)
	}
	r, mp := newReader(t)
	meter := mp.Meter("test")
	if _, err := otelmetric.Receiver(meter, metricfixture.Snapshot, "stomp"); err != nil {
		t.Fatal(err)
	}
	if _, err := otelmetric.Transport(meter, metricfixture.Stats, "stomp"); err != nil {
		t.Fatal(err)
	}
	for name := range collect(t, r) {
		if name == storeLatency+"_sum" || name == storeLatency+"_count" {
			name = storeLatency
		}
		otel = append(otel, name)
	}
	slices.Sort(table)
	slices.Sort(otel)
	otel = slices.Compact(otel)
	if !slices.Equal(prom, table) {
		t.Errorf("promexport exports %q\ninternal/metricnames lists %q", prom, table)
	}
	if !slices.Equal(otel, table) {
		t.Errorf("otelmetric exports %q\ninternal/metricnames lists %q", otel, table)
	}

	r, mp = newReader(t)
	if _, err := otelmetric.Backlog(mp.Meter("test"), countingSample(new(atomic.Int64)), "pg"); err != nil {
		t.Fatal(err)
	}
	reg = prometheus.NewPedanticRegistry()
	reg.MustRegister(promexport.Backlog(countingSample(new(atomic.Int64)), "pg"))
	if families, err = reg.Gather(); err != nil {
		t.Fatal(err)
	}
	prom, otel, table = nil, nil, nil
	for _, f := range families {
		prom = append(prom, f.GetName())
	}
	for name := range collect(t, r) {
		otel = append(otel, name)
	}
	for _, m := range metricnames.Backlog {
		table = append(table, m.Name)
	}
	slices.Sort(otel)
	slices.Sort(table)
	if !slices.Equal(otel, table) {
		t.Errorf("otelmetric's Backlog exports %q\ninternal/metricnames lists %q", otel, table)
	}
	if !slices.Equal(prom, table) {
		t.Errorf("promexport's Backlog exports %q\ninternal/metricnames lists %q", prom, table)
	}
}

// textOf returns the Prometheus text format of families gathered from g,
// by family name.
func textOf(t *testing.T, g prometheus.Gatherer) map[string]string {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range families {
		var b bytes.Buffer
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
		out[f.GetName()] = b.String()
	}
	return out
}

// TestPrometheusExporterSameSeries: OpenTelemetry's Prometheus exporter,
// with its default translation strategy, serves the instruments as the
// very text promexport serves: names, help, types, labels and values,
// byte for byte, but for the store latency, whose sum and count become
// the counters msgaudit_receiver_store_latency_seconds_sum_total and
// _count_total (see the package doc).
func TestPrometheusExporterSameSeries(t *testing.T) {
	t.Parallel()
	snap := func() receiver.Snapshot { return metricfixture.Snapshot() }
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promexport.Receiver(snap, "stomp"), promexport.Transport(metricfixture.Stats, "stomp"),
		promexport.Backlog(countingSample(new(atomic.Int64)), "pg"))
	want := textOf(t, reg)

	oreg := prometheus.NewPedanticRegistry()
	exp, err := promexporter.New(promexporter.WithRegisterer(oreg), promexporter.WithoutTargetInfo(), promexporter.WithoutScopeInfo())
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	meter := mp.Meter("github.com/acemq/msgaudit/otelmetric")
	if _, err := otelmetric.Receiver(meter, snap, "stomp"); err != nil {
		t.Fatal(err)
	}
	if _, err := otelmetric.Transport(meter, metricfixture.Stats, "stomp"); err != nil {
		t.Fatal(err)
	}
	if _, err := otelmetric.Backlog(meter, countingSample(new(atomic.Int64)), "pg"); err != nil {
		t.Fatal(err)
	}
	got := textOf(t, oreg)

	for name, text := range want {
		if name == storeLatency {
			continue
		}
		if got[name] != text {
			t.Errorf("%s: OpenTelemetry's Prometheus exporter serves\n%s\npromexport serves\n%s", name, got[name], text)
		}
		delete(got, name)
	}
	for name, value := range map[string]string{storeLatency + "_sum_total": "1.5", storeLatency + "_count_total": "78"} {
		line := name + `{transport="stomp"} ` + value + "\n"
		if !strings.Contains(got[name], "# TYPE "+name+" counter\n") || !strings.HasSuffix(got[name], line) {
			t.Errorf("%s: served as\n%s\nwant a counter, %s", name, got[name], line)
		}
		delete(got, name)
	}
	for name, text := range got {
		t.Errorf("%s: served by OpenTelemetry's Prometheus exporter only:\n%s", name, text)
	}
}
