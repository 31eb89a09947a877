package kubesource

// DeletingPolicies run by the primary against a real kube-apiserver
// (internal/k8stest). Skipped when ARBITER_K8S_RUN is not set. The
// policies run every two seconds: Kyverno's cron parser takes a seventh,
// seconds field ("*/2 * * * * * *").

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"

	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/internal/k8stest"
	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/store"
)

var (
	dpolGVR = schema.GroupVersionResource{Group: kyvernoapi.Group, Version: "v1", Resource: "deletingpolicies"}
	cmGVR   = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

// primary is one term of a primary running DeletingPolicies.
type primary struct {
	srv    *server.Server
	src    *Source
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan struct{}
}

// stop ends the term and waits until the source stopped.
func (p *primary) stop() {
	p.cancel()
	<-p.done
}

// startCleanup runs a primary (a fresh store) whose source runs the
// DeletingPolicies with cfg.
func startCleanup(t *testing.T, cfg *CleanupConfig) *primary {
	t.Helper()
	needAPIServer(t)
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := server.New(context.Background(), server.Config{DataDir: t.TempDir(), NoSync: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	src, err := New(Config{Rest: apiserver.Config, Logger: log, BatchDelay: 10 * time.Millisecond, Resync: time.Hour,
		RetryInterval: time.Second, Cleanup: cfg}, srv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &primary{srv: srv, src: src, logs: logs, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		_ = src.Run(ctx)
	}()
	t.Cleanup(func() {
		p.stop()
		srv.Shutdown(context.Background())
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	})
	select {
	case <-src.Ready():
	case <-time.After(60 * time.Second):
		t.Fatal("the source did not write its first comparison in 60 s")
	}
	return p
}

func deletingPolicy(name, schedule, ns, conditionExpr string) map[string]any {
	return map[string]any{
		"apiVersion": "policies.kyverno.io/v1", "kind": "DeletingPolicy",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"schedule": schedule,
			"matchConstraints": map[string]any{
				"resourceRules":     []any{map[string]any{"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"configmaps"}}},
				"objectSelector":    map[string]any{"matchLabels": map[string]any{"cleanup": "yes"}},
				"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": ns}},
			},
			"conditions": []any{map[string]any{"name": "old-enough", "expression": conditionExpr}},
		},
	}
}

func cleanupConfigMap(name, ns string, labelled bool) map[string]any {
	md := map[string]any{"name": name, "namespace": ns}
	if labelled {
		md["labels"] = map[string]any{"cleanup": "yes"}
	}
	return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": map[string]any{"k": "v"}}
}

func deletingException(name, ns, policy, cm, expiresAt string) map[string]any {
	spec := map[string]any{
		"policyRefs":      []any{map[string]any{"name": policy, "kind": "DeletingPolicy"}},
		"matchConditions": []any{map[string]any{"name": "cm", "expression": fmt.Sprintf("object.metadata.name == '%s'", cm)}},
	}
	if expiresAt != "" {
		spec["expiresAt"] = expiresAt
	}
	return map[string]any{"apiVersion": "policies.kyverno.io/v1", "kind": "PolicyException",
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec}
}

// configMaps returns the names of the ConfigMaps of a namespace.
func configMaps(t *testing.T, ns string) map[string]bool {
	t.Helper()
	l, err := kc.Dynamic.Resource(cmGVR).Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, u := range l.Items {
		out[u.GetName()] = true
	}
	return out
}

// cleanupEvents returns the Events recorded on a cluster-scoped policy
// (in default), by reason, then by related object name: how many.
func cleanupEvents(t *testing.T, policy string) map[string]map[string]int {
	t.Helper()
	ec, err := eventsv1client.NewForConfig(apiserver.Config)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ec.Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int{}
	for _, e := range l.Items {
		if e.Regarding.Name != policy || e.Regarding.Kind != kyvernoapi.KindDeletingPolicy || e.Related == nil {
			continue
		}
		if out[e.Reason] == nil {
			out[e.Reason] = map[string]int{}
		}
		out[e.Reason][e.Related.Name]++
		checkEvent(t, e)
	}
	return out
}

func checkEvent(t *testing.T, e eventsv1.Event) {
	t.Helper()
	want := map[string][2]string{
		ReasonCleanupDeleted: {"Normal", "successfully deleted the target resource ConfigMap/"},
		ReasonCleanupDryRun:  {"Normal", "dry run: would delete the target resource ConfigMap/"},
		ReasonCleanupFailed:  {"Warning", "failed to delete the target resource ConfigMap/"},
	}[e.Reason]
	if e.Type != want[0] || !strings.HasPrefix(e.Note, want[1]) || !strings.HasSuffix(e.Note, "/"+e.Related.Name) && e.Reason != ReasonCleanupFailed ||
		e.ReportingController != "arbiter-cleanup" || e.Related.Kind != "ConfigMap" {
		t.Errorf("event %s: %s %s %q by %s", e.Name, e.Type, e.Reason, e.Note, e.ReportingController)
	}
}

var (
	nameRe = regexp.MustCompile(` name=(\S+)`)
	runRe  = regexp.MustCompile(` run=(\S+)`)
)

// logged returns, for the log lines with msg, how many name the object
// within each run: run → name → count.
func logged(logs []string, msg string) map[string]map[string]int {
	out := map[string]map[string]int{}
	for _, l := range logs {
		for _, line := range strings.Split(l, "\n") {
			if !strings.Contains(line, `msg="`+msg+`"`) {
				continue
			}
			n, r := nameRe.FindStringSubmatch(line), runRe.FindStringSubmatch(line)
			if n == nil || r == nil {
				continue
			}
			if out[r[1]] == nil {
				out[r[1]] = map[string]int{}
			}
			out[r[1]][n[1]]++
		}
	}
	return out
}

// once checks that every object is named once per run in the log lines,
// and returns the objects named (with how many runs name them).
func once(t *testing.T, what string, byRun map[string]map[string]int) map[string]int {
	t.Helper()
	out := map[string]int{}
	for run, names := range byRun {
		for name, n := range names {
			if n != 1 {
				t.Errorf("%s: %s logged %d times in run %s", what, name, n, run)
			}
			out[name]++
		}
	}
	return out
}

func lastExecution(t *testing.T, name string) string {
	t.Helper()
	u, err := kc.Dynamic.Resource(dpolGVR).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, _, _ := unstructured.NestedString(u.Object, "status", "lastExecutionTime")
	return s
}

// TestCleanupDeletesOldConfigMaps: a DeletingPolicy selecting labelled
// ConfigMaps older than eight seconds deletes them on its schedule — not
// the young one, not the unlabelled one, not the one a PolicyException
// spares (an expired exception spares nothing); each deletion is logged
// once, recorded as a PolicyApplied Event once and counted;
// status.lastExecutionTime is written.
func TestCleanupDeletesOldConfigMaps(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics := NewCleanupMetrics(reg)
	p := startCleanup(t, &CleanupConfig{Metrics: metrics, PageSize: 2})
	ns, name := unique("dpol-old"), unique("dpol-old")
	apply(t, namespace(ns, nil))
	pol := deletingPolicy(name, "*/2 * * * * * *", ns, "time.now() - timestamp(object.metadata.creationTimestamp) > duration('8s')")
	t.Cleanup(func() { remove(t, pol) })
	for _, cm := range []string{"old-1", "old-2", "old-3", "spared", "was-spared"} {
		apply(t, cleanupConfigMap(cm, ns, true))
	}
	apply(t, cleanupConfigMap("unlabelled", ns, false))
	apply(t, deletingException("spare", ns, name, "spared", ""))
	apply(t, deletingException("expired", ns, name, "was-spared", "2020-01-01T00:00:00Z"))
	time.Sleep(9 * time.Second)
	apply(t, cleanupConfigMap("young", ns, true))
	apply(t, pol)
	eventually(t, "the first run", func() bool { return lastExecution(t, name) != "" })
	left := configMaps(t, ns)
	for _, cm := range []string{"spared", "unlabelled", "young"} {
		if !left[cm] {
			t.Errorf("%s was deleted", cm)
		}
	}
	for _, cm := range []string{"old-1", "old-2", "old-3", "was-spared"} {
		if left[cm] {
			t.Errorf("%s was not deleted", cm)
		}
	}
	remove(t, pol) // no more runs
	eventually(t, "the policy leaves the store", func() bool {
		_, ok := p.srv.Current().Object(store.Key{Group: kyvernoapi.Group, Kind: kyvernoapi.KindDeletingPolicy, Name: name})
		return !ok
	})
	deleted := once(t, "resource deleted", logged([]string{p.logs.String()}, "resource deleted"))
	events := cleanupEvents(t, name)
	for _, cm := range []string{"old-1", "old-2", "old-3", "was-spared"} {
		if deleted[cm] != 1 {
			t.Errorf("%s: deletion logged in %d runs", cm, deleted[cm])
		}
		if n := events[ReasonCleanupDeleted][cm]; n != 1 {
			t.Errorf("%s: %d PolicyApplied Events", cm, n)
		}
	}
	if len(deleted) != 4 || len(events[ReasonCleanupDeleted]) != 4 || len(events) != 1 {
		t.Errorf("deletions logged %v, Events %v", deleted, events)
	}
	got := testutil.ToFloat64(metrics.deleted.WithLabelValues(kyvernoapi.KindDeletingPolicy, "", name, "configmaps", ns, ""))
	if got != 4 {
		t.Errorf("arbiter_deleting_policy_deleted_objects_total = %v, want 4", got)
	}
	if st := p.src.Stats(); st.CleanupDeleted != 4 || st.CleanupRuns == 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestCleanupDryRun: with --kube-cleanup-dry-run, or on a policy annotated
// cleanup.arbiter.dev/dry-run: "true", nothing is deleted; what would be
// is logged and recorded as a PolicyDryRun Event once per object and run.
func TestCleanupDryRun(t *testing.T) {
	for _, c := range []struct {
		name       string
		cfg        *CleanupConfig
		annotation bool
	}{
		{"flag", &CleanupConfig{DryRun: true}, false},
		{"annotation", &CleanupConfig{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := startCleanup(t, c.cfg)
			ns, name := unique("dpol-dry"), unique("dpol-dry")
			apply(t, namespace(ns, nil))
			pol := deletingPolicy(name, "*/2 * * * * * *", ns, "true")
			if c.annotation {
				pol["metadata"].(map[string]any)["annotations"] = map[string]any{DryRunAnnotation: "true"}
			}
			t.Cleanup(func() { remove(t, pol) })
			for _, cm := range []string{"a", "b", "c"} {
				apply(t, cleanupConfigMap(cm, ns, true))
			}
			apply(t, pol)
			// Two runs at least.
			first := ""
			eventually(t, "two runs", func() bool {
				le := lastExecution(t, name)
				if first == "" {
					first = le
				}
				return le != "" && le != first
			})
			p.stop() // the source has stopped: no run in flight
			remove(t, pol)
			if left := configMaps(t, ns); len(left) != 3 {
				t.Errorf("a dry run deleted: left %v", left)
			}
			runs := logged([]string{p.logs.String()}, "dry run: resource would be deleted")
			perObject := once(t, "dry run", runs)
			events := cleanupEvents(t, name)
			for _, cm := range []string{"a", "b", "c"} {
				if perObject[cm] < 2 {
					t.Errorf("%s: logged in %d runs, want 2 or more", cm, perObject[cm])
				}
				if events[ReasonCleanupDryRun][cm] != perObject[cm] {
					t.Errorf("%s: %d PolicyDryRun Events for %d runs", cm, events[ReasonCleanupDryRun][cm], perObject[cm])
				}
			}
			if len(events) != 1 {
				t.Errorf("Events %v", events)
			}
			if strings.Contains(p.logs.String(), `msg="resource deleted"`) {
				t.Error("a dry run logged a deletion")
			}
		})
	}
}

// TestCleanupPrimaryStopsMidRun: a primary whose term ends in the middle
// of a run (after 10 of 40 deletions, lists of 7) writes no
// lastExecutionTime; the next primary runs the same slot and deletes the
// rest: every ConfigMap is deleted, logged and evented exactly once across
// both primaries, in that one run.
func TestCleanupPrimaryStopsMidRun(t *testing.T) {
	needAPIServer(t)
	ns, name := unique("dpol-mid"), unique("dpol-mid")
	apply(t, namespace(ns, nil))
	const n = 40
	for i := range n {
		apply(t, cleanupConfigMap(fmt.Sprintf("cm-%02d", i), ns, true))
	}
	var first atomic.Pointer[primary]
	var deletions atomic.Int32
	cfg := &CleanupConfig{PageSize: 7, Workers: 1}
	cfg.afterDelete = func() {
		if deletions.Add(1) == 10 {
			first.Load().cancel()
			time.Sleep(200 * time.Millisecond) // the term ends before the next deletion
		}
	}
	first.Store(startCleanup(t, cfg))
	pol := deletingPolicy(name, "*/2 * * * * * *", ns, "true")
	t.Cleanup(func() { remove(t, pol) })
	apply(t, pol)
	select {
	case <-first.Load().done:
	case <-time.After(60 * time.Second):
		t.Fatal("the first primary's term did not end")
	}
	if le := lastExecution(t, name); le != "" {
		t.Fatalf("the interrupted run wrote lastExecutionTime %s", le)
	}
	if left := len(configMaps(t, ns)); left != n-10 {
		t.Fatalf("%d ConfigMaps left after the interrupted run, want %d", left, n-10)
	}
	second := startCleanup(t, &CleanupConfig{PageSize: 7})
	eventually(t, "the run finished", func() bool { return lastExecution(t, name) != "" })
	remove(t, pol)
	if left := configMaps(t, ns); len(left) != 0 {
		t.Errorf("left %v", left)
	}
	logs := []string{first.Load().logs.String(), second.logs.String()}
	byRun := logged(logs, "resource deleted")
	deleted := once(t, "resource deleted", byRun)
	if len(byRun) != 1 {
		t.Errorf("deletions in %d runs, want the one slot: %v", len(byRun), byRun)
	}
	events := cleanupEvents(t, name)
	for i := range n {
		cm := fmt.Sprintf("cm-%02d", i)
		if deleted[cm] != 1 || events[ReasonCleanupDeleted][cm] != 1 {
			t.Errorf("%s: deleted in %d runs, %d Events", cm, deleted[cm], events[ReasonCleanupDeleted][cm])
		}
	}
	if d1 := len(logged(logs[:1], "resource deleted")); d1 != 1 || !strings.Contains(logs[0], "the run stopped with the term") {
		t.Errorf("the first primary did not stop mid-run")
	}
}

// TestCleanupStatusKeepsConditions: lastExecutionTime is merged into the
// status; the rest of it is kept (Kyverno replaces the whole status).
func TestCleanupStatusKeepsConditions(t *testing.T) {
	startCleanup(t, &CleanupConfig{})
	ns, name := unique("dpol-st"), unique("dpol-st")
	apply(t, namespace(ns, nil))
	pol := deletingPolicy(name, "*/2 * * * * * *", ns, "false")
	t.Cleanup(func() { remove(t, pol) })
	u := apply(t, pol)
	u.Object["status"] = map[string]any{"conditionStatus": map[string]any{"message": "kept"}}
	if _, err := kc.Dynamic.Resource(dpolGVR).UpdateStatus(context.Background(), u, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		t.Fatal(err)
	}
	eventually(t, "a run", func() bool { return lastExecution(t, name) != "" })
	got, err := kc.Dynamic.Resource(dpolGVR).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if msg, _, _ := unstructured.NestedString(got.Object, "status", "conditionStatus", "message"); msg != "kept" {
		t.Errorf("status %v", got.Object["status"])
	}
}

// TestCleanupDeployRBACSuffices: a primary with the rights deploy/ grants
// the server's account (kube-source and cleanup components, impersonated),
// plus list and delete on ConfigMaps as a cluster grants them (a
// ClusterRole labelled for the aggregated cleanup targets, bound directly:
// run-apiserver has no controller manager to aggregate it), runs a
// DeletingPolicy with no request refused.
func TestCleanupDeployRBACSuffices(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	if _, err := kc.Apply(ctx, namespace("arbiter", nil)); err != nil {
		t.Fatal(err)
	}
	objs, err := k8stest.ReadObjects("../deploy/kube-source/rbac.yaml", "../deploy/kube-source/cleanup/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	grant := map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
		"metadata": map[string]any{"name": "arbiter-test-cleanup-configmaps", "labels": map[string]any{"arbiter.dev/aggregate-to-cleanup": "true"}},
		"rules":    []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "verbs": []any{"list", "delete"}}}}
	bind := map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
		"metadata": map[string]any{"name": "arbiter-test-cleanup-configmaps"},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "arbiter-test-cleanup-configmaps"},
		"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": "arbiter-server", "namespace": "arbiter"}}}
	for _, o := range append(objs, grant, bind) {
		if _, err := kc.Apply(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		remove(t, bind)
		remove(t, grant)
	})
	rc := rest.CopyConfig(apiserver.Config)
	rc.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:arbiter:arbiter-server",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:arbiter", "system:authenticated"}}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := server.New(ctx, server.Config{DataDir: t.TempDir(), NoSync: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	src, err := New(Config{Rest: rc, Logger: log, BatchDelay: 10 * time.Millisecond, Resync: time.Hour, RetryInterval: time.Second,
		Cleanup: &CleanupConfig{}}, srv)
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = src.Run(sctx)
	}()
	defer func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	}()
	ns, name := unique("dpol-rbac"), unique("dpol-rbac")
	apply(t, namespace(ns, nil))
	apply(t, cleanupConfigMap("gone", ns, true))
	pol := deletingPolicy(name, "*/2 * * * * * *", ns, "true")
	t.Cleanup(func() { remove(t, pol) })
	apply(t, pol)
	eventually(t, "a run", func() bool { return lastExecution(t, name) != "" })
	if left := configMaps(t, ns); len(left) != 0 {
		t.Errorf("left %v", left)
	}
	if n := cleanupEvents(t, name)[ReasonCleanupDeleted]["gone"]; n != 1 {
		t.Errorf("%d PolicyApplied Events", n)
	}
	if l := logs.String(); strings.Contains(l, "forbidden") {
		t.Fatalf("a request was refused:\n%s", l)
	}
}
