package engine

import (
	"context"
)

// Applicable is a policy that matches a request, with the exceptions bound
// to it and whether each could apply.
type Applicable struct {
	Policy *Policy
	// Variant is "" or the autogen configuration that matched.
	Variant    string
	Exceptions []ApplicableException
	// PodSecurity is set when Policy is a Pod Security level (kind
	// PodSecurity): the level as it applies to the request — the modes and
	// versions of the request's namespace, their actions and resources.
	PodSecurity *PodSecurityInfo
}

// ApplicableException says whether an exception would match a request.
type ApplicableException struct {
	Exception *Exception
	// Match is "matches", "does not match", "expired", "error: ..." or
	// "not evaluated" (no object given; or the object is a Namespace and
	// the exception names a Pod Security level).
	Match string
	// HasControls says the exception is granted only if its compensating
	// controls hold (they are not evaluated here).
	HasControls bool
}

// Applicable returns the policies whose match constraints (and evaluation
// gates) select the request, without evaluating their validations; with
// evaluate, each bound exception's matchConditions are evaluated against
// the request's object. The Pod Security levels that apply come last
// (applicablePSA).
func (ps *PolicySet) Applicable(ctx context.Context, req *Request, evaluate bool) []Applicable {
	rq := newEvalRequest(ctx, ps, req)
	var out []Applicable
	for _, e := range ps.candidates(req.Resource.Resource) {
		p := e.policy
		switch req.Mode {
		case ModeAdmission:
			if !p.Spec.AdmissionEnabled() || p.Namespaced() && req.Namespace != p.Namespace {
				continue
			}
		case ModeBackground:
			if !p.Spec.BackgroundEnabled() || p.Namespaced() && req.Namespace != p.Namespace {
				continue
			}
		}
		var matched *variant
		if p.jsonMode {
			matched = p.variants[0]
		} else {
			for _, v := range p.variants {
				if ok, err := v.match.matches(rq); err == nil && ok {
					matched = v
					break
				}
			}
		}
		if matched == nil {
			continue
		}
		a := Applicable{Policy: p, Variant: matched.config}
		fl := flavour(p.Namespaced())
		for _, ex := range e.exceptions {
			ae := ApplicableException{Exception: ex, HasControls: len(ex.controls[fl]) > 0, Match: "not evaluated"}
			switch {
			case ex.Expired(rq.now):
				ae.Match = "expired"
			case !evaluate:
			case ex.refuted(req.Object):
				ae.Match = "does not match"
			default:
				st := &policyState{rq: rq, v: matched}
				ok, err := st.match(ex.conds[fl], p.failurePolicy)
				switch {
				case err != nil:
					ae.Match = "error: " + err.Error()
				case ok:
					ae.Match = "matches"
				default:
					ae.Match = "does not match"
				}
			}
			a.Exceptions = append(a.Exceptions, ae)
		}
		out = append(out, a)
	}
	return append(out, ps.applicablePSA(rq, evaluate)...)
}
