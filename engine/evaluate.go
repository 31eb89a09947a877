package engine

import (
	"context"
	"reflect"
	"time"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/authz"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/ivpol"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/mapol"
	"github.com/arbiter-pdp/arbiter/engine/mpol"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
	"github.com/arbiter-pdp/arbiter/engine/patch"
	"github.com/arbiter-pdp/arbiter/engine/psa"
	"github.com/arbiter-pdp/arbiter/engine/vap"
	"github.com/arbiter-pdp/arbiter/engine/vpol"
)

// EvalOptions say how a request is evaluated. The zero value is the
// default.
type EvalOptions struct {
	// Context is what Kyverno's context libraries (resource.*, http.*,
	// globalContext, image data) read. Nil means no cluster access.
	Context kyvernocel.Context
	// Now is the time exceptions' expiresAt is compared with (zero: time.Now()).
	Now time.Time
	// Trace, when set, records how the decision is reached (Explain).
	Trace *outcome.Trace
	// CostBudget bounds the CEL cost of every policy of the decision
	// together (0: no bound beyond the per-expression and per-policy
	// limits). Policies reached once it is spent are error results. The
	// untracked fast path is charged its static estimate, so the charge is
	// deterministic for a request and a policy set.
	CostBudget uint64
	// ObjectSizes, when set, are the sizes of the request's Object and
	// OldObject together as manifest.DecodeJSONSized measured them while
	// decoding (or the conversion of a protobuf Struct), sparing the engine a walk of the objects (it measures them
	// itself otherwise). The CEL cost estimates rest on them: set them
	// only from the decoder.
	ObjectSizes *manifest.Sizes
	// ExactCost runs every Kyverno CEL program with cost tracking, instead
	// of charging proven-cheap ones their static estimate (slower; the
	// decision is the same).
	ExactCost bool
	// Stages says which stages of the pipeline run (default: mutations,
	// then validations of the mutated object).
	Stages Stages
	// ImageVerifier serves ImageValidatingPolicies: registry reads and
	// signature verification (nil: their verification functions and
	// digest pinning fail, naming what is unavailable). The imageverify
	// package implements it.
	ImageVerifier kyvernocel.ImageVerifier
	// Results, when its capacity holds the decision's results, is where
	// they are written (from its start; what it holds is overwritten), so
	// that a caller deciding many requests can recycle the results of a
	// decision it is done with instead of allocating them again.
	Results []outcome.Result
}

// Stages are the stages of the admission pipeline a decision runs.
type Stages int

const (
	// AllStages mutates, then validates the mutated object.
	AllStages Stages = iota
	// ValidateOnly validates the request's object as it is.
	ValidateOnly
	// MutateOnly mutates; nothing is validated (an admission webhook's
	// mutating call: the API server validates the final object apart).
	MutateOnly
)

// Decision is the outcome of a request: the merged outcome of its kinds
// (Results, Warnings, AuditAnnotations) and the verdict.
type Decision struct {
	outcome.Outcome
	Allowed bool
	// Mutated is the object as the mutations left it, when they changed
	// it (nil otherwise): what validations saw, and what would be admitted.
	Mutated map[string]any
	// original is the request's object (what Patch starts from).
	original map[string]any
	// Denials are the reasons the request is denied.
	Denials []string
	// Message is the denial message (Denials joined as Kyverno does).
	Message string
	// Code and Reason are the HTTP status code and reason of a denial:
	// those of the first denial (400 and "" for a Kyverno policy; a
	// ValidatingAdmissionPolicy's reason, Invalid by default, and its code;
	// 403 Forbidden for Pod Security).
	Code   int32
	Reason string
	// Cost is the CEL cost charged for the decision (see EvalOptions.CostBudget).
	Cost uint64
}

