package vap_test

import (
	"context"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/vap"
)

// TestDifferential runs every case through Arbiter (package vap) and
// through k8s.io/apiserver's validating-policy dispatcher in-process, and
// requires the same decision, HTTP code and reason, message, warnings and
// audit annotations. Cases the API server would refuse at creation are
// refused by Arbiter at load, with the error the reference run reports at
// evaluation; escaping cases are compared with the API reference (seed
// 001) instead, since kube-apiserver without a schema does not resolve
// escaped names.
func TestDifferential(t *testing.T) {
	cases := differentialCases()
	if len(cases) < 100 {
		t.Fatalf("%d cases, want at least 100", len(cases))
	}
	names := map[string]bool{}
	var compared, refused, seed int
	for _, c := range cases {
		if names[c.name] {
			t.Fatalf("duplicate case %q", c.name)
		}
		names[c.name] = true
		t.Run(c.name, func(t *testing.T) {
			if raceEnabled && expensive(c.name) {
				// These burn the whole CEL cost budget twice (Arbiter and
				// the reference): minutes under the race detector. `make
				// test` runs them without it.
				t.Skip("cost-budget case: run without -race")
			}
			got, err := arbiterRun(c)
			if c.loadError != "" {
				if err == nil || !strings.Contains(err.Error(), c.loadError) {
					t.Fatalf("Arbiter load error = %v, want it to contain %q", err, c.loadError)
				}
				refused++
				if c.kubeContains != "" {
					want := kubeRun(t, c)
					if want.allowed || !strings.Contains(want.message, c.kubeContains) {
						t.Fatalf("reference run:\n%s\nwant a denial containing %q", want, c.kubeContains)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Arbiter load error: %v", err)
			}
			want := kubeRun(t, c)
			if c.seed != nil {
				seed++
				if got.String() != c.seed.String() {
					t.Fatalf("Arbiter:\n%s\nthe API reference (seed 001) says:\n%s", got, c.seed)
				}
				if c.kubeContains != "" && !strings.Contains(want.String(), c.kubeContains) {
					t.Fatalf("reference run:\n%s\nwant it to contain %q", want, c.kubeContains)
				}
				return
			}
			compared++
			if c.unordered {
				// kube-apiserver lists params in its cache's (map) order
				got.warnings, want.warnings = sortedCopy(got.warnings), sortedCopy(want.warnings)
			}
			if os.Getenv("VAP_DIFF_DUMP") != "" {
				t.Logf("%s", want)
			}
			if got.String() != want.String() || got.code != want.code || got.reason != want.reason {
				t.Fatalf("Arbiter:\n%s\nk8s.io/apiserver:\n%s", got, want)
			}
			if !reflect.DeepEqual(nonNil(got.annotations), nonNil(want.annotations)) {
				t.Fatalf("annotations:\n%v\nwant\n%v", got.annotations, want.annotations)
			}
		})
	}
	t.Logf("%d cases: %d compared with k8s.io/apiserver, %d refused at load, %d compared with the seed", len(cases), compared, refused, seed)
}

// expensive says whether a case exhausts (or nearly exhausts) a CEL cost
// budget.
func expensive(name string) bool {
	return strings.Contains(name, "cost") || strings.Contains(name, "budget")
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

type diffCase struct {
	name     string
	policies []*admissionregistrationv1.ValidatingAdmissionPolicy
	bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	params   []*unstructured.Unstructured
	// clusterParams makes the param kind cluster-scoped.
	clusterParams bool
	// unordered: several params give warnings, which kube-apiserver emits
	// in its param cache's order; they are compared as sets.
	unordered bool
	// namespaces are Namespace objects besides the defaults.
	namespaces []map[string]any
	// req changes the default request (CREATE configmaps default/beta by alice).
	req func(r *admission.Request)
	// loadError: Arbiter refuses the policies (as API validation does)
	// with this text; kubeContains: the reference run denies with it.
	loadError    string
	kubeContains string
	// seed is the outcome the API reference describes (escaping).
	seed *outcome
}

func (c *diffCase) allNamespaces() []map[string]any {
	return append(defaultNamespaces(), c.namespaces...)
}

func defaultNamespaces() []map[string]any {
	ns := func(name string, labels map[string]any) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name, "labels": labels}}
	}
	return []map[string]any{
		ns("default", map[string]any{"env": "dev", "kubernetes.io/metadata.name": "default"}),
		ns("prod", map[string]any{"env": "prod", "kubernetes.io/metadata.name": "prod"}),
	}
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

func defaultObject() map[string]any {
	return cm("beta", "default",
		map[string]any{"app-name": "x", "app.kubernetes.io/name": "y", "env": "dev"},
		map[string]any{"namespace": "n", "x-prop": "1", "redact__d": "2", "in": "3", "count": "3"})
}

func (c *diffCase) request() *admission.Request {
	r := &admission.Request{
		Operation: admission.OpCreate,
		Object:    defaultObject(),
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

// arbiterRun evaluates a case with package vap.
func arbiterRun(c *diffCase) (outcome, error) {
	var policies []*vap.Policy
	var errs []string
	for _, p := range c.policies {
		cp, ferrs := vap.CompilePolicy(p)
		for _, e := range ferrs {
			errs = append(errs, e.Error())
		}
		if cp != nil {
			policies = append(policies, cp)
		}
	}
	var bindings []*vap.Binding
	for _, b := range c.bindings {
		cb, ferrs := vap.CompileBinding(b)
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
	var params []*vap.Param
	for _, p := range c.params {
		params = append(params, &vap.Param{APIVersion: p.GetAPIVersion(), Kind: p.GetKind(), Namespace: p.GetNamespace(), Name: p.GetName(),
			Content: runtime.DeepCopyJSON(p.Object)})
	}
	namespaces := map[string]map[string]any{}
	for _, n := range c.allNamespaces() {
		md := n["metadata"].(map[string]any)
		namespaces[md["name"].(string)] = n
	}
	set := vap.NewSet(policies, bindings, params, namespaces, vap.Options{Namespaced: func(schema.GroupKind) bool { return !c.clusterParams }})
	out := set.Decide(context.Background(), c.request(), nil)
	o := outcome{allowed: len(out.Denials) == 0, warnings: out.Warnings, annotations: out.AuditAnnotations}
	if len(out.Denials) > 0 {
		d := out.Denials[0]
		o.code, o.reason, o.message = d.Code, string(d.Reason), d.Text()
	}
	return o, nil
}

type loadError string

func (e loadError) Error() string { return string(e) }

// ---- builders ----

var (
	fail   = admissionregistrationv1.Fail
	ignore = admissionregistrationv1.Ignore
	deny   = admissionregistrationv1.Deny
	warn   = admissionregistrationv1.Warn
	audit  = admissionregistrationv1.Audit
)

func ptr[T any](v T) *T { return &v }

func rule(groups, versions, resources []string, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.NamedRuleWithOperations {
	if len(ops) == 0 {
		ops = []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
	}
	return admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: ops,
		Rule:       admissionregistrationv1.Rule{APIGroups: groups, APIVersions: versions, Resources: resources},
	}}
}

var configmaps = rule([]string{""}, []string{"v1"}, []string{"configmaps"})

// pol is a policy on configmaps (every operation) with the defaults left unset.
func pol(name string, fp admissionregistrationv1.FailurePolicyType, vs ...admissionregistrationv1.Validation) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    &fp,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{configmaps}},
			Validations:      vs,
		},
	}
}

