package mapol

import (
	"sort"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	ap "github.com/arbiter-pdp/arbiter/engine/admissionpolicy"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// Param is a param object: an object of a kind some policy's paramKind names.
type Param = ap.Param

// Applier merges an apply configuration into an object: a server-side
// apply merge guided by the schema of the object's kind, as
// k8s.io/apiserver's ApplyStructuredMergeDiff does (allowAtomic lets it
// replace atomic lists, maps and structs; a MutatingAdmissionPolicy never
// sets it). Its method set is mpol.Applier's: one implementation serves
// both kinds. Its errors are the merge's own ("type converter must not be
// nil", "invalid ApplyConfiguration: ...", ...); the set prefixes them
// with "error applying patch: " as the API server does.
type Applier interface {
	Apply(obj, applyConfiguration map[string]any, allowAtomic bool) (map[string]any, error)
}

// Options tune a Set.
type Options struct {
	ap.Options
	// Applier merges apply configurations (nil: every ApplyConfiguration
	// mutation fails as it does in kube-apiserver's patcher without a type
	// converter, "error applying patch: type converter must not be nil").
	Applier Applier
}

// Set is an immutable set of compiled policies, bindings, params and the
// Namespaces they may consult. It is safe for concurrent use.
type Set struct {
	entries []*entry
	objects *ap.Objects
	apply   Applier
	// byResource lists the entries (with bindings) whose policy rules may
	// match a resource name, in evaluation order.
	byResource admission.Index[*entry]
	// paramObjects are the objects the params were taken from (Compile).
	paramObjects map[*manifest.Object]bool
}

type entry struct {
	policy   *Policy
	bindings []*Binding
}

// NewSet builds a set. Policies are evaluated in name order, each with its
// bindings in name order (kube-apiserver's order is that of a Go map: it
// varies); a binding whose policy is not in the set is ignored, and a
// policy without bindings is never evaluated (as in kube-apiserver).
// Params are taken in namespace and name order.
func NewSet(policies []*Policy, bindings []*Binding, params []*Param, namespaces map[string]map[string]any, opts Options) *Set {
	s := &Set{objects: ap.NewObjects(params, namespaces, opts.Options), apply: opts.Applier}
	byPolicy := map[string]*entry{}
	for _, p := range policies {
		e := &entry{policy: p}
		byPolicy[p.Name] = e
		s.entries = append(s.entries, e)
	}
	for _, b := range bindings {
		if e, ok := byPolicy[b.PolicyName]; ok {
			e.bindings = append(e.bindings, b)
		}
	}
	sort.SliceStable(s.entries, func(i, j int) bool { return s.entries[i].policy.Name < s.entries[j].policy.Name })
	for _, e := range s.entries {
		sort.SliceStable(e.bindings, func(i, j int) bool { return e.bindings[i].Name < e.bindings[j].Name })
		if len(e.bindings) > 0 {
			names, wild := e.policy.match.IndexNames()
			s.byResource.Add(e, names, wild)
		}
	}
	s.byResource.Build()
	return s
}

// Empty says whether the set has no policy with a binding.
func (s *Set) Empty() bool {
	if s == nil {
		return true
	}
	for _, e := range s.entries {
		if len(e.bindings) > 0 {
			return false
		}
	}
	return true
}

// Policies returns the compiled policies in evaluation order.
func (s *Set) Policies() []*Policy {
	out := make([]*Policy, len(s.entries))
	for i, e := range s.entries {
		out[i] = e.policy
	}
	return out
}

// Bindings returns the bindings of a policy in evaluation order.
func (s *Set) Bindings(policy string) []*Binding {
	for _, e := range s.entries {
		if e.policy.Name == policy {
			return e.bindings
		}
	}
	return nil
}

// Authorizer is the `authorizer` of Arbiter's policies (ap.Authorizer):
// members of system:masters are allowed everything, everyone else gets "no
// opinion".
type Authorizer = ap.Authorizer
