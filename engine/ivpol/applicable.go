package ivpol

import (
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
	// MatchError is the error matching the request.
	MatchError error
}

// Applicable returns the policies that apply to the request, by the same
// gates and matching as Evaluate, without evaluating their validations;
// with evaluate, each bound exception's matchConditions are evaluated.
func (s *Set) Applicable(rq *celeval.Request, evaluate bool) []Applicable {
	req := rq.Attributes()
	var out []Applicable
	for _, e := range s.candidates(req.Resource.Resource) {
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
			return e.bound.Applicable(st, p.Namespaced(), p.failurePolicy, evaluate)
		})
		out = append(out, a)
	}
	return out
}
