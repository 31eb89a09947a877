package e2e

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/kubesource"
)

var updateMetrics = flag.Bool("update-metrics", false, "rewrite deploy/monitoring/metrics.txt from the running servers")

// metricsFile lists the metric families a primary and a follower export
// (name and type, one a line). deploy/monitoring's tests (a module of their
// own: the Prometheus module's dependencies conflict with go.mod) check
// every query of the dashboard and the alert rules against it.
const metricsFile = "../deploy/monitoring/metrics.txt"

// TestExportedMetricsList: a primary and a follower, each with
// --metrics-listen and the decision log on, decide the seed table (a
// policy and an exception: every counter and histogram gets a child);
// the families their /metrics serve are metricsFile's, exactly.
func TestExportedMetricsList(t *testing.T) {
	dir := "testdata/seed000"
	pm, fm := freeAddr(t), freeAddr(t)
	p := startPrimary(t, "--metrics-listen", pm, "--decision-log", filepath.Join(t.TempDir(), "decisions.log"),
		"--load", filepath.Join(dir, "policy.yaml"), "--load", filepath.Join(dir, "exception.yaml"))
	f := startFollower(t, "follower-1", p, "--metrics-listen", fm)
	waitConverged(t, 30*time.Second, p, f)
	for _, pod := range []string{"legacy-app-granted", "legacy-app-no-ticket", "legacy-app-compliant", "web-app"} {
		y, err := os.ReadFile(filepath.Join(dir, pod+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		js, err := yaml.YAMLToJSON(y)
		if err != nil {
			t.Fatal(err)
		}
		decideOn(t, p, js, 0)
		decideOn(t, f, js, 0)
	}
	// The background scans' series, which a primary exports only with
	// --kube-source (registered as serve registers them).
	reg := prometheus.NewRegistry()
	kubesource.NewScanCounters(reg)
	scans := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer scans.Close()
	families := map[string]*family{}
	for _, url := range []string{"http://" + pm + "/metrics", "http://" + fm + "/metrics", scans.URL} {
		for name, f := range scrapeFamilies(t, url) {
			if families[name] == nil {
				families[name] = f
			}
			for l := range f.labels {
				families[name].labels[l] = true
			}
		}
	}
	var lines []string
	for name, f := range families {
		ls := slices.Sorted(maps.Keys(f.labels))
		lines = append(lines, strings.TrimSpace(name+" "+f.typ+" "+strings.Join(ls, ",")))
	}
	slices.Sort(lines)
	got := "# Metric families a primary and a follower export (name, type, labels; the arbiter_scan_*\n" +
		"# series with --kube-source), written by\n" +
		"# go test ./e2e/ -run TestExportedMetricsList -update-metrics\n" + strings.Join(lines, "\n") + "\n"
	if *updateMetrics {
		if err := os.WriteFile(metricsFile, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(metricsFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Errorf("%s is not what the servers export (go test ./e2e/ -run TestExportedMetricsList -update-metrics):\n got %s\nwant %s", metricsFile, got, want)
	}
	for _, name := range []string{"arbiter_decisions_total", "arbiter_exception_grants_total", "arbiter_follower_lag_revisions", "grpc_server_handled_total", "arbiter_decision_log_dropped_total"} {
		if families[name] == nil {
			t.Errorf("%s not exported", name)
		}
	}
}

// family is a metric family: its type and the labels of its samples.
type family struct {
	typ    string
	labels map[string]bool
}

// scrapeFamilies reads a Prometheus text exposition: the families (# TYPE
// lines) and the label names of their samples (a histogram's _bucket,
// _sum and _count samples count as the family's; "le" is left out).
func scrapeFamilies(t *testing.T, url string) map[string]*family {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	out := map[string]*family{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			f := strings.Fields(rest)
			if len(f) != 2 {
				t.Fatalf("%s: bad TYPE line %q", url, line)
			}
			out[f[0]] = &family{typ: f[1], labels: map[string]bool{}}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, _ := strings.Cut(line, "{")
		name = strings.Fields(name)[0]
		f := out[name]
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); f == nil && ok {
				f = out[base]
			}
		}
		if f == nil {
			t.Fatalf("%s: sample %q of no family", url, line)
		}
		if rest == "" {
			continue
		}
		labels, _, _ := strings.Cut(rest, "}")
		for _, kv := range strings.Split(labels, ",") {
			if k, _, ok := strings.Cut(kv, "="); ok && k != "le" && k != "quantile" {
				f.labels[k] = true
			}
		}
	}
	if len(out) == 0 {
		t.Fatal(fmt.Errorf("%s: no metric families", url))
	}
	return out
}