// mutator is one mutating policy kind's part of a PolicySet.
type mutator interface {
	// mutate applies the kind's mutations to the request's object as
	// mutated so far (rq.Object(), which it updates), adding its results
	// and denials to out. It returns what runs once every mutating kind
	// has (kube-apiserver's reinvocation of the in-tree plugins that ask
	// for it), or nil.
	mutate(rq *celeval.Request, out *outcome.Outcome) (reinvoke func())
	// applicable appends the kind's policies that apply to the request.
	applicable(rq *celeval.Request, evaluate bool, out []Applicable) []Applicable
}

// kind is one policy kind's part of a PolicySet, in the admission pipeline.
type kind interface {
	// evaluate adds the kind's results, denials, warnings and audit
	// annotations for the request to out.
	evaluate(rq *celeval.Request, out *outcome.Outcome)
	// applicable appends the kind's policies that apply to the request.
	applicable(rq *celeval.Request, evaluate bool, out []Applicable) []Applicable
}

// newRequest starts the evaluation of a request by the kinds of the set.
func (ps *PolicySet) newRequest(ctx context.Context, req *admission.Request, opts *EvalOptions) *celeval.Request {
	if opts == nil {
		opts = &EvalOptions{}
	}
	ns := req.NamespaceObject
	if ns == nil && req.Namespace != "" {
		ns = ps.namespaces[req.Namespace]
	}
	return celeval.NewRequest(ctx, req, celeval.Config{
		Namespace:   ns,
		Context:     opts.Context,
		Now:         opts.Now,
		Trace:       opts.Trace,
		CostBudget:  opts.CostBudget,
		ObjectSizes: opts.ObjectSizes,
		Shared:      ps.shared,
		ExtraSize:   ps.exceptionSize,
		ExactCost:   opts.ExactCost,
		// Image verification is slow and cached by the verifier.
		ImageVerifier: opts.ImageVerifier,
	})
}

// Evaluate decides a request: the mutating kinds in admission order
// (MutatingAdmissionPolicies, then Kyverno MutatingPolicies, then the
// reinvocation of the MutatingAdmissionPolicies that ask for it), each
// mutation applied to the object as the previous ones left it; then the
// validating kinds in admission order (Kyverno ValidatingPolicies,
// ValidatingAdmissionPolicies, Pod Security)
// on the mutated object; then one merge of their outcomes into the
// decision. It never fails: problems evaluating a policy become `error`
// results; a request whose context is done stops being evaluated (the
// policies not yet evaluated are errors). The caller must not modify the
// request's objects while Evaluate runs (the engine never modifies them);
// opts may be nil.
//
// A request whose Shape is an authorization request (an Envoy or HTTP
// CheckRequest) is evaluated by the authorization policies of that mode
// only, and the admission kinds do not see it; its decision carries the
// authorization response (Decision.Authorization) and is denied when that
// response denies.
func (ps *PolicySet) Evaluate(ctx context.Context, req *admission.Request, opts *EvalOptions) *Decision {
	kinds, req, opts := ps.kindsFor(req, opts)
	rq := ps.newRequest(ctx, req, opts)
	d := &Decision{}
	stages := AllStages
	if opts != nil {
		stages = opts.Stages
	}
	if n := ps.resultsHint(req, stages); n > 0 {
		if opts != nil && cap(opts.Results) >= n {
			d.Results = opts.Results[:0]
		} else {
			d.Results = make([]outcome.Result, 0, n)
		}
	}
	if stages != ValidateOnly && len(ps.mutators) > 0 && !req.Shape.Authorization() {
		var reinvoke []func()
		for _, m := range ps.mutators {
			if f := m.mutate(rq, &d.Outcome); f != nil {
				reinvoke = append(reinvoke, f)
			}
		}
		for _, f := range reinvoke {
			f()
		}
		// A mutation that wrote what was there already (an apply
		// configuration the object satisfies) leaves it unchanged.
		if obj := rq.Object(); !sameObject(obj, req.Object) && !patch.Equal(obj, req.Object) {
			d.Mutated, d.original = obj, req.Object
			mutated := *req
			mutated.Object = obj
			rq = rq.Continue(&mutated)
		}
	}
	if stages != MutateOnly {
		for _, k := range kinds {
			k.evaluate(rq, &d.Outcome)
		}
	}
	d.merge()
	d.Cost = rq.Cost()
	return d
}

