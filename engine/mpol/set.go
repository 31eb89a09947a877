package mpol

import (
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/exception"
)

// Set is the MutatingPolicies and NamespacedMutatingPolicies of a policy
// set, with their exceptions, indexed by the resources they match. It is
// immutable.
type Set struct {
	entries    []*entry
	byResource admission.Index[*entry]
	// apply merges apply configurations (nil: they fail).
	apply Applier
	// mutateExisting: a policy has evaluation.mutateExisting.enabled.
	mutateExisting bool
}

type entry struct {
	policy *Policy
	bound  *exception.Bound
}

// Applier merges an apply configuration into an object (a server-side
// apply merge guided by the schema of the object's kind); allowAtomic
// lets it replace atomic lists, maps and structs.
type Applier interface {
	Apply(obj, applyConfiguration map[string]any, allowAtomic bool) (map[string]any, error)
}

// NewSet builds the set of policies (in evaluation order), bounds[i]
// being the exceptions bound to policies[i]; apply merges their apply
// configurations.
func NewSet(policies []*Policy, bounds []*exception.Bound, apply Applier) *Set {
	s := &Set{apply: apply}
	for i, p := range policies {
		e := &entry{policy: p, bound: bounds[i]}
		s.entries = append(s.entries, e)
		s.mutateExisting = s.mutateExisting || p.Spec.MutateExistingEnabled()
		var names []string
		wild := false
		for _, v := range p.variants {
			ns, w := v.match.IndexNames()
			names, wild = append(names, ns...), wild || w
		}
		s.byResource.Add(e, names, wild)
	}
	s.byResource.Build()
	return s
}

// Candidates returns how many policies may apply to a resource: at most
// that many results.
func (s *Set) Candidates(resource string) int {
	if s.Empty() {
		return 0
	}
	return len(s.byResource.Candidates(resource))
}

// Empty says whether the set has no policy.
func (s *Set) Empty() bool { return s == nil || len(s.entries) == 0 }

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

// Has says whether the set has a policy of that kind and name.
func (s *Set) Has(kind, name string) bool {
	for _, e := range s.entries {
		if e.policy.Kind == kind && e.policy.Name == name {
			return true
		}
	}
	return false
}
