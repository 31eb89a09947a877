package gpol_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

var update = flag.Bool("update", false, "rewrite testdata/golden")

// generated is one result of a golden case, as the golden files hold it.
type generated struct {
	Trigger    string            `json:"trigger"`
	Policy     string            `json:"policy"`
	Rule       string            `json:"rule,omitempty"`
	Result     string            `json:"result"`
	Message    string            `json:"message"`
	Properties map[string]string `json:"properties,omitempty"`
	Generated  []map[string]any  `json:"generated,omitempty"`
}

// TestGolden compiles each testdata/cases/NAME.yaml (policies, exceptions,
// Namespaces and trigger resources) and runs PolicySet.Generate on every
// trigger (a CREATE in the CLI mode, as `kyverno test`); the results and
// generated objects must be testdata/golden/NAME.yaml (go test -update
// rewrites them). What each case covers is said at its top.
func TestGolden(t *testing.T) { runGolden(t) }

// TestGoldenRerun: a policy evaluated a second time with exact cost
// tracking (as when its estimates exceed the budget) starts afresh: the
// same results, nothing generated twice.
func TestGoldenRerun(t *testing.T) {
	if *update {
		t.Skip("-update")
	}
	celeval.SetRerunAlways(true)
	defer celeval.SetRerunAlways(false)
	runGolden(t)
}

func runGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/cases/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			objs := load(t, f)
			ps, err := engine.Compile(objs, engine.Options{Generating: true})
			if err != nil {
				t.Fatal(err)
			}
			var got []generated
			for _, o := range objs {
				if c := engine.Classify(o); c != engine.ClassResource && c != engine.ClassNamespace {
					continue
				}
				req := &admission.Request{Operation: admission.OpCreate, Object: o.Content, Mode: admission.ModeCLI}
				req.Fill()
				for _, r := range ps.Generate(context.Background(), req, nil) {
					got = append(got, generated{
						Trigger: o.Ref(), Policy: r.PolicyKind + " " + r.Policy, Rule: r.Rule,
						Result: r.Result.Result, Message: r.Message, Properties: r.Properties, Generated: r.Generated,
					})
				}
			}
			out, err := yaml.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "golden", name+".yaml")
			if *update {
				if err := os.WriteFile(golden, out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test -update writes it)", err)
			}
			if string(out) != string(want) {
				t.Errorf("results differ from %s:\n--- got\n%s\n--- want\n%s", golden, out, want)
			}
		})
	}
}

func load(t *testing.T, f string) []*manifest.Object {
	t.Helper()
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := manifest.Parse(f, data)
	if err != nil {
		t.Fatal(err)
	}
	return manifest.FromDocuments(docs)
}

