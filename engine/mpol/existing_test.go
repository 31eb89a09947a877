package mpol_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celenv"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/exception"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/mpol"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
	"github.com/arbiter-pdp/arbiter/engine/schema"
)

// builtinApplier merges apply configurations with the built-in schemas.
type builtinApplier struct{}

func (builtinApplier) Apply(obj, ac map[string]any, allowAtomic bool) (map[string]any, error) {
	return schema.ApplyConfiguration(schema.Builtin(), obj, ac, allowAtomic)
}

func decode(t *testing.T, doc string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	return m
}

// newSet compiles MutatingPolicies (YAML documents) into a set.
func newSet(t *testing.T, docs ...string) *mpol.Set {
	t.Helper()
	env, err := celenv.Default()
	if err != nil {
		t.Fatal(err)
	}
	var pols []*mpol.Policy
	var bounds []*exception.Bound
	for _, d := range docs {
		o := manifest.NewObject("test.yaml", decode(t, d))
		p, lerr := mpol.Compile(env, o)
		if lerr != nil {
			t.Fatalf("compile: %v", lerr)
		}
		pols = append(pols, p)
		bounds = append(bounds, exception.Bind(nil, exception.NewIndex(nil)))
	}
	return mpol.NewSet(pols, bounds, builtinApplier{})
}

// fakeCluster serves objects to resource.get and resource.list (the
// other libraries are offline).
type fakeCluster struct {
	kyvernocel.Context
	objects []map[string]any
}

func (f fakeCluster) match(apiVersion, resource, namespace string) []map[string]any {
	var out []map[string]any
	for _, o := range f.objects {
		md, _ := o["metadata"].(map[string]any)
		gvr := admission.ResourceFor(k8sschema.FromAPIVersionAndKind(o["apiVersion"].(string), o["kind"].(string)))
		if o["apiVersion"] == apiVersion && gvr.Resource == resource && md["namespace"] == namespace {
			out = append(out, o)
		}
	}
	return out
}

func (f fakeCluster) GetResource(_ context.Context, apiVersion, resource, namespace, name string) (*unstructured.Unstructured, error) {
	for _, o := range f.match(apiVersion, resource, namespace) {
		if o["metadata"].(map[string]any)["name"] == name {
			return &unstructured.Unstructured{Object: o}, nil
		}
	}
	return nil, apierrors.NewNotFound(k8sschema.GroupResource{Resource: resource}, name)
}

func (f fakeCluster) ListResources(_ context.Context, apiVersion, resource, namespace string, _ map[string]string) (*unstructured.UnstructuredList, error) {
	out := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List"}}
	for _, o := range f.match(apiVersion, resource, namespace) {
		out.Items = append(out.Items, unstructured.Unstructured{Object: o})
	}
	return out, nil
}

// mutateExisting is the offline mutate-existing flow of the engine: the
// expressions evaluated on the trigger, then each target evaluated within
// the trigger's request (the targets are visible to resource.get and
// resource.list, as in kyverno test). It returns, per target, the results
// ("policy=result") and the target as the policies left it.
func mutateExisting(t *testing.T, s *mpol.Set, trigger map[string]any, targets ...map[string]any) ([][]string, []map[string]any, []outcome.Result) {
	t.Helper()
	ctx := context.Background()
	cluster := fakeCluster{Context: kyvernocel.Offline, objects: targets}
	treq := &admission.Request{Object: trigger, Mode: admission.ModeCLI}
	treq.Fill()
	rq := celeval.NewRequest(ctx, treq, celeval.Config{Context: cluster})
	found, errs := s.Discover(rq)
	var results [][]string
	var patched []map[string]any
	for _, target := range targets {
		req := &admission.Request{Object: target, Mode: admission.ModeCLI}
		req.Fill()
		req.Operation = "" // a target is not being admitted
		trq := celeval.NewRequest(ctx, req, celeval.Config{Context: cluster, Request: treq, ExactCost: true})
		var out outcome.Outcome
		s.MutateTarget(trq, found, &out)
		var rs []string
		for _, r := range out.Results {
			w := r.Policy + "=" + r.Result
			if r.Result != outcome.Pass {
				w += " (" + r.Message + ")"
			}
			rs = append(rs, w)
		}
		results = append(results, rs)
		patched = append(patched, trq.Object())
	}
	return results, patched, errs
}

