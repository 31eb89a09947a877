package engine

import (
	"encoding/json"
	"fmt"
	"sort"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/mpol"
)

// What the policies read with resource.Get and resource.List: the calls of
// their expressions (kyvernocel.ResourceCalls), with the apiVersion and
// resource (or kind) each names when they are constants. A variable whose
// expression is a constant (a string, a concatenation of strings, or
// resource.ToGVR of constants) counts as one where another expression
// uses it.

// ResourceRead is a resource.Get or resource.List call of a policy.
type ResourceRead struct {
	// PolicyKind, PolicyNamespace and PolicyName name the policy.
	PolicyKind, PolicyNamespace, PolicyName string
	// Field is where the call is: spec.validations[0].expression.
	Field string
	kyvernocel.ResourceCall
}

// Policy names the reading policy: Kind name, or Kind namespace/name.
func (r ResourceRead) Policy() string {
	if r.PolicyNamespace != "" {
		return r.PolicyKind + " " + r.PolicyNamespace + "/" + r.PolicyName
	}
	return r.PolicyKind + " " + r.PolicyName
}

// ResourceRef is a resource read: an apiVersion and a resource, or an
// apiVersion and a kind (resource.ToGVR).
type ResourceRef struct {
	APIVersion string
	// Resource is the resource ("configmaps"), without a subresource.
	Resource string
	// Kind is set instead of Resource for resource.ToGVR(apiVersion, kind).
	Kind string
}

func (r ResourceRef) String() string {
	if r.Kind != "" {
		return r.APIVersion + " kind " + r.Kind
	}
	return r.APIVersion + " " + r.Resource
}

// ResourceReads returns the resource.Get and resource.List calls of the
// set's ValidatingPolicies, MutatingPolicies (and their namespaced kinds)
// and authorization policies, by policy in evaluation order, then by field.
func (ps *PolicySet) ResourceReads() []ResourceRead {
	var out []ResourceRead
	for _, p := range ps.Policies() {
		out = append(out, vpolReads(p.Kind, p.Namespace, p.Name, p.Spec)...)
	}
	for _, p := range ps.MutatingPolicies() {
		out = append(out, mpolReads(p.Kind, p.Namespace, p.Name, p.Spec)...)
	}
	for _, p := range ps.AuthzPolicies() {
		out = append(out, vpolReads(p.Kind, "", p.Name, p.Spec)...)
	}
	for _, p := range ps.ImagePolicies() {
		out = append(out, ivpolReads(p.Kind, p.Namespace, p.Name, p.Spec)...)
	}
	return out
}

// ConstantResources returns the distinct resources that the calls with
// constant arguments among reads read, sorted (subresources read their
// resource).
func ConstantResources(reads []ResourceRead) []ResourceRef {
	seen := map[ResourceRef]bool{}
	var out []ResourceRef
	for _, r := range reads {
		if !r.Constant {
			continue
		}
		ref := ResourceRef{APIVersion: r.APIVersion, Resource: baseResource(r.Resource), Kind: r.Kind}
		if !seen[ref] {
			seen[ref] = true
			out = append(out, ref)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.APIVersion != b.APIVersion {
			return a.APIVersion < b.APIVersion
		}
		if a.Resource != b.Resource {
			return a.Resource < b.Resource
		}
		return a.Kind < b.Kind
	})
	return out
}

// baseResource drops a subresource: pods/status reads pods.
func baseResource(r string) string {
	for i := 0; i < len(r); i++ {
		if r[i] == '/' {
			return r[:i]
		}
	}
	return r
}

// ResourceReadsOf returns the resource.Get and resource.List calls of a
// policy object not compiled yet (a ValidatingPolicy, MutatingPolicy or
// their namespaced kinds, in any mode); nil for objects of other classes.
// An object whose spec does not decode is an error.
func ResourceReadsOf(o *manifest.Object) ([]ResourceRead, error) {
	class := Classify(o)
	if class != ClassPolicy && class != ClassMutatingPolicy && class != ClassAuthzPolicy && class != ClassImagePolicy {
		return nil, nil
	}
	raw, err := json.Marshal(o.Content)
	if err != nil {
		return nil, err
	}
	if class == ClassImagePolicy {
		var ip kyvernoapi.ImageValidatingPolicy
		if err := json.Unmarshal(raw, &ip); err != nil {
			return nil, fmt.Errorf("decoding the %s: %w", o.Kind, err)
		}
		return ivpolReads(o.Kind, o.Namespace, o.Name, &ip.Spec), nil
	}
	if class == ClassMutatingPolicy {
		var mp mpol.MutatingPolicy
		if err := json.Unmarshal(raw, &mp); err != nil {
			return nil, fmt.Errorf("decoding the %s: %w", o.Kind, err)
		}
		return mpolReads(o.Kind, o.Namespace, o.Name, &mp.Spec), nil
	}
	var vp kyvernoapi.ValidatingPolicy
	if err := json.Unmarshal(raw, &vp); err != nil {
		return nil, fmt.Errorf("decoding the %s: %w", o.Kind, err)
	}
	return vpolReads(o.Kind, o.Namespace, o.Name, &vp.Spec), nil
}

