package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"

	"github.com/arbiter-pdp/arbiter/decisionlog"
	"github.com/arbiter-pdp/arbiter/internal/tracing"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/server/metrics"
)

// exceptionFixture: one policy requiring a team label, and exceptions that
// are granted (for pod "granted"), refused by a compensating control (for
// pod "refused"), and expired.
const exceptionFixture = `
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: require-team}
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  validations:
    - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
      message: pods need a team label
---
apiVersion: policies.kyverno.io/v1
kind: PolicyException
metadata: {name: let-granted, namespace: apps}
spec:
  policyRefs: [{name: require-team, kind: ValidatingPolicy}]
  matchConditions:
    - {name: only, expression: "object.metadata.name == 'granted'"}
---
apiVersion: policies.kyverno.io/v1
kind: PolicyException
metadata: {name: needs-ticket, namespace: apps}
spec:
  policyRefs: [{name: require-team, kind: ValidatingPolicy}]
  matchConditions:
    - {name: only, expression: "object.metadata.name == 'refused'"}
  validations:
    - expression: "has(object.metadata.annotations) && 'ticket' in object.metadata.annotations"
      message: an exception needs a ticket annotation
---
apiVersion: policies.kyverno.io/v1
kind: PolicyException
metadata: {name: long-gone, namespace: apps}
spec:
  policyRefs: [{name: require-team, kind: ValidatingPolicy}]
  expiresAt: "2020-01-01T00:00:00Z"
`

func writeFixture(t testing.TB, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fixture.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func plainPod(name string) *arbiterv1.DecideRequest {
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": "apps"},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": "x"}}}})
	return &arbiterv1.DecideRequest{ObjectJson: b}
}

// gather returns the value of the metric name with labels (a subset).
func gather(t testing.TB, m *metrics.Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	found := false
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, mt := range f.GetMetric() {
			for k, v := range labels {
				ok := false
				for _, lp := range mt.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						ok = true
					}
				}
				if !ok {
					continue next
				}
			}
			found = true
			sum += metricValue(mt)
		}
	}
	if !found {
		return -1
	}
	return sum
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetHistogram() != nil:
		return float64(m.GetHistogram().GetSampleCount())
	case m.GetSummary() != nil:
		return float64(m.GetSummary().GetSampleCount())
	}
	return 0
}

