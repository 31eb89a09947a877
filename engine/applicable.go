package engine

import (
	"context"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/authz"
	"github.com/arbiter-pdp/arbiter/engine/exception"
	"github.com/arbiter-pdp/arbiter/engine/ivpol"
	"github.com/arbiter-pdp/arbiter/engine/mapol"
	"github.com/arbiter-pdp/arbiter/engine/mpol"
	"github.com/arbiter-pdp/arbiter/engine/psa"
	"github.com/arbiter-pdp/arbiter/engine/vap"
	"github.com/arbiter-pdp/arbiter/engine/vpol"
)

// Applicable is a policy that applies to a request — its match constraints
// and evaluation gates select it — with the exceptions bound to it and
// whether each could apply.
type Applicable struct {
	// Kind, Namespace and Name name the policy (a Pod Security level is a
	// policy of kind PodSecurity named by the level).
	Kind, Namespace, Name string
	// Policy is set for a Kyverno ValidatingPolicy or
	// NamespacedValidatingPolicy; Variant is "" or the autogen
	// configuration that matched.
	Policy  *vpol.Policy
	Variant string
	// MutatingPolicy is set for a Kyverno MutatingPolicy or
	// NamespacedMutatingPolicy (Variant as for Policy).
	MutatingPolicy *mpol.Policy
	// ImagePolicy is set for an ImageValidatingPolicy or
	// NamespacedImageValidatingPolicy (Variant as for Policy).
	ImagePolicy *ivpol.Policy
	// VAP is set for a ValidatingAdmissionPolicy: its bindings are those
	// whose matchResources select the request.
	VAP *vap.Info
	// MAP is set for a MutatingAdmissionPolicy (its bindings as VAP's).
	MAP *mapol.Info
	// PodSecurity is set for a Pod Security level: the level as it applies
	// to the request — the modes and versions of the request's namespace,
	// their actions and resources.
	PodSecurity *psa.Info
	// Authz is set for an authorization policy (a ValidatingPolicy in
	// Envoy or HTTP mode), which applies to every request of its mode.
	Authz      *authz.Policy
	Exceptions []exception.Applicability
	// MatchError is the error matching the policy to the request (its
	// decision result is then an error).
	MatchError string
}

// Applicable returns the policies that apply to the request, in
// evaluation order (mutating, then validating), by the same gates and matching as Evaluate, without
// evaluating their validations; with evaluate, each bound exception's
// matchConditions are evaluated against the request's object. opts may be nil.
func (ps *PolicySet) Applicable(ctx context.Context, req *admission.Request, evaluate bool, opts *EvalOptions) []Applicable {
	kinds, req, opts := ps.kindsFor(req, opts)
	rq := ps.newRequest(ctx, req, opts)
	var out []Applicable
	if !req.Shape.Authorization() {
		for _, m := range ps.mutators {
			out = m.applicable(rq, evaluate, out)
		}
	}
	for _, k := range kinds {
		out = k.applicable(rq, evaluate, out)
	}
	return out
}
