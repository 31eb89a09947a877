package mpol

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// Mutate-existing policies in a cluster: what Kyverno's admission handler
// and background controller do (Kyverno 1.19: pkg/cel/policies/mpol/engine
// MatchedMutateExistingPolicies, reconciler.MatchesMutateExisting;
// pkg/background/mpol/processor.go). An admission request sets off the
// policies it qualifies for (Triggered); the caller selects each policy's
// targets in the cluster (TargetConstraints, or TargetObjects for a
// targetMatchConstraints expression) and evaluates the policy on each one
// (MutateTargetBy), writing those it changes.

// Triggered returns the mutate-existing policies an admission request
// (rq) sets off, in evaluation order: those with
// evaluation.mutateExisting.enabled and evaluation.admission.enabled, in
// scope (cluster policies, and namespaced ones of the request's
// namespace), whose matchConstraints match the request (operations
// included) and whose matchConditions hold (variables bound; an error is
// no match). The autogen variants are not consulted, as Kyverno's
// reconciler matches the policy's own matchConstraints.
func (s *Set) Triggered(rq *celeval.Request) []*Policy {
	if s.Empty() {
		return nil
	}
	req := rq.Attributes()
	var out []*Policy
	for _, e := range s.byResource.Candidates(req.Resource.Resource) {
		p := e.policy
		if !p.Spec.MutateExistingEnabled() || !p.Spec.AdmissionEnabled() {
			continue
		}
		if p.Namespaced() && req.Namespace != p.Namespace {
			continue
		}
		v := p.variants[0]
		if ok, err := v.match.Matches(req, rq.Namespace()); err != nil || !ok {
			continue
		}
		matched := celeval.Run(rq, &v.scope, func(st *celeval.State) bool {
			st.Label(outcome.PhaseMatchCondition, "", "")
			ok, err := st.Match(v.matchConditions, admissionregistrationv1.Fail)
			return err == nil && ok
		})
		if matched {
			out = append(out, p)
		}
	}
	return out
}

// HasMutateExisting says whether a policy of the set has
// evaluation.mutateExisting.enabled.
func (s *Set) HasMutateExisting() bool { return s != nil && s.mutateExisting }

// Lookup returns the policy of the set whose key (Policy.Key) is key.
func (s *Set) Lookup(key string) *Policy {
	if s.Empty() {
		return nil
	}
	for _, e := range s.entries {
		if e.policy.Key() == key {
			return e.policy
		}
	}
	return nil
}

// TargetConstraints returns what selects a mutate-existing policy's
// targets in a cluster when it has no targetMatchConstraints expression:
// targetMatchConstraints when it has resource rules, else the policy's
// own matchConstraints (Kyverno's processor: operations are not
// considered). It returns nil when the policy has an expression
// (TargetObjects selects its targets).
func (p *Policy) TargetConstraints() *admissionregistrationv1.MatchResources {
	t := p.Spec.TargetMatchConstraints
	switch {
	case t != nil && t.Expression != "":
		return nil
	case t != nil && len(t.ResourceRules) > 0:
		return &t.MatchResources
	}
	return p.Spec.MatchConstraints
}

// HasTargetExpression says whether the policy selects its targets with a
// targetMatchConstraints expression.
func (p *Policy) HasTargetExpression() bool { return p.target != nil && p.target.expr != nil }

// TargetObjects evaluates a policy's targetMatchConstraints expression on
// rq's object (the trigger as the cluster holds it) with the policy's
// variables: the objects it returned (an object, or the items of a map
// with items), each a target.
func (s *Set) TargetObjects(rq *celeval.Request, p *Policy) ([]map[string]any, error) {
	if !p.HasTargetExpression() {
		return nil, nil
	}
	objs, err := celeval.Run(rq, &p.variants[0].scope, func(st *celeval.State) targetObjects {
		st.Label(outcome.PhaseMatch, "targetMatchConstraints.expression", "")
		objs, err := discoverObjects(st, p.target.expr)
		return targetObjects{objs, err}
	}).get()
	return objs, err
}

type targetObjects struct {
	objs []map[string]any
	err  error
}

func (t targetObjects) get() ([]map[string]any, error) { return t.objs, t.err }

// MutateTargetBy evaluates one mutate-existing policy of the set on a
// target the cluster selected for it (rq's object, which it updates): no
// selection is made here, as Kyverno's background controller evaluates
// with no matcher; then exceptions, targetMatchConditions (instead of
// matchConditions) and the mutations, as MutateTarget does. rq's request
// is the target's and its `request` variable the trigger's. It adds the
// policy's result to out (none when the policy is not in the set, or is
// namespaced and the target is of another namespace).
func (s *Set) MutateTargetBy(rq *celeval.Request, p *Policy, out *outcome.Outcome) {
	if s.Empty() {
		return
	}
	req := rq.Attributes()
	for _, e := range s.entries {
		if e.policy != p {
			continue
		}
		if p.Namespaced() && req.Namespace != p.Namespace {
			return
		}
		var conds []*celeval.Program
		if p.target != nil {
			conds = p.target.conditions
		}
		r, after, mutated := s.evalVariant(rq, e, p.variants[0], conds)
		if mutated {
			rq.Restore(after)
		}
		r.Expired = e.bound.Expired(rq.Now())
		out.Results = append(out.Results, r)
		return
	}
}