func TestMetrics(t *testing.T) {
	m := metrics.New()
	ts := startServer(t, server.Config{Metrics: m})
	m.RegisterState(ts.State)
	ctx := context.Background()
	if _, err := ts.LoadObjects(ctx, readObjects(t, writeFixture(t, exceptionFixture))); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"granted", "refused", "other", "other"} {
		if _, err := ts.c.Decide(ctx, plainPod(name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"arbiter_decisions_total", map[string]string{"result": "fail", "action": "Deny", "policy_kind": "ValidatingPolicy"}, 3},
		{"arbiter_decisions_total", map[string]string{"result": "skip", "action": "Deny", "policy_kind": "ValidatingPolicy"}, 1},
		{"arbiter_decision_requests_total", map[string]string{"allowed": "false"}, 3},
		{"arbiter_decision_requests_total", map[string]string{"allowed": "true"}, 1},
		{"arbiter_decision_duration_seconds", nil, 4},
		{"arbiter_exception_grants_total", map[string]string{"exception": "apps/let-granted", "result": "granted"}, 1},
		{"arbiter_exception_grants_total", map[string]string{"exception": "apps/needs-ticket", "result": "refused"}, 1},
		{"arbiter_exception_grants_total", map[string]string{"exception": "apps/long-gone", "result": "expired"}, 4},
		{"arbiter_store_revision", nil, 1},
		{"arbiter_store_objects", nil, 4},
		{"arbiter_policies", nil, 1},
		{"arbiter_exceptions", nil, 3},
		{"arbiter_follower_lag_revisions", nil, 0},
		{"arbiter_sync_commit_duration_seconds", nil, 1},
		{"grpc_server_handled_total", map[string]string{"grpc_method": "Decide", "grpc_code": "OK"}, 4},
		{"grpc_server_handling_seconds", map[string]string{"grpc_method": "Decide"}, 4},
	} {
		if got := gather(t, m, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// The HTTP handler serves them; pprof only when asked.
	srv := httptest.NewServer(m.Handler(false, ts.Serving))
	defer srv.Close()
	body := httpGet(t, srv.URL+"/metrics")
	if !strings.Contains(body, "arbiter_decisions_total") || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics lacks metrics:\n%.500s", body)
	}
	if code := httpCode(t, srv.URL+"/debug/pprof/"); code != http.StatusNotFound {
		t.Fatalf("pprof served without the flag: %d", code)
	}
	if code := httpCode(t, srv.URL+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz of a serving server: %d", code)
	}
	notReady := httptest.NewServer(m.Handler(false, func() bool { return false }))
	defer notReady.Close()
	if code := httpCode(t, notReady.URL+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz of a server not serving: %d", code)
	}
	withPprof := httptest.NewServer(m.Handler(true, nil))
	defer withPprof.Close()
	if code := httpCode(t, withPprof.URL+"/debug/pprof/"); code != http.StatusOK {
		t.Fatalf("pprof with the flag: %d", code)
	}
}

func httpGet(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func httpCode(t testing.TB, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestFollowerLagMetric(t *testing.T) {
	primary := startServer(t, server.Config{})
	m := metrics.New()
	f := startServer(t, server.Config{Follow: primary.addr, Metrics: m})
	m.RegisterState(f.State)
	if _, err := primary.LoadObjects(context.Background(), readObjects(t, pssDir)); err != nil {
		t.Fatal(err)
	}
	waitRevision(t, f, 1)
	if got := gather(t, m, "arbiter_store_revision", nil); got != 1 {
		t.Fatalf("follower revision gauge %v", got)
	}
	if got := gather(t, m, "arbiter_follower_lag_revisions", nil); got != 0 {
		t.Fatalf("lag %v after catching up", got)
	}
	if got := gather(t, m, "arbiter_sync_commit_duration_seconds", nil); got < 1 {
		t.Fatalf("follower commits observed: %v", got)
	}
}

func TestDecisionSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	ts := startServer(t, server.Config{TracerProvider: tp, GRPCOptions: []grpc.ServerOption{tracing.ServerOption(tp)}})
	ctx := context.Background()
	if _, err := ts.LoadObjects(ctx, readObjects(t, pssDir)); err != nil {
		t.Fatal(err)
	}
	resp, err := ts.c.Decide(ctx, podRequest("traced", "default", false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.c.Serving(ctx); err != nil {
		t.Fatal(err)
	}
	var decision, rpc sdktrace.ReadOnlySpan
	for _, s := range exp.GetSpans().Snapshots() {
		switch s.Name() {
		case "arbiter.decision":
			decision = s
		case "arbiter.v1.DecisionService/Decide":
			rpc = s
		}
		if strings.Contains(s.Name(), "Health") {
			t.Fatalf("health checks are traced: %s", s.Name())
		}
	}
	if decision == nil || rpc == nil {
		t.Fatalf("spans: %v", exp.GetSpans().Snapshots())
	}
	if decision.Parent().SpanID() != rpc.SpanContext().SpanID() {
		t.Fatal("the decision span is not a child of the RPC span")
	}
	attrs := map[string]string{}
	for _, a := range decision.Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	for k, want := range map[string]string{
		"arbiter.revision": "1", "arbiter.digest": resp.GetDigest(), "arbiter.decision_id": resp.GetDecisionId(),
		"arbiter.allowed": "true", "arbiter.request.name": "traced",
	} {
		if attrs[k] != want {
			t.Errorf("span attribute %s = %q, want %q", k, attrs[k], want)
		}
	}
}

func readLines(t testing.TB, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not a JSON line: %v: %s", err, sc.Text())
		}
		out = append(out, m)
	}
	return out
}

func TestDecisionLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	dl, err := decisionlog.New(decisionlog.Config{Output: path, IncludeObjects: true})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, server.Config{DecisionLog: dl})
	ctx := context.Background()
	if _, err := ts.LoadObjects(ctx, readObjects(t, writeFixture(t, exceptionFixture))); err != nil {
		t.Fatal(err)
	}
	granted, err := ts.c.Decide(ctx, plainPod("granted"))
	if err != nil {
		t.Fatal(err)
	}
	dry := plainPod("refused")
	dry.DryRun = true
	dry.UserInfo = &arbiterv1.UserInfo{Username: "alice", Groups: []string{"devs"}}
	dry.Operation = arbiterv1.Operation_OPERATION_CREATE
	if _, err := ts.c.Decide(ctx, dry); err != nil {
		t.Fatal(err)
	}
	secret, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Secret",
		"metadata":   map[string]any{"name": "creds", "namespace": "apps"},
		"data":       map[string]any{"password": "aHVudGVyMg=="},
		"stringData": map[string]any{"token": "plain-secret"}})
	if _, err := ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: secret}); err != nil {
		t.Fatal(err)
	}
	if err := dl.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3", len(lines))
	}
	g := lines[0]
	if g["decisionId"] != granted.GetDecisionId() || g["digest"] != granted.GetDigest() || g["revision"].(float64) != 1 ||
		g["caller"] != "anonymous" || g["allowed"] != true || g["time"] == nil {
		t.Fatalf("line 0: %v", g)
	}
	if ex := g["exceptions"].(map[string]any); !strings.Contains(jsonText(ex["granted"]), "apps/let-granted") || !strings.Contains(jsonText(ex["expired"]), "apps/long-gone") {
		t.Fatalf("line 0 exceptions: %v", ex)
	}
	r := lines[1]
	req := r["request"].(map[string]any)
	if r["dryRun"] != true || r["allowed"] != false || req["user"] != "alice" || req["kind"] != "Pod" || req["name"] != "refused" ||
		req["namespace"] != "apps" || req["operation"] != "CREATE" {
		t.Fatalf("line 1: %v", r)
	}
	if ex := r["exceptions"].(map[string]any); !strings.Contains(jsonText(ex["refused"]), "apps/needs-ticket") {
		t.Fatalf("line 1 exceptions: %v", ex)
	}
	if res := jsonText(r["results"]); !strings.Contains(res, "an exception needs a ticket annotation") {
		t.Fatalf("line 1 results: %s", res)
	}
	// The Secret's data and stringData are masked; its keys and metadata are not.
	s := lines[2]
	obj := jsonText(s["object"])
	if strings.Contains(obj, "aHVudGVyMg==") || strings.Contains(obj, "plain-secret") {
		t.Fatalf("secret values logged: %s", obj)
	}
	if !strings.Contains(obj, `"password":"***"`) || !strings.Contains(obj, `"token":"***"`) || !strings.Contains(obj, `"name":"creds"`) {
		t.Fatalf("masked secret: %s", obj)
	}
	// The pod objects are logged unmasked.
	if !strings.Contains(jsonText(g["object"]), `"image":"x"`) {
		t.Fatalf("pod object: %s", jsonText(g["object"]))
	}
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestDecisionLogSampling(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	zero, one := 0.0, 1.0
	dl, err := decisionlog.New(decisionlog.Config{Output: path, SampleAllowed: &zero, SampleDenied: &one})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, server.Config{DecisionLog: dl})
	ctx := context.Background()
	if _, err := ts.LoadObjects(ctx, readObjects(t, writeFixture(t, exceptionFixture))); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		for _, name := range []string{"granted", "other"} {
			if _, err := ts.c.Decide(ctx, plainPod(name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	dl.Close()
	lines := readLines(t, path)
	if len(lines) != 5 {
		t.Fatalf("%d lines, want the 5 denials", len(lines))
	}
	for _, l := range lines {
		if l["allowed"] != false {
			t.Fatalf("an allowed decision was logged at rate 0: %v", l)
		}
		if l["object"] != nil {
			t.Fatal("objects logged without IncludeObjects")
		}
	}
}

// TestGracefulDrain: on Shutdown health goes NOT_SERVING at once, calls are
// still served during the drain delay, in-flight calls finish, then the
// server stops.
func TestGracefulDrain(t *testing.T) {
	ts := startServer(t, server.Config{DrainDelay: 2 * time.Second})
	ctx := context.Background()
	if _, err := ts.LoadObjects(ctx, readObjects(t, pssDir)); err != nil {
		t.Fatal(err)
	}
	// An in-flight call: waits for a revision that arrives during the drain.
	inflight := make(chan error, 1)
	go func() {
		req := podRequest("p", "default", false)
		req.MinRevision = 2
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := ts.c.Decide(cctx, req)
		inflight <- err
	}()
	time.Sleep(100 * time.Millisecond)
	done := make(chan struct{})
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		ts.Shutdown(sctx)
		close(done)
	}()
	time.Sleep(100 * time.Millisecond)
	if ok, err := ts.c.Serving(ctx); err != nil || ok {
		t.Fatalf("during the drain: serving=%v err=%v, want NOT_SERVING", ok, err)
	}
	if _, err := ts.c.Decide(ctx, podRequest("q", "default", false)); err != nil {
		t.Fatalf("a call during the drain delay: %v", err)
	}
	if _, err := ts.c.Write(ctx, upserts(namespaceJSON("drain", 0))); err != nil {
		t.Fatal(err)
	}
	if err := <-inflight; err != nil {
		t.Fatalf("in-flight call: %v", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return")
	}
	if _, err := ts.c.Decide(ctx, podRequest("late", "default", false)); err == nil {
		t.Fatal("a call after shutdown succeeded")
	}
}
