package vap

import ap "github.com/arbiter-pdp/arbiter/engine/admissionpolicy"

// Step is one expression evaluated (Value or Err) or one note, for the
// trace of Decide (its Phase is one of outcome's Phase words).
type Step = ap.Step

// matchConditionName is the name of the policy's i-th matchCondition.
func (p *Policy) matchConditionName(i int) string {
	if i < len(p.Spec.MatchConditions) {
		return p.Spec.MatchConditions[i].Name
	}
	return ap.IndexName(i)
}