func policy(name, spec string) string {
	return fmt.Sprintf("apiVersion: policies.kyverno.io/v1beta1\nkind: MutatingPolicy\nmetadata:\n  name: %s\nspec:\n%s", name, indent(spec))
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "  " + l
	}
	return strings.Join(lines, "\n") + "\n"
}

// label is an apply configuration that sets a label.
func label(k, v string) string {
	return fmt.Sprintf(`mutations:
- patchType: ApplyConfiguration
  applyConfiguration:
    expression: "Object{metadata: Object.metadata{labels: {'%s': %s}}}"
`, k, v)
}

const (
	existingOn    = "evaluation:\n  mutateExisting:\n    enabled: true\n"
	onDeployments = `matchConstraints:
  resourceRules:
  - apiGroups: [apps]
    apiVersions: [v1]
    operations: [CREATE]
    resources: [deployments]
`
	onSecrets = `matchConstraints:
  resourceRules:
  - apiGroups: [""]
    apiVersions: [v1]
    operations: [CREATE]
    resources: [secrets]
`
	onPods = `matchConstraints:
  resourceRules:
  - apiGroups: [""]
    apiVersions: [v1]
    operations: [CREATE]
    resources: [pods]
`
	configMapTargets = `targetMatchConstraints:
  resourceRules:
  - apiGroups: [""]
    apiVersions: [v1]
    operations: [CREATE]
    resources: [configmaps]
`
)

const (
	deployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: test-ns}
spec:
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: nginx}]}
`
	secret    = "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: test-ns}\n"
	configMap = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm, namespace: test-ns}\ndata: {k: v}\n"
	otherCM   = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm, namespace: other}\ndata: {k: v}\n"
	cm2       = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm2, namespace: test-ns}\n"
	secretTgt = "apiVersion: v1\nkind: Secret\nmetadata: {name: other-secret, namespace: test-ns}\n"
)

// TestMutateExistingSelection: which targets a mutate-existing policy
// selects, and how each is evaluated (Kyverno 1.19's CLI:
// discoverCELTargets, targetMatchPredicate, EvaluateTarget).
func TestMutateExistingSelection(t *testing.T) {
	cases := []struct {
		name     string
		policies []string
		trigger  string
		targets  []string
		// want are the results per target; labels the label
		// mutated=... each target then has ("" none).
		want   [][]string
		labels []string
		// errs are the discovery errors ("policy: message" contains).
		errs []string
	}{{
		name:     "targetMatchConstraints rules select by resource, every operation",
		policies: []string{policy("p", existingOn+onDeployments+configMapTargets+label("mutated", "'yes'"))},
		trigger:  deployment,
		targets:  []string{configMap, secretTgt},
		want:     [][]string{{"p=pass"}, nil},
		labels:   []string{"yes", ""},
	}, {
		name: "operations of the target rules are not considered",
		policies: []string{policy("p", existingOn+onDeployments+strings.Replace(configMapTargets, "[CREATE]", "[DELETE]", 1)+
			label("mutated", "'yes'"))},
		trigger: deployment,
		targets: []string{configMap},
		want:    [][]string{{"p=pass"}},
		labels:  []string{"yes"},
	}, {
		name:     "without target rules, the policy's own matchConstraints select targets",
		policies: []string{policy("p", existingOn+onSecrets+label("mutated", "'yes'"))},
		trigger:  deployment,
		targets:  []string{configMap, secretTgt},
		want:     [][]string{nil, {"p=pass"}},
		labels:   []string{"", "yes"},
	}, {
		name:     "targetMatchConstraints without mutateExisting.enabled mutates no target",
		policies: []string{policy("p", onDeployments+configMapTargets+label("mutated", "'yes'"))},
		trigger:  deployment,
		targets:  []string{configMap},
		want:     [][]string{nil},
		labels:   []string{""},
	}, {
		name: "the expression (an object) selects by namespace/name, evaluated on the trigger",
		policies: []string{policy("p", existingOn+onDeployments+`targetMatchConstraints:
  expression: "resource.get('v1', 'configmaps', object.metadata.namespace, 'cm')"
