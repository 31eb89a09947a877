package ivpol

import (
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/exception"
)

// Set is the ImageValidatingPolicies and NamespacedImageValidatingPolicies
// of a policy set, with their exceptions, indexed by the resources they
// match. It is immutable.
type Set struct {
	entries    []*entry
	byResource admission.Index[*entry]
	mutating   bool
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
		s.mutating = s.mutating || p.MutatesDigests()
	}
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
	return s
}

// Empty says whether the set has no policy.
func (s *Set) Empty() bool { return s == nil || len(s.entries) == 0 }

// Mutating says whether a policy of the set pins digests.
func (s *Set) Mutating() bool { return s != nil && s.mutating }

// Policies returns the compiled policies, in evaluation order.
func (s *Set) Policies() []*Policy {
	if s == nil {
		return nil
	}
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

// Has says whether the set has a policy of that kind and name.
func (s *Set) Has(kind, name string) bool {
	if s == nil {
		return false
	}
	for _, e := range s.entries {
		if e.policy.Kind == kind && e.policy.Name == name {
			return true
		}
	}
	return false
}

func (s *Set) candidates(resource string) []*entry {
	if s == nil {
		return nil
	}
	return s.byResource.Candidates(resource)
}

// Candidates returns how many policies may apply to a resource.
func (s *Set) Candidates(resource string) int { return len(s.candidates(resource)) }
