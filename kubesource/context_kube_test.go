package kubesource

// The context kinds and the apiCall fetches against a real kube-apiserver
// (skipped when ARBITER_K8S_RUN is not set).

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/arbiter-pdp/arbiter/callout"
	"github.com/arbiter-pdp/arbiter/clusterdata"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/store"
)

// startWith runs a primary fed by a source configured by cfg (and a server
// configured by scfg).
func startWith(t *testing.T, cfg func(*Config), scfg func(*server.Config)) *fixture {
	t.Helper()
	needAPIServer(t)
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sc := server.Config{DataDir: t.TempDir(), NoSync: true, Logger: log}
	if scfg != nil {
		scfg(&sc)
	}
	srv, err := server.New(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Rest: apiserver.Config, Logger: log, BatchDelay: 10 * time.Millisecond, Resync: time.Hour, RetryInterval: time.Second}
	if cfg != nil {
		cfg(&c)
	}
	src, err := New(c, srv)
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

func configMap(ns, name string, data map[string]any) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name, "namespace": ns}, "data": data}
}

func cmKey(ns, name string) store.Key { return store.Key{Kind: "ConfigMap", Namespace: ns, Name: name} }

// cmLimit is a ValidatingPolicy refusing a ConfigMap in a namespace that
// already holds max of them (resource.List with constant arguments).
func cmLimit(name string, max int) map[string]any {
	return map[string]any{
		"apiVersion": "policies.kyverno.io/v1",
		"kind":       "ValidatingPolicy",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"validationActions": []any{"Deny"},
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"configmaps"},
			}}},
			"variables": []any{map[string]any{"name": "cms", "expression": "resource.List('v1', 'configmaps', object.metadata.namespace)"}},
			"validations": []any{map[string]any{
				"expression": fmt.Sprintf("size(variables.cms.items) < %d", max),
				"message":    fmt.Sprintf("at most %d ConfigMaps per namespace", max),
			}},
		},
	}
}

func cmRequest(ns, name string) []byte {
	b, _ := json.Marshal(configMap(ns, name, nil))
	return b
}

// withVariable replaces a policy's variables.
func withVariable(obj map[string]any, expr string) map[string]any {
	obj["spec"].(map[string]any)["variables"] = []any{map[string]any{"name": "cms", "expression": expr}}
	return obj
}

