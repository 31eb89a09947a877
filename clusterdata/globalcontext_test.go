package clusterdata

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

func entryObject(t testing.TB, doc string) *manifest.Object {
	t.Helper()
	content, err := manifest.Decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return manifest.NewObject("test.yaml", content)
}

func mustEntry(t *testing.T, doc string) *Entry {
	t.Helper()
	e, errs := CompileEntry(entryObject(t, doc))
	if errs != nil {
		t.Fatal(errs)
	}
	return e
}

// CompileEntry refuses what Kyverno's validation refuses, naming the field.
func TestCompileEntryErrors(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"both", `apiVersion: kyverno.io/v2beta1
kind: GlobalContextEntry
metadata: {name: e}
spec:
  kubernetesResource: {group: apps, version: v1, resource: deployments}
  apiCall: {urlPath: /api/v1/namespaces}`, "spec.kubernetesResource: a GlobalContextEntry has either kubernetesResource or apiCall"},
		{"neither", `apiVersion: kyverno.io/v2
kind: GlobalContextEntry
metadata: {name: e}
spec: {}`, "spec: a GlobalContextEntry needs kubernetesResource or apiCall"},
		{"group", `apiVersion: kyverno.io/v2alpha1
kind: GlobalContextEntry
metadata: {name: e}
spec:
  kubernetesResource: {version: v2, resource: things}`, "spec.kubernetesResource.group: required"},
		{"resource", `apiVersion: kyverno.io/v2alpha1
kind: GlobalContextEntry
metadata: {name: e}
spec:
  kubernetesResource: {version: v1}`, "spec.kubernetesResource.resource: required"},
		{"version", `apiVersion: kyverno.io/v1
kind: GlobalContextEntry
metadata: {name: e}
spec:
  kubernetesResource: {version: v1, resource: pods}`, "apiVersion: unsupported version kyverno.io/v1"},
		{"unknown field", `apiVersion: kyverno.io/v2
kind: GlobalContextEntry
metadata: {name: e}
spec:
  kubernetesResource: {version: v1, resource: pods, labels: {a: b}}`, "spec.kubernetesResource.labels: unknown field"},
		{"url and service", `apiVersion: kyverno.io/v2
kind: GlobalContextEntry
metadata: {name: e}
spec:
  apiCall: {urlPath: /x, service: {url: "https://x"}}`, "spec.apiCall.service: an apiCall has either urlPath or service"},
		{"method", `apiVersion: kyverno.io/v2
kind: GlobalContextEntry
metadata: {name: e}
spec:
  apiCall: {urlPath: /x, method: PUT}`, "spec.apiCall.method: must be GET or POST"},
		{"data needs POST", `apiVersion: kyverno.io/v2
kind: GlobalContextEntry
metadata: {name: e}
spec:
  apiCall: {urlPath: /x, data: [{key: a, value: 1}]}`, "spec.apiCall.method: an apiCall with data must be a POST"},
		{"projection name", `apiVersion: kyverno.io/v2
kind: GlobalContextEntry
metadata: {name: e}
spec:
  kubernetesResource: {version: v1, resource: pods}
  projections: [{name: e, jmesPath: "length(@)"}]`, "spec.projections[0].name: must differ"},
		{"projection duplicate", `apiVersion: kyverno.io/v2
kind: GlobalContextEntry
metadata: {name: e}
spec:
  kubernetesResource: {version: v1, resource: pods}
  projections: [{name: a, jmesPath: "length(@)"}, {name: a, jmesPath: "@"}]`, `spec.projections[1].name: duplicate projection "a"`},
		{"projection jmespath", `apiVersion: kyverno.io/v2
kind: GlobalContextEntry
metadata: {name: e}
spec:
  kubernetesResource: {version: v1, resource: pods}
  projections: [{name: a, jmesPath: "items[?"}]`, "spec.projections[0].jmesPath:"},
		{"namespaced", `apiVersion: kyverno.io/v2
kind: GlobalContextEntry
metadata: {name: e, namespace: x}
spec:
  kubernetesResource: {version: v1, resource: pods}`, "metadata.namespace: must be empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := CompileEntry(entryObject(t, tc.doc))
			if errs == nil || !strings.Contains(errs.Error(), tc.want) {
				t.Fatalf("got %v, want %q", errs, tc.want)
			}
			if !strings.HasPrefix(errs.Error(), "test.yaml: GlobalContextEntry ") {
				t.Fatalf("error does not name the object: %v", errs)
			}
		})
	}
}

