package dpol

import "github.com/arbiter-pdp/arbiter/engine/exception"

// Set is the DeletingPolicies and NamespacedDeletingPolicies of a policy
// set, with their exceptions. It is immutable.
type Set struct {
	entries []Bound
}

// NewSet builds the set of policies, bounds[i] being the exceptions bound
// to policies[i].
func NewSet(policies []*Policy, bounds []*exception.Bound) *Set {
	s := &Set{entries: make([]Bound, len(policies))}
	for i, p := range policies {
		s.entries[i] = Bound{Policy: p, Exceptions: bounds[i]}
	}
	return s
}

// Empty says whether the set has no policy.
func (s *Set) Empty() bool { return s == nil || len(s.entries) == 0 }

// Policies returns the compiled policies, in order.
func (s *Set) Policies() []*Policy {
	if s == nil {
		return nil
	}
	out := make([]*Policy, len(s.entries))
	for i, e := range s.entries {
		out[i] = e.Policy
	}
	return out
}

// Bound returns the policies with their exceptions, in order.
func (s *Set) Bound() []Bound {
	if s == nil {
		return nil
	}
	return s.entries
}

// Get returns the policy of a kind, namespace and name with its exceptions.
func (s *Set) Get(kind, namespace, name string) (Bound, bool) {
	if s == nil {
		return Bound{}, false
	}
	for _, e := range s.entries {
		if e.Policy.Kind == kind && e.Policy.Name == name && (!e.Policy.Namespaced() || e.Policy.Namespace == namespace) {
			return e, true
		}
	}
	return Bound{}, false
}

// Has says whether the set has a policy of that kind and name (in any
// namespace, as exceptions name policies).
func (s *Set) Has(kind, name string) bool {
	if s == nil {
		return false
	}
	for _, e := range s.entries {
		if e.Policy.Kind == kind && e.Policy.Name == name {
			return true
		}
	}
	return false
}

// ExceptionsFor returns the exceptions bound to a policy.
func (s *Set) ExceptionsFor(p *Policy) []*exception.Exception {
	if s == nil {
		return nil
	}
	for _, e := range s.entries {
		if e.Policy == p && e.Exceptions != nil {
			return e.Exceptions.Exceptions
		}
	}
	return nil
}