// resultsHint is how many results the Kyverno kinds may give a request
// (their policies indexed under its resource), so the results are
// allocated once.
func (ps *PolicySet) resultsHint(req *admission.Request, stages Stages) int {
	if req.Shape.Authorization() {
		return 0
	}
	n := 0
	if stages != ValidateOnly {
		n += ps.mpol.Candidates(req.Resource.Resource)
	}
	if stages != MutateOnly && ps.vpol != nil {
		n += ps.vpol.Candidates(req.Resource.Resource)
	}
	if stages != MutateOnly {
		n += ps.ivpol.Candidates(req.Resource.Resource)
	}
	return n
}

// sameObject says whether a and b are the same object (not merely equal).
func sameObject(a, b map[string]any) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// kindsFor returns the kinds that evaluate a request, and the request
// they evaluate: the validating kinds for an admission request; for an
// authorization request, the authorization kind, with the request's object
// made the `object` of its policies (authz.Prepare) and measured for the
// cost estimates — or, when it is not a valid CheckRequest, left as it is,
// the error being every policy's result.
func (ps *PolicySet) kindsFor(req *admission.Request, opts *EvalOptions) ([]kind, *admission.Request, *EvalOptions) {
	if !req.Shape.Authorization() {
		return ps.validators, req, opts
	}
	obj, sizes, err := authz.Prepare(req.Shape, req.Object)
	o := EvalOptions{}
	if opts != nil {
		o = *opts
	}
	o.ObjectSizes = nil
	r := *req
	r.OldObject = nil
	if err == nil {
		r.Object, o.ObjectSizes = obj, &sizes
	}
	return []kind{authzKind{set: ps.authz, prepErr: err}}, &r, &o
}

// Patch returns the mutations as an RFC 6902 JSON patch from the
// request's object to the mutated one (nil when nothing was mutated).
func (d *Decision) Patch() []patch.Op {
	if d.Mutated == nil {
		return nil
	}
	return patch.Diff(d.original, d.Mutated)
}

// merge derives the verdict from the kinds' outcome: denied when any kind
// denied, with the first denial's code and reason and the denials joined
// as the message.
func (d *Decision) merge() {
	d.Allowed = !d.Denied()
	d.Denials, d.Message, d.Code, d.Reason = d.Outcome.Message()
}

// The mutating kinds.

type mapolKind struct{ set *mapol.Set }

func (k mapolKind) mutate(rq *celeval.Request, out *outcome.Outcome) func() {
	if r := k.set.Mutate(rq, out); r != nil {
		return func() { r.Reinvoke(rq) }
	}
	return nil
}

func (k mapolKind) applicable(rq *celeval.Request, _ bool, out []Applicable) []Applicable {
	for _, info := range k.set.Applicable(rq.Context(), rq.Attributes()) {
		info := info
		out = append(out, Applicable{Kind: mapol.KindPolicy, Name: info.Name, MAP: &info})
	}
	return out
}

type mpolKind struct{ set *mpol.Set }

func (k mpolKind) mutate(rq *celeval.Request, out *outcome.Outcome) func() {
	if rq.Object() != nil {
		k.set.Mutate(rq, out)
	}
	return nil
}

func (k mpolKind) applicable(rq *celeval.Request, evaluate bool, out []Applicable) []Applicable {
	for _, a := range k.set.Applicable(rq, evaluate) {
		ap := Applicable{Kind: a.Policy.Kind, Name: a.Policy.Name, Namespace: a.Policy.Namespace, MutatingPolicy: a.Policy, Variant: a.Variant, Exceptions: a.Exceptions}
		if a.MatchError != nil {
			ap.MatchError = "failed to execute matching: " + a.MatchError.Error()
		}
		out = append(out, ap)
	}
	return out
}

