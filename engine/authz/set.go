package authz

import "github.com/arbiter-pdp/arbiter/engine/admission"

// Set is the authorization policies of a policy set, by mode, in
// evaluation order. It is immutable.
type Set struct {
	policies []*Policy
	byMode   map[admission.Shape][]*Policy
}

// NewSet builds the set of policies (in evaluation order).
func NewSet(policies []*Policy) *Set {
	s := &Set{policies: policies, byMode: map[admission.Shape][]*Policy{}}
	for _, p := range policies {
		s.byMode[p.Mode] = append(s.byMode[p.Mode], p)
	}
	return s
}

// Policies returns the compiled policies, in evaluation order.
func (s *Set) Policies() []*Policy { return s.policies }

// Of returns the policies that evaluate requests of a shape, in order.
func (s *Set) Of(shape admission.Shape) []*Policy { return s.byMode[shape] }

// Has says whether the set has a policy of that kind and name.
func (s *Set) Has(kind, name string) bool {
	for _, p := range s.policies {
		if p.Kind == kind && p.Name == name {
			return true
		}
	}
	return false
}

// Empty says whether the set has no policy.
func (s *Set) Empty() bool { return len(s.policies) == 0 }
