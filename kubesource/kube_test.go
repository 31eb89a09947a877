package kubesource

// Tests against a real kube-apiserver (internal/k8stest), skipped when
// ARBITER_K8S_RUN is not set: a Source writing to an in-process
// server.Server on a bbolt file, fed by client-go writes.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/internal/k8stest"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/store"
)

var (
	apiserver *k8stest.Server
	kc        *k8stest.Client
)

func TestMain(m *testing.M) {
	code := func() int {
		srv, err := k8stest.StartRestartable()
		if err != nil {
			fmt.Fprintln(os.Stderr, "starting the API server:", err)
			return 1
		}
		if srv == nil {
			fmt.Println(k8stest.SkipMessage)
			return m.Run() // the hermetic tests only
		}
		defer srv.Stop()
		apiserver = srv
		if kc, err = k8stest.NewClient(srv.Config); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := kc.InstallCRDs(context.Background(), "../deploy/kube-source/crds/*.json"); err != nil {
			fmt.Fprintln(os.Stderr, "installing the CRDs:", err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

func needAPIServer(t *testing.T) {
	t.Helper()
	if apiserver == nil {
		t.Skip(k8stest.SkipMessage)
	}
}

// syncBuffer collects a test's logs, shown when it fails.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type fixture struct {
	t   *testing.T
	srv *server.Server
	src *Source
	// halt, when set, ends the source's term and waits until it stopped.
	halt func()
}

// start runs a primary (in-process, on a fresh bbolt file) fed by a Source,
// and waits for the source's first comparison of the store with the cluster.
func start(t *testing.T) *fixture {
	t.Helper()
	needAPIServer(t)
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := server.New(context.Background(), server.Config{DataDir: t.TempDir(), NoSync: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	src, err := New(Config{Rest: apiserver.Config, Logger: log, BatchDelay: 10 * time.Millisecond, Resync: time.Hour, RetryInterval: time.Second}, srv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = src.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
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
	return &fixture{t: t, srv: srv, src: src}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitKey waits until the key is in the store with content satisfying ok
// (nil: present) or, with present false, absent; it returns the revision.
func (f *fixture) waitKey(k store.Key, present bool, ok func(*manifest.Object) bool) uint64 {
	f.t.Helper()
	var rev uint64
	eventually(f.t, fmt.Sprintf("%s present=%v", k, present), func() bool {
		snap := f.srv.Current()
		o, found := snap.Object(k)
		rev = snap.Revision
		if !present {
			return !found
		}
		return found && (ok == nil || ok(o))
	})
	return rev
}

func (f *fixture) decide(pod []byte, minRevision uint64) *arbiterv1.DecideResponse {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := f.srv.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: pod, MinRevision: minRevision, Operation: arbiterv1.Operation_OPERATION_CREATE})
	if err != nil {
		f.t.Fatalf("decide at min_revision %d: %v", minRevision, err)
	}
	if resp.GetRevision() < minRevision {
		f.t.Fatalf("decided at revision %d, below min_revision %d", resp.GetRevision(), minRevision)
	}
	return resp
}

func apply(t *testing.T, obj map[string]any) *unstructured.Unstructured {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, err := kc.Apply(ctx, obj)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func remove(t *testing.T, obj map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := kc.Delete(ctx, obj); err != nil {
		t.Fatal(err)
	}
}

// unique returns prefix-NNNN, different for every test run on one API server.
func unique(prefix string) string { return fmt.Sprintf("%s-%04d", prefix, rand.IntN(10000)) }

func vpol(name, podPrefix string) map[string]any {
	return map[string]any{
		"apiVersion": "policies.kyverno.io/v1",
		"kind":       "ValidatingPolicy",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"validationActions": []any{"Deny"},
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE", "UPDATE"}, "resources": []any{"pods"},
			}}},
			"validations": []any{map[string]any{
				"expression": fmt.Sprintf("!object.metadata.name.startsWith('%s')", podPrefix),
				"message":    podPrefix + " pods are not allowed",
			}},
		},
	}
}

func polex(name, ns, policy, pod string) map[string]any {
	return map[string]any{
		"apiVersion": "policies.kyverno.io/v1",
		"kind":       "PolicyException",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"policyRefs":      []any{map[string]any{"name": policy, "kind": "ValidatingPolicy"}},
			"matchConditions": []any{map[string]any{"name": "pod", "expression": fmt.Sprintf("object.metadata.name == '%s'", pod)}},
		},
	}
}

func namespace(name string, labels map[string]any) map[string]any {
	md := map[string]any{"name": name}
	if labels != nil {
		md["labels"] = labels
	}
	return map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": md}
}

func pod(name, ns string) []byte {
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": "nginx"}}},
	})
	return b
}

