package dpol

import (
	"fmt"
	"strings"

	"github.com/google/cel-go/common/types"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celenv"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// IsKind says whether kind is DeletingPolicy or NamespacedDeletingPolicy.
func IsKind(kind string) bool {
	return kind == kyvernoapi.KindDeletingPolicy || kind == kyvernoapi.KindNamespacedDeletingPolicy
}

// Policy is a compiled DeletingPolicy or NamespacedDeletingPolicy. It is
// immutable.
type Policy struct {
	Kind      string
	Namespace string
	Name      string
	Source    string
	Spec      *DeletingPolicySpec
	// Labels and Annotations of the policy.
	Labels      map[string]string
	Annotations map[string]string
	// CreationTimestamp is metadata.creationTimestamp (zero when absent):
	// a policy that never ran runs at the first time its schedule names
	// after it.
	CreationTimestamp metav1.Time
	// Schedule is spec.schedule, parsed.
	Schedule Schedule

	match      *admission.Matcher
	conditions []*celeval.Program
	names      []string
	scope      celeval.Scope
}

// Key returns the policy's name, namespace/name for a namespaced policy.
func (p *Policy) Key() string {
	if p.Namespace != "" {
		return p.Namespace + "/" + p.Name
	}
	return p.Name
}

// Namespaced says whether this is a NamespacedDeletingPolicy: it deletes
// only in its own namespace, and never cluster-scoped objects.
func (p *Policy) Namespaced() bool { return p.Kind == kyvernoapi.KindNamespacedDeletingPolicy }

// PropagationPolicy is spec.deletionPropagationPolicy (nil: the API
// server's default for the kind).
func (p *Policy) PropagationPolicy() *metav1.DeletionPropagation {
	return p.Spec.DeletionPropagationPolicy
}

// Compile loads, validates and compiles one DeletingPolicy or
// NamespacedDeletingPolicy object. The messages are those of Kyverno's
// validation (pkg/cel/policies/dpol/validate.go) and of the CRDs' schema.
func Compile(env *celenv.Env, o *manifest.Object) (*Policy, *manifest.LoadError) {
	if err := kyvernoapi.CheckVersion(o); err != nil {
		return nil, err
	}
	if _, ok := o.Content["spec"].(map[string]any); !ok {
		return nil, manifest.Errorf(o, "spec", "Required value: spec must not be nil")
	}
	var dp DeletingPolicy
	if err := manifest.DecodeStrict(o, &dp); err != nil {
		return nil, err
	}
	if dp.Name == "" {
		return nil, manifest.Errorf(o, "metadata.name", "required")
	}
	spec := &dp.Spec
	p := &Policy{
		Kind:              o.Kind,
		Namespace:         dp.Namespace,
		Name:              dp.Name,
		Source:            o.Source,
		Spec:              spec,
		Labels:            dp.Labels,
		Annotations:       dp.Annotations,
		CreationTimestamp: dp.CreationTimestamp,
	}
	if p.Kind == kyvernoapi.KindDeletingPolicy {
		p.Namespace = ""
	} else if p.Namespace == "" {
		p.Namespace = "default"
	}
	if err := compileExpressions(env, o, p); err != nil {
		return nil, err
	}
	if spec.MatchConstraints == nil || len(spec.MatchConstraints.ResourceRules) == 0 {
		return nil, manifest.Errorf(o, "spec.matchConstraints", "Required value: a matchConstraints with at least one resource rule is required")
	}
	if spec.Schedule == "" {
		return nil, manifest.Errorf(o, "spec.schedule", "Required value: schedule is required")
	}
	s, err := ParseSchedule(spec.Schedule)
	if err != nil {
		return nil, manifest.Errorf(o, "spec.schedule", "Invalid value: %q: schedule spec in the deletingPolicy is not in proper cron format: %v", spec.Schedule, err)
	}
	p.Schedule = s
	if pp := spec.DeletionPropagationPolicy; pp != nil {
		switch *pp {
		case metav1.DeletePropagationForeground, metav1.DeletePropagationBackground, metav1.DeletePropagationOrphan:
		default:
			return nil, manifest.Errorf(o, "spec.deletionPropagationPolicy", "Unsupported value: %q: supported values: \"Foreground\", \"Background\", \"Orphan\"", *pp)
		}
	}
	if p.Namespaced() {
		exprs := p.expressions()
		if kyvernocel.ExpressionsUseGlobalContext(exprs...) {
			return nil, manifest.Errorf(o, "spec", "Forbidden: %s", kyvernocel.GlobalContextNotAllowedMessage)
		}
	}
	// Operations are not a DeletingPolicy's business: Kyverno matches
	// every candidate with the rules' operations forced to "*".
	match := spec.MatchConstraints.DeepCopy()
	for i := range match.ResourceRules {
		match.ResourceRules[i].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
	}
	for i := range match.ExcludeResourceRules {
		match.ExcludeResourceRules[i].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
	}
	m, field, err := admission.CompileMatch(match, "spec.matchConstraints")
	if err != nil {
		return nil, manifest.Errorf(o, field, "%v", err)
	}
	p.match = m
	return p, nil
}

// compileExpressions compiles the variables and the conditions in the
// environment of Kyverno's DeletingPolicy compiler: object,
// namespaceObject, variables and Kyverno's libraries (the policy
// environment Arbiter compiles every Kyverno kind in).
func compileExpressions(env *celenv.Env, o *manifest.Object, p *Policy) *manifest.LoadError {
	spec := p.Spec
	penv, err := env.ForPolicy(p.Namespaced())
	if err != nil {
		return manifest.Errorf(o, "spec", "%v", err)
	}
	p.scope = celeval.Scope{Policy: p.Key(), Namespace: p.Namespace}
	bounds := map[string]celeval.SizeBounds{}
	seen := map[string]bool{}
	for i, v := range spec.Variables {
		field := fmt.Sprintf("spec.variables[%d]", i)
		if v.Name == "" {
			return manifest.Errorf(o, field+".name", "Required value")
		}
		if seen[v.Name] {
			return manifest.Errorf(o, field+".name", "Duplicate value: %q", v.Name)
		}
		seen[v.Name] = true
		prg, ast, err := celeval.Compile(penv.Pair, v.Expression, nil, bounds)
		if err != nil {
			return manifest.Errorf(o, field+".expression", "%v", err)
		}
		penv.DeclareVariable(v.Name, ast.OutputType())
		bounds[v.Name] = celeval.VarBound(ast, bounds)
		p.scope.Variables = append(p.scope.Variables, celeval.Variable{Name: v.Name, Prog: prg})
	}
	seen = map[string]bool{}
	for i, c := range spec.Conditions {
		field := fmt.Sprintf("spec.conditions[%d]", i)
		if c.Name == "" {
			return manifest.Errorf(o, field+".name", "Required value")
		}
		if seen[c.Name] {
			return manifest.Errorf(o, field+".name", "Duplicate value: %q", c.Name)
		}
		seen[c.Name] = true
		prg, _, err := celeval.Compile(penv.Pair, c.Expression, types.BoolType, bounds)
		if err != nil {
			return manifest.Errorf(o, field+".expression", "%v", err)
		}
		p.conditions = append(p.conditions, prg)
		p.names = append(p.names, c.Name)
	}
	return nil
}

// expressions are those Kyverno's validation scans for globalContext and
// http in a namespaced policy: variables, then conditions.
func (p *Policy) expressions() []string {
	out := make([]string, 0, len(p.Spec.Variables)+len(p.Spec.Conditions))
	for _, v := range p.Spec.Variables {
		out = append(out, v.Expression)
	}
	for _, c := range p.Spec.Conditions {
		out = append(out, c.Expression)
	}
	return out
}

// UsesHTTP says whether the policy's expressions use http.* (a namespaced
// policy that does is refused unless HTTP calls are allowed in namespaced
// policies).
func (p *Policy) UsesHTTP() bool { return kyvernocel.ExpressionsUseHTTP(p.expressions()...) }

// Resources returns the resources the policy's rules name, as
// group/version/resource (with * where the rule says so).
func (p *Policy) Resources() []string {
	return p.match.Resources(map[string]bool{}, nil)
}

// GVRs are the resources a run lists, as Kyverno lists them
// (admissionpolicy.GetGVRs): every group × version × resource of
// resourceRules, taken literally, in order, without duplicates. A rule
// without groups or versions names none. Wildcards and subresources are
// returned as written: the caller cannot list them (Kyverno's list fails).
func (p *Policy) GVRs() []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	seen := map[schema.GroupVersionResource]bool{}
	for _, r := range p.Spec.MatchConstraints.ResourceRules {
		for _, g := range r.APIGroups {
			for _, v := range r.APIVersions {
				for _, res := range r.Resources {
					gvr := schema.GroupVersionResource{Group: g, Version: v, Resource: res}
					if !seen[gvr] {
						seen[gvr] = true
						out = append(out, gvr)
					}
				}
			}
		}
	}
	return out
}

// Listable says whether a resource of GVRs can be listed: no wildcard, no
// subresource.
func Listable(gvr schema.GroupVersionResource) bool {
	return gvr.Group != "*" && gvr.Version != "*" && gvr.Resource != "*" && !strings.Contains(gvr.Resource, "/")
}

// ObjectSelector is matchConstraints.objectSelector as a label selector
// string for a list ("" selects everything).
func (p *Policy) ObjectSelector() (string, error) {
	sel, err := metav1.LabelSelectorAsSelector(p.Spec.MatchConstraints.ObjectSelector)
	if err != nil {
		return "", err
	}
	return sel.String(), nil
}