func TestGlobalsKubernetesResource(t *testing.T) {
	deploy := func(ns, name string, replicas int64) *manifest.Object {
		o := obj("apps/v1", "Deployment", ns, name, nil)
		o.Content["spec"] = map[string]any{"replicas": replicas}
		return o
	}
	view := New([]*manifest.Object{deploy("a", "d1", 2), deploy("b", "d2", 3), deploy("a", "d0", 1)})
	all := mustEntry(t, `apiVersion: kyverno.io/v2alpha1
kind: GlobalContextEntry
metadata: {name: all-deployments}
spec:
  kubernetesResource: {group: apps, version: v1, resource: deployments}
  projections:
  - {name: count, jmesPath: "length(@)"}
  - {name: replicas, jmesPath: "sum([].spec.replicas)"}
  - {name: names, jmesPath: "[].metadata.name"}
  - {name: broken, jmesPath: "abs(@)"}`)
	inA := mustEntry(t, `apiVersion: kyverno.io/v2
kind: GlobalContextEntry
metadata: {name: in-a}
spec:
  kubernetesResource: {group: apps, version: v1, resource: deployments, namespace: a}
  projections: [{name: count, jmesPath: "length(@)"}]`)
	unknown := mustEntry(t, `apiVersion: kyverno.io/v2
kind: GlobalContextEntry
metadata: {name: unknown}
spec:
  kubernetesResource: {group: x.io, version: v1, resource: things}`)
	g := NewGlobals([]*Entry{all, inA, unknown}, view, nil)
	get := func(name, projection string) any {
		t.Helper()
		v, err := g.GetGlobalReference(context.Background(), name, projection)
		if err != nil {
			t.Fatalf("%s %s: %v", name, projection, err)
		}
		return v
	}
	if got := get("all-deployments", "count"); got != 3.0 {
		t.Errorf("count %v", got)
	}
	if got := get("all-deployments", "replicas"); got != 6.0 {
		t.Errorf("replicas %v", got)
	}
	if got := get("all-deployments", "names"); !reflect.DeepEqual(got, []any{"d0", "d1", "d2"}) {
		t.Errorf("names %v", got)
	}
	if got := get("in-a", "count"); got != 2.0 {
		t.Errorf("in-a count %v", got)
	}
	if got, ok := get("all-deployments", "").([]any); !ok || len(got) != 3 {
		t.Errorf("whole entry %v", got)
	}
	if got := get("missing", ""); got != nil {
		t.Errorf("missing entry %v, want nil", got)
	}
	for _, tc := range []struct{ name, projection, want string }{
		{"all-deployments", "nope", `global context entry "all-deployments": projection "nope" not found`},
		{"all-deployments", "broken", `projection "broken": Invalid type for`},
		{"unknown", "", `global context entry "unknown": kubernetesResource x.io/v1 things: the server could not find the requested resource`},
	} {
		if _, err := g.GetGlobalReference(context.Background(), tc.name, tc.projection); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want %q", tc.name, tc.projection, err, tc.want)
		}
	}
	// The next revision reuses what did not change, and recomputes what did.
	view2 := view.Apply([]Change{{Key: Key{Group: "apps", Kind: "Deployment", Namespace: "b", Name: "d3"}, Object: deploy("b", "d3", 10)}})
	g2 := NewGlobals([]*Entry{all, inA}, view2, g)
	if v, _ := g2.GetGlobalReference(context.Background(), "all-deployments", "count"); v != 4.0 {
		t.Errorf("after a change: count %v", v)
	}
	if g2.entries["all-deployments"] == g.entries["all-deployments"] {
		t.Error("changed entry reused")
	}
	view3 := view2.Apply([]Change{{Key: Key{Kind: "ConfigMap", Namespace: "b", Name: "c"}, Object: obj("v1", "ConfigMap", "b", "c", nil)}})
	g3 := NewGlobals([]*Entry{all, inA}, view3, g2)
	if g3.entries["all-deployments"] != g2.entries["all-deployments"] {
		t.Error("unchanged entry recomputed")
	}
}