// TestContextKindsWatched: a policy reading ConfigMaps with constant
// arguments makes the source watch ConfigMaps; the revision that first
// holds the policy holds the ConfigMaps too; a ConfigMap created in the
// cluster changes the decisions from its revision; the source owns the
// kind (a ConfigMap pushed beside it goes, an object of another kind
// stays); without the policy the ConfigMaps leave the store and the watch
// stops.
func TestContextKindsWatched(t *testing.T) {
	f := start(t)
	ctx := context.Background()
	ns, pname := unique("cx"), unique("cx-limit")
	apply(t, namespace(ns, nil))
	apply(t, configMap(ns, "a", map[string]any{"k": "1"}))
	apply(t, configMap(ns, "b", nil))
	// Pushed context objects: a ConfigMap the cluster does not have, and a
	// Widget (a kind nothing watches).
	pushed := manifest.NewObject("push", configMap(ns, "pushed", nil))
	widget := manifest.NewObject("push", map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w"}})
	if _, err := f.srv.WriteObjects(ctx, []*manifest.Object{pushed, widget}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { remove(t, cmLimit(pname, 3)) })
	apply(t, cmLimit(pname, 3))
	rev := f.waitKey(vpKey(pname), true, nil)
	// The revision that first holds the policy holds the ConfigMaps.
	sets, err := f.srv.Store().ChangesSince(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	revOf := map[store.Key]uint64{}
	for _, cs := range sets {
		for _, ch := range cs.Changes {
			if _, seen := revOf[ch.Key]; !seen && ch.Op == store.OpUpsert {
				revOf[ch.Key] = cs.Revision
			}
		}
	}
	for _, name := range []string{"a", "b"} {
		if r, ok := revOf[cmKey(ns, name)]; !ok || r > revOf[vpKey(pname)] {
			t.Fatalf("the policy is stored at revision %d, ConfigMap %s/%s at %d", revOf[vpKey(pname)], ns, name, r)
		}
	}
	if !strings.Contains(strings.Join(f.src.Stats().Watching, ","), "ConfigMap.v1") {
		t.Fatalf("watching %v", f.src.Stats().Watching)
	}
	f.waitKey(cmKey(ns, "pushed"), false, nil)
	if _, ok := f.srv.Current().Object(store.Key{Group: "example.com", Kind: "Widget", Name: "w"}); !ok {
		t.Fatal("the pushed Widget went")
	}

	if resp := f.decide(cmRequest(ns, "c"), rev); !resp.GetAllowed() {
		t.Fatalf("2 ConfigMaps, a third refused: %v", resp)
	}
	apply(t, configMap(ns, "c", nil))
	rev3 := f.waitKey(cmKey(ns, "c"), true, nil)
	resp := f.decide(cmRequest(ns, "d"), rev3)
	if resp.GetAllowed() || !hasResult(resp, pname, "fail") {
		t.Fatalf("3 ConfigMaps at revision %d, a fourth admitted: %v", rev3, resp)
	}

	remove(t, cmLimit(pname, 3))
	f.waitKey(vpKey(pname), false, nil)
	f.waitKey(cmKey(ns, "a"), false, nil)
	eventually(t, "the ConfigMap watch stops", func() bool {
		return !strings.Contains(strings.Join(f.src.Stats().Watching, ","), "ConfigMap.v1")
	})
	if _, ok := f.srv.Current().Object(store.Key{Group: "example.com", Kind: "Widget", Name: "w"}); !ok {
		t.Fatal("the pushed Widget went")
	}
}

// TestContextReadsRefused: a policy whose resource.List arguments are not
// constants is refused with an ArbiterRejected Event naming the call and
// the flag, unless --kube-context-resources lists a resource its constant
// parts match; a policy reading Secrets is refused without StoreSecrets.
func TestContextReadsRefused(t *testing.T) {
	f := start(t)
	dyn, secret := unique("cx-dyn"), unique("cx-secret")
	t.Cleanup(func() {
		remove(t, cmLimit(dyn, 3))
		remove(t, cmLimit(secret, 3))
	})
	apply(t, withVariable(cmLimit(dyn, 3), "resource.List('v1', object.data.resource, object.metadata.namespace)"))
	apply(t, withVariable(cmLimit(secret, 3), "resource.List('v1', 'secrets', object.metadata.namespace)"))
	eventually(t, "the Events", func() bool { return len(rejectedEvents(t, dyn)) > 0 && len(rejectedEvents(t, secret)) > 0 })
	if msg := rejectedEvents(t, dyn)[0]; !strings.Contains(msg, `spec.variables[0].expression: resource.List("v1", ?): its apiVersion and resource are not constants`) ||
		!strings.Contains(msg, "--kube-context-resources") {
		t.Fatalf("event: %s", msg)
	}
	if msg := rejectedEvents(t, secret)[0]; !strings.Contains(msg, `resource.List("v1", "secrets") reads Secret, which Arbiter does not store: Secrets are stored only with --store-secrets`) {
		t.Fatalf("event: %s", msg)
	}
	for _, n := range []string{dyn, secret} {
		if _, ok := f.srv.Current().Object(vpKey(n)); ok {
			t.Fatalf("%s stored", n)
		}
	}

	// Listed, and with --store-secrets: both admitted.
	g := startWith(t, func(c *Config) {
		c.ContextResources = []engine.ResourceRef{{APIVersion: "v1", Resource: "configmaps"}}
		c.StoreSecrets = true
	}, func(c *server.Config) { c.StoreSecrets = true })
	g.waitKey(vpKey(dyn), true, nil)
	g.waitKey(vpKey(secret), true, nil)
	if w := strings.Join(g.src.Stats().Watching, ","); !strings.Contains(w, "ConfigMap.v1") || !strings.Contains(w, "Secret.v1") {
		t.Fatalf("watching %s", w)
	}
}

// TestCoalescedRevisions: 200 ConfigMaps created as fast as the API server
// takes them make a handful of revisions, at most one per CommitInterval.
func TestCoalescedRevisions(t *testing.T) {
	ns := unique("cx-burst")
	f := startWith(t, func(c *Config) {
		c.ContextResources = []engine.ResourceRef{{APIVersion: "v1", Resource: "configmaps"}}
		c.CommitInterval = 200 * time.Millisecond
	}, nil)
	apply(t, namespace(ns, nil))
	before := f.src.Stats().Commits
	start := time.Now()
	const n = 200
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := range n {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			u := &unstructured.Unstructured{Object: configMap(ns, fmt.Sprintf("cm-%03d", i), nil)}
			_, err := kc.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{})
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	f.waitKey(cmKey(ns, fmt.Sprintf("cm-%03d", n-1)), true, nil)
	eventually(t, "every ConfigMap stored", func() bool {
		count := 0
		rangeKind(f.srv.Current(), schema.GroupKind{Kind: "ConfigMap"}, func(k store.Key, _ *manifest.Object) bool {
			if k.Namespace == ns {
				count++
			}
			return true
		})
		return count == n
	})
	elapsed := time.Since(start)
	commits := f.src.Stats().Commits - before
	limit := uint64(elapsed/(200*time.Millisecond)) + 2
	t.Logf("%d ConfigMaps in %v: %d revisions (at most %d allowed)", n, elapsed.Round(time.Millisecond), commits, limit)
	if commits > limit {
		t.Fatalf("%d revisions in %v with a 200ms commit interval", commits, elapsed)
	}
}

// gce is a GlobalContextEntry.
func gce(name string, spec map[string]any) map[string]any {
	return map[string]any{"apiVersion": "kyverno.io/v2", "kind": "GlobalContextEntry", "metadata": map[string]any{"name": name}, "spec": spec}
}

func gceKey(name string) store.Key {
	return store.Key{Group: "kyverno.io", Kind: "GlobalContextEntry", Name: name}
}

func dataKey(name string) store.Key {
	return store.Key{Group: clusterdata.DataGroup, Kind: clusterdata.KindEntryData, Name: name}
}

// gcePolicy validates Pods with globalContext.Get(entry, projection).
func gcePolicy(name, expr string) map[string]any {
	return map[string]any{
		"apiVersion": "policies.kyverno.io/v1",
		"kind":       "ValidatingPolicy",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"validationActions": []any{"Deny"},
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"pods"},
			}}},
			"validations": []any{map[string]any{"expression": expr, "message": "refused by the global context"}},
		},
	}
}