func with[T any](v T, f func(T)) T {
	f(v)
	return v
}

// V is a validation: expression, message, messageExpression.
func V(expr, msg, msgExpr string) admissionregistrationv1.Validation {
	return admissionregistrationv1.Validation{Expression: expr, Message: msg, MessageExpression: msgExpr}
}

func VR(expr, msg string, reason metav1.StatusReason) admissionregistrationv1.Validation {
	return admissionregistrationv1.Validation{Expression: expr, Message: msg, Reason: &reason}
}

func bind(name, policy string, actions ...admissionregistrationv1.ValidationAction) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	if len(actions) == 0 {
		actions = []admissionregistrationv1.ValidationAction{deny}
	}
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy, ValidationActions: actions},
	}
}

func paramRef(name, namespace string, action admissionregistrationv1.ParameterNotFoundActionType) *admissionregistrationv1.ParamRef {
	return &admissionregistrationv1.ParamRef{Name: name, Namespace: namespace, ParameterNotFoundAction: &action}
}

func param(kind, namespace, name string, labels map[string]any, data map[string]any) *unstructured.Unstructured {
	o := cm(name, namespace, labels, data)
	o["kind"] = kind
	if kind != "ConfigMap" {
		o["apiVersion"] = "example.com/v1"
	}
	return &unstructured.Unstructured{Object: o}
}

// one is a case with one policy "p" and one binding "b" (Deny unless actions say).
func one(name string, p *admissionregistrationv1.ValidatingAdmissionPolicy, actions ...admissionregistrationv1.ValidationAction) *diffCase {
	p.Name = "p"
	return &diffCase{name: name, policies: []*admissionregistrationv1.ValidatingAdmissionPolicy{p}, bindings: []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{bind("b", "p", actions...)}}
}

func (c *diffCase) withReq(f func(r *admission.Request)) *diffCase {
	c.req = f
	return c
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}
