package clusterdata

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

func obj(apiVersion, kind, ns, name string, labels map[string]string) *manifest.Object {
	md := map[string]any{"name": name}
	if ns != "" {
		md["namespace"] = ns
	}
	if labels != nil {
		l := map[string]any{}
		for k, v := range labels {
			l[k] = v
		}
		md["labels"] = l
	}
	return manifest.NewObject("test", map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": md})
}

func crd(group, kind, plural, scope string, versions ...string) *manifest.Object {
	vs := make([]any, len(versions))
	for i, v := range versions {
		vs[i] = map[string]any{"name": v, "served": true, "storage": i == 0}
	}
	return manifest.NewObject("test", map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": plural + "." + group},
		"spec": map[string]any{"group": group, "scope": scope, "versions": vs,
			"names": map[string]any{"kind": kind, "plural": plural}},
	})
}

func names(t *testing.T, v *View, apiVersion, resource, ns string, labels map[string]string) []string {
	t.Helper()
	list, err := v.ListResources(context.Background(), apiVersion, resource, ns, labels)
	if err != nil {
		t.Fatalf("list %s %s %q: %v", apiVersion, resource, ns, err)
	}
	out := []string{}
	for _, it := range list.Items {
		out = append(out, it.GetNamespace()+"/"+it.GetName())
	}
	return out
}

func testView() *View {
	return New([]*manifest.Object{
		obj("v1", "ConfigMap", "b", "cm2", map[string]string{"app": "web", "tier": "front"}),
		obj("v1", "ConfigMap", "a", "cm1", map[string]string{"app": "web"}),
		obj("v1", "ConfigMap", "a", "cm0", map[string]string{"app": "db"}),
		obj("v1", "ConfigMap", "b", "cm1", nil),
		obj("v1", "Namespace", "", "a", nil),
		obj("apps/v1", "Deployment", "a", "web", nil),
		obj("rbac.authorization.k8s.io/v1", "ClusterRole", "", "admin", nil),
		crd("example.com", "Widget", "widgets", "Namespaced", "v1", "v1beta1"),
		obj("example.com/v1", "Widget", "a", "w1", nil),
		obj("example.com/v1beta1", "Widget", "b", "w2", nil),
		obj("other.io/v2", "Gadget", "", "g", nil),
	})
}

