package mapol_test

import (
	"context"
	"os"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/mapol"
)

// TestDifferential runs every case through Arbiter (package mapol) and
// through k8s.io/apiserver's MutatingAdmissionPolicy dispatcher in-process
// (kube_test.go), and requires the same decision, HTTP code and reason,
// message, final object and number of dispatcher passes (reinvocation).
// Cases the API server would refuse at creation are refused by Arbiter at
// load with the API server's validation error.
func TestDifferential(t *testing.T) {
	cases := differentialCases()
	if len(cases) < 150 {
		t.Fatalf("%d cases, want at least 150", len(cases))
	}
	names := map[string]bool{}
	var compared, refused, denied, reinvoked int
	for _, c := range cases {
		if names[c.name] {
			t.Fatalf("duplicate case %q", c.name)
		}
		names[c.name] = true
		t.Run(c.name, func(t *testing.T) {
			if raceEnabled && c.expensive {
				// These burn a whole CEL cost budget twice (Arbiter and the
				// reference): minutes under the race detector.
				t.Skip("cost-budget case: run without -race")
			}
			got, err := arbiterRun(t, c)
			if c.loadError != "" {
				if err == nil || !strings.Contains(err.Error(), c.loadError) {
					t.Fatalf("Arbiter load error = %v, want it to contain %q", err, c.loadError)
				}
				refused++
				return
			}
			if err != nil {
				t.Fatalf("Arbiter load error: %v", err)
			}
			want := kubeRun(t, c)
			if os.Getenv("MAP_DIFF_DUMP") != "" {
				t.Logf("%s", want)
			}
			compared++
			if !want.allowed {
				denied++
			}
			if want.passes == 2 {
				reinvoked++
			}
			if got.String() != want.String() || got.code != want.code || got.reason != want.reason {
				t.Fatalf("Arbiter:\n%s\nk8s.io/apiserver:\n%s", got, want)
			}
			if c.check != nil {
				c.check(t, want)
			}
		})
	}
	t.Logf("%d cases: %d compared with k8s.io/apiserver (%d denied, %d reinvoked), %d refused at load", len(cases), compared, denied, reinvoked, refused)
}

type diffCase struct {
	name     string
	policies []*admissionregistrationv1.MutatingAdmissionPolicy
	bindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding
	params   []*unstructured.Unstructured
	// clusterParams makes the param kind cluster-scoped.
	clusterParams bool
	// namespaces are Namespace objects besides the defaults.
	namespaces []map[string]any
	// req changes the default request (CREATE configmaps default/beta by alice).
	req func(r *admission.Request)
	// loadError: Arbiter refuses the policies (as API validation does)
	// with this text.
	loadError string
	// expensive: the case exhausts a CEL cost budget.
	expensive bool
	// check, when set, asserts on the reference outcome (that the case
	// tests what it says).
	check func(t *testing.T, o outcome)
}

func (c *diffCase) allNamespaces() []map[string]any {
	return append(defaultNamespaces(), c.namespaces...)
}

func defaultNamespaces() []map[string]any {
	return []map[string]any{
		nsObj("default", map[string]any{"env": "dev", "kubernetes.io/metadata.name": "default"}),
		nsObj("prod", map[string]any{"env": "prod", "kubernetes.io/metadata.name": "prod"}),
	}
}

func nsObj(name string, labels map[string]any) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name, "labels": labels}}
}

func (c *diffCase) request() *admission.Request {
	r := &admission.Request{
		Operation: admission.OpCreate,
		Object:    configMap(),
		Kind:      schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		Resource:  schema.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		Name:      "beta",
		Namespace: "default",
		UserInfo:  admission.UserInfo{Username: "alice", UID: "u-1", Groups: []string{"devs", "system:authenticated"}},
	}
	if c.req != nil {
		c.req(r)
	}
	return r
}

