// Package monitoring_test checks deploy/monitoring: the Prometheus alert
// rules validate as promtool validates them (rulefmt), and every query of
// the rules and of the Grafana dashboard parses as PromQL and names only
// metric families, and labels, the servers export (metrics.txt, written
// from a running primary and follower by the e2e test
// TestExportedMetricsList). A module of its own: the Prometheus module's
// dependencies conflict with the main go.mod.
package monitoring_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

const (
	rulesFile     = "arbiter-alerts.yaml"
	dashboardFile = "arbiter-dashboard.json"
	metricsFile   = "metrics.txt"
)

// promql parses queries as Prometheus does by default.
var promql = parser.NewParser(parser.Options{})

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"instance", "job"}

type family struct {
	typ    string
	labels []string
}

func loadFamilies(t *testing.T) map[string]family {
	t.Helper()
	f, err := os.Open(metricsFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]family{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			t.Fatalf("%s: bad line %q", metricsFile, line)
		}
		fam := family{typ: fields[1]}
		if len(fields) == 3 {
			fam.labels = strings.Split(fields[2], ",")
		}
		out[fields[0]] = fam
	}
	if len(out) < 10 {
		t.Fatalf("%s: %d families", metricsFile, len(out))
	}
	return out
}

// series resolves a series name to its family and the labels its series
// carry: a histogram's _bucket (with le), _sum and _count are the family's.
func series(fams map[string]family, name string) ([]string, bool) {
	if f, ok := fams[name]; ok {
		return f.labels, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if f, found := fams[base]; ok && found && (f.typ == "histogram" || f.typ == "summary") {
			if suffix == "_bucket" {
				return append(slices.Clone(f.labels), "le"), true
			}
			return f.labels, true
		}
	}
	return nil, false
}

// checkQuery parses a PromQL query and returns what is wrong with it: an
// unknown series, a label matcher or a grouping label the series do not
// carry.
func checkQuery(fams map[string]family, query string) []string {
	expr, err := promql.ParseExpr(query)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	labelsOf := func(n parser.Node) (map[string]bool, int) {
		ls := map[string]bool{}
		for _, l := range targetLabels {
			ls[l] = true
		}
		var n2 int
		parser.Inspect(n, func(node parser.Node, _ []parser.Node) error {
			if vs, ok := node.(*parser.VectorSelector); ok {
				n2++
				labels, _ := series(fams, vs.Name)
				for _, l := range labels {
					ls[l] = true
				}
			}
			return nil
		})
		return ls, n2
	}
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			labels, ok := series(fams, n.Name)
			if !ok {
				problems = append(problems, fmt.Sprintf("series %q is not exported", n.Name))
				return nil
			}
			for _, m := range n.LabelMatchers {
				if m.Name != "__name__" && !slices.Contains(labels, m.Name) && !slices.Contains(targetLabels, m.Name) {
					problems = append(problems, fmt.Sprintf("%s has no label %q", n.Name, m.Name))
				}
			}
		case *parser.AggregateExpr:
			ls, nsel := labelsOf(n.Expr)
			if nsel == 0 {
				return nil
			}
			for _, g := range n.Grouping {
				if !ls[g] {
					problems = append(problems, fmt.Sprintf("%s by (%s): no series inside carries %q", n.Op, strings.Join(n.Grouping, ", "), g))
				}
			}
		}
		return nil
	})
	return problems
}

// TestRules: rulefmt (promtool check rules) accepts the file, every
// alert has a severity, a summary and a description, and every
// expression only names exported series and labels.
func TestRules(t *testing.T) {
	fams := loadFamilies(t)
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, promql, slog.Default())
	for _, err := range errs {
		t.Error(err)
	}
	if groups == nil {
		t.Fatal("no rule groups")
	}
	var n int
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			n++
			name := r.Alert + r.Record
			if r.Alert != "" {
				if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
					t.Errorf("%s: severity %q", name, r.Labels["severity"])
				}
				if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
					t.Errorf("%s: summary or description missing", name)
				}
			}
			for _, p := range checkQuery(fams, r.Expr) {
				t.Errorf("%s: %s", name, p)
			}
		}
	}
	if n < 10 {
		t.Errorf("%d rules", n)
	}
}

