package kyvernocel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

type exprCase struct {
	Mode             string `json:"mode"`
	Namespace        string `json:"namespace"`
	Expr             string `json:"expr"`
	Want             any    `json:"want"`
	WantNull         bool   `json:"wantNull"`
	WantError        string `json:"wantError"`
	WantCompileError bool   `json:"wantCompileError"`
}

// nativeOf converts a CEL result to JSON-like Go values for comparison.
func nativeOf(t *testing.T, v ref.Val) any {
	t.Helper()
	n, err := toJSONNative(v)
	if err != nil {
		t.Fatalf("converting %v: %v", v, err)
	}
	raw, err := json.Marshal(n)
	if err != nil {
		t.Fatalf("marshal %v: %v", n, err)
	}
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func normalise(t *testing.T, v any) any {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func runExprCases(t *testing.T, file string, contexts map[string]Context) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var cases []exprCase
	if err := yaml.UnmarshalStrict(raw, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	for _, tc := range cases {
		mode := tc.Mode
		if mode == "" {
			mode = "fake"
		}
		c, ok := contexts[mode]
		if !ok {
			t.Fatalf("%s: unknown mode %q", tc.Expr, mode)
		}
		got, compileErr := evalExpr(t, tc.Namespace != "", tc.Expr, Bind(c, tc.Namespace))
		switch {
		case tc.WantCompileError:
			if compileErr == nil {
				t.Errorf("%s: compiles, want a compile error", tc.Expr)
			}
		case compileErr != nil:
			t.Errorf("%s: %v", tc.Expr, compileErr)
		case tc.WantError != "":
			if !types.IsError(got) || got.(*types.Err).String() != tc.WantError {
				t.Errorf("%s:\n got: %v\nwant error: %s", tc.Expr, got, tc.WantError)
			}
		case types.IsError(got):
			t.Errorf("%s: error %v", tc.Expr, got)
		case tc.WantNull:
			if got != types.NullValue {
				t.Errorf("%s: %v, want null", tc.Expr, got)
			}
		default:
			if g, w := nativeOf(t, got), normalise(t, tc.Want); !reflect.DeepEqual(g, w) {
				gj, _ := json.Marshal(g)
				wj, _ := json.Marshal(w)
				t.Errorf("%s:\n got: %s\nwant: %s", tc.Expr, gj, wj)
			}
		}
	}
}

func TestStaticExpressions(t *testing.T) {
	c, err := LoadContextFile("testdata/static/context.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fake := NewStatic()
	if err := fake.AddContextFile(c); err != nil {
		t.Fatal(err)
	}
	cluster := NewStatic()
	cluster.SetClusterMode(true)
	if err := cluster.AddContextFile(c); err != nil {
		t.Fatal(err)
	}
	runExprCases(t, "testdata/static/cases.yaml", map[string]Context{"fake": fake, "cluster": cluster})
}

// The generating-policy clone suite lists Secrets from its context file.
func TestStaticSecretsContext(t *testing.T) {
	s, err := LoadTestContext("testdata/static/kyverno-test.yaml", TestContext{Context: "secrets-context.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	got, cerr := evalExpr(t, false, `dyn(resource.List("v1", "secrets", "default").items).map(s, s.metadata.name)`, Bind(s, ""))
	if cerr != nil || types.IsError(got) {
		t.Fatalf("%v %v", got, cerr)
	}
	if g := nativeOf(t, got); !reflect.DeepEqual(g, []any{"test-secret-1", "test-secret-2", "test-secret-3"}) {
		t.Fatalf("got %v", g)
	}
}

func TestStaticGo(t *testing.T) {
	ctx := context.Background()
	s := NewStatic()
	// unknown kinds: refused by default, guessed in cluster mode
	crd := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w"}}}
	if err := s.AddObject(crd); err == nil || err.Error() != `no matches for kind "Widget" in version "example.com/v1"` {
		t.Errorf("AddObject unknown kind: %v", err)
	}
	s.SetClusterMode(true)
	if err := s.AddObject(crd); err != nil {
		t.Fatal(err)
	}
	if o, err := s.GetResource(ctx, "example.com/v1", "widgets", "", "w"); err != nil || o.GetName() != "w" {
		t.Errorf("guessed resource: %v %v", o, err)
	}
	_, err := s.GetResource(ctx, "example.com/v1", "widgets", "", "x")
	if !apierrors.IsNotFound(err) || err.Error() != `widgets.example.com "x" not found` {
		t.Errorf("not found: %v", err)
	}
	s.RegisterKind(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gadget"}, "gadgetz", false)
	gvr, err := s.ToGVR(ctx, "example.com/v1", "Gadget")
	if err != nil || gvr.Resource != "gadgetz" {
		t.Errorf("ToGVR: %v %v", gvr, err)
	}
	// version-less mapping: the preferred version
	for _, tc := range []struct {
		gk   schema.GroupKind
		want string
	}{
		{schema.GroupKind{Group: "autoscaling", Kind: "HorizontalPodAutoscaler"}, "autoscaling/v2, Resource=horizontalpodautoscalers"},
		{schema.GroupKind{Kind: "Pod"}, "/v1, Resource=pods"},
		{schema.GroupKind{Group: "example.com", Kind: "Gadget"}, "example.com/v1, Resource=gadgetz"},
	} {
		m, err := s.RESTMapping(tc.gk, "")
		if err != nil || m.Resource.String() != tc.want {
			t.Errorf("RESTMapping(%v) = %v, %v", tc.gk, m, err)
		}
	}
	if _, err := s.RESTMapping(schema.GroupKind{Kind: "Nope"}, ""); err == nil || err.Error() != `no matches for kind "Nope" in group ""` {
		t.Errorf("RESTMapping(Nope): %v", err)
	}
	// global context
	s.SetGlobalContextEntry("obj", map[string]any{"a": 1})
	s.SetGlobalContextEntry("list", []any{1})
	for _, tc := range []struct {
		name, proj string
		want       any
		err        string
	}{
		{"obj", "", map[string]any{"a": 1}, ""},
		{"obj", "a", 1, ""},
		{"obj", "b", nil, `projection "b" not found in global context entry "obj"`},
		{"list", "x", nil, `projection "x" not found in global context entry "list": stored value is not an object`},
		{"missing", "x", nil, ""},
	} {
		got, err := s.GetGlobalReference(ctx, tc.name, tc.proj)
		if (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("GetGlobalReference(%s, %s) = %v, %v", tc.name, tc.proj, got, err)
		}
	}
	// HTTP mocks: method-specific first, then any method
	s.SetHTTPMock("", "https://x", "any")
	s.SetHTTPMock("post", "https://x", "post")
	h := s.HTTP()
	if got, _ := h.Get(ctx, "https://x", nil); got != "any" {
		t.Errorf("GET mock: %v", got)
	}
	if got, _ := h.Post(ctx, "https://x", nil, nil); got != "post" {
		t.Errorf("POST mock: %v", got)
	}
	if _, err := h.Get(ctx, "https://y", nil); err == nil || !strings.Contains(err.Error(), "GET https://y: no apiCallResponses entry matches") {
		t.Errorf("unmocked: %v", err)
	}
	if _, err := h.Client(ctx, "not a pem"); err == nil || err.Error() != "failed to parse PEM CA bundle for APICall" {
		t.Errorf("Client: %v", err)
	}
	pem, _ := os.ReadFile("testdata/x509/rsa-cert.pem")
	if c, err := h.Client(ctx, string(pem)); err != nil || c == nil {
		t.Errorf("Client(valid): %v", err)
	}
}

func TestOffline(t *testing.T) {
	for _, tc := range []struct{ expr, err string }{
		{`resource.get("v1", "configmaps", "a", "b")`, "failed to get resource: resource.Get: no cluster access in this context"},
		{`resource.list("v1", "configmaps", "a")`, "failed to list resource: resource.List: no cluster access in this context"},
		{`resource.post("v1", "configmaps", {"a": "b"})`, "failed to create resource: resource.Post: no cluster access in this context"},
		{`resource.toGVR("v1", "Pod")`, "failed to map kind to resource: resource.ToGVR: no cluster access in this context"},
		{`globalContext.Get("a", "")`, "failed to get global reference: globalContext.Get: no global context entries in this context"},
		{`image.GetMetadata("nginx")`, "failed to get image data: image.GetMetadata: no image registry access in this context"},
		{`http.Get("https://example.com")`, "request failed: http.Get: no network access in this context"},
		{`http.post("https://example.com", {"a": 1})`, "request failed: http.Post: no network access in this context"},
		{`http.client("x").get("https://example.com")`, "request failed: failed to parse PEM CA bundle for APICall"},
		{`http.client("").get("https://example.com")`, "request failed: http.Get: no network access in this context"},
	} {
		for _, c := range []Context{Offline, nil} {
			got, cerr := evalExpr(t, false, tc.expr, Bind(c, ""))
			if cerr != nil {
				t.Fatalf("%s: %v", tc.expr, cerr)
			}
			if !types.IsError(got) || got.(*types.Err).String() != tc.err {
				t.Errorf("%s: %v, want %q", tc.expr, got, tc.err)
			}
		}
	}
	var gotErr error
	_, gotErr = Offline.GetResource(context.Background(), "v1", "pods", "a", "b")
	if !errors.Is(gotErr, ErrNoCluster) {
		t.Errorf("errors.Is(ErrNoCluster): %v", gotErr)
	}
}

func TestNamespacedWithoutNamespace(t *testing.T) {
	got, cerr := evalExpr(t, true, `resource.list("v1", "configmaps")`, Bind(NewStatic(), ""))
	if cerr != nil {
		t.Fatal(cerr)
	}
	if !types.IsError(got) || !strings.Contains(got.(*types.Err).String(), "without the policy namespace") {
		t.Errorf("got %v", got)
	}
}

// Static and the bound values are shared by concurrent evaluations.
func TestConcurrentEvaluation(t *testing.T) {
	c, err := LoadContextFile("testdata/static/context.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := NewStatic()
	if err := s.AddContextFile(c); err != nil {
		t.Fatal(err)
	}
	act := Bind(s, "")
	act["object"] = map[string]any{"image": "ghcr.io/kyverno/test:1"}
	env := cachedEnv(t, false)
	ast, iss := env.Compile(`resource.get("v1", "configmaps", "team-a", "cm-a").data.key == "a" &&
		image.getMetadata(object.image).config.architecture == "amd64" &&
		parseImageReference(object.image).registry() == "ghcr.io" &&
		size(resource.list("v1", "configmaps", "team-a").items) == 2`)
	if iss.Err() != nil {
		t.Fatal(iss.Err())
	}
	prg, err := env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 8)
	for range 8 {
		go func() {
			for range 200 {
				out, _, err := prg.Eval(act)
				if err != nil || out != types.True {
					done <- fmt.Errorf("%v %v", out, err)
					return
				}
			}
			done <- nil
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
