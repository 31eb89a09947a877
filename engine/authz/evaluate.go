package authz

import (
	"fmt"

	"github.com/google/cel-go/common/types"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// verdict is what one policy answered: a response of its mode, nothing
// (no opinion: a false matchCondition, every validation null, an error
// under failurePolicy Ignore), or an error.
type verdict struct {
	envoy *envoyResponse
	http  *httpResponse
	err   error
	// unmatched says a matchCondition was false.
	unmatched bool
}

// responded says whether the policy answered (a response or an error):
// the Authz Server's sequential dispatch stops at the first that does.
func (v *verdict) responded() bool { return v.envoy != nil || v.http != nil || v.err != nil }

// Evaluate evaluates the policies of the request's mode (its Shape) on
// its object — the payload Prepare made, or prepErr when the request is not
// a valid CheckRequest — and adds one result per policy, the authorization
// response and, when that response denies, the denial. It never fails.
func (s *Set) Evaluate(rq *celeval.Request, prepErr error, out *outcome.Outcome) {
	shape := rq.Attributes().Shape
	pols := s.byMode[shape]
	out.Reserve(len(pols))
	var decided *Policy
	var decision verdict
	for _, p := range pols {
		v := evaluate(rq, p, prepErr)
		r := result(p, &v)
		if rq.Traced() {
			rq.Note(p.Key(), "", outcome.PhaseResult, "", r.Result+": "+r.Message)
		}
		out.Results = append(out.Results, r)
		if decided == nil && v.responded() {
			decided, decision = p, v
		}
	}
	a := response(shape, decided, &decision)
	out.Authorization = a
	if !a.Allowed {
		verb := "failed"
		if decision.err != nil {
			verb = "error"
		}
		out.Deny(a.Code, "", "Policy ", decided.Name, " ", verb, ": ", verdictMessage(&decision))
	}
}

// evaluate runs one policy on the request, as kyverno-authz's compiled
// policy does: matchConditions, then the validations in order until one
// returns a response; errors are the verdict under failurePolicy Fail and
// no opinion under Ignore.
func evaluate(rq *celeval.Request, p *Policy, prepErr error) verdict {
	if prepErr != nil {
		return verdict{err: fmt.Errorf("invalid %s CheckRequest: %w", p.Mode, prepErr)}
	}
	if err := rq.Stopped(); err != nil {
		return verdict{err: fmt.Errorf("%w; the policy was not evaluated", err)}
	}
	if rq.BudgetSpent() {
		return verdict{err: fmt.Errorf("decision cost budget of %d exceeded (the policies before this one cost %d); the policy was not evaluated", rq.Budget(), rq.Cost())}
	}
	v := celeval.Run(rq, &p.scope, func(st *celeval.State) verdict {
		st.Label(outcome.PhaseMatchCondition, "", "")
		matched, err := st.Match(p.matchConditions, p.failurePolicy)
		if err != nil {
			return verdict{err: err}
		}
		if !matched {
			return verdict{unmatched: true}
		}
		for i, rule := range p.rules {
			st.Label(outcome.PhaseValidation, celeval.Index(i), "")
			val, err := st.Eval(rule)
			if err != nil {
				return verdict{err: err}
			}
			if val == nil || val == types.NullValue {
				continue
			}
			if r, ok := valueOf[*envoyResponse](val, envoyResponseType); ok && p.Mode == admission.ShapeEnvoy {
				return verdict{envoy: r}
			}
			if r, ok := valueOf[*httpResponse](val, httpResponseType); ok && p.Mode == admission.ShapeHTTP {
				return verdict{http: r}
			}
			return verdict{err: fmt.Errorf("rule result is expected to be a %s CheckResponse, got %s", p.Mode, val.Type().TypeName())}
		}
		return verdict{}
	})
	if v.err != nil && p.failurePolicy == admissionregistrationv1.Ignore {
		return verdict{}
	}
	return v
}

// result is the policy's result, in the words of Kyverno's CLI (the rule
// is named after the policy, as the CLI names it).
func result(p *Policy, v *verdict) outcome.Result {
	r := outcome.Result{
		Policy:     p.Key(),
		PolicyName: p.Name,
		PolicyKind: p.Kind,
		Rule:       p.Name,
		Source:     outcome.SourceValidatingPolicy,
		Scored:     p.scored,
		Category:   p.category,
		Severity:   p.severity,
		Message:    verdictMessage(v),
	}
	switch {
	case v.err != nil:
		r.Result, r.Cause = outcome.Error, outcome.CauseEvaluation
	case v.envoy != nil && v.envoy.ok != nil, v.http != nil && !v.http.denied:
		r.Result = outcome.Pass
	case v.envoy != nil && v.envoy.denied != nil, v.http != nil:
		r.Result = outcome.Fail
	default:
		r.Result = outcome.Skip
		if v.unmatched {
			r.Cause = outcome.CauseMatchConditions
		}
	}
	return r
}

// verdictMessage is how Kyverno's CLI words a verdict.
func verdictMessage(v *verdict) string {
	switch {
	case v.err != nil:
		return v.err.Error()
	case v.envoy != nil && v.envoy.ok != nil, v.http != nil && !v.http.denied:
		return "request allowed"
	case v.envoy != nil && v.envoy.denied != nil:
		return fmt.Sprintf("request denied with status code %d", v.envoy.denied.status)
	case v.http != nil:
		return "request denied, reason: " + v.http.reason
	}
	return "request does not match"
}

// response is the authorization response of the request: that of the
// deciding policy, or the Authz Server's default when none responded (an
// empty CheckResponse for Envoy — status OK —, 200 for HTTP).
func response(shape admission.Shape, p *Policy, v *verdict) *outcome.Authorization {
	a := &outcome.Authorization{Allowed: true, Code: 200}
	if p != nil {
		a.Policy = p.Key()
	}
	switch {
	case shape == admission.ShapeEnvoy && v.err != nil:
		a.Allowed, a.Code, a.JSON = false, 403, envoyErrorJSON(v.err)
	case shape == admission.ShapeEnvoy && v.envoy != nil:
		a.JSON = v.envoy.json()
		if d := v.envoy.denied; d != nil {
			a.Allowed, a.Code = false, envoyDeniedCode(d)
		}
	case shape == admission.ShapeEnvoy:
		a.JSON = []byte("{}")
	case v.err != nil:
		a.Allowed, a.Code, a.JSON = false, 500, httpErrorJSON(v.err)
	case v.http != nil:
		a.Allowed, a.Code, a.JSON = !v.http.denied, v.http.code(), v.http.json()
	default:
		a.JSON = (&httpResponse{}).json()
	}
	return a
}