// grafanaVariables are the dashboard's variables and the values they are
// replaced by before a query is parsed.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "${instance}", "x", "$instance", "x")

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

var labelValues = regexp.MustCompile(`^label_values\((\w+), *(\w+)\)$`)

// TestDashboard: the dashboard is JSON Grafana imports (uid, title,
// panels that fit the 24-column grid with unique ids), its queries parse
// and name only exported series and labels, and it shows what the issue
// asks: decisions, latency, denials by policy kind, revision lag per
// replica, webhook (Decide) errors and Sync health.
func TestDashboard(t *testing.T) {
	fams := loadFamilies(t)
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" {
		t.Error("uid or title missing")
	}
	ids := map[int]bool{}
	var queries []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H <= 0 {
				t.Errorf("panel %q: gridPos %+v", p.Title, p.GridPos)
			}
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q: no query", p.Title)
			}
			for _, tg := range p.Targets {
				queries = append(queries, tg.Expr)
				for _, pr := range checkQuery(fams, grafanaVariables.Replace(tg.Expr)) {
					t.Errorf("panel %q: %s: %s", p.Title, tg.Expr, pr)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(METRIC, LABEL)", v.Name, q.Query)
			continue
		}
		if labels, ok := series(fams, m[1]); !ok || !slices.Contains(append(labels, targetLabels...), m[2]) {
			t.Errorf("variable %s: %s has no label %s", v.Name, m[1], m[2])
		}
	}
	all := strings.Join(queries, "\n")
	for what, needle := range map[string]string{
		"decision rate":              "arbiter_decision_requests_total",
		"decision latency":           "arbiter_decision_duration_seconds_bucket",
		"denials by policy kind":     `sum by (policy_kind, action) (rate(arbiter_decisions_total{result="fail"`,
		"revision lag per replica":   "arbiter_follower_lag_revisions",
		"webhook errors":             `grpc_service="arbiter.v1.DecisionService", grpc_code!="OK"`,
		"Sync health":                `grpc_service="arbiter.v1.SyncService"`,
		"revision per replica":       "arbiter_store_revision",
		"exception outcomes":         "arbiter_exception_grants_total",
		"sync commit time":           "arbiter_sync_commit_duration_seconds_bucket",
		"memory against GOMEMLIMIT":  "go_gc_gomemlimit_bytes",
		"decision log lines dropped": "arbiter_decision_log_dropped_total",
	} {
		if !strings.Contains(all, needle) {
			t.Errorf("the dashboard does not show the %s (%s)", what, needle)
		}
	}
}

// TestChecksCatch: the checks refuse what is wrong — a misspelt series, a
// label the series lack, grouping by such a label, PromQL that does not
// parse — and rulefmt refuses an invalid rule.
func TestChecksCatch(t *testing.T) {
	fams := loadFamilies(t)
	for _, q := range []string{
		`rate(arbiter_decision_total[5m])`,
		`arbiter_decisions_total{policy="x"}`,
		`sum by (policy) (rate(arbiter_decisions_total[5m]))`,
		`rate(arbiter_store_revision_bucket[5m])`,
		`sum(rate(arbiter_decisions_total[5m])`,
	} {
		if len(checkQuery(fams, q)) == 0 {
			t.Errorf("%s: accepted", q)
		}
	}
	if p := checkQuery(fams, `histogram_quantile(0.99, sum by (le, instance) (rate(arbiter_decision_duration_seconds_bucket[5m])))`); len(p) != 0 {
		t.Errorf("a valid query refused: %v", p)
	}
	bad := []byte("groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up ==\n        for: 5x\n")
	if _, errs := rulefmt.Parse(bad, false, model.UTF8Validation, promql, slog.Default()); len(errs) == 0 {
		t.Error("rulefmt accepted an invalid rule")
	}
}