func TestViewList(t *testing.T) {
	v := testView()
	for _, tc := range []struct {
		name                     string
		apiVersion, resource, ns string
		labels                   map[string]string
		want                     []string
	}{
		{"one namespace, by name", "v1", "configmaps", "a", nil, []string{"a/cm0", "a/cm1"}},
		{"all namespaces", "v1", "configmaps", "", nil, []string{"a/cm0", "a/cm1", "b/cm1", "b/cm2"}},
		{"labels, all namespaces", "v1", "configmaps", "", map[string]string{"app": "web"}, []string{"a/cm1", "b/cm2"}},
		{"labels, every key", "v1", "configmaps", "", map[string]string{"app": "web", "tier": "front"}, []string{"b/cm2"}},
		{"labels, none match", "v1", "configmaps", "a", map[string]string{"app": "nope"}, []string{}},
		{"empty value is a value", "v1", "configmaps", "", map[string]string{"app": ""}, []string{}},
		{"empty namespace", "v1", "configmaps", "zzz", nil, []string{}},
		{"known kind without objects", "v1", "secrets", "a", nil, []string{}},
		{"cluster-scoped", "rbac.authorization.k8s.io/v1", "clusterroles", "", nil, []string{"/admin"}},
		{"cluster-scoped in a namespace", "rbac.authorization.k8s.io/v1", "clusterroles", "a", nil, []string{}},
		{"CRD kind, any stored version", "example.com/v1", "widgets", "", nil, []string{"a/w1", "b/w2"}},
		{"CRD kind, other served version", "example.com/v1beta1", "widgets", "a", nil, []string{"a/w1"}},
		{"guessed kind", "other.io/v2", "gadgets", "", nil, []string{"/g"}},
		{"subresource lists the resource", "apps/v1", "deployments/status", "a", nil, []string{"a/web"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(t, v, tc.apiVersion, tc.resource, tc.ns, tc.labels); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	list, err := v.ListResources(context.Background(), "v1", "configmaps", "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if list.GetAPIVersion() != "v1" || list.GetKind() != "ConfigMapList" {
		t.Fatalf("list head %v", list.Object)
	}
	for _, tc := range []struct{ apiVersion, resource, want string }{
		{"v1", "nothings", "could not find the requested resource"},
		{"v2", "configmaps", "could not find the requested resource"},
		{"example.com/v9", "widgets", "could not find the requested resource"},
		{"a/b/c", "x", "unexpected GroupVersion"},
	} {
		if _, err := v.ListResources(context.Background(), tc.apiVersion, tc.resource, "", nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("list %s %s: %v, want %q", tc.apiVersion, tc.resource, err, tc.want)
		}
	}
}

func TestViewGet(t *testing.T) {
	v := testView()
	for _, tc := range []struct {
		apiVersion, resource, ns, name string
		found                          bool
	}{
		{"v1", "configmaps", "a", "cm1", true},
		{"v1", "configmaps", "b", "cm1", true},
		{"v1", "configmaps", "a", "cm2", false},
		{"v1", "configmaps", "", "cm1", false},
		{"v1", "namespaces", "", "a", true},
		{"v1", "pods", "a", "x", false},
		{"v1", "nothings", "a", "x", false},
		{"v1", "configmaps/status", "a", "cm1", true},
		{"example.com/v1beta1", "widgets", "b", "w2", true},
		{"example.com/v1", "widgets", "b", "w2", true},
		{"other.io/v2", "gadgets", "", "g", true},
		{"other.io/v1", "gadgets", "", "g", false},
	} {
		o, err := v.GetResource(context.Background(), tc.apiVersion, tc.resource, tc.ns, tc.name)
		switch {
		case tc.found && err != nil:
			t.Errorf("get %v: %v", tc, err)
		case tc.found && (o.GetName() != tc.name || o.GetNamespace() != tc.ns):
			t.Errorf("get %v: got %s/%s", tc, o.GetNamespace(), o.GetName())
		case !tc.found && !apierrors.IsNotFound(err):
			t.Errorf("get %v: %v, want NotFound", tc, err)
		}
	}
}

func TestViewToGVR(t *testing.T) {
	v := testView()
	for _, tc := range []struct{ apiVersion, kind, want string }{
		{"v1", "ConfigMap", "/v1, Resource=configmaps"},
		{"apps/v1", "Deployment", "apps/v1, Resource=deployments"},
		{"autoscaling/v1", "HorizontalPodAutoscaler", "autoscaling/v1, Resource=horizontalpodautoscalers"},
		{"example.com/v1beta1", "Widget", "example.com/v1beta1, Resource=widgets"},
		{"other.io/v2", "Gadget", "other.io/v2, Resource=gadgets"},
		{"apps/v2", "Deployment", `error: no matches for kind "Deployment" in version "apps/v2"`},
		{"x.io/v1", "Nothing", `error: no matches for kind "Nothing" in version "x.io/v1"`},
	} {
		gvr, err := v.ToGVR(context.Background(), tc.apiVersion, tc.kind)
		got := ""
		if err != nil {
			got = "error: " + err.Error()
		} else {
			got = gvr.String()
		}
		if got != tc.want {
			t.Errorf("ToGVR(%s, %s) = %s, want %s", tc.apiVersion, tc.kind, got, tc.want)
		}
	}
}

// Apply copies on write: the old view is unchanged, and the buckets the
// changes do not touch are shared.
func TestViewApplyCopyOnWrite(t *testing.T) {
	v := testView()
	cm := schema.GroupKind{Kind: "ConfigMap"}
	v2 := v.Apply([]Change{
		{Key: Key{Kind: "ConfigMap", Namespace: "a", Name: "cm9"}, Object: obj("v1", "ConfigMap", "a", "cm9", nil)},
		{Key: Key{Kind: "ConfigMap", Namespace: "a", Name: "cm0"}},
		{Key: Key{Kind: "ConfigMap", Namespace: "a", Name: "missing"}},
	})
	if got := names(t, v, "v1", "configmaps", "a", nil); !reflect.DeepEqual(got, []string{"a/cm0", "a/cm1"}) {
		t.Fatalf("old view changed: %v", got)
	}
	if got := names(t, v2, "v1", "configmaps", "a", nil); !reflect.DeepEqual(got, []string{"a/cm1", "a/cm9"}) {
		t.Fatalf("new view: %v", got)
	}
	if v.Len() != 11 || v2.Len() != 11 {
		t.Fatalf("len %d, %d", v.Len(), v2.Len())
	}
	if v.kinds[cm].byNS["b"] != v2.kinds[cm].byNS["b"] {
		t.Error("untouched namespace bucket copied")
	}
	if v.kinds[cm].byNS["a"] == v2.kinds[cm].byNS["a"] {
		t.Error("touched namespace bucket shared")
	}
	dep := schema.GroupKind{Group: "apps", Kind: "Deployment"}
	if v.kinds[dep] != v2.kinds[dep] {
		t.Error("untouched kind bucket copied")
	}
	if v.mapper != v2.mapper {
		t.Error("mapper rebuilt though no kind or CRD changed")
	}
	// Deleting the last object of a kind drops the kind, and its guessed
	// mapping.
	v3 := v2.Apply([]Change{{Key: Key{Group: "other.io", Kind: "Gadget", Name: "g"}}})
	if _, err := v3.ListResources(context.Background(), "other.io/v2", "gadgets", "", nil); err == nil {
		t.Error("gadgets still mapped")
	}
	if _, ok := v3.kinds[schema.GroupKind{Group: "other.io", Kind: "Gadget"}]; ok || v3.Len() != 10 {
		t.Errorf("kind kept (len %d)", v3.Len())
	}
	// The last change of a key wins.
	v4 := Empty().Apply([]Change{
		{Key: Key{Kind: "ConfigMap", Namespace: "a", Name: "x"}, Object: obj("v1", "ConfigMap", "a", "x", nil)},
		{Key: Key{Kind: "ConfigMap", Namespace: "a", Name: "x"}},
	})
	if v4.Len() != 0 || len(v4.kinds) != 0 {
		t.Errorf("upsert then delete: %d objects", v4.Len())
	}
}

// Range and All list objects in key order: group, kind, namespace, name.
func TestViewRange(t *testing.T) {
	var got []string
	testView().Range(func(k Key, o *manifest.Object) bool {
		if KeyOf(o) != k {
			t.Errorf("%v holds %v", k, KeyOf(o))
		}
		got = append(got, k.String())
		return true
	})
	want := []string{
		"ConfigMap a/cm0", "ConfigMap a/cm1", "ConfigMap b/cm1", "ConfigMap b/cm2", "Namespace a",
		"CustomResourceDefinition.apiextensions.k8s.io widgets.example.com",
		"Deployment.apps a/web", "Widget.example.com a/w1", "Widget.example.com b/w2", "Gadget.other.io g",
		"ClusterRole.rbac.authorization.k8s.io admin",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	n := 0
	for range testView().All() {
		if n++; n == 3 {
			break
		}
	}
}

// A CRD maps its kind's plural, which Get and List then use, and changes
// of CRDs rebuild the mapping.
func TestViewCRDMapping(t *testing.T) {
	v := New([]*manifest.Object{obj("example.com/v1", "Mouse", "a", "m", nil)})
	if got := names(t, v, "example.com/v1", "mouses", "a", nil); len(got) != 1 {
		t.Fatalf("guessed plural: %v", got)
	}
	v2 := v.Apply([]Change{{Key: Key{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition", Name: "mice.example.com"},
		Object: crd("example.com", "Mouse", "mice", "Namespaced", "v1")}})
	if got := names(t, v2, "example.com/v1", "mice", "a", nil); len(got) != 1 {
		t.Fatalf("CRD plural: %v", got)
	}
	if _, err := v2.ListResources(context.Background(), "example.com/v1", "mouses", "a", nil); err == nil {
		t.Fatal("the guessed plural is still served")
	}
	mp, _ := v2.Mapper().KindFor(schema.GroupKind{Group: "example.com", Kind: "Mouse"})
	if mp.Source != "CustomResourceDefinition mice.example.com" || !mp.Namespaced {
		t.Fatalf("mapping %+v", mp)
	}
	// A CRD cannot override a built-in kind.
	v3 := v2.Apply([]Change{{Key: Key{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition", Name: "x"},
		Object: crd("apps", "Deployment", "deploys", "Cluster", "v1")}})
	if mp, _ := v3.Mapper().KindFor(schema.GroupKind{Group: "apps", Kind: "Deployment"}); mp.Resource != "deployments" {
		t.Fatalf("built-in overridden: %+v", mp)
	}
}

func TestCheckScope(t *testing.T) {
	v := testView()
	for _, tc := range []struct {
		o    *manifest.Object
		want string
	}{
		{obj("v1", "ConfigMap", "a", "x", nil), ""},
		{obj("v1", "ConfigMap", "", "x", nil), "metadata.namespace: required"},
		{obj("rbac.authorization.k8s.io/v1", "ClusterRole", "a", "x", nil), "metadata.namespace: must be empty"},
		{obj("example.com/v1", "Widget", "", "x", nil), "metadata.namespace: required"},
		{obj("other.io/v2", "Gadget", "a", "x", nil), ""}, // guessed: not checked
	} {
		err := CheckScope(v, tc.o)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.o.Ref(), got, tc.want)
		}
	}
}

// Views of many objects are built and changed in proportion to what
// changes.
func TestViewLarge(t *testing.T) {
	var objs []*manifest.Object
	for ns := 0; ns < 50; ns++ {
		for i := 0; i < 20; i++ {
			objs = append(objs, obj("v1", "ConfigMap", fmt.Sprintf("ns-%03d", ns), fmt.Sprintf("cm-%03d", i), nil))
		}
	}
	v := New(objs)
	if v.Len() != 1000 {
		t.Fatal(v.Len())
	}
	if got := names(t, v, "v1", "configmaps", "", nil); len(got) != 1000 || got[0] != "ns-000/cm-000" || got[999] != "ns-049/cm-019" {
		t.Fatalf("all: %d", len(got))
	}
}

// FuzzViewApply: any sequence of upserts and deletes leaves a view whose
// Len, Range, Get, List and Apply's copy-on-write agree with a plain map
// of the same changes.
func FuzzViewApply(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, uint8(3))
	f.Add([]byte{9, 9, 9, 1, 1, 0, 200, 201, 202}, uint8(1))
	kinds := []struct{ apiVersion, kind, resource string }{
		{"v1", "ConfigMap", "configmaps"}, {"apps/v1", "Deployment", "deployments"}, {"example.com/v1", "Gadget", "gadgets"},
	}
	f.Fuzz(func(t *testing.T, ops []byte, batch uint8) {
		if batch == 0 {
			batch = 1
		}
		want := map[Key]*manifest.Object{}
		v := Empty()
		var changes []Change
		resourceOf := map[string][2]string{}
		for _, k := range kinds {
			resourceOf[k.kind] = [2]string{k.apiVersion, k.resource}
		}
		// valueOf reads a key's value (made on the first read, then kept
		// by the views that keep the object).
		valueOf := func(v *View, k Key) (map[string]any, bool) {
			r := resourceOf[k.Kind]
			val, err := v.GetResourceValue(context.Background(), r[0], r[1], k.Namespace, k.Name)
			if err != nil {
				return nil, false
			}
			return val.Value().(map[string]any), true
		}
		flush := func() {
			before := v
			beforeLen := before.Len()
			for key := range want {
				valueOf(v, key)
			}
			v = v.Apply(changes)
			if before.Len() != beforeLen {
				t.Fatal("Apply changed its receiver")
			}
			changes = nil
		}
		for i, op := range ops {
			k := kinds[int(op)%len(kinds)]
			ns := fmt.Sprintf("ns%d", (op/3)%3)
			name := fmt.Sprintf("o%d", (op/9)%5)
			key := Key{Group: schema.FromAPIVersionAndKind(k.apiVersion, k.kind).Group, Kind: k.kind, Namespace: ns, Name: name}
			if op >= 128 {
				delete(want, key)
				changes = append(changes, Change{Key: key})
			} else {
				o := obj(k.apiVersion, k.kind, ns, name, map[string]string{"i": fmt.Sprint(i % 2)})
				want[key] = o
				changes = append(changes, Change{Key: key, Object: o})
			}
			if len(changes) >= int(batch) {
				flush()
			}
		}
		flush()
		if v.Len() != len(want) {
			t.Fatalf("len %d, want %d", v.Len(), len(want))
		}
		var prev *Key
		n := 0
		v.Range(func(k Key, o *manifest.Object) bool {
			if want[k] != o {
				t.Fatalf("%v: wrong object", k)
			}
			if prev != nil && !(prev.Group < k.Group || prev.Group == k.Group && (prev.Kind < k.Kind || prev.Kind == k.Kind &&
				(prev.Namespace < k.Namespace || prev.Namespace == k.Namespace && prev.Name < k.Name))) {
				t.Fatalf("%v after %v", k, *prev)
			}
			kk := k
			prev = &kk
			n++
			return true
		})
		if n != len(want) {
			t.Fatalf("range %d, want %d", n, len(want))
		}
		for k, o := range want {
			if m, ok := valueOf(v, k); !ok || reflectPointer(m) != reflectPointer(o.Content) {
				t.Fatalf("%v: the value is not the object's", k)
			}
		}
		for _, k := range kinds {
			for _, ns := range []string{"", "ns0", "ns1", "ns2"} {
				count := 0
				for key := range want {
					if key.Kind == k.kind && (ns == "" || key.Namespace == ns) {
						count++
					}
				}
				list, err := v.ListResources(context.Background(), k.apiVersion, k.resource, ns, nil)
				if k.kind == "Gadget" && count == 0 && ns == "" {
					continue // a guessed kind without objects is unknown
				}
				if err != nil {
					if k.kind == "Gadget" && count == 0 {
						continue
					}
					t.Fatal(err)
				}
				if len(list.Items) != count {
					t.Fatalf("%s in %q: %d, want %d", k.resource, ns, len(list.Items), count)
				}
			}
		}
	})
}
