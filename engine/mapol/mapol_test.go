package mapol_test

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/mapol"
	arboutcome "github.com/arbiter-pdp/arbiter/engine/outcome"
)

func objects(tb testing.TB, docs string) []*manifest.Object {
	tb.Helper()
	parsed, err := manifest.Parse("test.yaml", []byte(docs))
	if err != nil {
		tb.Fatal(err)
	}
	return manifest.FromDocuments(parsed)
}

func compileSet(tb testing.TB, docs string, applier mapol.Applier) *mapol.Set {
	tb.Helper()
	var objs, others []*manifest.Object
	for _, o := range objects(tb, docs) {
		if p, b := mapol.Classify(o); p || b {
			objs = append(objs, o)
		} else {
			others = append(others, o)
		}
	}
	var c mapol.Cache
	s, errs := c.Compile(objs, others, nil, mapol.Options{Applier: applier})
	if len(errs) > 0 {
		tb.Fatal(errs)
	}
	return s
}

func configMapRequest() *admission.Request {
	r := &admission.Request{Object: configMap(), UserInfo: admission.UserInfo{Username: "alice"}}
	r.Fill()
	return r
}

const labelPolicy = `
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: label}
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  reinvocationPolicy: Never
  mutations:
    - patchType: JSONPatch
      jsonPatch:
        expression: '[JSONPatch{op: "add", path: "/metadata/labels/json", value: "yes"}]'
    - patchType: ApplyConfiguration
      applyConfiguration:
        expression: 'Object{metadata: Object.metadata{labels: {"applied": "yes"}}}'
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: label-binding}
spec: {policyName: label}
`

// Without an Applier, an apply configuration fails as kube-apiserver's
// patcher fails without a type converter; JSON patches still apply (and a
// failed mutation does not stop the next).
func TestNoApplier(t *testing.T) {
	v := compileSet(t, labelPolicy, nil).Decide(context.Background(), configMapRequest(), nil)
	if len(v.Denials) != 1 {
		t.Fatalf("denials %+v", v.Denials)
	}
	d := v.Denials[0]
	if want := "policy 'label' with binding 'label-binding' denied request: error applying patch: type converter must not be nil"; d.Text() != want || d.Code != 403 || d.Reason != "Invalid" {
		t.Fatalf("denial %d %s %q, want 403 Invalid %q", d.Code, d.Reason, d.Text(), want)
	}
	labels := v.Object["metadata"].(map[string]any)["labels"].(map[string]any)
	if labels["json"] != "yes" || labels["applied"] != nil {
		t.Fatalf("labels %v: want the JSON patch applied only", labels)
	}
	if r := v.Results[0]; r.Result != mapol.ResultError || r.Binding != "label-binding" {
		t.Fatalf("result %+v", r)
	}
}

// Every version kube-apiserver v1.37 serves loads (v1alpha1's paramRef
// defaults parameterNotFoundAction to Deny); others are refused.
func TestVersions(t *testing.T) {
	const policy = `
apiVersion: admissionregistration.k8s.io/%s
kind: MutatingAdmissionPolicy
metadata: {name: p}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  reinvocationPolicy: Never
  mutations:
    - patchType: ApplyConfiguration
      applyConfiguration: {expression: 'Object{metadata: Object.metadata{labels: {"p": "x"}}}'}
---
apiVersion: admissionregistration.k8s.io/%s
kind: MutatingAdmissionPolicyBinding
metadata: {name: b}
spec:
  policyName: p
  paramRef: {name: missing}
`
	for _, v := range []string{"v1", "v1beta1", "v1alpha1", "v2"} {
		var c mapol.Cache
		s, errs := c.Compile(objects(t, strings.ReplaceAll(policy, "%s", v)), nil, nil, mapol.Options{Applier: testApplier})
		switch v {
		case "v1alpha1":
			if len(errs) > 0 {
				t.Fatalf("%s: %v", v, errs)
			}
			out := s.Decide(context.Background(), configMapRequest(), nil)
			if len(out.Denials) != 1 || !strings.Contains(out.Denials[0].Text(), "no params found for policy binding with `Deny` parameterNotFoundAction") {
				t.Fatalf("%s: the default parameterNotFoundAction is Deny: %+v", v, out.Denials)
			}
		case "v2":
			if len(errs) != 2 || !strings.Contains(errs.Error(), "unsupported version admissionregistration.k8s.io/v2") {
				t.Fatalf("%s: %v", v, errs)
			}
		default:
			if len(errs) != 1 || !strings.Contains(errs.Error(), "spec.paramRef.parameterNotFoundAction: Required value") {
				t.Fatalf("%s: %v", v, errs)
			}
		}
	}
}