func vpKey(name string) store.Key {
	return store.Key{Group: kyvernoapi.Group, Kind: kyvernoapi.KindValidatingPolicy, Name: name}
}

func hasResult(resp *arbiterv1.DecideResponse, policy, result string) bool {
	for _, r := range resp.GetResults() {
		if r.GetPolicy() == policy && r.GetResult() == result {
			return true
		}
	}
	return false
}

// A policy and an exception created through client-go reach the store and
// are honoured from the revision their commit produced; deletes propagate.
func TestPolicyAndExceptionLand(t *testing.T) {
	f := start(t)
	ns, pname := unique("t1"), unique("t1-deny")
	prefix := strings.ReplaceAll(ns, "-", "") + "bad"
	apply(t, namespace(ns, nil))
	t.Cleanup(func() { remove(t, vpol(pname, prefix)) })

	cluster := apply(t, vpol(pname, prefix))
	rev1 := f.waitKey(vpKey(pname), true, nil)
	resp := f.decide(pod(prefix+"-pod", ns), rev1)
	if resp.GetAllowed() || !hasResult(resp, pname, "fail") {
		t.Fatalf("at revision %d the policy is not honoured: %v", rev1, resp)
	}
	// What is stored is the object without its volatile fields.
	o, _ := f.srv.Current().Object(vpKey(pname))
	md := o.Content["metadata"].(map[string]any)
	for _, field := range []string{"resourceVersion", "managedFields", "generation"} {
		if _, ok := md[field]; ok {
			t.Errorf("stored policy keeps metadata.%s", field)
		}
	}
	if md["uid"] != string(cluster.GetUID()) {
		t.Errorf("stored uid %v, cluster %s", md["uid"], cluster.GetUID())
	}

	exName := unique("t1-ex")
	apply(t, polex(exName, ns, pname, prefix+"-pod"))
	exKey := store.Key{Group: kyvernoapi.Group, Kind: kyvernoapi.KindPolicyException, Namespace: ns, Name: exName}
	rev2 := f.waitKey(exKey, true, nil)
	if rev2 <= rev1 {
		t.Fatalf("exception at revision %d, not after the policy's %d", rev2, rev1)
	}
	if resp := f.decide(pod(prefix+"-pod", ns), rev2); !resp.GetAllowed() || !hasResult(resp, pname, "skip") {
		t.Fatalf("at revision %d the exception is not honoured: %v", rev2, resp)
	}
	if resp := f.decide(pod(prefix+"-other", ns), rev2); resp.GetAllowed() {
		t.Fatalf("the exception covers another pod: %v", resp)
	}

	remove(t, polex(exName, ns, pname, ""))
	rev3 := f.waitKey(exKey, false, nil)
	if resp := f.decide(pod(prefix+"-pod", ns), rev3); resp.GetAllowed() {
		t.Fatalf("at revision %d the deleted exception still applies: %v", rev3, resp)
	}
	remove(t, vpol(pname, prefix))
	rev4 := f.waitKey(vpKey(pname), false, nil)
	if resp := f.decide(pod(prefix+"-pod", ns), rev4); !resp.GetAllowed() {
		t.Fatalf("at revision %d the deleted policy still applies: %v", rev4, resp)
	}
	f.storeEqualsCluster()
}

