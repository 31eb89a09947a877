package callout_test

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/arbiter-pdp/arbiter/callout"
	"github.com/arbiter-pdp/arbiter/internal/k8stest"
)

// TestPostResourceAPIServer: resource.Post of reviews against a real
// kube-apiserver (skipped unless ARBITER_K8S_RUN is set): a
// SubjectAccessReview answers by RBAC, a TokenReview of a bogus token is
// unauthenticated, a ConfigMap is refused before anything is sent.
func TestPostResourceAPIServer(t *testing.T) {
	srv := k8stest.Shared(t)
	var calls []callout.Call
	c, err := callout.New(callout.Config{AllowedResources: callout.ReviewResources}, callout.Options{
		Kube:     srv.Config,
		Recorder: func(_ context.Context, c callout.Call) { calls = append(calls, c) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sar := func(user string, groups ...any) map[string]any {
		return map[string]any{
			"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
			"spec": map[string]any{"user": user, "groups": groups,
				"resourceAttributes": map[string]any{"verb": "get", "resource": "secrets", "namespace": "default"}},
		}
	}
	for _, tc := range []struct {
		user   string
		groups []any
		want   bool
	}{
		{"nobody", nil, false},
		{"root", []any{"system:masters"}, true},
	} {
		out, err := c.PostResource(ctx, "authorization.k8s.io/v1", "subjectaccessreviews", "", sar(tc.user, tc.groups...))
		if err != nil {
			t.Fatal(err)
		}
		if got, _, _ := unstructured.NestedBool(out.Object, "status", "allowed"); got != tc.want {
			t.Errorf("%s: allowed %v, want %v: %v", tc.user, got, tc.want, out.Object["status"])
		}
	}
	out, err := c.PostResource(ctx, "authentication.k8s.io/v1", "tokenreviews", "", map[string]any{
		"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": map[string]any{"token": "not-a-token"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedBool(out.Object, "status", "authenticated"); got {
		t.Errorf("a bogus token is authenticated: %v", out.Object["status"])
	}
	if _, err := c.PostResource(ctx, "v1", "configmaps", "default", map[string]any{"metadata": map[string]any{"name": "x"}}); err == nil {
		t.Errorf("a ConfigMap was created")
	}
	if len(calls) != 4 || calls[0].Status != 201 || calls[3].Refused != true {
		t.Errorf("calls: %+v", calls)
	}
}