func TestGlobalsAPICall(t *testing.T) {
	e := mustEntry(t, `apiVersion: kyverno.io/v2alpha1
kind: GlobalContextEntry
metadata: {name: deployments}
spec:
  apiCall:
    urlPath: /apis/apps/v1/namespaces/x/deployments
    refreshInterval: 1h
  projections: [{name: count, jmesPath: "items | length(@)"}]`)
	if e.RefreshInterval() != time.Hour {
		t.Fatal(e.RefreshInterval())
	}
	g := NewGlobals([]*Entry{e}, Empty(), nil)
	if _, err := g.GetGlobalReference(context.Background(), "deployments", "count"); err == nil || !strings.Contains(err.Error(), "apiCall data not yet fetched") {
		t.Fatalf("before a fetch: %v", err)
	}
	data := NewEntryData(e, time.Unix(100, 0), map[string]any{"items": []any{map[string]any{}, map[string]any{}}}, nil)
	view := New([]*manifest.Object{data})
	g2 := NewGlobals([]*Entry{e}, view, g)
	if v, err := g2.GetGlobalReference(context.Background(), "deployments", "count"); err != nil || v != 2.0 {
		t.Fatalf("after a fetch: %v %v", v, err)
	}
	failed := NewEntryData(e, time.Unix(200, 0), nil, errors.New("connection refused"))
	g3 := NewGlobals([]*Entry{e}, New([]*manifest.Object{failed}), g2)
	if _, err := g3.GetGlobalReference(context.Background(), "deployments", ""); err == nil || !strings.Contains(err.Error(), "apiCall failed at 1970-01-01T00:03:20Z: connection refused") {
		t.Fatalf("failed fetch: %v", err)
	}
	// As Kyverno's apiCall entries: a null value, or a projection the entry
	// does not have, is "no data available"; a projection that fails
	// fails the entry.
	empty := NewEntryData(e, time.Unix(300, 0), map[string]any{"items": []any{}}, nil)
	g5 := NewGlobals([]*Entry{e}, New([]*manifest.Object{empty}), g3)
	if _, err := g5.GetGlobalReference(context.Background(), "deployments", "nope"); err == nil || !strings.Contains(err.Error(), "no data available") {
		t.Fatalf("a projection the entry does not have: %v", err)
	}
	plain := e2noProjections(t)
	null := NewEntryData(plain, time.Unix(300, 0), nil, nil)
	g6 := NewGlobals([]*Entry{plain}, New([]*manifest.Object{null}), nil)
	if _, err := g6.GetGlobalReference(context.Background(), "deployments", ""); err == nil || !strings.Contains(err.Error(), "no data available") {
		t.Fatalf("null data: %v", err)
	}
	bad := NewEntryData(e, time.Unix(300, 0), map[string]any{"items": 5}, nil)
	g7 := NewGlobals([]*Entry{e}, New([]*manifest.Object{bad}), g5)
	for _, p := range []string{"count", ""} {
		if _, err := g7.GetGlobalReference(context.Background(), "deployments", p); err == nil || !strings.Contains(err.Error(), `projection "count"`) {
			t.Fatalf("projection %q of an entry whose projection fails: %v", p, err)
		}
	}
	// Data fetched for another version of the entry is not served.
	e2 := mustEntry(t, `apiVersion: kyverno.io/v2alpha1
kind: GlobalContextEntry
metadata: {name: deployments}
spec:
  apiCall: {urlPath: /apis/apps/v1/deployments, refreshInterval: 1h}`)
	g4 := NewGlobals([]*Entry{e2}, view, g2)
	if _, err := g4.GetGlobalReference(context.Background(), "deployments", ""); err == nil || !strings.Contains(err.Error(), "another version") {
		t.Fatalf("stale data: %v", err)
	}
}

func TestJSONShaped(t *testing.T) {
	in := map[string]any{"a": int64(1), "b": []any{"x", int64(2), map[string]any{"c": 3.5}}, "d": "s"}
	out := jsonShaped(in)
	want := map[string]any{"a": 1.0, "b": []any{"x", 2.0, map[string]any{"c": 3.5}}, "d": "s"}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("got %v", out)
	}
	if in["a"] != int64(1) {
		t.Fatal("input modified")
	}
	same := map[string]any{"a": "x", "b": []any{1.5}}
	if o := jsonShaped(same).(map[string]any); o["b"].([]any)[0] != 1.5 {
		t.Fatal("unchanged value")
	}
}

// FuzzCompileEntry: any document either compiles or is refused with load
// errors naming the object; compiled entries answer without panicking.
func FuzzCompileEntry(f *testing.F) {
	f.Add(`{"apiVersion":"kyverno.io/v2","kind":"GlobalContextEntry","metadata":{"name":"e"},"spec":{"kubernetesResource":{"group":"apps","version":"v1","resource":"deployments"},"projections":[{"name":"n","jmesPath":"length(@)"}]}}`)
	f.Add(`{"apiVersion":"kyverno.io/v2alpha1","kind":"GlobalContextEntry","metadata":{"name":"e"},"spec":{"apiCall":{"urlPath":"/x","refreshInterval":"1m"}}}`)
	f.Add(`{"apiVersion":"kyverno.io/v2beta1","kind":"GlobalContextEntry","metadata":{"name":"e"},"spec":{"apiCall":{"service":{"url":"https://x"},"method":"POST","data":[{"key":"k","value":{"a":1}}]}}}`)
	view := New([]*manifest.Object{obj("apps/v1", "Deployment", "a", "d", nil)})
	f.Fuzz(func(t *testing.T, doc string) {
		var content map[string]any
		if json.Unmarshal([]byte(doc), &content) != nil || content == nil {
			return
		}
		o := manifest.NewObject("fuzz", content)
		e, errs := CompileEntry(o)
		if errs != nil {
			if e != nil {
				t.Fatal("entry and errors")
			}
			return
		}
		g := NewGlobals([]*Entry{e}, view, nil)
		_, _ = g.GetGlobalReference(context.Background(), e.Name, "")
		for _, p := range e.Spec.Projections {
			_, _ = g.GetGlobalReference(context.Background(), e.Name, p.Name)
		}
	})
}

// e2noProjections is an apiCall entry without projections.
func e2noProjections(t *testing.T) *Entry {
	return mustEntry(t, `apiVersion: kyverno.io/v2alpha1
kind: GlobalContextEntry
metadata: {name: deployments}
spec:
  apiCall: {urlPath: /apis/apps/v1/namespaces/x/deployments, refreshInterval: 1h}`)
}