func parse(t *testing.T, text string) []*manifest.Object {
	t.Helper()
	docs, err := manifest.Parse("policy.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return manifest.FromDocuments(docs)
}

const validPolicy = `apiVersion: policies.kyverno.io/v1
kind: GeneratingPolicy
metadata:
  name: p
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["namespaces"]
  generate:
  - expression: generator.Apply(object.metadata.name, [])
`

// TestCompileErrors: bad policies are refused with an error naming the
// object and the field; a valid one is refused where GeneratingPolicies
// are not evaluated (a server: no Options.Generating).
func TestCompileErrors(t *testing.T) {
	edit := func(old, new string) string {
		if !strings.Contains(validPolicy, old) {
			t.Fatalf("%q not in the policy", old)
		}
		return strings.Replace(validPolicy, old, new, 1)
	}
	cases := []struct {
		name, policy string
		opts         engine.Options
		want         string
	}{
		{"server refuses", validPolicy, engine.Options{},
			"GeneratingPolicy p: spec.generate: a GeneratingPolicy is evaluated offline only (arbiter test, arbiter apply): the server does not create the resources it generates in the cluster"},
		{"version", edit("policies.kyverno.io/v1", "policies.kyverno.io/v2"), engine.Options{Generating: true},
			`apiVersion: unsupported version "policies.kyverno.io/v2" of GeneratingPolicy (supported: v1alpha1, v1beta1, v1)`},
		{"namespaced v1alpha1", strings.Replace(edit("policies.kyverno.io/v1", "policies.kyverno.io/v1alpha1"), "kind: GeneratingPolicy", "kind: NamespacedGeneratingPolicy", 1), engine.Options{Generating: true},
			`unsupported version "policies.kyverno.io/v1alpha1" of NamespacedGeneratingPolicy (supported: v1beta1, v1)`},
		{"no match constraints", edit("  matchConstraints:", "  matchConditions: []\n  x:"), engine.Options{Generating: true},
			"unknown field"},
		{"no resource rules", edit("    resourceRules:\n", "    resourceRules: []\n    excludeResourceRules:\n"), engine.Options{Generating: true},
			"spec.matchConstraints: Required value: a matchConstraints with at least one resource rule is required"},
		{"template not a mapping", edit("  - expression: generator.Apply(object.metadata.name, [])", "  - template:\n      value: '- a'"), engine.Options{Generating: true},
			"spec.generate[0].template.value: Invalid value: line 1: document must be a mapping describing a resource"},
		{"template placeholder", edit("  - expression: generator.Apply(object.metadata.name, [])", "  - template:\n      interpolate: cel\n      value: 'metadata: {name: ((1 + \"a\"))}'"), engine.Options{Generating: true},
			`spec.generate[0].template.value: Invalid value: line 1: invalid placeholder expression "1 + \"a\""`},
		{"template unterminated", edit("  - expression: generator.Apply(object.metadata.name, [])", "  - template:\n      interpolate: cel\n      value: 'metadata: {name: \"((object\"}'"), engine.Options{Generating: true},
			"line 1: unterminated placeholder starting at offset 0: missing closing '))'"},
		{"template key placeholder", edit("  - expression: generator.Apply(object.metadata.name, [])", "  - template:\n      interpolate: cel\n      value: 'metadata: {((a)): b}'"), engine.Options{Generating: true},
			"placeholders are not supported in mapping keys"},
		{"template interpolate", edit("  - expression: generator.Apply(object.metadata.name, [])", "  - template:\n      interpolate: jinja\n      value: 'a: b'"), engine.Options{Generating: true},
			`spec.generate[0].template.interpolate: Unsupported value: "jinja": supported values: "none", "cel"`},
		{"template empty", edit("  - expression: generator.Apply(object.metadata.name, [])", "  - template:\n      value: ''"), engine.Options{Generating: true},
			"template must contain at least one YAML document"},
		{"template globalContext in a namespaced policy", strings.Replace(edit("  - expression: generator.Apply(object.metadata.name, [])", "  - template:\n      interpolate: cel\n      value: 'data: ((globalContext.Get(\"e\", \"\")))'"), "kind: GeneratingPolicy", "kind: NamespacedGeneratingPolicy", 1), engine.Options{Generating: true},
			"spec: Forbidden: globalContext.* is not allowed in namespaced policies"},
		{"both", edit("  - expression: generator.Apply(object.metadata.name, [])", "  - expression: 'true'\n    template:\n      value: 'kind: ConfigMap'"), engine.Options{Generating: true},
			"spec.generate[0]: Invalid value: only one of expression or template may be set"},
		{"neither", edit("  - expression: generator.Apply(object.metadata.name, [])", "  - {}"), engine.Options{Generating: true},
			"spec.generate[0]: Required value: one of expression or template must be set"},
		{"bad expression", edit("generator.Apply(object.metadata.name, [])", "generator.Apply([])"), engine.Options{Generating: true},
			"spec.generate[0].expression: ERROR"},
		{"namespaced overload in a cluster policy", edit("generator.Apply(object.metadata.name, [])", "generator.apply([])"), engine.Options{Generating: true},
			"found no matching overload for 'apply'"},
		{"namespace argument in a namespaced policy", strings.Replace(validPolicy, "kind: GeneratingPolicy", "kind: NamespacedGeneratingPolicy", 1), engine.Options{Generating: true},
			"NamespacedGeneratingPolicy p: spec.generate[0].expression: ERROR"},
		{"globalContext in a namespaced policy", strings.Replace(edit("generator.Apply(object.metadata.name, [])", "generator.Apply([globalContext.Get('e', '')])"), "kind: GeneratingPolicy", "kind: NamespacedGeneratingPolicy", 1), engine.Options{Generating: true},
			"spec: Forbidden: globalContext.* is not allowed in namespaced policies"},
		{"duplicate variable", edit("  generate:", "  variables:\n  - name: a\n    expression: '1'\n  - name: a\n    expression: '2'\n  generate:"), engine.Options{Generating: true},
			`spec.variables[1].name: Duplicate value: "a"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := engine.Compile(parse(t, c.policy), c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
	if _, err := engine.Compile(parse(t, validPolicy), engine.Options{Generating: true}); err != nil {
		t.Errorf("the valid policy: %v", err)
	}
}

// TestModes: in the admission and background modes, a policy whose
// admission is disabled, or a namespaced policy of another namespace, has
// no result; the CLI mode evaluates every policy, as Kyverno's CLI does.
func TestModes(t *testing.T) {
	objs := parse(t, strings.Replace(validPolicy, "name: p\n", "name: p\n  namespace: apps\n", 1)+"---\n"+
		strings.Replace(strings.Replace(validPolicy, "kind: GeneratingPolicy", "kind: NamespacedGeneratingPolicy", 1),
			"generator.Apply(object.metadata.name, [])", "generator.Apply([])", 1)+
		"---\n"+strings.Replace(strings.Replace(validPolicy, "name: p\n", "name: disabled\n", 1), "  generate:", "  evaluation:\n    admission:\n      enabled: false\n  generate:", 1))
	ps, err := engine.Compile(objs, engine.Options{Generating: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode      admission.Mode
		namespace string
		want      []string
	}{
		{admission.ModeCLI, "team", []string{"GeneratingPolicy disabled", "GeneratingPolicy p", "NamespacedGeneratingPolicy default/p"}},
		{admission.ModeAdmission, "team", []string{"GeneratingPolicy p"}},
		{admission.ModeAdmission, "default", []string{"GeneratingPolicy p", "NamespacedGeneratingPolicy default/p"}},
		{admission.ModeBackground, "default", []string{"GeneratingPolicy p", "NamespacedGeneratingPolicy default/p"}},
	} {
		obj := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": c.namespace}}
		req := &admission.Request{Operation: admission.OpCreate, Object: obj, Mode: c.mode, Namespace: c.namespace}
		req.Fill()
		var got []string
		for _, r := range ps.Generate(context.Background(), req, nil) {
			got = append(got, r.PolicyKind+" "+r.Policy)
		}
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("mode %v, namespace %s: results of %q, want %q", c.mode, c.namespace, got, c.want)
		}
	}
}
