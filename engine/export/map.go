package export

import (
	"fmt"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/arbiter-pdp/arbiter/engine/exception"
	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/mapol"
	"github.com/arbiter-pdp/arbiter/engine/mpol"
)

// Export is a Kyverno policy expressed as Kubernetes admission policies
// and bindings, or the reason it cannot be.
type Export struct {
	// Policy is the Kyverno policy's name; Kind its kind.
	Policy string
	Kind   string
	Source string
	// Objects are the admission policy and binding of the policy, then
	// those of its autogen variants (pod controllers), JSON-shaped.
	Objects []map[string]any
	// Refused says why the policy cannot be expressed (Objects is empty).
	Refused string
}

// MAP expresses each MutatingPolicy as MutatingAdmissionPolicies with
// bindings, named as Kyverno names those it generates: mpol-NAME and its
// binding mpol-NAME-binding, one more pair mpol-NAME-CONFIG for each
// autogen configuration. The whole matchConstraints is kept (with
// matchPolicy Exact, as Kyverno's policies match), so the generated policy
// matches what the MutatingPolicy matches. Each PolicyException of the
// policy not expired at now is folded in as the ValidatingPolicy export
// folds it (a full exemption as a negated matchCondition, image and value
// exemptions as the variables allowedImages and allowedValues).
//
// A policy is refused, with the reason, when it is namespaced, mutates
// existing resources, does not run at admission, has auditAnnotations
// (a MutatingAdmissionPolicy has none), when an exception of it defines
// compensating controls, or when the result does not load as a
// MutatingAdmissionPolicy in the API server (a Kyverno library function,
// a matchCondition that reads variables, ...).
func MAP(set *mpol.Set, now time.Time) []Export {
	var out []Export
	for _, p := range set.Policies() {
		x := Export{Policy: p.Name, Kind: p.Kind, Source: p.Source}
		objs, reason := exportMutating(p, set.ExceptionsFor(p), now)
		if reason != "" {
			x.Refused = reason
		} else {
			x.Objects = objs
		}
		out = append(out, x)
	}
	return out
}

func exportMutating(p *mpol.Policy, exceptions []*exception.Exception, now time.Time) ([]map[string]any, string) {
	spec := p.Spec
	switch {
	case p.Kind != kyvernoapi.KindMutatingPolicy:
		return nil, "a NamespacedMutatingPolicy applies in its own namespace only; only MutatingPolicies are exported"
	case spec.IsMutateExisting():
		return nil, "it mutates existing resources (targetMatchConstraints, evaluation.mutateExisting), which a MutatingAdmissionPolicy cannot"
	case !spec.AdmissionEnabled():
		return nil, "evaluation.admission.enabled is false: a MutatingAdmissionPolicy runs at admission only"
	case len(spec.AuditAnnotations) > 0:
		return nil, "it has auditAnnotations, which a MutatingAdmissionPolicy does not have"
	case spec.UseServerSideApply():
		return nil, "evaluation.useServerSideApply lets its apply configurations replace atomic lists, maps and structs, which a MutatingAdmissionPolicy refuses"
	case len(spec.Mutations) == 0:
		return nil, "it has no mutations; a MutatingAdmissionPolicy needs at least one"
	}
	live, reason := liveExceptions(exceptions, now, spec.GetFailurePolicy(), "MutatingAdmissionPolicy")
	if reason != "" {
		return nil, reason
	}
	type variant struct {
		config string
		match  *admissionregistrationv1.MatchResources
		conds  []admissionregistrationv1.MatchCondition
		muts   []admissionregistrationv1.Mutation
	}
	variants := []variant{{match: spec.MatchConstraints, conds: spec.MatchConditions, muts: spec.Mutations}}
	for _, av := range mpol.AutogenVariants(spec) {
		variants = append(variants, variant{config: av.Config.Name, match: av.Config.Match, conds: av.MatchConditions, muts: av.Mutations})
	}
	var objs []map[string]any
	for _, v := range variants {
		name := "mpol-" + p.Name
		what := "it"
		if v.config != "" {
			name += "-" + v.config
			what = "its autogen " + v.config + " variant"
		}
		fp := spec.GetFailurePolicy()
		mapSpec := admissionregistrationv1.MutatingAdmissionPolicySpec{
			FailurePolicy:      &fp,
			ReinvocationPolicy: spec.GetReinvocationPolicy(),
		}
		var exprs []*string
		for _, m := range v.muts {
			m = *m.DeepCopy()
			mapSpec.Mutations = append(mapSpec.Mutations, m)
		}
		for i := range mapSpec.Mutations {
			m := &mapSpec.Mutations[i]
			if m.JSONPatch != nil {
				exprs = append(exprs, &m.JSONPatch.Expression)
			}
			if m.ApplyConfiguration != nil {
				exprs = append(exprs, &m.ApplyConfiguration.Expression)
			}
		}
		f, reason := fold(v.match, v.conds, spec.Variables, exprs, live)
		if reason != "" {
			return nil, reason
		}
		mapSpec.MatchConstraints, mapSpec.MatchConditions, mapSpec.Variables = f.match, f.conds, f.vars
		typed := &admissionregistrationv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: mapSpec}
		if _, errs := mapol.CompilePolicy(typed); len(errs) > 0 {
			msgs := make([]string, len(errs))
			for i, e := range errs {
				msgs[i] = e.Error()
			}
			return nil, fmt.Sprintf("%s does not load as a MutatingAdmissionPolicy (it uses what the API server lacks): %s", what, strings.Join(msgs, "; "))
		}
		source := p.Kind + "/" + p.Name
		objs = append(objs,
			map[string]any{
				"apiVersion": mapol.APIVersion,
				"kind":       mapol.KindPolicy,
				"metadata":   exportedMeta(name, source),
				"spec":       toJSONMap(&mapSpec),
			},
			map[string]any{
				"apiVersion": mapol.APIVersion,
				"kind":       mapol.KindBinding,
				"metadata":   exportedMeta(name+"-binding", source),
				"spec":       toJSONMap(&admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: name}),
			})
	}
	return objs, ""
}

// exportedMeta is the metadata of an exported object.
func exportedMeta(name, source string) map[string]any {
	return map[string]any{
		"name":        name,
		"labels":      map[string]any{exportManagedBy: "arbiter"},
		"annotations": map[string]any{exportSource: source},
	}
}

// liveExceptions returns the exceptions not expired at now, or why they
// cannot be folded into an admission policy of the kind: compensating
// controls, or, under failurePolicy Ignore, matchConditions whose error
// would skip the whole policy where Kyverno evaluates it.
func liveExceptions(exceptions []*exception.Exception, now time.Time, fp admissionregistrationv1.FailurePolicyType, kind string) ([]*exception.Exception, string) {
	var live []*exception.Exception
	var controls []string
	for _, ex := range exceptions {
		if ex.Expired(now) {
			continue
		}
		live = append(live, ex)
		if ex.HasControls() {
			controls = append(controls, ex.Key())
		}
	}
	if len(controls) > 0 {
		return nil, fmt.Sprintf("policy exception(s) %s define compensating controls (spec.validations), which a generated %s cannot evaluate",
			strings.Join(controls, ", "), kind)
	}
	if fp == admissionregistrationv1.Ignore {
		for _, ex := range live {
			if ex.Full() && len(ex.Spec.MatchConditions) > 0 {
				return nil, fmt.Sprintf("failurePolicy is Ignore: an error in the matchConditions of exception %s would skip the %s, where the policy is evaluated", ex.Key(), kind)
			}
		}
	}
	return live, ""
}
