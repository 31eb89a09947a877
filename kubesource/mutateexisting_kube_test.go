package kubesource

// The Mutator against a real kube-apiserver, in-process with the race
// detector: triggers decided by the server's Decide (as from the webhook
// shim) update the targets through the API server; a second trigger finds
// them compliant and writes nothing. Skipped when ARBITER_K8S_RUN is not
// set.

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

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

// triggerReads wraps the Mutator's transport: it counts the GETs of one
// object (path) and runs after(n) once the n-th one's response is read,
// before readTrigger sees it, so that a test writes the object between
// two reads of it, deterministically.
type triggerReads struct {
	path  string
	mu    sync.Mutex
	n     int
	after func(n int, body []byte)
}

func (r *triggerReads) set(path string, after func(n int, body []byte)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.path, r.n, r.after = path, 0, after
}

// stop stops counting (count still says how many reads were counted).
func (r *triggerReads) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.path, r.after = "", nil
}

func (r *triggerReads) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func (r *triggerReads) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		r.mu.Lock()
		match := req.Method == http.MethodGet && req.URL.Path == r.path
		if match {
			r.n++
		}
		n, after := r.n, r.after
		r.mu.Unlock()
		if !match || err != nil || after == nil {
			return resp, err
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		after(n, body)
		return resp, nil
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestReadTrigger: the expression's trigger is read as the API server
// holds it after the request. The Mutator's reads of the trigger are
// counted and, between two of them, the test writes it, as the API server
// does after the admission response: an update persisted after the first
// read is read once persisted (new resourceVersion), and so are a creation
// persisted after the first read and an update that changes nothing but
// that the replica's mutations changed; a no-op update (the admitted
// object is the stored one, at the old resourceVersion), and an update
// the mutations reverted, are read once, not waited for; an update that
// never lands is read as the old object, a creation that never lands as
// nothing, once the wait is over.
func TestReadTrigger(t *testing.T) {
	needAPIServer(t)
	reads := &triggerReads{}
	rc := rest.CopyConfig(apiserver.Config)
	rc.Wrap(reads.wrap)
	m, err := NewMutator(Config{Rest: rc}, MutateExistingConfig{TriggerWait: 200 * time.Millisecond}, func() MutatorSnapshot { return nil })
	if err != nil {
		t.Fatal(err)
	}
	ns := unique("readtrigger")
	apply(t, namespace(ns, nil))
	t.Cleanup(func() { remove(t, namespace(ns, nil)) })
	cms := kc.Dynamic.Resource(cmGVR).Namespace(ns)
	cm := apply(t, map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "t", "namespace": ns}, "data": map[string]any{"k": "1"}})
	path := "/api/v1/namespaces/" + ns + "/configmaps/"
	request := func(op string, obj, old map[string]any) *admission.Request {
		r := &admission.Request{Operation: op, Object: obj, OldObject: old}
		r.Fill()
		return r
	}
	changed := cm.DeepCopy()
	changed.Object["data"] = map[string]any{"k": "2"}
	ctx := context.Background()
	// readVersion is the resourceVersion (or "" when absent) of a read's
	// response body.
	readVersion := func(body []byte) string {
		var u unstructured.Unstructured
		if err := u.UnmarshalJSON(body); err != nil {
			return ""
		}
		return u.GetResourceVersion()
	}

	// Never persisted: the old object, after the wait.
	reads.set(path+"t", nil)
	got, err := m.readTrigger(ctx, request(admission.OpUpdate, changed.Object, cm.Object), nil)
	if err != nil || got.GetResourceVersion() != cm.GetResourceVersion() {
		t.Fatalf("an update that never lands: %v %v", got, err)
	}

	// The other cases wait as long as it takes: a read that does not end
	// when it should ends the call instead (its context is cancelled at
	// the read after the one it should have stopped at).
	m.cfg.TriggerWait = time.Hour
	readUntil := func(req *admission.Request, admitted map[string]any, name string, last int, between func(n int, body []byte)) (*unstructured.Unstructured, error) {
		t.Helper()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		reads.set(path+name, func(n int, body []byte) {
			if n > last {
				cancel()
				return
			}
			if between != nil {
				between(n, body)
			}
		})
		defer reads.stop()
		return m.readTrigger(ctx, req, admitted)
	}

	// A no-op update (the stored object is at the old resourceVersion,
	// with the content admitted): the stored object, read once.
	got, err = readUntil(request(admission.OpUpdate, cm.Object, cm.Object), nil, "t", 1, nil)
	if err != nil || got.GetResourceVersion() != cm.GetResourceVersion() || string(got.GetUID()) != string(cm.GetUID()) {
		t.Fatalf("a no-op update: read %v %v (after %d reads), want the stored object at resourceVersion %s", got, err, reads.count(), cm.GetResourceVersion())
	}

	// An update persisted after the first read (which sees the old
	// resourceVersion): the second read's object, the updated one.
	var updated *unstructured.Unstructured
	got, err = readUntil(request(admission.OpUpdate, changed.Object, cm.Object), nil, "t", 2, func(n int, body []byte) {
		if n != 1 {
			return
		}
		if v := readVersion(body); v != cm.GetResourceVersion() {
			t.Errorf("the first read saw resourceVersion %q, not the old %s", v, cm.GetResourceVersion())
		}
		var err error
		if updated, err = cms.Update(ctx, changed, metav1.UpdateOptions{}); err != nil {
			t.Errorf("updating the trigger: %v", err)
		}
	})
	if updated == nil {
		t.Fatalf("the trigger was not updated after the first read (%d reads): %v %v", reads.count(), got, err)
	}
	if err != nil || got.GetResourceVersion() != updated.GetResourceVersion() {
		t.Fatalf("an update persisted after the first read: read %v %v (after %d reads), want the updated object at resourceVersion %s",
			got, err, reads.count(), updated.GetResourceVersion())
	}

	// An update that changes nothing but that the replica's mutations
	// changed (admitted: with a label), persisted after the first read:
	// the second read's object, the mutated one (not the stored object
	// the request's object equals).
	stored := updated
	admitted := stored.DeepCopy()
	admitted.SetLabels(map[string]string{"mutated": "yes"})
	var persisted *unstructured.Unstructured
	got, err = readUntil(request(admission.OpUpdate, stored.Object, stored.Object), admitted.Object, "t", 2, func(n int, body []byte) {
		if n != 1 {
			return
		}
		if v := readVersion(body); v != stored.GetResourceVersion() {
			t.Errorf("the first read saw resourceVersion %q, not the old %s", v, stored.GetResourceVersion())
		}
		var err error
		if persisted, err = cms.Update(ctx, admitted, metav1.UpdateOptions{}); err != nil {
			t.Errorf("updating the trigger: %v", err)
		}
	})
	if persisted == nil {
		t.Fatalf("the trigger was not updated after the first read (%d reads): %v %v", reads.count(), got, err)
	}
	if err != nil || got.GetResourceVersion() != persisted.GetResourceVersion() || got.GetLabels()["mutated"] != "yes" {
		t.Fatalf("a no-op update the mutations changed: read %v %v (after %d reads), want the mutated object at resourceVersion %s",
			got, err, reads.count(), persisted.GetResourceVersion())
	}

	// An update that the replica's mutations reverted (admitted: the
	// stored object), not persisted: the stored object, read once.
	reverted := persisted.DeepCopy()
	reverted.Object["data"] = map[string]any{"k": "3"}
	got, err = readUntil(request(admission.OpUpdate, reverted.Object, persisted.Object), persisted.Object, "t", 1, nil)
	if err != nil || got.GetResourceVersion() != persisted.GetResourceVersion() {
		t.Fatalf("an update the mutations reverted: read %v %v (after %d reads), want the stored object at resourceVersion %s",
			got, err, reads.count(), persisted.GetResourceVersion())
	}

	// A creation persisted after the first read (not found): the second
	// read's object, the created one.
	late := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "late", "namespace": ns}, "data": map[string]any{"k": "late"}}
	var created *unstructured.Unstructured
	got, err = readUntil(request(admission.OpCreate, late, nil), nil, "late", 2, func(n int, body []byte) {
		if n != 1 {
			return
		}
		if v := readVersion(body); v != "" {
			t.Errorf("the first read found the created trigger at resourceVersion %s", v)
		}
		var err error
		if created, err = cms.Create(ctx, &unstructured.Unstructured{Object: late}, metav1.CreateOptions{}); err != nil {
			t.Errorf("creating the trigger: %v", err)
		}
	})
	if created == nil {
		t.Fatalf("the trigger was not created after the first read (%d reads): %v %v", reads.count(), got, err)
	}
	if err != nil || got == nil || got.GetResourceVersion() != created.GetResourceVersion() {
		t.Fatalf("a creation persisted after the first read: read %v %v (after %d reads), want the created object at resourceVersion %s",
			got, err, reads.count(), created.GetResourceVersion())
	}

	// A creation never persisted: nothing, after the wait.
	m.cfg.TriggerWait = 200 * time.Millisecond
	absent := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "absent", "namespace": ns}}
	if got, err := m.readTrigger(ctx, request(admission.OpCreate, absent, nil), nil); err != nil || got != nil {
		t.Fatalf("a creation that never lands: %v %v", got, err)
	}
}
