package mpol

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/exception"
)

// Applicable is a policy whose match constraints (and evaluation gates)
// select a request, with the exceptions bound to it.
type Applicable struct {
	Policy *Policy
	// Variant is "" or the autogen configuration that matched.
	Variant    string
	Exceptions []exception.Applicability
	// MatchError is the error matching the request (the policy's result
	// is then an error).
	MatchError error
}

// Applicable returns the policies that would mutate the request, by the
// same gates and matching as Mutate, without evaluating their mutations;
// with evaluate, each bound exception's matchConditions are evaluated
// against the request's object.
func (s *Set) Applicable(rq *celeval.Request, evaluate bool) []Applicable {
	if s.Empty() {
		return nil
	}
	req := rq.Attributes()
	var out []Applicable
	for _, e := range s.byResource.Candidates(req.Resource.Resource) {
		p := e.policy
		if !applies(p, req) {
			continue
		}
		v, err := p.match(rq)
		if err != nil {
			out = append(out, Applicable{Policy: p, MatchError: err})
			continue
		}
		if v == nil {
			continue
		}
		a := Applicable{Policy: p, Variant: v.config}
		a.Exceptions = celeval.Run(rq, &v.scope, func(st *celeval.State) []exception.Applicability {
			return e.bound.Applicable(st, p.Namespaced(), admissionregistrationv1.Fail, evaluate)
		})
		out = append(out, a)
	}
	return out
}
