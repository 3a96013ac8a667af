package metricnames_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/internal/metricnames"
)

// TestTable: every metric follows the Prometheus conventions the two
// exporters rely on. Names are unique and prefixed msgaudit_; a counter
// and only a counter ends in _total; a unit of seconds and only that ends
// in _seconds; any other unit is a count's annotation, which
// OpenTelemetry's Prometheus exporter drops; help reads as a sentence;
// the first label is the constant one.
func TestTable(t *testing.T) {
	seen := map[string]bool{}
	annotation := regexp.MustCompile(`^\{[a-z]+\}$`)
	for _, m := range metricnames.All {
		if seen[m.Name] {
			t.Errorf("%s is in the table twice", m.Name)
		}
		seen[m.Name] = true
		if !strings.HasPrefix(m.Name, "msgaudit_") {
			t.Errorf("%s: not prefixed msgaudit_", m.Name)
		}
		if strings.HasSuffix(m.Name, "_total") != (m.Kind == metricnames.Counter) {
			t.Errorf("%s: a %v; only counters end in _total, and all do", m.Name, m.Kind)
		}
		if strings.HasSuffix(m.Name, "_seconds") != (m.Unit == "s") {
			t.Errorf("%s: unit %q; a name ends in _seconds when and only when the unit is s", m.Name, m.Unit)
		}
		if m.Unit != "s" && !annotation.MatchString(m.Unit) {
			t.Errorf("%s: unit %q is neither s nor an annotation such as {delivery}", m.Name, m.Unit)
		}
		if m.Kind.String() == "unknown" {
			t.Errorf("%s: no kind", m.Name)
		}
		if m.Help == "" || !strings.HasSuffix(m.Help, ".") || strings.ToUpper(m.Help[:1]) != m.Help[:1] {
			t.Errorf("%s: help %q is not a sentence", m.Name, m.Help)
		}
		if len(m.Labels) == 0 || (m.Labels[0] != metricnames.LabelTransport && m.Labels[0] != metricnames.LabelStore) {
			t.Errorf("%s: labels %q do not start with transport or store", m.Name, m.Labels)
		}
	}
	if want := slices.Concat(metricnames.Receiver, metricnames.Transport, metricnames.Backlog); len(want) != len(metricnames.All) {
		t.Errorf("All has %d metrics, the three tables %d", len(metricnames.All), len(want))
	}
	for prefix, table := range map[string][]metricnames.Metric{
		"msgaudit_receiver_": metricnames.Receiver, "msgaudit_transport_": metricnames.Transport,
		"msgaudit_backlog_": metricnames.Backlog,
	} {
		for _, m := range table {
			if !strings.HasPrefix(m.Name, prefix) {
				t.Errorf("%s is in the table of %s*", m.Name, prefix)
			}
		}
	}
}

// TestDocsListEveryMetric: docs/metrics.md names every metric of the
// table, and no msgaudit_ metric the table lacks.
func TestDocsListEveryMetric(t *testing.T) {
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	inDoc := map[string]bool{}
	for _, m := range regexp.MustCompile("`(msgaudit_[a-z_]+)`").FindAllStringSubmatch(string(doc), -1) {
		inDoc[m[1]] = true
	}
	inTable := map[string]bool{}
	for _, m := range metricnames.All {
		inTable[m.Name] = true
		if !inDoc[m.Name] {
			t.Errorf("docs/metrics.md does not list %s", m.Name)
		}
	}
	for name := range inDoc {
		if !inTable[name] && !strings.HasSuffix(name, "_sum") && !strings.HasSuffix(name, "_count") &&
			!strings.HasSuffix(name, "_sum_total") && !strings.HasSuffix(name, "_count_total") {
			t.Errorf("docs/metrics.md lists %s, which no exporter exports", name)
		}
	}
}
