package kyvernocel

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/cel-go/common/types"
)

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
	got, cerr := evalExpr(t, true, `resource.list("v1", "configmaps")`, Bind(Offline, ""))
	if cerr != nil {
		t.Fatal(cerr)
	}
	if !types.IsError(got) || !strings.Contains(got.(*types.Err).String(), "without the policy namespace") {
		t.Errorf("got %v", got)
	}
}

// nsHTTP answers every call with the namespace it was bound to.
type nsHTTP struct{ ns string }

func (h nsHTTP) Get(context.Context, string, map[string]string) (any, error) {
	return map[string]any{"ns": h.ns}, nil
}

func (h nsHTTP) Post(context.Context, string, any, map[string]string) (any, error) {
	return map[string]any{"ns": h.ns}, nil
}

func (h nsHTTP) Client(context.Context, string) (HTTPContext, error) { return h, nil }

func (h nsHTTP) ForNamespace(ns string) HTTPContext { return nsHTTP{ns: "for:" + ns} }

// TestBindHTTPNamespacer: a namespaced policy's http variable is
// ForNamespace(ns) of an HTTPContext that implements HTTPNamespacer; a
// cluster policy's is the context itself, and so is a namespaced policy's
// when the context does not implement it.
func TestBindHTTPNamespacer(t *testing.T) {
	c := WithHTTP(Offline, nsHTTP{})
	for _, tc := range []struct {
		ns, expr, want string
	}{
		{"", `http.Get("https://example.com").ns`, ""},
		{"team", `http.Get("https://example.com").ns`, "for:team"},
		{"team", `http.post("https://example.com", {}).ns`, "for:team"},
		{"team", `http.Client("").Get("https://example.com").ns`, "for:team"},
	} {
		got, err := evalExpr(t, tc.ns != "", tc.expr, Bind(c, tc.ns))
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		if types.IsError(got) || got.Value() != tc.want {
			t.Errorf("ns %q: %s = %v, want %q", tc.ns, tc.expr, got, tc.want)
		}
	}
	// without HTTPNamespacer, a namespaced policy gets the context itself
	got, err := evalExpr(t, true, `http.Get("https://example.com")`, Bind(Offline, "team"))
	if err != nil {
		t.Fatal(err)
	}
	if !types.IsError(got) || got.(*types.Err).String() != "request failed: http.Get: no network access in this context" {
		t.Errorf("Offline in a namespaced policy: %v", got)
	}
}
