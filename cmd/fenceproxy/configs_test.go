package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceproxy/fenceproxy/lease"
)

// The dashboard and the alert rules in configs/ name metrics by string; a
// renamed or removed metric would leave a panel empty or an alert silent
// forever. These tests hold their names against what the binary registers.

// descRecorder is a registry that also remembers the name of every metric
// registered with it, children or not (Gather shows a vector only once a
// child exists).
type descRecorder struct {
	*prometheus.Registry
	names map[string]bool
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *descRecorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		// Desc has no name accessor; its String is stable across
		// client_golang releases.
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return r.Registry.Register(c)
}

func (r *descRecorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// exportedMetrics are the series names a scrape can return: the proxy's
// registry as serve builds it, plus the lease keeper's metrics, which apps
// using the Go lease package export (the FenceproxyLeaseLost alert).
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	r := &descRecorder{Registry: prometheus.NewRegistry(), names: map[string]bool{}}
	registerMetrics(r)
	if _, err := lease.NewMetrics(r); err != nil {
		t.Fatal(err)
	}
	if len(r.names) < 20 {
		t.Fatalf("only %d metric names recorded: %v", len(r.names), r.names)
	}
	// Histograms are scraped as NAME_bucket, NAME_sum and NAME_count.
	fams, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]bool{}
	for name := range r.names {
		series[name] = true
	}
	for _, f := range fams {
		switch f.GetType().String() {
		case "HISTOGRAM":
			series[f.GetName()+"_bucket"] = true
			fallthrough
		case "SUMMARY":
			series[f.GetName()+"_sum"] = true
			series[f.GetName()+"_count"] = true
		}
	}
	return series
}

var (
	quoted     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
)

// ownMetricNames returns the metric names of the fenceproxy binary (and of
// the Go and process collectors it registers) that a PromQL expression uses.
func ownMetricNames(expr string) []string {
	var names []string
	for _, id := range identifier.FindAllString(quoted.ReplaceAllString(expr, `""`), -1) {
		for _, p := range []string{"fenceproxy_", "process_", "go_"} {
			if strings.HasPrefix(id, p) {
				names = append(names, id)
			}
		}
	}
	return names
}

// unknownMetrics lists the names exprs use that are not exported, with the
// expression each appears in.
func unknownMetrics(exported map[string]bool, exprs []string) []string {
	var bad []string
	for _, e := range exprs {
		for _, n := range ownMetricNames(e) {
			if !exported[n] {
				bad = append(bad, fmt.Sprintf("%s (in %s)", n, e))
			}
		}
	}
	return bad
}

func TestUnknownMetricNamesAreFound(t *testing.T) {
	exported := exportedMetrics(t)
	tests := []struct {
		expr string
		bad  []string
	}{
		{`rate(fenceproxy_commands_total{command="query"}[5m])`, nil},
		{`histogram_quantile(0.99, sum by (le) (rate(fenceproxy_command_duration_seconds_bucket[5m])))`, nil},
		{`fenceproxy_stale_writes_rejected_total{reason="fenceproxy_nonsense_total"}`, nil}, // a label value
		{`go_goroutines + process_resident_memory_bytes`, nil},
		{`rate(fenceproxy_command_total[5m])`, []string{"fenceproxy_command_total"}},
		{`fenceproxy_bytes_total_bucket or fenceproxy_connections_active_count`, []string{"fenceproxy_bytes_total_bucket", "fenceproxy_connections_active_count"}},
		{`fenceproxy_stale_writes_total > 0`, []string{"fenceproxy_stale_writes_total"}},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			var got []string
			for _, n := range ownMetricNames(tt.expr) {
				if !exported[n] {
					got = append(got, n)
				}
			}
			if !slices.Equal(got, tt.bad) {
				t.Errorf("unknown names %q, want %q", got, tt.bad)
			}
		})
	}
}

func readConfig(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "configs", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// grafanaDashboard is the part of Grafana's dashboard model the test reads.
type grafanaDashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource *struct {
			Type string `json:"type"`
			UID  string `json:"uid"`
		} `json:"datasource"`
		GridPos struct{ H, W, X, Y int } `json:"gridPos"`
		Targets []struct {
			Expr  string `json:"expr"`
			RefID string `json:"refId"`
		} `json:"targets"`
	} `json:"panels"`
}

