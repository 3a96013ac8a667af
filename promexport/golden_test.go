package promexport_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/metricnames"
	"github.com/acemq/msgaudit/internal/testkit/metricfixture"
	"github.com/acemq/msgaudit/promexport"
	"github.com/acemq/msgaudit/receiver"
)

var update = flag.Bool("update", false, "rewrite testdata/*.prom from the collectors")

// scrapeText gathers reg into the Prometheus text format, as a scrape
// endpoint serves it.
func scrapeText(t *testing.T, reg *prometheus.Registry) []byte {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, f := range families {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// TestScrapeText: the text a scrape of Receiver and Transport returns for
// known snapshots, names, help texts, labels and values, is byte for byte
// the one in testdata/, so that moving the names elsewhere changes no
// series a dashboard or an alert reads.
func TestScrapeText(t *testing.T) {
	t.Parallel()
	cases := []struct {
		file string
		c    prometheus.Collector
	}{
		{"receiver.prom", promexport.Receiver(metricfixture.Snapshot, "stomp")},
		{"receiver_unaudited.prom", promexport.Receiver(func() receiver.Snapshot {
			s := metricfixture.Snapshot()
			s.Audited = false
			return s
		}, "amqp")},
		{"transport.prom", promexport.Transport(metricfixture.Stats, "stomp")},
	}
	for _, c := range cases {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(c.c)
		got := scrapeText(t, reg)
		file := filepath.Join("testdata", c.file)
		if *update {
			if err := os.WriteFile(file, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("%v (go test ./promexport -run TestScrapeText -update writes it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("the scrape differs from %s:\ngot:\n%s\nwant:\n%s", file, got, want)
		}
	}
}

// TestNamesFromTable: a scrape of Receiver (audited) and Transport has
// one family for each metric of internal/metricnames' receiver and
// transport tables, with its help text and kind, and no other family.
func TestNamesFromTable(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promexport.Receiver(metricfixture.Snapshot, "stomp"), promexport.Transport(metricfixture.Stats, "stomp"),
		promexport.Backlog(func(context.Context) (idempotency.Backlog, error) { return idempotency.Backlog{Held: 1}, nil }, "pg"))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]metricnames.Metric{}
	for _, m := range metricnames.All {
		want[m.Name] = m
	}
	for _, f := range families {
		m, ok := want[f.GetName()]
		if !ok {
			t.Errorf("%s is exported but not in internal/metricnames", f.GetName())
			continue
		}
		delete(want, f.GetName())
		if f.GetHelp() != m.Help || !strings.EqualFold(f.GetType().String(), m.Kind.String()) {
			t.Errorf("%s: help %q, type %v; the table says %q, %v", m.Name, f.GetHelp(), f.GetType(), m.Help, m.Kind)
		}
		var labels []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		if !slices.Equal(labels, slices.Sorted(slices.Values(m.Labels))) {
			t.Errorf("%s: labels %q, the table says %q", m.Name, labels, m.Labels)
		}
	}
	for name := range want {
		t.Errorf("%s is in internal/metricnames but not exported", name)
	}
}