// arbiterRun decides a case with package mapol.
func arbiterRun(t testing.TB, c *diffCase) (outcome, error) {
	var policies []*mapol.Policy
	var errs []string
	for _, p := range c.policies {
		cp, ferrs := mapol.CompilePolicy(p)
		for _, e := range ferrs {
			errs = append(errs, e.Error())
		}
		if cp != nil {
			policies = append(policies, cp)
		}
	}
	var bindings []*mapol.Binding
	for _, b := range c.bindings {
		cb, ferrs := mapol.CompileBinding(b)
		for _, e := range ferrs {
			errs = append(errs, e.Error())
		}
		if cb != nil {
			bindings = append(bindings, cb)
		}
	}
	if len(errs) > 0 {
		return outcome{}, loadError(strings.Join(errs, "\n"))
	}
	var params []*mapol.Param
	for _, p := range c.params {
		params = append(params, &mapol.Param{APIVersion: p.GetAPIVersion(), Kind: p.GetKind(), Namespace: p.GetNamespace(), Name: p.GetName(),
			Content: runtime.DeepCopyJSON(p.Object)})
	}
	namespaces := map[string]map[string]any{}
	for _, n := range c.allNamespaces() {
		md := n["metadata"].(map[string]any)
		namespaces[md["name"].(string)] = n
	}
	opts := mapol.Options{Applier: testApplier}
	opts.Namespaced = func(schema.GroupKind) bool { return !c.clusterParams }
	set := mapol.NewSet(policies, bindings, params, namespaces, opts)
	r := c.request()
	before := objectJSON(t, r.Object)
	v := set.Decide(context.Background(), r, nil)
	if after := objectJSON(t, r.Object); after != before {
		t.Fatalf("Decide modified the request's object:\n%s\nwas\n%s", after, before)
	}
	o := outcome{allowed: len(v.Denials) == 0, passes: v.Passes}
	if o.allowed {
		o.object = objectJSON(t, v.Object)
	} else {
		d := v.Denials[0]
		o.code, o.reason, o.message = d.Code, string(d.Reason), d.Text()
	}
	return o, nil
}

type loadError string

func (e loadError) Error() string { return string(e) }

// ---- builders ----

var (
	fail     = admissionregistrationv1.Fail
	ignore   = admissionregistrationv1.Ignore
	never    = admissionregistrationv1.NeverReinvocationPolicy
	ifNeeded = admissionregistrationv1.IfNeededReinvocationPolicy
	denyAct  = admissionregistrationv1.DenyAction
	allowAct = admissionregistrationv1.AllowAction
)

func ptr[T any](v T) *T { return &v }

func rule(groups, versions, resources []string, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.NamedRuleWithOperations {
	if len(ops) == 0 {
		ops = []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
	}
	return admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: ops,
		Rule:       admissionregistrationv1.Rule{APIGroups: groups, APIVersions: versions, Resources: resources},
	}}
}

var (
	configmaps  = rule([]string{""}, []string{"v1"}, []string{"configmaps"})
	deployments = rule([]string{"apps"}, []string{"v1"}, []string{"deployments"})
	pods        = rule([]string{""}, []string{"v1"}, []string{"pods"})
)

// JP is a JSONPatch mutation, AC an ApplyConfiguration one.
func JP(expr string) admissionregistrationv1.Mutation {
	return admissionregistrationv1.Mutation{PatchType: admissionregistrationv1.PatchTypeJSONPatch, JSONPatch: &admissionregistrationv1.JSONPatch{Expression: expr}}
}

func AC(expr string) admissionregistrationv1.Mutation {
	return admissionregistrationv1.Mutation{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration, ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: expr}}
}

// pol is a policy on configmaps (CREATE, UPDATE).
func pol(name string, fp admissionregistrationv1.FailurePolicyType, rp admissionregistrationv1.ReinvocationPolicyType, ms ...admissionregistrationv1.Mutation) *admissionregistrationv1.MutatingAdmissionPolicy {
	return &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			FailurePolicy:      &fp,
			MatchConstraints:   &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{configmaps}},
			Mutations:          ms,
			ReinvocationPolicy: rp,
		},
	}
}

func on(p *admissionregistrationv1.MutatingAdmissionPolicy, rules ...admissionregistrationv1.NamedRuleWithOperations) *admissionregistrationv1.MutatingAdmissionPolicy {
	p.Spec.MatchConstraints.ResourceRules = rules
	return p
}

func with[T any](v T, f func(T)) T {
	f(v)
	return v
}

func bind(name, policy string) *admissionregistrationv1.MutatingAdmissionPolicyBinding {
	return &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: policy},
	}
}

func bindRef(name, policy string, ref *admissionregistrationv1.ParamRef) *admissionregistrationv1.MutatingAdmissionPolicyBinding {
	b := bind(name, policy)
	b.Spec.ParamRef = ref
	return b
}