func TestGrafanaDashboard(t *testing.T) {
	data := readConfig(t, "grafana-dashboard.json")
	dec := json.NewDecoder(strings.NewReader(string(data)))
	var d grafanaDashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	if dec.More() {
		t.Fatal("grafana-dashboard.json: data after the dashboard object")
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion == 0 || len(d.Panels) == 0 {
		t.Fatalf("not a dashboard: title %q, uid %q, schemaVersion %d, %d panels", d.Title, d.UID, d.SchemaVersion, len(d.Panels))
	}
	var exprs []string
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			exprs = append(exprs, v.Definition)
		}
	}
	ids := map[int]string{}
	for _, p := range d.Panels {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panel id %d used by %q and %q", p.ID, prev, p.Title)
		}
		ids[p.ID] = p.Title
		if p.GridPos.W < 1 || p.GridPos.H < 1 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want the ${datasource} variable", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, q := range p.Targets {
			if q.Expr == "" || q.RefID == "" || refs[q.RefID] {
				t.Errorf("panel %q: query %+v without expr, or a missing or repeated refId", p.Title, q)
			}
			refs[q.RefID] = true
			exprs = append(exprs, q.Expr)
		}
	}
	if bad := unknownMetrics(exportedMetrics(t), exprs); len(bad) > 0 {
		t.Errorf("the dashboard uses metrics the proxy does not export:\n%s", strings.Join(bad, "\n"))
	}
	t.Run("PromQL parses", func(t *testing.T) { promQLParses(t, exprs) })
	// What the dashboard is for: each of these is on a panel.
	used := map[string]bool{}
	for _, e := range exprs {
		for _, n := range ownMetricNames(e) {
			used[n] = true
		}
	}
	for _, want := range []string{
		"fenceproxy_connections_active", "fenceproxy_commands_total", "fenceproxy_command_duration_seconds_bucket",
		"fenceproxy_stale_writes_rejected_total", "fenceproxy_statements_total", "fenceproxy_lease_calls_total",
		"fenceproxy_bytes_total", "fenceproxy_backend_dial_failures_total", "fenceproxy_audit_write_errors_total",
		"fenceproxy_config_last_reload_successful", "fenceproxy_backend_up", "fenceproxy_catalog_readable",
		"fenceproxy_catalog_last_refresh_success_timestamp_seconds",
		"fenceproxy_leases_held", "fenceproxy_lease_expiry_seconds", "fenceproxy_audit_table_queue_length",
		"fenceproxy_login_failures_total", "fenceproxy_paused", "fenceproxy_certificate_expiry_timestamp_seconds",
	} {
		if !used[want] {
			t.Errorf("no panel shows %s", want)
		}
	}
}

func TestAlertRulesUseExportedMetrics(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(readConfig(t, "alerts.yml"), &rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	var unitTests struct {
		Tests []struct {
			InputSeries []struct {
				Series string `yaml:"series"`
			} `yaml:"input_series"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(readConfig(t, "alerts_test.yml"), &unitTests); err != nil {
		t.Fatalf("alerts_test.yml: %v", err)
	}
	var exprs []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	if len(exprs) < 6 {
		t.Fatalf("alerts.yml: %d rules read", len(exprs))
	}
	for _, tc := range unitTests.Tests {
		for _, s := range tc.InputSeries {
			exprs = append(exprs, s.Series)
		}
	}
	if bad := unknownMetrics(exportedMetrics(t), exprs); len(bad) > 0 {
		t.Errorf("alerts.yml or its tests use metrics nothing exports:\n%s", strings.Join(bad, "\n"))
	}
}

// grafanaVars are the dashboard's variables, as Grafana substitutes them.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__range", "6h", "$job", ".+", "$instance", ".+")

// promQLParses has promtool parse each expression: as recording rules, the
// one way promtool checks PromQL on its own. scripts/test.sh installs it.
func promQLParses(t *testing.T, exprs []string) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (scripts/test.sh installs Debian's prometheus package)")
	}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		if strings.HasPrefix(e, "label_values(") {
			continue // Grafana's, not PromQL
		}
		q, _ := json.Marshal(grafanaVars.Replace(e)) // a JSON string is a YAML string
		fmt.Fprintf(&rules, "      - record: dashboard_query_%d\n        expr: %s\n", i, q)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules of the dashboard's queries: %v\n%s", err, out)
	}
}