// Mutate writes one result per invocation (Kyverno CLI's words), threads
// the object through the celeval request, and Reinvoke updates the results
// of the invocations it runs again.
func TestMutateOutcome(t *testing.T) {
	docs := labelPolicy + `---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: counter}
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  reinvocationPolicy: IfNeeded
  matchConditions:
    - {name: labelled, expression: 'has(object.metadata.labels)'}
  mutations:
    - patchType: JSONPatch
      jsonPatch: {expression: '[JSONPatch{op: "replace", path: "/metadata/labels/n", value: string(int(object.metadata.labels.n) + 1)}]'}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: counter-binding}
spec: {policyName: counter}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: skipped}
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  reinvocationPolicy: Never
  matchConditions:
    - {name: never, expression: 'false'}
  mutations:
    - patchType: ApplyConfiguration
      applyConfiguration: {expression: 'Object{}'}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: skipped-binding}
spec: {policyName: skipped}
`
	s := compileSet(t, docs, testApplier)
	req := configMapRequest()
	original := req.Object
	trace := &arboutcome.Trace{}
	rq := celeval.NewRequest(context.Background(), req, celeval.Config{Trace: trace})
	var out arboutcome.Outcome
	r := s.Mutate(rq, &out)
	if r == nil {
		t.Fatal("no reinvocation pending")
	}
	if labels := rq.Object()["metadata"].(map[string]any)["labels"].(map[string]any); labels["n"] != "1" || labels["applied"] != "yes" {
		t.Fatalf("after the first pass: %v", labels)
	}
	r.Reinvoke(rq)
	if labels := rq.Object()["metadata"].(map[string]any)["labels"].(map[string]any); labels["n"] != "2" {
		t.Fatalf("after the reinvocation: %v", labels)
	}
	if original["metadata"].(map[string]any)["labels"].(map[string]any)["n"] != "0" {
		t.Fatal("the request's object was modified")
	}
	if out.Denied() {
		t.Fatal(out.Message())
	}
	type row struct{ policy, rule, result, message, reinvoked string }
	var got []row
	for _, r := range out.Results {
		if r.Source != arboutcome.SourceMutatingAdmissionPolicy || r.PolicyKind != mapol.KindPolicy || r.Properties[arboutcome.PropBinding] != r.Rule {
			t.Fatalf("result %+v", r)
		}
		got = append(got, row{r.Policy, r.Rule, r.Result, r.Message, r.Properties[mapol.PropReinvoked]})
	}
	want := []row{
		{"counter", "counter-binding", "pass", mapol.MessageApplied, "true"},
		{"label", "label-binding", "pass", mapol.MessageApplied, ""},
		{"skipped", "skipped-binding", "skip", mapol.MessageMatchConditions, ""},
	}
	if len(got) != len(want) {
		t.Fatalf("results %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("result %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if out.Results[2].Cause != arboutcome.CauseMatchConditions {
		t.Fatal("a matchConditions skip has its cause")
	}
	var mutations int
	for _, st := range trace.Steps {
		if st.Phase == arboutcome.PhaseMutation && st.Variant == "binding label-binding" {
			mutations++
		}
	}
	if mutations != 2 {
		t.Fatalf("%d mutation steps of label traced: %+v", mutations, trace.Steps)
	}
}

// In a background scan the stored object is not changed: an invocation
// that would change it fails.
func TestBackground(t *testing.T) {
	s := compileSet(t, labelPolicy, testApplier)
	req := configMapRequest()
	req.Mode = admission.ModeBackground
	rq := celeval.NewRequest(context.Background(), req, celeval.Config{})
	var out arboutcome.Outcome
	if r := s.Mutate(rq, &out); r != nil {
		t.Fatal("a background scan has no pending reinvocation")
	}
	if rq.Object()["metadata"].(map[string]any)["labels"].(map[string]any)["json"] != nil {
		t.Fatal("a background scan changed the object")
	}
	if len(out.Results) != 1 || out.Results[0].Result != arboutcome.Fail || out.Results[0].Message != mapol.MessageNotApplied ||
		out.Results[0].Properties[arboutcome.PropProcess] != "background scan" {
		t.Fatalf("%+v", out.Results)
	}
}

// The plugin handles CREATE, UPDATE and CONNECT, and never requests on the
// admission policies themselves or the reviews.
func TestNotHandled(t *testing.T) {
	s := compileSet(t, strings.ReplaceAll(labelPolicy, "operations: [CREATE]", `operations: ["*"]`), testApplier)
	del := configMapRequest()
	del.Operation, del.OldObject, del.Object = admission.OpDelete, del.Object, nil
	if v := s.Decide(context.Background(), del, nil); v.Passes != 0 || len(v.Results) != 0 {
		t.Fatalf("DELETE: %+v", v)
	}
	self := configMapRequest()
	self.Resource.Group, self.Resource.Resource = mapol.Group, "mutatingadmissionpolicies"
	if v := s.Decide(context.Background(), self, nil); v.Passes != 0 {
		t.Fatalf("on a policy: %+v", v)
	}
}

// The policies' defaults and validation as the API server's.
func TestCompileErrors(t *testing.T) {
	p := pol("p", fail, never, AC(`Object{metadata: nope}`))
	p.Spec.FailurePolicy = nil
	p.Spec.MatchConstraints.ResourceRules = append(p.Spec.MatchConstraints.ResourceRules,
		rule([]string{""}, []string{"v1"}, []string{"pods"}, "PATCH"))
	_, errs := mapol.CompilePolicy(p)
	got := map[string]bool{}
	for _, e := range errs {
		got[e.Field] = true
	}
	for _, f := range []string{"spec.mutations[0].applyConfiguration.expression", "spec.matchConstraints.resourceRules[1].operations[0]", "spec.matchConstraints.resourceRules.operations"} {
		if !got[f] {
			t.Errorf("no error for %s in %v", f, errs)
		}
	}
	d := mapol.DefaultPolicy(pol("p", fail, never))
	if *d.Spec.MatchConstraints.MatchPolicy != admissionregistrationv1.Equivalent || d.Spec.MatchConstraints.NamespaceSelector == nil {
		t.Fatalf("defaults %+v", d.Spec.MatchConstraints)
	}
}

// In the engine, MutatingAdmissionPolicies run before Kyverno
// MutatingPolicies, and those that ask for it again after them when they
// changed the object; the validations see the final object.
func TestPipeline(t *testing.T) {
	docs := `
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: strip}
spec:
  failurePolicy: Ignore
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  reinvocationPolicy: IfNeeded
  mutations:
    - patchType: JSONPatch
      jsonPatch: {expression: '[JSONPatch{op: "remove", path: "/metadata/labels/kyverno"}]'}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: strip}
spec: {policyName: strip}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: first}
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  reinvocationPolicy: Never
  mutations:
    - patchType: JSONPatch
      jsonPatch: {expression: '[JSONPatch{op: "add", path: "/metadata/annotations", value: {"map": "first"}}]'}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: first}
spec: {policyName: first}
---
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata: {name: kyverno}
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  mutations:
    - patchType: JSONPatch
      jsonPatch:
        expression: '[JSONPatch{op: "add", path: "/metadata/labels/kyverno", value: object.metadata.annotations["map"]}]'
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: check}
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
    - expression: '!has(object.metadata.labels.kyverno) && object.metadata.annotations["map"] == "first"'
      message: the MAP ran after the MutatingPolicy
`
	ps, err := engine.Compile(objects(t, docs), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if infos := ps.MAPInfos(); len(infos) != 2 || infos[0].Name != "first" || infos[1].ReinvocationPolicy != "IfNeeded" {
		t.Fatalf("infos %+v", infos)
	}
	var applicable []string
	for _, a := range ps.Applicable(context.Background(), configMapRequest(), false, nil) {
		if a.MAP != nil {
			applicable = append(applicable, a.Name+":"+strings.Join(a.MAP.Bindings, ","))
		}
	}
	if got := strings.Join(applicable, " "); got != "first:first strip:strip" {
		t.Fatalf("applicable: %s", got)
	}
	d := ps.Evaluate(context.Background(), configMapRequest(), nil)
	if !d.Allowed {
		t.Fatalf("denied: %s", d.Message)
	}
	var words []string
	for _, r := range d.Results {
		words = append(words, r.Policy+":"+r.Result+":"+r.Properties[mapol.PropReinvoked])
	}
	// strip fails on the first pass (no label yet, failurePolicy Ignore),
	// the MutatingPolicy reads first's annotation and adds the label, the
	// reinvocation of strip removes it; the validation sees it gone.
	if got := strings.Join(words, " "); got != "first:pass: strip:error:true kyverno:pass: check:pass:" {
		t.Fatalf("results: %s", got)
	}
	if d.Mutated == nil || d.Mutated["metadata"].(map[string]any)["labels"].(map[string]any)["kyverno"] != nil {
		t.Fatalf("mutated %v", d.Mutated)
	}
}
