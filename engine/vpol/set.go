package vpol

import (
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/exception"
)

// Set is the ValidatingPolicies and NamespacedValidatingPolicies of a
// policy set, with their exceptions, indexed by the resources they match.
// It is immutable.
type Set struct {
	entries []*entry
	// byResource indexes entries by the resources their variants may match.
	byResource admission.Index[*entry]
}

type entry struct {
	policy *Policy
	bound  *exception.Bound
}

// NewSet builds the set of policies (in evaluation order), bounds[i] being
// the exceptions bound to policies[i].
func NewSet(policies []*Policy, bounds []*exception.Bound) *Set {
	s := &Set{}
	for i, p := range policies {
		s.entries = append(s.entries, &entry{policy: p, bound: bounds[i]})
	}
	s.index()
	return s
}

// Policies returns the compiled policies, in evaluation order.
func (s *Set) Policies() []*Policy {
	out := make([]*Policy, len(s.entries))
	for i, e := range s.entries {
		out[i] = e.policy
	}
	return out
}

// ExceptionsFor returns the exceptions bound to a policy.
func (s *Set) ExceptionsFor(p *Policy) []*exception.Exception {
	for _, e := range s.entries {
		if e.policy == p {
			return e.bound.Exceptions
		}
	}
	return nil
}

// Has says whether the set has a policy of that kind and name (in any
// namespace, as exceptions reference policies by name only).
func (s *Set) Has(kind, name string) bool {
	for _, e := range s.entries {
		if e.policy.Kind == kind && e.policy.Name == name {
			return true
		}
	}
	return false
}

// CountMemoKeys counts, in counts, the request-pure variables of the
// policies by canonical form: those that occur more than once are worth
// computing once per request (celeval.Config.Shared).
func (s *Set) CountMemoKeys(counts map[string]int) {
	for _, e := range s.entries {
		for _, v := range e.policy.variants {
			for _, vr := range v.scope.Variables {
				if k := vr.Prog.MemoKey(); k != "" {
					counts[k]++
				}
			}
		}
	}
}

// index builds the resource index: an entry is listed under every resource
// name its variants' rules name, or as a wildcard when a rule says "*" or
// the policy is in JSON mode.
func (s *Set) index() {
	for _, e := range s.entries {
		var names []string
		wild := e.policy.jsonMode
		for _, v := range e.policy.variants {
			if v.match == nil {
				wild = true
				continue
			}
			ns, w := v.match.IndexNames()
			wild = wild || w
			names = append(names, ns...)
		}
		s.byResource.Add(e, names, wild)
	}
	s.byResource.Build()
}

// candidates returns, in evaluation order, the entries that may match a
// request on resource.
func (s *Set) candidates(resource string) []*entry { return s.byResource.Candidates(resource) }

// Candidates returns how many policies may apply to a resource: at most
// that many results (the engine sizes a decision's results with it).
func (s *Set) Candidates(resource string) int { return len(s.byResource.Candidates(resource)) }
