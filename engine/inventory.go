package engine

import (
	"time"

	"github.com/arbiter-pdp/arbiter/engine/authz"
	"github.com/arbiter-pdp/arbiter/engine/dpol"
	"github.com/arbiter-pdp/arbiter/engine/exception"
	"github.com/arbiter-pdp/arbiter/engine/export"
	"github.com/arbiter-pdp/arbiter/engine/gpol"
	"github.com/arbiter-pdp/arbiter/engine/ivpol"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/mapol"
	"github.com/arbiter-pdp/arbiter/engine/mpol"
	"github.com/arbiter-pdp/arbiter/engine/psa"
	"github.com/arbiter-pdp/arbiter/engine/vap"
	"github.com/arbiter-pdp/arbiter/engine/vpol"
)

// What a PolicySet holds, for inventories (QueryService ListPolicies,
// GetPolicy, ListExceptions, Status) and exports.

// Policies returns the compiled Kyverno ValidatingPolicies and
// NamespacedValidatingPolicies, in evaluation order.
func (ps *PolicySet) Policies() []*vpol.Policy { return ps.vpol.Policies() }

// MutatingPolicies returns the compiled Kyverno MutatingPolicies and
// NamespacedMutatingPolicies, in evaluation order.
func (ps *PolicySet) MutatingPolicies() []*mpol.Policy { return ps.mpol.Policies() }

// MutatingPolicyExceptions returns the exceptions bound to a MutatingPolicy.
func (ps *PolicySet) MutatingPolicyExceptions(p *mpol.Policy) []*exception.Exception {
	return ps.mpol.ExceptionsFor(p)
}

// ImagePolicies returns the compiled ImageValidatingPolicies and
// NamespacedImageValidatingPolicies, in evaluation order.
func (ps *PolicySet) ImagePolicies() []*ivpol.Policy { return ps.ivpol.Policies() }

// ImagePolicyExceptions returns the exceptions bound to an
// ImageValidatingPolicy.
func (ps *PolicySet) ImagePolicyExceptions(p *ivpol.Policy) []*exception.Exception {
	return ps.ivpol.ExceptionsFor(p)
}

// AuthzPolicies returns the compiled authorization policies
// (ValidatingPolicies in Envoy or HTTP mode), in evaluation order.
func (ps *PolicySet) AuthzPolicies() []*authz.Policy { return ps.authz.Policies() }

// DeletingPolicies returns the compiled DeletingPolicies and
// NamespacedDeletingPolicies, in order. They are not evaluated at
// admission: the Kubernetes source runs them on their schedule.
func (ps *PolicySet) DeletingPolicies() []*dpol.Policy { return ps.dpol.Policies() }

// DeletingPolicy returns a DeletingPolicy or NamespacedDeletingPolicy with
// the exceptions that name it.
func (ps *PolicySet) DeletingPolicy(kind, namespace, name string) (dpol.Bound, bool) {
	return ps.dpol.Get(kind, namespace, name)
}

// DeletingPolicyExceptions returns the exceptions bound to a DeletingPolicy.
func (ps *PolicySet) DeletingPolicyExceptions(p *dpol.Policy) []*exception.Exception {
	return ps.dpol.ExceptionsFor(p)
}

// GeneratingPolicies returns the compiled GeneratingPolicies and
// NamespacedGeneratingPolicies, in order (see Generate).
func (ps *PolicySet) GeneratingPolicies() []*gpol.Policy { return ps.gpol.Policies() }

// GeneratingPolicyExceptions returns the exceptions bound to a GeneratingPolicy.
func (ps *PolicySet) GeneratingPolicyExceptions(p *gpol.Policy) []*exception.Exception {
	return ps.gpol.ExceptionsFor(p)
}

// Exceptions returns the compiled exceptions, in order.
func (ps *PolicySet) Exceptions() []*exception.Exception { return ps.exceptions }

// ExceptionsFor returns the exceptions bound to a policy.
func (ps *PolicySet) ExceptionsFor(p *vpol.Policy) []*exception.Exception {
	return ps.vpol.ExceptionsFor(p)
}

// Namespace returns the Namespace object named name, if the set has it.
func (ps *PolicySet) Namespace(name string) (map[string]any, bool) {
	ns, ok := ps.namespaces[name]
	return ns, ok
}

// HasPolicy says whether the set has a policy of that kind and name (in any
// namespace, as exceptions reference policies by name only).
func (ps *PolicySet) HasPolicy(kind, name string) bool {
	if kind == psa.KindPodSecurity {
		return psa.IsLevel(name)
	}
	return ps.vpol.Has(kind, name) || ps.mpol.Has(kind, name) || ps.ivpol.Has(kind, name) || ps.authz.Has(kind, name) || ps.dpol.Has(kind, name) || ps.gpol.Has(kind, name)
}

// IsParam says whether o is one of the set's params (an object of a kind a
// ValidatingAdmissionPolicy's or MutatingAdmissionPolicy's paramKind names).
func (ps *PolicySet) IsParam(o *manifest.Object) bool {
	return ps.vap.IsParam(o) || ps.mapol.IsParam(o)
}

// VAPInfos describes the set's ValidatingAdmissionPolicies, by name.
func (ps *PolicySet) VAPInfos() []vap.Info { return ps.vap.Infos() }

// MAPInfos describes the set's MutatingAdmissionPolicies, by name.
func (ps *PolicySet) MAPInfos() []mapol.Info { return ps.mapol.Infos() }

// PodSecurityConfiguration returns the set's PodSecurityConfiguration
// object (nil when it has none and the defaults apply).
func (ps *PolicySet) PodSecurityConfiguration() *manifest.Object { return ps.psa.Configuration() }

// PodSecurityWarnings are the warnings about the set's Pod Security
// configuration: exempted controller service accounts, which exempt every
// user who can create the workloads they manage.
func (ps *PolicySet) PodSecurityWarnings() []string { return ps.psa.Warnings() }

// PodSecurityInfos describes the set's Pod Security levels as policies of
// kind PodSecurity (psa.Set.Infos). Callers must not modify them.
func (ps *PolicySet) PodSecurityInfos() []psa.Info { return ps.psa.Infos() }

// PodSecurityExceptions returns the PolicyExceptions that name a Pod
// Security level (baseline, restricted), in order.
func (ps *PolicySet) PodSecurityExceptions(level string) []*exception.Exception {
	return ps.psa.Exceptions(level)
}

// PodSecurityLevels are the Pod Security levels that are policies (that
// PolicyExceptions may name): baseline, restricted.
func PodSecurityLevels() []string {
	out := make([]string, len(psa.Levels))
	for i, l := range psa.Levels {
		out[i] = string(l)
	}
	return out
}

// ExportVAP expresses each Kyverno ValidatingPolicy of the set as
// ValidatingAdmissionPolicies with bindings (export.VAP).
func (ps *PolicySet) ExportVAP(now time.Time) []export.Export { return export.VAP(ps.vpol, now) }

// ExportMAP expresses each Kyverno MutatingPolicy of the set as
// MutatingAdmissionPolicies with bindings (export.MAP).
func (ps *PolicySet) ExportMAP(now time.Time) []export.Export { return export.MAP(ps.mpol, now) }
