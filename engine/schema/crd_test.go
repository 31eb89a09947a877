package schema

import (
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

func widgetGVK(v string) k8sschema.GroupVersionKind {
	return k8sschema.GroupVersionKind{Group: "example.com", Version: v, Kind: "Widget"}
}

func TestCRDConverterKinds(t *testing.T) {
	c, err := NewCRDConverter(mustJSON(t, fixtureCRD))
	if err != nil {
		t.Fatal(err)
	}
	if c.Name() != "widgets.example.com" {
		t.Errorf("name %q", c.Name())
	}
	got := c.GroupVersionKinds()
	if len(got) != 2 || got[0] != widgetGVK("v1") || got[1] != widgetGVK("v2") {
		t.Errorf("kinds %v", got)
	}
}

// TestCRDConverterIsKubeAPIServers: on every object of the differential
// cases that the CRD converts, the typed value is the same as with the
// converter kube-apiserver builds from its OpenAPI v3 document, and a merge
// and back gives the same object (the differential test compares the rest).
func TestCRDConverterIsKubeAPIServers(t *testing.T) {
	p := converterPairs(t)["crd"]
	for _, c := range applyCases() {
		if c.conv != "crd" {
			continue
		}
		for _, src := range []string{c.obj, c.ac} {
			u := &unstructured.Unstructured{Object: mustJSON(t, src)}
			got, gerr := p.ours.ObjectToTyped(u)
			want, werr := p.ref.ObjectToTyped(u)
			if !sameError(gerr, werr) {
				t.Errorf("%s: error %v, kube-apiserver's %v", c.name, gerr, werr)
				continue
			}
			if gerr != nil {
				continue
			}
			if !sameYAML(got.TypeRef(), want.TypeRef()) {
				t.Errorf("%s: type %v, kube-apiserver's %v", c.name, got.TypeRef(), want.TypeRef())
			}
		}
	}
}

func TestCRDErrors(t *testing.T) {
	base := func(mod string) string {
		return `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.com}
spec:
  group: example.com
  names: {kind: Thing, plural: things}
  versions:
  - name: v1
    served: true
    schema:
      openAPIV3Schema:
` + mod
	}
	for _, tc := range []struct {
		name, crd string
		want      []string // substrings of the error, in order
	}{
		{"list-type", base(`        type: object
        properties:
          spec:
            type: object
            properties:
              l: {type: array, items: {type: string}, x-kubernetes-list-type: bag}`),
			[]string{"CustomResourceDefinition things.example.com: spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[l].x-kubernetes-list-type: Unsupported value: \"bag\""}},
		{"map-keys-missing", base(`        type: object
        properties:
          l: {type: array, items: {type: object, properties: {k: {type: string}}}, x-kubernetes-list-type: map}`),
			[]string{"spec.versions[0].schema.openAPIV3Schema.properties[l].x-kubernetes-list-map-keys: Required value"}},
		{"map-key-not-a-property", base(`        type: object
        properties:
          l: {type: array, items: {type: object, properties: {k: {type: string}}}, x-kubernetes-list-type: map, x-kubernetes-list-map-keys: [name]}`),
			[]string{`properties[l].x-kubernetes-list-map-keys[0]: Invalid value: "name": entries must all be names of item properties`}},
		{"map-keys-without-map", base(`        type: object
        properties:
          l: {type: array, items: {type: string}, x-kubernetes-list-map-keys: [a]}`),
			[]string{"properties[l].x-kubernetes-list-map-keys: Forbidden"}},
		{"map-type", base(`        type: object
        properties:
          m: {type: object, x-kubernetes-map-type: partial}`),
			[]string{`properties[m].x-kubernetes-map-type: Unsupported value: "partial"`}},
		{"type", base(`        type: object
        properties:
          m: {type: thing}`),
			[]string{`properties[m].type: Unsupported value: "thing"`}},
		{"items-array", base(`        type: object
        properties:
          a: {type: array, items: [{type: string}]}`),
			[]string{"properties[a].items: Forbidden"}},
		{"items-missing", base(`        type: object
        properties:
          a: {type: array}`),
			[]string{"properties[a].items: Required value"}},
		{"ref", base(`        type: object
        properties:
          a: {$ref: "#/definitions/x"}`),
			[]string{"properties[a].$ref: Forbidden"}},
		{"preserve-not-bool", base(`        type: object
        x-kubernetes-preserve-unknown-fields: "yes"`),
			[]string{"openAPIV3Schema.x-kubernetes-preserve-unknown-fields: must be a boolean"}},
		{"no-schema", `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.com}
spec:
  group: example.com
  names: {kind: Thing}
  versions: [{name: v1, served: true}]`,
			[]string{"CustomResourceDefinition things.example.com: spec.versions[0].schema.openAPIV3Schema: Required value"}},
		{"no-group-no-kind", `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.com}
spec:
  versions: [{name: v1, served: true, schema: {openAPIV3Schema: {type: object}}}]`,
			[]string{"spec.group: Required value", "spec.names.kind: Required value"}},
		{"no-versions", `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.com}
spec: {group: example.com, names: {kind: Thing}}`,
			[]string{"spec.versions: must have at least one version"}},
		{"version-fields", `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.com}
spec:
  group: example.com
  names: {kind: Thing}
  versions: [{served: true}, {name: v1}, {name: v2, served: false}, {name: v2, served: true}]`,
			[]string{"spec.versions[0].name: Required value", "spec.versions[1].served: Required value", "spec.versions[3].name: Duplicate value"}},
		{"not-a-crd", `
apiVersion: apiextensions.k8s.io/v1beta1
kind: CustomResourceDefinition
metadata: {}
spec: {group: example.com, names: {kind: Thing}, versions: [{name: v1, served: false}]}`,
			[]string{"CustomResourceDefinition: metadata.name: Required value", "CustomResourceDefinition: apiVersion: must be apiextensions.k8s.io/v1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewCRDConverter(mustJSON(t, tc.crd))
			if err == nil {
				t.Fatal("no error")
			}
			if manifest.AsLoadErrors(err) == nil {
				t.Errorf("%T is not a load error", err)
			}
			msg := err.Error()
			at := 0
			for _, w := range tc.want {
				i := strings.Index(msg[at:], w)
				if i < 0 {
					t.Fatalf("error\n%s\ndoes not have (in order)\n%s", msg, w)
				}
				at += i + len(w)
			}
		})
	}
}

func TestSchemas(t *testing.T) {
	crd := mustJSON(t, fixtureCRD)
	s, err := NewSchemas(crd)
	if err != nil {
		t.Fatal(err)
	}
	pod := k8sschema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	if s.For(pod) == nil || (*Schemas)(nil).For(pod) == nil {
		t.Error("no converter for Pods")
	}
	if tc := s.For(widgetGVK("v1")); tc != s.CRD("widgets.example.com") || tc == nil {
		t.Errorf("For(Widget v1) = %v", tc)
	}
	for _, gvk := range []k8sschema.GroupVersionKind{
		widgetGVK("v0"), // not served
		widgetGVK("v3"),
		{Version: "v1", Kind: "PodList"},     // in the scheme, not in the schema
		{Version: "v1", Kind: "ListOptions"}, // same
		{Group: "example.com", Version: "v1", Kind: "Gadget"},
	} {
		if tc := s.For(gvk); tc != nil {
			t.Errorf("For(%v) = %v, want nil", gvk, tc)
		}
	}
	if (*Schemas)(nil).For(widgetGVK("v1")) != nil {
		t.Error("nil Schemas knows a CRD")
	}
	if s.Deduced() == nil || Deduced() == nil {
		t.Error("no deduced converter")
	}
	if len(s.CRDs()) != 1 {
		t.Errorf("%d CRDs", len(s.CRDs()))
	}

	// Two CRDs with the same kind, a CRD given twice, a bad CRD: errors
	// naming each.
	other := mustJSON(t, strings.Replace(fixtureCRD, "name: widgets.example.com", "name: gizmos.example.com", 1))
	bad := mustJSON(t, `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"bad.example.com"},"spec":{"group":"example.com","names":{"kind":"Bad"},"versions":[{"name":"v1","served":true,"schema":{"openAPIV3Schema":{"type":"bogus"}}}]}}`)
	_, err = NewSchemas(crd, other, crd, bad)
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range []string{
		"CustomResourceDefinition gizmos.example.com: spec.versions[v1]: example.com/v1, Kind=Widget is also defined by CustomResourceDefinition widgets.example.com",
		"CustomResourceDefinition widgets.example.com: metadata.name: Duplicate value",
		"CustomResourceDefinition bad.example.com: spec.versions[0].schema.openAPIV3Schema.type: Unsupported value",
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error\n%v\nlacks\n%s", err, w)
		}
	}

	// A CRD that defines a built-in kind does not replace it.
	deployCRD := mustJSON(t, `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"deployments.apps"},"spec":{"group":"apps","names":{"kind":"Deployment"},"versions":[{"name":"v1","served":true,"schema":{"openAPIV3Schema":{"type":"object"}}},{"name":"v9","served":true,"schema":{"openAPIV3Schema":{"type":"object"}}}]}}`)
	s2, err := NewSchemas(deployCRD)
	if err != nil {
		t.Fatal(err)
	}
	if s2.For(k8sschema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}) != Builtin() {
		t.Error("a CRD replaced the built-in Deployment")
	}
	if s2.For(k8sschema.GroupVersionKind{Group: "apps", Version: "v9", Kind: "Deployment"}) != s2.CRD("deployments.apps") {
		t.Error("the CRD's own version is not used")
	}
}

// TestConcurrentUse: the lazily parsed schemas and the converters are safe
// for concurrent use (run with -race).
func TestConcurrentUse(t *testing.T) {
	s, err := NewSchemas(mustJSON(t, fixtureCRD))
	if err != nil {
		t.Fatal(err)
	}
	pod := mustJSON(t, fixturePod)
	widget := mustJSON(t, fixtureWidget)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				if i%2 == 0 {
					ac := mustJSON(t, podHead+"metadata: {labels: {x: y}}\nspec: {containers: [{name: web, securityContext: {runAsNonRoot: true}}]}")
					if _, err := ApplyConfiguration(s.For(k8sschema.GroupVersionKind{Version: "v1", Kind: "Pod"}), pod, ac, false); err != nil {
						t.Error(err)
						return
					}
				} else {
					ac := mustJSON(t, widgetHead+"spec: {ports: [{port: 1}]}")
					if _, err := ApplyConfiguration(s.For(widgetGVK("v1")), widget, ac, false); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}(i)
	}
	wg.Wait()
}