// rejectedEvents returns the messages of the ArbiterRejected Events on a
// cluster-scoped object.
func rejectedEvents(t *testing.T, name string) []string {
	t.Helper()
	core, err := corev1client.NewForConfig(apiserver.Config)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := core.Events("default").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + name + ",reason=" + ReasonRejected,
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Items {
		out = append(out, e.Message)
	}
	return out
}

func withExpression(obj map[string]any, expr string) map[string]any {
	spec := obj["spec"].(map[string]any)
	spec["validations"].([]any)[0].(map[string]any)["expression"] = expr
	return obj
}

// An object that does not compile is refused: an Event names the field,
// the store does not move, the other objects still land, and the last
// accepted version of an updated policy keeps deciding.
func TestRejectedObject(t *testing.T) {
	needAPIServer(t)
	bad, good := unique("t2-bad"), unique("t2-good")
	t.Cleanup(func() {
		remove(t, vpol(bad, "x"))
		remove(t, vpol(good, "x"))
	})
	// Both exist before the source starts: its first list holds them.
	apply(t, withExpression(vpol(bad, "t2x"), "object.metadata.name.startsWith("))
	apply(t, vpol(good, "t2good"))
	f := start(t)
	f.waitKey(vpKey(good), true, nil)
	if _, ok := f.srv.Current().Object(vpKey(bad)); ok {
		t.Fatal("a policy that does not compile was stored")
	}
	eventually(t, "an ArbiterRejected Event on "+bad, func() bool {
		for _, m := range rejectedEvents(t, bad) {
			if strings.Contains(m, "spec.validations[0].expression") {
				return true
			}
		}
		return false
	})

	// An update that does not compile: refused, the store does not move,
	// and the previous version keeps deciding.
	rev0 := f.srv.Current().Revision
	rejected0 := f.src.Stats().Rejected
	apply(t, withExpression(vpol(good, "t2good"), "object.spec.nope(("))
	eventually(t, "the update to be refused", func() bool { return f.src.Stats().Rejected > rejected0 })
	if rev := f.srv.Current().Revision; rev != rev0 {
		t.Fatalf("a refused update moved the store from %d to %d", rev0, rev)
	}
	if resp := f.decide(pod("t2good-pod", "default"), rev0); resp.GetAllowed() {
		t.Fatalf("the last accepted version no longer decides: %v", resp)
	}
	eventually(t, "an ArbiterRejected Event on "+good, func() bool { return len(rejectedEvents(t, good)) > 0 })

	// Fixed: it lands at the next revision.
	apply(t, vpol(good, "t2fixed"))
	rev1 := f.waitKey(vpKey(good), true, func(o *manifest.Object) bool { return strings.Contains(mustJSON(o.Content), "t2fixed") })
	if rev1 != rev0+1 {
		t.Fatalf("the fixed policy landed at %d, want %d (nothing in between)", rev1, rev0+1)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Changes that carry no policy meaning (status, managedFields,
// resourceVersion, kubectl's last-applied annotation) make no revision.
func TestNoOpUpdatesMakeNoRevision(t *testing.T) {
	f := start(t)
	a, b := unique("t3-a"), unique("t3-b")
	t.Cleanup(func() {
		remove(t, vpol(a, "x"))
		remove(t, vpol(b, "x"))
	})
	apply(t, vpol(a, "t3a"))
	apply(t, vpol(b, "t3b"))
	f.waitKey(vpKey(a), true, nil)
	rev0 := f.waitKey(vpKey(b), true, nil)

	ctx := context.Background()
	gvr := schema.GroupVersionResource{Group: kyvernoapi.Group, Version: "v1", Resource: "validatingpolicies"}
	cur, err := kc.Dynamic.Resource(gvr).Get(ctx, a, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv := cur.GetResourceVersion()
	_ = unstructured.SetNestedField(cur.Object, map[string]any{"conditionStatus": map[string]any{"ready": true, "message": "ok"}}, "status")
	cur, err = kc.Dynamic.Resource(gvr).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.SetAnnotations(map[string]string{lastApplied: mustJSON(vpol(a, "t3a"))})
	cur, err = kc.Dynamic.Resource(gvr).Update(ctx, cur, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur.GetResourceVersion() == rv {
		t.Fatal("the updates did not change the resourceVersion")
	}
	// A real change of another policy, after them on the same watch.
	apply(t, vpol(b, "t3changed"))
	rev1 := f.waitKey(vpKey(b), true, func(o *manifest.Object) bool { return strings.Contains(mustJSON(o.Content), "t3changed") })
	if rev1 != rev0+1 {
		t.Fatalf("revision %d after one real change from %d: the no-op updates made revisions", rev1, rev0)
	}
}

// Namespaces in the store make namespaceSelector work without the caller
// sending the Namespace.
func TestNamespacesInStore(t *testing.T) {
	f := start(t)
	ns, pname := unique("t4"), unique("t4-prod-only")
	t.Cleanup(func() { remove(t, vpol(pname, "x")) })
	apply(t, namespace(ns, map[string]any{"env": "prod"}))
	p := vpol(pname, "t4")
	p["spec"].(map[string]any)["matchConstraints"].(map[string]any)["namespaceSelector"] = map[string]any{"matchLabels": map[string]any{"env": "prod"}}
	apply(t, p)
	rev := f.waitKey(vpKey(pname), true, nil)
	if resp := f.decide(pod("t4-pod", ns), rev); resp.GetAllowed() {
		t.Fatalf("a pod in the prod namespace is allowed: %v", resp)
	}
	if resp := f.decide(pod("t4-pod", "default"), rev); !resp.GetAllowed() {
		t.Fatalf("a pod outside the prod namespace is denied: %v", resp)
	}
	apply(t, namespace(ns, map[string]any{"env": "dev"}))
	rev = f.waitKey(store.Key{Kind: "Namespace", Name: ns}, true, func(o *manifest.Object) bool {
		return strings.Contains(mustJSON(o.Content), `"env":"dev"`)
	})
	if resp := f.decide(pod("t4-pod", ns), rev); !resp.GetAllowed() {
		t.Fatalf("after the relabel the pod is still denied: %v", resp)
	}
}

// The param kinds a ValidatingAdmissionPolicy names are watched while it
// exists; its params leave the store with it, in the same revision.
func TestParamKinds(t *testing.T) {
	f := start(t)
	ns, name := unique("t5"), unique("t5-forbid")
	apply(t, namespace(ns, nil))
	vap := map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"failurePolicy": "Fail",
			"paramKind":     map[string]any{"apiVersion": "v1", "kind": "ConfigMap"},
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"pods"},
			}}},
			"validations": []any{map[string]any{"expression": "object.metadata.name != params.data.forbidden"}},
		},
	}
	binding := map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"policyName":        name,
			"validationActions": []any{"Deny"},
			"paramRef":          map[string]any{"name": "limits", "namespace": ns, "parameterNotFoundAction": "Deny"},
			"matchResources":    map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": ns}}},
		},
	}
	cm := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "limits", "namespace": ns}, "data": map[string]any{"forbidden": "evil"}}
	apply(t, cm)
	apply(t, vap)
	apply(t, binding)
	t.Cleanup(func() {
		remove(t, binding)
		remove(t, vap)
	})
	cmKey := store.Key{Kind: "ConfigMap", Namespace: ns, Name: "limits"}
	rev := f.waitKey(cmKey, true, nil)
	f.waitKey(store.Key{Group: vapGroup, Kind: "ValidatingAdmissionPolicyBinding", Name: name}, true, nil)
	rev = max(rev, f.srv.Current().Revision)
	if resp := f.decide(pod("evil", ns), rev); resp.GetAllowed() {
		t.Fatalf("the param does not apply: %v", resp)
	}
	if w := f.src.Stats().Watching; !strings.Contains(strings.Join(w, " "), "ConfigMap.v1") {
		t.Fatalf("watching %v, not ConfigMaps", w)
	}
	cm["data"] = map[string]any{"forbidden": "other"}
	apply(t, cm)
	rev = f.waitKey(cmKey, true, func(o *manifest.Object) bool { return strings.Contains(mustJSON(o.Content), "other") })
	if resp := f.decide(pod("evil", ns), rev); !resp.GetAllowed() {
		t.Fatalf("the updated param does not apply: %v", resp)
	}

	// Without the policy, ConfigMaps are no params: they leave the store in
	// the revision the policy leaves it, and are no longer watched.
	remove(t, binding)
	remove(t, vap)
	eventually(t, "the policy and its params to leave the store", func() bool {
		snap := f.srv.Current()
		_, hasVAP := snap.Object(store.Key{Group: vapGroup, Kind: "ValidatingAdmissionPolicy", Name: name})
		params := 0
		snap.Range(func(k store.Key, _ *manifest.Object) bool {
			if k.Kind == "ConfigMap" {
				params++
			}
			return true
		})
		if !hasVAP && params > 0 {
			t.Fatalf("revision %d has %d ConfigMaps without the policy that makes them params", snap.Revision, params)
		}
		return !hasVAP
	})
	eventually(t, "the ConfigMap informer to stop", func() bool {
		return !strings.Contains(strings.Join(f.src.Stats().Watching, " "), "ConfigMap")
	})
}