func entryStatus(t *testing.T, name string) map[string]any {
	t.Helper()
	u, err := kc.Dynamic.Resource(schema.GroupVersionResource{Group: "kyverno.io", Version: "v2", Resource: "globalcontextentries"}).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := u.Object["status"].(map[string]any)
	return st
}

func apiCallEvents(t *testing.T, name string) []string {
	t.Helper()
	core, err := corev1client.NewForConfig(apiserver.Config)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := core.Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + ReasonAPICallFailure})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Items {
		out = append(out, e.Message)
	}
	return out
}

// TestGlobalContextEntries: a kubernetesResource entry serves the objects
// of its kind from the store (the source watches the kind); an apiCall
// entry to a service is fetched by the primary through the callout client
// and committed, refreshed on its refreshInterval (a change of the
// response is a new revision, the same response none), its failure
// committed as the entry's error (decisions error, a FailedToCallAPI
// Event, status Ready False); a urlPath entry reads the API server.
func TestGlobalContextEntries(t *testing.T) {
	var answer atomic.Value
	answer.Store(`{"allowed": ["nginx"]}`)
	var status atomic.Int32
	status.Store(200)
	var calls atomic.Int32
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(int(status.Load()))
		_, _ = w.Write([]byte(answer.Load().(string)))
	}))
	defer svc.Close()
	client, err := callout.New(callout.Config{AllowedURLPrefixes: []string{svc.URL}}, callout.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := startWith(t, func(c *Config) { c.APICall.Service = client }, nil)
	ns := unique("gce")
	apply(t, namespace(ns, nil))
	apply(t, configMap(ns, "team-a", map[string]any{"tier": "gold"}))
	apply(t, configMap(ns, "team-b", map[string]any{"tier": "silver"}))

	images, cms, path := unique("gce-images"), unique("gce-cms"), unique("gce-path")
	pImages, pCMs := unique("gce-p-images"), unique("gce-p-cms")
	t.Cleanup(func() {
		for _, o := range []map[string]any{gce(images, nil), gce(cms, nil), gce(path, nil), gcePolicy(pImages, "true"), gcePolicy(pCMs, "true")} {
			remove(t, o)
		}
	})
	apply(t, gce(images, map[string]any{
		"apiCall":     map[string]any{"service": map[string]any{"url": svc.URL + "/images"}, "refreshInterval": "1s"},
		"projections": []any{map[string]any{"name": "allowed", "jmesPath": "allowed"}},
	}))
	apply(t, gce(cms, map[string]any{
		"kubernetesResource": map[string]any{"version": "v1", "resource": "configmaps", "namespace": ns},
		"projections":        []any{map[string]any{"name": "gold", "jmesPath": "[?data.tier=='gold'].metadata.name"}},
	}))
	apply(t, gce(path, map[string]any{
		"apiCall": map[string]any{"urlPath": "/api/v1/namespaces/" + ns + "/configmaps", "refreshInterval": "1h"},
	}))
	apply(t, gcePolicy(pImages, fmt.Sprintf("object.spec.containers.all(c, c.image in globalContext.Get('%s', 'allowed'))", images)))
	apply(t, gcePolicy(pCMs, fmt.Sprintf("size(globalContext.Get('%s', 'gold')) == 1 && size(globalContext.Get('%s', '').items) >= 2", cms, path)))

	rev := f.waitKey(dataKey(images), true, nil)
	f.waitKey(dataKey(path), true, nil)
	f.waitKey(vpKey(pCMs), true, nil)
	rev = max(rev, f.waitKey(vpKey(pImages), true, nil))
	if !strings.Contains(strings.Join(f.src.Stats().Watching, ","), "ConfigMap.v1") {
		t.Fatalf("the kubernetesResource's kind is not watched: %v", f.src.Stats().Watching)
	}
	good := pod("web", ns) // image nginx
	resp := f.decide(good, rev)
	if !resp.GetAllowed() {
		t.Fatalf("at revision %d: %v", rev, resp)
	}
	eventually(t, "status Ready", func() bool {
		st := entryStatus(t, images)
		return st["ready"] == true && st["lastRefreshTime"] != nil
	})

	// Refreshed every second: the same answer makes no revision.
	n := calls.Load()
	eventually(t, "two more fetches", func() bool { return calls.Load() >= n+2 })
	o1, _ := f.srv.Current().Object(dataKey(images))
	time.Sleep(1500 * time.Millisecond)
	o2, _ := f.srv.Current().Object(dataKey(images))
	if o1 != o2 {
		t.Fatal("a fetch with the same answer made a revision")
	}
	// Another answer: a new revision, and the decisions follow.
	answer.Store(`{"allowed": ["httpd"]}`)
	rev2 := f.waitKey(dataKey(images), true, func(o *manifest.Object) bool {
		return strings.Contains(fmt.Sprint(o.Content["spec"]), "httpd")
	})
	if resp := f.decide(good, rev2); resp.GetAllowed() || !hasResult(resp, pImages, "fail") {
		t.Fatalf("at revision %d nginx is still allowed: %v", rev2, resp)
	}
	// A failure: committed, answered as an error, recorded.
	status.Store(500)
	answer.Store(`boom`)
	rev3 := f.waitKey(dataKey(images), true, func(o *manifest.Object) bool {
		spec, _ := o.Content["spec"].(map[string]any)
		return spec["error"] != nil
	})
	resp = f.decide(good, rev3)
	if resp.GetAllowed() || !hasResult(resp, pImages, "error") || !strings.Contains(fmt.Sprint(resp.GetResults()), "HTTP 500 Internal Server Error: boom") {
		t.Fatalf("after a failed fetch: %v", resp)
	}
	eventually(t, "a FailedToCallAPI Event", func() bool { return len(apiCallEvents(t, images)) > 0 })
	eventually(t, "status not ready", func() bool { return entryStatus(t, images)["ready"] == false })

	// The urlPath entry and the kubernetesResource entry.
	if resp := f.decide(pod("x", ns), rev3); hasResult(resp, pCMs, "fail") || hasResult(resp, pCMs, "error") {
		t.Fatalf("the ConfigMap entries: %v", resp)
	}
	apply(t, configMap(ns, "team-c", map[string]any{"tier": "gold"}))
	rev4 := f.waitKey(cmKey(ns, "team-c"), true, nil)
	if resp := f.decide(pod("x", ns), rev4); !hasResult(resp, pCMs, "fail") {
		t.Fatalf("two gold ConfigMaps at revision %d: %v", rev4, resp)
	}

	// Without the entry its data goes.
	remove(t, gce(images, nil))
	f.waitKey(gceKey(images), false, nil)
	f.waitKey(dataKey(images), false, nil)
}