`+label("mutated", "'yes'"))},
		trigger: deployment,
		targets: []string{configMap, otherCM, cm2},
		want:    [][]string{{"p=pass"}, nil, nil},
		labels:  []string{"yes", "", ""},
	}, {
		name: "the expression (a list) selects its items, whatever their kind",
		policies: []string{policy("p", existingOn+onDeployments+`targetMatchConstraints:
  expression: "resource.list('v1', 'configmaps', object.metadata.namespace)"
`+label("mutated", "'yes'"))},
		trigger: deployment,
		targets: []string{configMap, otherCM, cm2, "apiVersion: v1\nkind: Secret\nmetadata: {name: cm, namespace: test-ns}\n"},
		want:    [][]string{{"p=pass"}, nil, {"p=pass"}, {"p=pass"}},
		labels:  []string{"yes", "", "yes", "yes"},
	}, {
		name: "a null expression result selects nothing and is an error",
		policies: []string{policy("p", existingOn+onSecrets+`targetMatchConstraints:
  expression: "resource.get('v1', 'configmaps', object.metadata.namespace, 'missing')"
`+label("mutated", "'yes'"))},
		trigger: secret,
		targets: []string{configMap},
		want:    [][]string{nil},
		labels:  []string{""},
		errs:    []string{"p: failed to evaluate the targetMatchConstraints expression"},
	}, {
		name: "a namespaceSelector sees only kubernetes.io/metadata.name",
		policies: []string{
			policy("by-name", existingOn+onDeployments+configMapTargets+
				"  namespaceSelector:\n    matchLabels: {kubernetes.io/metadata.name: test-ns}\n"+label("a", "'yes'")),
			policy("by-label", existingOn+onDeployments+configMapTargets+
				"  namespaceSelector:\n    matchLabels: {env: prod}\n"+label("b", "'yes'")),
		},
		trigger: deployment,
		targets: []string{configMap},
		want:    [][]string{{"by-name=pass"}},
	}, {
		name: "exclusions keep their operations (a target has none)",
		policies: []string{policy("p", existingOn+onDeployments+configMapTargets+`  excludeResourceRules:
  - apiGroups: [""]
    apiVersions: [v1]
    operations: [CREATE]
    resources: [configmaps]
`+label("mutated", "'yes'"))},
		trigger: deployment,
		targets: []string{configMap},
		want:    [][]string{{"p=pass"}},
		labels:  []string{"yes"},
	}, {
		name: "targetMatchConditions replace matchConditions on targets",
		policies: []string{
			policy("skipped", existingOn+onDeployments+configMapTargets+`matchConditions:
- name: trigger-only
  expression: "object.kind == 'Deployment'"
targetMatchConditions:
- name: never
  expression: "object.metadata.name == 'nope'"
`+label("a", "'yes'")),
			policy("kept", existingOn+onDeployments+configMapTargets+`matchConditions:
- name: trigger-only
  expression: "object.kind == 'Deployment'"
