package vpol

import (
	"github.com/arbiter-pdp/arbiter/engine/exception"
)

// Set is the ValidatingPolicies and NamespacedValidatingPolicies of a
// policy set, with their exceptions, indexed by the resources they match.
// It is immutable.
type Set struct {
	entries []*entry
	// byResource indexes entries by the resources their variants may match.
	byResource map[string][]*entry
	wildcard   []*entry
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
// name its variants' rules name, or in wildcard when a rule says "*" or the
// policy is in JSON mode.
func (s *Set) index() {
	s.byResource = map[string][]*entry{}
	for _, e := range s.entries {
		names := map[string]bool{}
		wild := e.policy.jsonMode
		for _, v := range e.policy.variants {
			if v.match == nil {
				wild = true
				continue
			}
			ns, w := v.match.IndexNames()
			wild = wild || w
			for _, n := range ns {
				names[n] = true
			}
		}
		if wild {
			s.wildcard = append(s.wildcard, e)
			continue
		}
		for n := range names {
			s.byResource[n] = append(s.byResource[n], e)
		}
	}
	if len(s.wildcard) == 0 {
		return
	}
	// Every per-resource list also holds the wildcard entries, in the global order.
	wild := map[*entry]bool{}
	for _, e := range s.wildcard {
		wild[e] = true
	}
	for n, l := range s.byResource {
		in := map[*entry]bool{}
		for _, e := range l {
			in[e] = true
		}
		merged := make([]*entry, 0, len(l)+len(s.wildcard))
		for _, e := range s.entries {
			if in[e] || wild[e] {
				merged = append(merged, e)
			}
		}
		s.byResource[n] = merged
	}
}

// candidates returns, in evaluation order, the entries that may match a
// request on resource.
func (s *Set) candidates(resource string) []*entry {
	if l, ok := s.byResource[resource]; ok {
		return l
	}
	return s.wildcard
}
