package kyvernocel

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func loadTestFile(t *testing.T, path string) TestContext {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tc TestContext
	if err := yaml.Unmarshal(raw, &tc); err != nil {
		t.Fatal(err)
	}
	return tc
}

func TestLoadTestContext(t *testing.T) {
	tc := loadTestFile(t, "testdata/loader/kyverno-test.yaml")
	pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "pod-under-test", "namespace": "default"}}}
	s, err := LoadTestContext("testdata/loader/kyverno-test.yaml", tc, pod)
	if err != nil {
		t.Fatal(err)
	}
	if !s.ClusterMode() {
		t.Fatal("clusterResources must select cluster mode")
	}
	runExprCases(t, "testdata/loader/cases.yaml", map[string]Context{"fake": s})
}

// writeTree writes files (path → content) under a temporary directory.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadTestContextErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		test  string
		files map[string]string
		want  []string // substrings of the error
	}{{
		name:  "context file unknown field",
		test:  "context: ctx.yaml",
		files: map[string]string{"ctx.yaml": "apiVersion: cli.kyverno.io/v1alpha1\nkind: Context\nspec:\n  resourcez: []\n"},
		want:  []string{"kyverno-test.yaml: context: ", "ctx.yaml: ", `unknown field "spec.resourcez"`},
	}, {
		name:  "context resource without kind",
		test:  "context: ctx.yaml",
		files: map[string]string{"ctx.yaml": "spec:\n  resources:\n  - apiVersion: v1\n    metadata: {name: x}\n"},
		want:  []string{"ctx.yaml: ", "Object 'Kind' is missing"},
	}, {
		name:  "context resource of an unknown kind",
		test:  "context: ctx.yaml",
		files: map[string]string{"ctx.yaml": "spec:\n  resources:\n  - apiVersion: example.com/v1\n    kind: Foo\n    metadata: {name: x, namespace: ns1}\n"},
		want:  []string{"ctx.yaml: spec.resources[0] (Foo ns1/x): no matches for kind \"Foo\" in version \"example.com/v1\""},
	}, {
		name:  "context image unknown field",
		test:  "context: ctx.yaml",
		files: map[string]string{"ctx.yaml": "spec:\n  images:\n  - image: x\n    labels: {}\n"},
		want:  []string{`unknown field "spec.images[0].labels"`},
	}, {
		name: "missing context file",
		test: "context: nope.yaml",
		want: []string{"kyverno-test.yaml: context: ", "nope.yaml: no such file or directory"},
	}, {
		name:  "clusterResources unknown field",
		test:  "clusterResources: [c.yaml]",
		files: map[string]string{"c.yaml": "spec:\n  objects: []\n"},
		want:  []string{"kyverno-test.yaml: clusterResources[0]: ", "c.yaml: ", `unknown field "spec.objects"`},
	}, {
		name:  "CRD without names",
		test:  "clusterResources: [c.yaml]",
		files: map[string]string{"c.yaml": "spec:\n  crds: [crd.yaml]\n", "crd.yaml": "spec:\n  group: g.io\n  versions: [{name: v1}]\n"},
		want:  []string{"c.yaml: spec.crds[0]: ", "crd.yaml: spec.names.plural and spec.names.kind are required"},
	}, {
		name: "apiCallResponses without url",
		test: "apiCallResponses:\n- response: {body: {a: 1}}\n",
		want: []string{"kyverno-test.yaml: apiCallResponses[0]: either url or urlPath is required"},
	}, {
		name: "apiCallResponses duplicate",
		test: "apiCallResponses:\n- {url: 'https://a', method: get, response: {body: {a: 1}}}\n- {url: 'https://a', method: GET, response: {body: {a: 2}}}\n",
		want: []string{`apiCallResponses: duplicate entry for "https://a" (key "GET:https://a")`},
	}, {
		name: "apiCallResponses body not an object",
		test: "apiCallResponses:\n- {url: 'https://a', response: {body: [1]}}\n",
		want: []string{`apiCallResponses[0] "https://a": response.body must be a JSON object`},
	}, {
		name: "apiCallResponses bad scheme",
		test: "apiCallResponses:\n- {url: 'ftp://a', response: {body: {}}}\n",
		want: []string{`apiCallResponses[0]: url "ftp://a" must be an absolute https/http URL`},
	}, {
		name: "apiCallResponses bad status",
		test: "apiCallResponses:\n- {url: 'https://a', response: {statusCode: 700, body: {}}}\n",
		want: []string{`apiCallResponses[0] "https://a": statusCode 700 must be between 100 and 599`},
	}, {
		name: "apiCallResponses bad method",
		test: "apiCallResponses:\n- {url: 'https://a', method: PUT, response: {body: {}}}\n",
		want: []string{`apiCallResponses[0]: method must be GET or POST`},
	}, {
		name: "apiCallResponses missing body",
		test: "apiCallResponses:\n- {url: 'https://a', response: {statusCode: 200}}\n",
		want: []string{`apiCallResponses[0] "https://a": response.body is required`},
	}, {
		name: "apiCallResponses urlPath",
		test: "apiCallResponses:\n- {urlPath: 'api', response: {body: {}}}\n",
		want: []string{`apiCallResponses[0]: urlPath "api" must be an absolute path starting with '/'`},
	}, {
		name: "globalContextEntries without source",
		test: "globalContextEntries:\n- name: a\n",
		want: []string{`globalContextEntries entry "a": one of data, resources, or resourceFiles is required`},
	}, {
		name: "globalContextEntries two sources",
		test: "globalContextEntries:\n- {name: a, data: {x: 1}, resources: []}\n",
		want: []string{`globalContextEntries entry "a": data, resources, and resourceFiles are mutually exclusive`},
	}, {
		name: "globalContextEntries duplicate",
		test: "globalContextEntries:\n- {name: a, data: {x: 1}}\n- {name: a, data: {x: 1}}\n",
		want: []string{`globalContextEntries: duplicate name "a"`},
	}, {
		name: "globalContextEntries escaping file",
		test: "globalContextEntries:\n- {name: a, resourceFiles: [../x.yaml]}\n",
		want: []string{`globalContextEntries entry "a" resourceFiles[0]: file path must not escape the test directory`},
	}, {
		name: "globalContextEntries missing file",
		test: "globalContextEntries:\n- {name: a, resourceFiles: [x.yaml]}\n",
		want: []string{`globalContextEntries "a" resourceFiles "x.yaml": read: `},
	}, {
		name: "globalContextEntries data not an object",
		test: "globalContextEntries:\n- {name: a, data: [1]}\n",
		want: []string{`globalContextEntries entry "a": data must be a JSON object`},
	}, {
		name: "globalContextEntries projection without path",
		test: "globalContextEntries:\n- {name: a, data: {x: 1}, projections: [{name: p}]}\n",
		want: []string{`globalContextEntries entry "a" projection "p": path is required`},
	}, {
		name: "globalContextEntries bad jmespath",
		test: "globalContextEntries:\n- {name: a, data: {x: 1}, projections: [{name: p, path: 'x['}]}\n",
		want: []string{`globalContextEntries "a" projection "p" path "x[": `},
	}, {
		name: "globalContextEntries kyverno jmespath function",
		test: "globalContextEntries:\n- {name: a, data: {x: 1}, fieldPath: 'to_upper(x)'}\n",
		want: []string{`globalContextEntries "a" fieldPath: `, "unknown function: to_upper"},
	}, {
		// Kyverno's JMESPath library: a missing field is an error, not null
		name: "globalContextEntries fieldPath missing field",
		test: "globalContextEntries:\n- {name: a, data: {x: 1}, fieldPath: 'spec.items'}\n",
		want: []string{`globalContextEntries "a" fieldPath: Unknown key "spec" in path`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"kyverno-test.yaml": tc.test}
			for k, v := range tc.files {
				files[k] = v
			}
			dir := writeTree(t, files)
			testFile := filepath.Join(dir, "kyverno-test.yaml")
			_, err := LoadTestContext(testFile, loadTestFile(t, testFile))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestContextFileImageJSON(t *testing.T) {
	c, err := ParseContextFile([]byte(`
spec:
  images:
  - image: a
    manifest: null
    imageIndex: {mediaType: x}
    digest: sha256:1
`))
	if err != nil {
		t.Fatal(err)
	}
	s := NewStatic()
	if err := s.AddContextFile(c); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(s.images["a"])
	want := `{"digest":"sha256:1","image":"a","imageIndex":{"mediaType":"x"},"registry":"","repository":"","resolvedImage":""}`
	if string(got) != want {
		t.Errorf("image data %s, want %s", got, want)
	}
}

// FuzzParseContextFile: the context-file loader must never panic, and what
// it accepts must load into a Static context and serve it.
func FuzzParseContextFile(f *testing.F) {
	for _, p := range []string{"testdata/static/context.yaml", "testdata/loader/context.yaml", "testdata/static/secrets-context.yaml",
		"testdata/suites/cli__test-validating-policy__allowed-base-images/context.yaml"} {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("spec: {resources: [{apiVersion: v1, kind: Pod, metadata: {name: p}}], images: [{image: x}]}"))
	f.Add([]byte("{}"))
	f.Add([]byte("spec:\n  resources:\n  - kind: Secret\n    apiVersion: v1\n    metadata: {name: s, namespace: n}\n---\nfoo: bar\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseContextFile(data)
		if err != nil {
			return
		}
		s := NewStatic()
		if err := s.AddContextFile(c); err != nil {
			return
		}
		for i := range c.Spec.Resources {
			r := &c.Spec.Resources[i]
			gvk := r.GroupVersionKind()
			m, err := s.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				t.Fatalf("added %s but cannot map it: %v", gvk, err)
			}
			if _, err := s.GetResource(t.Context(), gvk.GroupVersion().String(), m.Resource.Resource, r.GetNamespace(), r.GetName()); err != nil {
				t.Fatalf("added %s %s/%s but cannot get it: %v", gvk, r.GetNamespace(), r.GetName(), err)
			}
		}
		for _, img := range c.Spec.Images {
			if _, err := s.GetImageData(t.Context(), img.Image); err != nil {
				t.Fatalf("image %q: %v", img.Image, err)
			}
		}
	})
}