`+label("mutated", "'yes'")),
		},
		trigger: deployment,
		targets: []string{configMap},
		want:    [][]string{{"skipped=skip (skip)", "kept=pass"}},
		labels:  []string{"yes"},
	}, {
		name: "each policy mutates the target as the previous ones left it",
		policies: []string{
			policy("first", existingOn+onDeployments+configMapTargets+label("step", "'one'")),
			policy("second", existingOn+onDeployments+configMapTargets+label("mutated", "object.metadata.labels.step + '-two'")),
		},
		trigger: deployment,
		targets: []string{configMap},
		want:    [][]string{{"first=pass", "second=pass"}},
		labels:  []string{"one-two"},
	}, {
		name: "object is the target, request the trigger's, namespaceObject null",
		policies: []string{policy("p", existingOn+onDeployments+configMapTargets+
			label("mutated", "request.object.metadata.name + '.' + request.kind.kind + '.' + object.kind + '.' + string(namespaceObject == null)"))},
		trigger: deployment,
		targets: []string{configMap},
		want:    [][]string{{"p=pass"}},
		labels:  []string{"web.Deployment.ConfigMap.true"},
	}, {
		name:     "a pod policy's autogen variant selects a controller target",
		policies: []string{policy("p", existingOn+onPods+label("mutated", "'yes'"))},
		trigger:  secret,
		targets:  []string{deployment, configMap},
		want:     [][]string{{"p=pass"}, nil},
	}, {
		name: "an error leaves the target as the previous policies left it",
		policies: []string{
			policy("first", existingOn+onDeployments+configMapTargets+label("mutated", "'yes'")),
			policy("broken", existingOn+onDeployments+configMapTargets+label("x", "object.data.nope")),
		},
		trigger: deployment,
		targets: []string{configMap},
		want:    [][]string{{"first=pass", "broken=error (failed to evaluate policy: no such key: nope)"}},
		labels:  []string{"yes"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSet(t, c.policies...)
			var targets []map[string]any
			for _, d := range c.targets {
				targets = append(targets, decode(t, d))
			}
			before, _ := json.Marshal(targets)
			got, patched, errs := mutateExisting(t, s, decode(t, c.trigger), targets...)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("results %q, want %q", got, c.want)
			}
			if after, _ := json.Marshal(targets); string(after) != string(before) {
				t.Errorf("the targets were modified")
			}
			for i, l := range c.labels {
				md, _ := patched[i]["metadata"].(map[string]any)
				labels, _ := md["labels"].(map[string]any)
				got, _ := labels["mutated"].(string)
				if got != l {
					t.Errorf("target %d: label mutated=%q, want %q", i, got, l)
				}
			}
			if len(errs) != len(c.errs) {
				t.Fatalf("discovery errors %v, want %v", errs, c.errs)
			}
			for i, e := range errs {
				if got := e.Policy + ": " + e.Message; !strings.Contains(got, c.errs[i]) {
					t.Errorf("discovery error %q, want %q", got, c.errs[i])
				}
			}
		})
	}
}

// TestTargetExpressionType: a targetMatchConstraints expression must be of
// type map(string, any) exactly (what resource.get and resource.list
// return), as Kyverno's compiler requires.
func TestTargetExpressionType(t *testing.T) {
	env, err := celenv.Default()
	if err != nil {
		t.Fatal(err)
	}
	for expr, ok := range map[string]bool{
		"resource.get('v1', 'configmaps', 'ns', 'cm')": true,
		"resource.list('v1', 'configmaps', 'ns')":      true,
		"object":                            false,
		"{'metadata': {'name': 'cm'}}":      false,
		"dyn({'metadata': {'name': 'cm'}})": false,
	} {
		doc := policy("p", existingOn+onDeployments+"targetMatchConstraints:\n  expression: "+strconvQuote(expr)+"\n"+label("a", "'b'"))
		_, lerr := mpol.Compile(env, manifest.NewObject("test.yaml", decode(t, doc)))
		if ok && lerr != nil {
			t.Errorf("%s: %v", expr, lerr)
		}
		if !ok && (lerr == nil || lerr.Field != "spec.targetMatchConstraints.expression" || lerr.Detail != "output type must be a map") {
			t.Errorf("%s: %v, want: output type must be a map", expr, lerr)
		}
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
