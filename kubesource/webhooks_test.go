package kubesource

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/internal/k8stest"
	"github.com/arbiter-pdp/arbiter/store"
)

var update = flag.Bool("update", false, "rewrite the golden files of the webhook tests")

// readPolicies decodes the policies of YAML files.
func readPolicies(t *testing.T, files ...string) []*policyInfo {
	t.Helper()
	objs, err := k8stest.ReadObjects(files...)
	if err != nil {
		t.Fatal(err)
	}
	var out []*policyInfo
	for _, o := range objs {
		mo := manifest.NewObject("test", o)
		k := store.Key{Group: mo.Group(), Kind: mo.Kind, Namespace: mo.Namespace, Name: mo.Name}
		if !isStatusKind(k.Group, k.Kind) {
			continue
		}
		p, err := decodePolicy(k, o)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		out = append(out, p)
	}
	return out
}

// kyvernoConfig is the configuration of Kyverno's chainsaw runs: the
// service kyverno/kyverno-svc, and the Helm chart's namespace exclusions.
var kyvernoConfig = &WebhookConfig{
	Service:           ServiceRef{Namespace: "kyverno", Name: "kyverno-svc"},
	NamespaceSelector: DefaultNamespaceSelector("kube-system", "kyverno"),
}

// TestWebhooksAsKyverno: the webhooks made from the policies of Kyverno's
// own chainsaw tests (test/conformance/chainsaw/validating-policies,
// v1.19.1, in testdata/kyverno-webhooks) satisfy Kyverno's assertions on
// its ValidatingWebhookConfiguration — as chainsaw compares: every field
// asserted, lists element by element — once Kyverno's webhook names
// (vpol.validate.kyverno.svc) and paths (/vpol/NAMES) are read as
// Arbiter's (vpol.validate.arbiter.dev, /validate).
func TestWebhooksAsKyverno(t *testing.T) {
	dirs, err := filepath.Glob("testdata/kyverno-webhooks/*")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
			var policyFiles []string
			for _, f := range files {
				if filepath.Base(f) != "webhooks.yaml" {
					policyFiles = append(policyFiles, f)
				}
			}
			d := buildWebhooks(kyvernoConfig, nil, readPolicies(t, policyFiles...))
			raw, err := os.ReadFile(filepath.Join(dir, "webhooks.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			raw = []byte(strings.ReplaceAll(string(raw), "kyverno.svc", "arbiter.dev"))
			var want map[string]any
			if err := yaml.Unmarshal(raw, &want); err != nil {
				t.Fatal(err)
			}
			for _, w := range want["webhooks"].([]any) {
				svc := w.(map[string]any)["clientConfig"].(map[string]any)["service"].(map[string]any)
				svc["path"] = validatePath
			}
			got := toAny(t, map[string]any{"webhooks": d.validating})
			if diff := subset("", want["webhooks"], got.(map[string]any)["webhooks"]); diff != "" {
				b, _ := yaml.Marshal(got)
				t.Fatalf("%s\ngot:\n%s", diff, b)
			}
		})
	}
}

func toAny(t *testing.T, v any) any {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := yaml.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// subset is chainsaw's comparison: every field of want is in got with an
// equal value; lists have the same length and compare element by element.
func subset(path string, want, got any) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: want an object, got %v", path, got)
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if w[k] == nil && g[k] == nil {
				continue
			}
			if d := subset(path+"."+k, w[k], g[k]); d != "" {
				return d
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s: want %d elements, got %v", path, len(w), got)
		}
		for i := range w {
			if d := subset(fmt.Sprintf("%s[%d]", path, i), w[i], g[i]); d != "" {
				return d
			}
		}
		return ""
	}
	if !reflect.DeepEqual(want, got) {
		return fmt.Sprintf("%s: want %v, got %v", path, want, got)
	}
	return ""
}

// TestWebhooksGolden: matchConstraints → webhooks, for the cases Kyverno's
// tests do not cover (testdata/webhooks/NAME.yaml holds the policies,
// NAME.golden.yaml the two configurations' webhooks; go test -update
// rewrites the goldens, to be read before committing).
func TestWebhooksGolden(t *testing.T) {
	cfg := &WebhookConfig{
		URL:               "https://arbiter-webhook.example:8443/",
		CABundle:          []byte("CA"),
		NamespaceSelector: DefaultNamespaceSelector("kube-system", "arbiter"),
	}
	inputs, err := filepath.Glob("testdata/webhooks/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, in := range inputs {
		if strings.HasSuffix(in, ".golden.yaml") {
			continue
		}
		n++
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			d := buildWebhooks(cfg, cfg.CABundle, readPolicies(t, in))
			carried := map[string][]string{}
			for name, ps := range d.policies {
				for _, p := range ps {
					carried[name] = append(carried[name], p.key.String())
				}
			}
			var included []string
			for _, p := range d.included {
				included = append(included, p.key.String())
			}
			got, err := yaml.Marshal(map[string]any{
				"validatingWebhooks": d.validating,
				"mutatingWebhooks":   d.mutating,
				"policiesByWebhook":  carried,
				"configured":         included,
			})
			if err != nil {
				t.Fatal(err)
			}
			golden := strings.TrimSuffix(in, ".yaml") + ".golden.yaml"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test -run TestWebhooksGolden -update writes it)", err)
			}
			if string(want) != string(got) {
				t.Fatalf("%s differs; got:\n%s", golden, got)
			}
		})
	}
	if n == 0 {
		t.Fatal("no cases")
	}
}

func TestDefaultNamespaceSelector(t *testing.T) {
	if DefaultNamespaceSelector() != nil || DefaultNamespaceSelector("") != nil {
		t.Fatal("no namespace: no selector")
	}
	got := DefaultNamespaceSelector("kube-system", "arbiter")
	want := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system"}},
		{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"arbiter"}},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v", got)
	}
}
