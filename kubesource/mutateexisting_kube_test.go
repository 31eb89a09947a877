package kubesource

// The Mutator against a real kube-apiserver, in-process with the race
// detector: triggers decided by the server's Decide (as from the webhook
// shim) update the targets through the API server; a second trigger finds
// them compliant and writes nothing. Skipped when ARBITER_K8S_RUN is not
// set.

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

func labelConfigMapsPolicy(name, ns string) map[string]any {
	return map[string]any{
		"apiVersion": "policies.kyverno.io/v1", "kind": "NamespacedMutatingPolicy",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"evaluation": map[string]any{"mutateExisting": map[string]any{"enabled": true}},
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"secrets"}}}},
			"targetMatchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"UPDATE"}, "resources": []any{"configmaps"},
				"resourceNames": []any{"a", "b", "c"}}}},
			"mutations": []any{map[string]any{"patchType": "ApplyConfiguration", "applyConfiguration": map[string]any{
				"expression": `Object{metadata: Object.metadata{labels: {"seen-by": request.object.metadata.name}}}`}}},
		},
	}
}

// TestMutatorUpdatesTargets: three targets (resourceNames) of a
// NamespacedMutatingPolicy, updated once by the first trigger; the second
// trigger of the same content writes nothing; the other ConfigMap is not
// a target.
func TestMutatorUpdatesTargets(t *testing.T) {
	needAPIServer(t)
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := server.New(context.Background(), server.Config{DataDir: t.TempDir(), NoSync: true, Logger: log, MutateExisting: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Rest: apiserver.Config, Logger: log, BatchDelay: 10 * time.Millisecond, Resync: time.Hour, RetryInterval: time.Second}
	src, err := New(cfg, srv)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	metrics := NewMutateExistingMetrics(reg)
	m, err := NewMutator(cfg, MutateExistingConfig{Logger: log, Metrics: metrics}, srv.Current)
	if err != nil {
		t.Fatal(err)
	}
	srv.SetMutateExisting(m)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { _ = src.Run(ctx); done <- struct{}{} }()
	go func() { m.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
		srv.Shutdown(context.Background())
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	})

	ns := unique("mexist")
	apply(t, namespace(ns, nil))
	t.Cleanup(func() { remove(t, namespace(ns, nil)) })
	pol := labelConfigMapsPolicy("label-configmaps", ns)
	apply(t, pol)
	eventually(t, "the policy is served", func() bool {
		return srv.Current().PolicySet().MutateExistingPolicy(ns+"/label-configmaps") != nil
	})
	for _, name := range []string{"a", "b", "c", "other"} {
		apply(t, map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name, "namespace": ns}})
	}

	trigger := []byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"t1","namespace":"` + ns + `"}}`)
	decide := func() {
		t.Helper()
		resp, err := srv.Decide(context.Background(), &arbiterv1.DecideRequest{ObjectJson: trigger, AdmissionWebhook: true, Stages: arbiterv1.Stages_STAGES_MUTATE_ONLY})
		if err != nil || !resp.GetAllowed() {
			t.Fatalf("decide: %v %v", resp, err)
		}
	}
	decide()
	eventually(t, "the first trigger is processed", func() bool { return m.Stats().Done == 1 })
	if st := m.Stats(); st.Updated != 3 || st.Unchanged != 0 || st.Errors != 0 || st.Queued != 1 {
		t.Fatalf("first trigger: %+v", st)
	}
	cms := kc.Dynamic.Resource(cmGVR).Namespace(ns)
	versions := map[string]string{}
	for _, name := range []string{"a", "b", "c", "other"} {
		u, err := cms.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := "t1"
		if name == "other" {
			want = ""
		}
		if got := u.GetLabels()["seen-by"]; got != want {
			t.Errorf("%s: label seen-by %q, want %q", name, got, want)
		}
		versions[name] = u.GetResourceVersion()
	}

	decide()
	eventually(t, "the second trigger is processed", func() bool { return m.Stats().Done == 2 })
	if st := m.Stats(); st.Updated != 3 || st.Unchanged != 3 || st.Errors != 0 {
		t.Fatalf("second trigger: %+v", st)
	}
	for _, name := range []string{"a", "b", "c"} {
		u, err := cms.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if u.GetResourceVersion() != versions[name] {
			t.Errorf("%s written again: resourceVersion %s, was %s", name, u.GetResourceVersion(), versions[name])
		}
	}
	key := ns + "/label-configmaps"
	for result, want := range map[string]float64{"updated": 3, "unchanged": 3, "error": 0} {
		if got := testutil.ToFloat64(metrics.targets.WithLabelValues(key, result)); got != want {
			t.Errorf("arbiter_mutate_existing_targets_total{result=%q} = %v, want %v", result, got, want)
		}
	}
	if got := testutil.ToFloat64(metrics.triggers.WithLabelValues("queued")); got != 2 {
		t.Errorf("triggers queued %v, want 2", got)
	}

	// A trigger in another namespace does not set off the namespaced policy.
	other := []byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"t2","namespace":"default"}}`)
	if _, err := srv.Decide(context.Background(), &arbiterv1.DecideRequest{ObjectJson: other, AdmissionWebhook: true}); err != nil {
		t.Fatal(err)
	}
	if st := m.Stats(); st.Queued != 2 {
		t.Errorf("a trigger out of the policy's namespace was queued: %+v", st)
	}
}