// expr is an expression of a policy and where it is.
type expr struct{ field, expr string }

// readsOf scans exprs, after the variables (whose constant values the
// other expressions may use).
func readsOf(kind, namespace, name string, namespaced bool, vars []expr, varNames []string, exprs []expr) []ResourceRead {
	consts := kyvernocel.Constants{}
	var out []ResourceRead
	add := func(e expr) {
		for _, c := range kyvernocel.ResourceCalls(e.expr, consts, namespaced) {
			out = append(out, ResourceRead{PolicyKind: kind, PolicyNamespace: namespace, PolicyName: name, Field: e.field, ResourceCall: c})
		}
	}
	for i, v := range vars {
		add(v)
		if c, ok := kyvernocel.ConstantValue(v.expr, consts); ok {
			consts[varNames[i]] = c
		}
	}
	for _, e := range exprs {
		add(e)
	}
	return out
}

// variableExprs are a spec's variables and their names.
func variableExprs(vs []admissionregistrationv1.Variable) ([]expr, []string) {
	vars := make([]expr, len(vs))
	names := make([]string, len(vs))
	for i, v := range vs {
		vars[i] = expr{fmt.Sprintf("spec.variables[%d].expression", i), v.Expression}
		names[i] = v.Name
	}
	return vars, names
}

func conditionExprs(mcs []admissionregistrationv1.MatchCondition) []expr {
	out := make([]expr, 0, len(mcs))
	for i, mc := range mcs {
		out = append(out, expr{fmt.Sprintf("spec.matchConditions[%d].expression", i), mc.Expression})
	}
	return out
}

func validationExprs(vs []admissionregistrationv1.Validation) []expr {
	out := make([]expr, 0, 2*len(vs))
	for i, v := range vs {
		out = append(out, expr{fmt.Sprintf("spec.validations[%d].expression", i), v.Expression},
			expr{fmt.Sprintf("spec.validations[%d].messageExpression", i), v.MessageExpression})
	}
	return out
}

func auditExprs(as []admissionregistrationv1.AuditAnnotation) []expr {
	out := make([]expr, 0, len(as))
	for i, a := range as {
		out = append(out, expr{fmt.Sprintf("spec.auditAnnotations[%d].valueExpression", i), a.ValueExpression})
	}
	return out
}

func vpolReads(kind, namespace, name string, spec *kyvernoapi.ValidatingPolicySpec) []ResourceRead {
	if spec == nil {
		return nil
	}
	vars, names := variableExprs(spec.Variables)
	exprs := conditionExprs(spec.MatchConditions)
	exprs = append(exprs, validationExprs(spec.Validations)...)
	exprs = append(exprs, auditExprs(spec.AuditAnnotations)...)
	return readsOf(kind, namespace, name, kind == kyvernoapi.KindNamespacedValidatingPolicy, vars, names, exprs)
}

func ivpolReads(kind, namespace, name string, spec *kyvernoapi.ImageValidatingPolicySpec) []ResourceRead {
	if spec == nil {
		return nil
	}
	vars, names := variableExprs(spec.Variables)
	exprs := conditionExprs(spec.MatchConditions)
	for i, m := range spec.MatchImageReferences {
		if m.Expression != "" {
			exprs = append(exprs, expr{fmt.Sprintf("spec.matchImageReferences[%d].expression", i), m.Expression})
		}
	}
	for i, e := range spec.ImageExtractors {
		exprs = append(exprs, expr{fmt.Sprintf("spec.images[%d].expression", i), e.Expression})
	}
	exprs = append(exprs, validationExprs(spec.Validations)...)
	exprs = append(exprs, auditExprs(spec.AuditAnnotations)...)
	return readsOf(kind, namespace, name, kind == kyvernoapi.KindNamespacedImageValidatingPolicy, vars, names, exprs)
}

func mpolReads(kind, namespace, name string, spec *mpol.MutatingPolicySpec) []ResourceRead {
	if spec == nil {
		return nil
	}
	vars, names := variableExprs(spec.Variables)
	exprs := conditionExprs(spec.MatchConditions)
	for i, m := range spec.Mutations {
		if m.ApplyConfiguration != nil {
			exprs = append(exprs, expr{fmt.Sprintf("spec.mutations[%d].applyConfiguration.expression", i), m.ApplyConfiguration.Expression})
		}
		if m.JSONPatch != nil {
			exprs = append(exprs, expr{fmt.Sprintf("spec.mutations[%d].jsonPatch.expression", i), m.JSONPatch.Expression})
		}
	}
	exprs = append(exprs, auditExprs(spec.AuditAnnotations)...)
	if t := spec.TargetMatchConstraints; t != nil && t.Expression != "" {
		exprs = append(exprs, expr{"spec.targetMatchConstraints.expression", t.Expression})
	}
	for i, mc := range spec.TargetMatchConditions {
		exprs = append(exprs, expr{fmt.Sprintf("spec.targetMatchConditions[%d].expression", i), mc.Expression})
	}
	return readsOf(kind, namespace, name, kind == kyvernoapi.KindNamespacedMutatingPolicy, vars, names, exprs)
}
