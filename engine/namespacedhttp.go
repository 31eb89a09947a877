package engine

import (
	"github.com/arbiter-pdp/arbiter/engine/ivpol"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/mpol"
	"github.com/arbiter-pdp/arbiter/engine/vpol"
)

// Kyverno 1.19 refuses, when a policy is admitted, a namespaced policy whose
// expressions use http.* unless --allowHTTPInNamespacedPolicies is set
// (pkg/cel/policies/vpol/validate.go and mpol/validate.go: a field.Forbidden
// error on "spec"). Options.RefuseNamespacedHTTP makes Compile do the same;
// the expressions scanned are Kyverno's vpolExpressions and mpolExpressions.

// vpolExpressions are the expressions Kyverno's ValidatingPolicy validation
// scans: variables, matchConditions, validations (expression and
// messageExpression), auditAnnotations.
func vpolExpressions(spec *vpol.ValidatingPolicySpec) []string {
	exprs := make([]string, 0, len(spec.Variables)+len(spec.MatchConditions)+len(spec.Validations)*2+len(spec.AuditAnnotations))
	for _, v := range spec.Variables {
		exprs = append(exprs, v.Expression)
	}
	for _, mc := range spec.MatchConditions {
		exprs = append(exprs, mc.Expression)
	}
	for _, v := range spec.Validations {
		exprs = append(exprs, v.Expression, v.MessageExpression)
	}
	for _, a := range spec.AuditAnnotations {
		exprs = append(exprs, a.ValueExpression)
	}
	return exprs
}

// mpolExpressions are the expressions Kyverno's MutatingPolicy validation
// scans: variables, matchConditions, mutations (applyConfiguration and
// jsonPatch), auditAnnotations, targetMatchConstraints.expression and
// targetMatchConditions.
func mpolExpressions(spec *mpol.MutatingPolicySpec) []string {
	exprs := make([]string, 0, len(spec.Variables)+len(spec.MatchConditions)+len(spec.Mutations)+len(spec.AuditAnnotations)+1+len(spec.TargetMatchConditions))
	for _, v := range spec.Variables {
		exprs = append(exprs, v.Expression)
	}
	for _, mc := range spec.MatchConditions {
		exprs = append(exprs, mc.Expression)
	}
	for _, m := range spec.Mutations {
		if m.ApplyConfiguration != nil {
			exprs = append(exprs, m.ApplyConfiguration.Expression)
		}
		if m.JSONPatch != nil {
			exprs = append(exprs, m.JSONPatch.Expression)
		}
	}
	for _, a := range spec.AuditAnnotations {
		exprs = append(exprs, a.ValueExpression)
	}
	if spec.TargetMatchConstraints != nil && spec.TargetMatchConstraints.Expression != "" {
		exprs = append(exprs, spec.TargetMatchConstraints.Expression)
	}
	for _, mc := range spec.TargetMatchConditions {
		exprs = append(exprs, mc.Expression)
	}
	return exprs
}

// namespacedHTTPRefused returns the load error of a namespaced policy that
// uses http.*, nil for any other policy.
func namespacedHTTPRefused(o *manifest.Object, vp *vpol.Policy, mp *mpol.Policy) *manifest.LoadError {
	var exprs []string
	switch {
	case vp != nil && vp.Namespaced():
		exprs = vpolExpressions(vp.Spec)
	case mp != nil && mp.Namespaced():
		exprs = mpolExpressions(mp.Spec)
	default:
		return nil
	}
	if !kyvernocel.ExpressionsUseHTTP(exprs...) {
		return nil
	}
	return manifest.Errorf(o, "spec", "%s", kyvernocel.HTTPNotAllowedValidationMessage)
}

// namespacedImageHTTPRefused is namespacedHTTPRefused for an
// ImageValidatingPolicy: Kyverno's ivpol validation scans every expression
// (variables, matchConditions, validations, auditAnnotations, images,
// matchImageReferences and attestor expressions).
func namespacedImageHTTPRefused(o *manifest.Object, p *ivpol.Policy) *manifest.LoadError {
	if !p.Namespaced() || !kyvernocel.ExpressionsUseHTTP(p.Expressions()...) {
		return nil
	}
	return manifest.Errorf(o, "spec", "%s", kyvernocel.HTTPNotAllowedValidationMessage)
}