// TestReadTrigger: the expression's trigger is read as the API server
// holds it after the request: an update once persisted (new
// resourceVersion), a no-op update at once, an update that never lands
// as the old object, a creation that never lands as nothing.
func TestReadTrigger(t *testing.T) {
	needAPIServer(t)
	m, err := NewMutator(Config{Rest: apiserver.Config}, MutateExistingConfig{TriggerWait: 200 * time.Millisecond}, func() MutatorSnapshot { return nil })
	if err != nil {
		t.Fatal(err)
	}
	ns := unique("readtrigger")
	apply(t, namespace(ns, nil))
	t.Cleanup(func() { remove(t, namespace(ns, nil)) })
	cm := apply(t, map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "t", "namespace": ns}, "data": map[string]any{"k": "1"}})
	request := func(op string, obj, old map[string]any) *admission.Request {
		r := &admission.Request{Operation: op, Object: obj, OldObject: old}
		r.Fill()
		return r
	}
	changed := cm.DeepCopy()
	changed.Object["data"] = map[string]any{"k": "2"}
	ctx := context.Background()

	// Never persisted: the old object, after the wait.
	got, err := m.readTrigger(ctx, request(admission.OpUpdate, changed.Object, cm.Object))
	if err != nil || got.GetResourceVersion() != cm.GetResourceVersion() {
		t.Fatalf("an update that never lands: %v %v", got, err)
	}
	// A no-op update: the stored object.
	if got, err := m.readTrigger(ctx, request(admission.OpUpdate, cm.Object, cm.Object)); err != nil || got.GetResourceVersion() != cm.GetResourceVersion() {
		t.Fatalf("a no-op update: %v %v", got, err)
	}
	// Persisted while the trigger is read: the new version.
	m.cfg.TriggerWait = 20 * time.Second
	type result struct {
		u   *unstructured.Unstructured
		err error
	}
	out := make(chan result, 1)
	go func() {
		u, err := m.readTrigger(ctx, request(admission.OpUpdate, changed.Object, cm.Object))
		out <- result{u, err}
	}()
	updated, err := kc.Dynamic.Resource(cmGVR).Namespace(ns).Update(ctx, changed, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := <-out
	if r.err != nil || r.u.GetResourceVersion() != updated.GetResourceVersion() {
		t.Fatalf("an update persisted meanwhile: read %v %v, want resourceVersion %s", r.u, r.err, updated.GetResourceVersion())
	}
	// A creation never persisted: nothing.
	m.cfg.TriggerWait = 200 * time.Millisecond
	absent := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "absent", "namespace": ns}}
	if got, err := m.readTrigger(ctx, request(admission.OpCreate, absent, nil)); err != nil || got != nil {
		t.Fatalf("a creation that never lands: %v %v", got, err)
	}
}