// The validating kinds.

type vpolKind struct{ set *vpol.Set }

func (k vpolKind) evaluate(rq *celeval.Request, out *outcome.Outcome) { k.set.Evaluate(rq, out) }

func (k vpolKind) applicable(rq *celeval.Request, evaluate bool, out []Applicable) []Applicable {
	for _, a := range k.set.Applicable(rq, evaluate) {
		ap := Applicable{Kind: a.Policy.Kind, Name: a.Policy.Name, Namespace: a.Policy.Namespace, Policy: a.Policy, Variant: a.Variant, Exceptions: a.Exceptions}
		if a.MatchError != nil {
			ap.MatchError = "failed to execute matching: " + a.MatchError.Error()
		}
		out = append(out, ap)
	}
	return out
}

// ivpolKind is ImageValidatingPolicies: a mutating kind (digest pinning at
// admission) and a validating one.
type ivpolKind struct{ set *ivpol.Set }

func (k ivpolKind) mutate(rq *celeval.Request, out *outcome.Outcome) func() {
	k.set.Mutate(rq, out)
	return nil
}

func (k ivpolKind) evaluate(rq *celeval.Request, out *outcome.Outcome) { k.set.Evaluate(rq, out) }

func (k ivpolKind) applicable(rq *celeval.Request, evaluate bool, out []Applicable) []Applicable {
	for _, a := range k.set.Applicable(rq, evaluate) {
		ap := Applicable{Kind: a.Policy.Kind, Name: a.Policy.Name, Namespace: a.Policy.Namespace, ImagePolicy: a.Policy, Variant: a.Variant, Exceptions: a.Exceptions}
		if a.MatchError != nil {
			ap.MatchError = "failed to execute matching: " + a.MatchError.Error()
		}
		out = append(out, ap)
	}
	return out
}

type vapKind struct{ set *vap.Set }

func (k vapKind) evaluate(rq *celeval.Request, out *outcome.Outcome) {
	k.set.Evaluate(rq.Context(), rq.Attributes(), rq.Trace(), out)
}

func (k vapKind) applicable(rq *celeval.Request, _ bool, out []Applicable) []Applicable {
	for _, info := range k.set.Applicable(rq.Context(), rq.Attributes()) {
		info := info
		out = append(out, Applicable{Kind: vap.KindPolicy, Name: info.Name, VAP: &info})
	}
	return out
}

type psaKind struct{ set *psa.Set }

func (k psaKind) evaluate(rq *celeval.Request, out *outcome.Outcome) { k.set.Evaluate(rq, out) }

func (k psaKind) applicable(rq *celeval.Request, evaluate bool, out []Applicable) []Applicable {
	for _, a := range k.set.Applicable(rq, evaluate) {
		a := a
		out = append(out, Applicable{Kind: psa.KindPodSecurity, Name: a.Info.Level, PodSecurity: &a.Info, Exceptions: a.Exceptions})
	}
	return out
}

// The authorization kind.

type authzKind struct {
	set *authz.Set
	// prepErr is the error making the request's object a CheckRequest.
	prepErr error
}

func (k authzKind) evaluate(rq *celeval.Request, out *outcome.Outcome) {
	k.set.Evaluate(rq, k.prepErr, out)
}

// applicable lists the policies of the request's mode: authorization
// policies have no match constraints (their matchConditions are part of
// their evaluation).
func (k authzKind) applicable(rq *celeval.Request, _ bool, out []Applicable) []Applicable {
	for _, p := range k.set.Of(rq.Attributes().Shape) {
		out = append(out, Applicable{Kind: p.Kind, Name: p.Name, Authz: p})
	}
	return out
}