// A watch cut (the API server restarted on the same etcd) re-lists without
// losing a change or making a revision twice.
func TestWatchCutRelists(t *testing.T) {
	f := start(t)
	a, b, c := unique("t6-a"), unique("t6-b"), unique("t6-c")
	t.Cleanup(func() {
		for _, n := range []string{a, b, c} {
			remove(t, vpol(n, "x"))
		}
	})
	apply(t, vpol(a, "t6a"))
	apply(t, vpol(b, "t6b"))
	f.waitKey(vpKey(a), true, nil)
	rev0 := f.waitKey(vpKey(b), true, nil)
	relists0 := f.src.Stats().Relists

	if err := apiserver.RestartAPIServer(nil); err != nil {
		t.Fatal(err)
	}
	// Three changes right after the restart, while the source reconnects.
	apply(t, vpol(c, "t6c"))
	apply(t, vpol(a, "t6a-changed"))
	remove(t, vpol(b, ""))
	f.waitKey(vpKey(c), true, nil)
	f.waitKey(vpKey(b), false, nil)
	rev1 := f.waitKey(vpKey(a), true, func(o *manifest.Object) bool { return strings.Contains(mustJSON(o.Content), "t6a-changed") })
	if st := f.src.Stats(); st.Relists == relists0 {
		t.Errorf("the restart made no informer list again: %+v", st)
	}
	if n := rev1 - rev0; n < 1 || n > 3 {
		t.Fatalf("%d revisions for 3 changes (from %d to %d)", n, rev0, rev1)
	}
	f.storeEqualsCluster()
	// A later full comparison finds nothing to write.
	n0 := f.src.Stats().Reconciles
	f.src.markFull()
	eventually(t, "a full comparison", func() bool { return f.src.Stats().Reconciles > n0 })
	time.Sleep(100 * time.Millisecond)
	if rev := f.srv.Current().Revision; rev != rev1 {
		t.Fatalf("a full comparison after the cut moved the store from %d to %d", rev1, rev)
	}
}

