package kyvernoapi_test

import (
	"strings"
	"testing"

	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// TestCheckVersion: every kind is served in v1alpha1, v1beta1 and v1 but
// the namespaced kinds Kyverno 1.19 added in v1beta1; the error names the
// field and the versions served.
func TestCheckVersion(t *testing.T) {
	for _, c := range []struct {
		kind, version, want string
	}{
		{"ValidatingPolicy", "v1alpha1", ""},
		{"NamespacedValidatingPolicy", "v1alpha1", ""},
		{"PolicyException", "v1", ""},
		{"MutatingPolicy", "v2", `apiVersion: unsupported version "policies.kyverno.io/v2" of MutatingPolicy (supported: v1alpha1, v1beta1, v1)`},
		{"NamespacedDeletingPolicy", "v1beta1", ""},
		{"NamespacedDeletingPolicy", "v1alpha1", `apiVersion: unsupported version "policies.kyverno.io/v1alpha1" of NamespacedDeletingPolicy (supported: v1beta1, v1)`},
		{"NamespacedGeneratingPolicy", "v1alpha1", `apiVersion: unsupported version "policies.kyverno.io/v1alpha1" of NamespacedGeneratingPolicy (supported: v1beta1, v1)`},
		{"NamespacedImageValidatingPolicy", "v1", ""},
		{"NamespacedImageValidatingPolicy", "v1alpha1", `apiVersion: unsupported version "policies.kyverno.io/v1alpha1" of NamespacedImageValidatingPolicy (supported: v1beta1, v1)`},
		{"ImageValidatingPolicy", "v1alpha1", ""},
	} {
		o := manifest.NewObject("p.yaml", map[string]any{"apiVersion": kyvernoapi.Group + "/" + c.version, "kind": c.kind, "metadata": map[string]any{"name": "p"}})
		err := kyvernoapi.CheckVersion(o)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s %s: %v", c.kind, c.version, err)
		case c.want != "" && (err == nil || err.Field != "apiVersion" || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s %s: %v, want %s", c.kind, c.version, err, c.want)
		}
	}
}
