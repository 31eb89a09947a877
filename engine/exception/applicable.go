package exception

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/arbiter-pdp/arbiter/engine/celeval"
)

// Applicability says whether an exception would match a request.
type Applicability struct {
	Exception *Exception
	// Match is "matches", "does not match", "expired", "error: ..." or
	// "not evaluated" (no object given; or the object is a Namespace and
	// the exception names a Pod Security level).
	Match string
	// HasControls says the exception is granted only if its compensating
	// controls hold (they are not evaluated here).
	HasControls bool
}

// Applicable says, for each bound exception in order, whether it would
// match the request of st: with evaluate, its matchConditions are
// evaluated (under failurePolicy fp, as Evaluate does); otherwise only
// expiry is checked.
func (b *Bound) Applicable(st *celeval.State, namespaced bool, fp admissionregistrationv1.FailurePolicyType, evaluate bool) []Applicability {
	if b == nil {
		return nil
	}
	fl := flavour(namespaced)
	object := st.Request().Attributes().Object
	now := st.Request().Now()
	out := make([]Applicability, 0, len(b.Exceptions))
	for _, ex := range b.Exceptions {
		a := Applicability{Exception: ex, HasControls: len(ex.controls[fl]) > 0, Match: "not evaluated"}
		switch {
		case ex.Expired(now):
			a.Match = "expired"
		case !evaluate:
		case ex.refuted(object):
			a.Match = "does not match"
		default:
			ok, err := st.Match(ex.conds[fl], fp)
			switch {
			case err != nil:
				a.Match = "error: " + err.Error()
			case ok:
				a.Match = "matches"
			default:
				a.Match = "does not match"
			}
		}
		out = append(out, a)
	}
	return out
}