// storeEqualsCluster waits until the store holds exactly the cluster's
// objects of the kinds the source owns (as normalize stores them).
func (f *fixture) storeEqualsCluster() {
	f.t.Helper()
	resources := map[schema.GroupKind]schema.GroupVersionResource{
		{Group: kyvernoapi.Group, Kind: kyvernoapi.KindValidatingPolicy}:           {Group: kyvernoapi.Group, Version: "v1", Resource: "validatingpolicies"},
		{Group: kyvernoapi.Group, Kind: kyvernoapi.KindNamespacedValidatingPolicy}: {Group: kyvernoapi.Group, Version: "v1", Resource: "namespacedvalidatingpolicies"},
		{Group: kyvernoapi.Group, Kind: kyvernoapi.KindPolicyException}:            {Group: kyvernoapi.Group, Version: "v1", Resource: "policyexceptions"},
		{Group: vapGroup, Kind: "ValidatingAdmissionPolicy"}:                       {Group: vapGroup, Version: "v1", Resource: "validatingadmissionpolicies"},
		{Group: vapGroup, Kind: "ValidatingAdmissionPolicyBinding"}:                {Group: vapGroup, Version: "v1", Resource: "validatingadmissionpolicybindings"},
		{Kind: "Namespace"}: {Version: "v1", Resource: "namespaces"},
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		want := map[store.Key]string{}
		for gk, gvr := range resources {
			l, err := kc.Dynamic.Resource(gvr).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				f.t.Fatal(err)
			}
			for i := range l.Items {
				u := &l.Items[i]
				want[keyOf(gk, u.GetNamespace(), u.GetName())] = mustJSON(normalize(u))
			}
		}
		got := map[store.Key]string{}
		f.srv.Current().Range(func(k store.Key, o *manifest.Object) bool {
			if _, owned := resources[schema.GroupKind{Group: k.Group, Kind: k.Kind}]; owned {
				got[k] = mustJSON(o.Content)
			}
			return true
		})
		var diff []string
		for k, v := range want {
			if got[k] != v {
				diff = append(diff, fmt.Sprintf("%s: store %.300s\n  cluster %.300s", k, got[k], v))
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				diff = append(diff, fmt.Sprintf("%s: in the store only", k))
			}
		}
		if len(diff) == 0 {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("the store differs from the cluster:\n%s", strings.Join(diff, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// LiveReader (arbiter apply/decide --cluster) reads the API server as
// Kyverno's context provider does: lists with label selectors, gets (a
// missing object is NotFound), maps kinds with discovery.
func TestLiveReader(t *testing.T) {
	needAPIServer(t)
	ns := unique("live")
	apply(t, namespace(ns, nil))
	for i, team := range []string{"a", "a", "b"} {
		apply(t, map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": fmt.Sprintf("cm-%d", i), "namespace": ns, "labels": map[string]any{"team": team}}})
	}
	r, err := NewLiveReader(apiserver.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	list, err := r.ListResources(ctx, "v1", "configmaps", ns, nil)
	if err != nil || len(list.Items) != 3 {
		t.Fatalf("list: %v %v", list, err)
	}
	list, err = r.ListResources(ctx, "v1", "configmaps", ns, map[string]string{"team": "a"})
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("list team=a: %v %v", list, err)
	}
	if o, err := r.GetResource(ctx, "v1", "configmaps", ns, "cm-2"); err != nil || o.GetLabels()["team"] != "b" {
		t.Fatalf("get: %v %v", o, err)
	}
	if _, err := r.GetResource(ctx, "v1", "configmaps", ns, "missing"); !apierrors.IsNotFound(err) {
		t.Fatalf("get missing: %v", err)
	}
	if gvr, err := r.ToGVR(ctx, "apps/v1", "Deployment"); err != nil || gvr.Resource != "deployments" {
		t.Fatalf("toGVR: %v %v", gvr, err)
	}
}