func paramRef(name, namespace string, action admissionregistrationv1.ParameterNotFoundActionType) *admissionregistrationv1.ParamRef {
	return &admissionregistrationv1.ParamRef{Name: name, Namespace: namespace, ParameterNotFoundAction: &action}
}

func selectorRef(labels map[string]string, action admissionregistrationv1.ParameterNotFoundActionType) *admissionregistrationv1.ParamRef {
	return &admissionregistrationv1.ParamRef{Selector: &metav1.LabelSelector{MatchLabels: labels}, ParameterNotFoundAction: &action}
}

func withParams(p *admissionregistrationv1.MutatingAdmissionPolicy, apiVersion, kind string) *admissionregistrationv1.MutatingAdmissionPolicy {
	p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: apiVersion, Kind: kind}
	return p
}

func cmParam(name, namespace string, labels map[string]any, data map[string]any) *unstructured.Unstructured {
	o := cm(name, namespace, labels, data)
	return &unstructured.Unstructured{Object: o}
}

func cm(name, namespace string, labels map[string]any, data map[string]any) map[string]any {
	md := map[string]any{"name": name}
	if namespace != "" {
		md["namespace"] = namespace
	}
	if labels != nil {
		md["labels"] = labels
	}
	o := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": md}
	if data != nil {
		o["data"] = data
	}
	return o
}

// configMap is the default request's object.
func configMap() map[string]any {
	return cm("beta", "default",
		map[string]any{"app": "x", "env": "dev", "n": "0"},
		map[string]any{"a": "1", "b": "2", "count": "3"})
}

func deployment() map[string]any {
	return map[string]any{
		"apiVersion": "apps/v1",
		"kind":       "Deployment",
		"metadata":   map[string]any{"name": "web", "namespace": "default", "labels": map[string]any{"app": "web"}},
		"spec": map[string]any{
			"replicas": int64(2),
			"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
				"spec": map[string]any{
					"containers": []any{
						map[string]any{"name": "app", "image": "web:1", "args": []any{"--port", "80"},
							"env": []any{map[string]any{"name": "A", "value": "1"}}},
						map[string]any{"name": "side", "image": "side:1"},
					},
					"tolerations": []any{map[string]any{"key": "k", "operator": "Exists"}},
				},
			},
		},
	}
}

func pod() map[string]any {
	return map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata":   map[string]any{"name": "p1", "namespace": "default", "labels": map[string]any{"app": "p"}, "finalizers": []any{"f1"}},
		"spec": map[string]any{
			"containers": []any{map[string]any{"name": "c", "image": "c:1"}},
		},
	}
}

// onDeployment makes the request a CREATE of deployment().
func onDeployment(r *admission.Request) {
	r.Object = deployment()
	r.Kind = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	r.Resource = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	r.Name = "web"
}

// onPod makes the request a CREATE of pod().
func onPod(r *admission.Request) {
	r.Object = pod()
	r.Kind = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	r.Resource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	r.Name = "p1"
}

// one is a case with one policy "p" and one binding "b".
func one(name string, p *admissionregistrationv1.MutatingAdmissionPolicy) *diffCase {
	p.Name = "p"
	return &diffCase{name: name, policies: []*admissionregistrationv1.MutatingAdmissionPolicy{p},
		bindings: []*admissionregistrationv1.MutatingAdmissionPolicyBinding{bind("b", "p")}}
}

func (c *diffCase) withReq(f func(r *admission.Request)) *diffCase {
	c.req = f
	return c
}

func (c *diffCase) expect(f func(t *testing.T, o outcome)) *diffCase {
	c.check = f
	return c
}

// denied and allowed are checks on the reference outcome.
func denied(substr string) func(t *testing.T, o outcome) {
	return func(t *testing.T, o outcome) {
		if o.allowed || !strings.Contains(o.message, substr) {
			t.Fatalf("want a denial containing %q, reference: %s", substr, o)
		}
	}
}

func allowedWith(passes int, substrs ...string) func(t *testing.T, o outcome) {
	return func(t *testing.T, o outcome) {
		if !o.allowed || o.passes != passes {
			t.Fatalf("want allowed in %d passes, reference: %s", passes, o)
		}
		for _, s := range substrs {
			if !strings.Contains(o.object, s) {
				t.Fatalf("want the object to contain %s, reference: %s", s, o)
			}
		}
	}
}
