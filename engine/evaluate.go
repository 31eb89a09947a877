package engine

import (
	"context"
	"strings"
	"time"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
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
	// decoding, sparing the engine a walk of the objects (it measures them
	// itself otherwise). The CEL cost estimates rest on them: set them
	// only from the decoder.
	ObjectSizes *manifest.Sizes
	// ExactCost runs every Kyverno CEL program with cost tracking, instead
	// of charging proven-cheap ones their static estimate (slower; the
	// decision is the same).
	ExactCost bool
}

// Decision is the outcome of a request.
type Decision struct {
	Allowed bool
	// Results holds one result per matched policy (binding, level), in
	// evaluation order.
	Results  []outcome.Result
	Warnings []string
	// AuditAnnotations are the audit annotations to record.
	AuditAnnotations map[string]string
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

// kind is one policy kind's part of a PolicySet, in the admission pipeline.
type kind interface {
	// evaluate adds the kind's results, denials, warnings and audit
	// annotations for the request to out.
	evaluate(ev *evaluation, out *outcome.Outcome)
	// applicable appends the kind's policies that apply to the request.
	applicable(ev *evaluation, evaluate bool, out []Applicable) []Applicable
}

// evaluation is one request's evaluation by the kinds of a set.
type evaluation struct {
	ctx   context.Context
	req   *admission.Request
	trace *outcome.Trace
	// rq is the evaluation state shared by the kinds written in Kyverno's
	// CEL (their cost budget, memoized expressions, inputs as CEL values).
	rq *celeval.Request
}

func (ps *PolicySet) newEvaluation(ctx context.Context, req *admission.Request, opts *EvalOptions) *evaluation {
	if opts == nil {
		opts = &EvalOptions{}
	}
	ns := req.NamespaceObject
	if ns == nil && req.Namespace != "" {
		ns = ps.namespaces[req.Namespace]
	}
	rq := celeval.NewRequest(ctx, req, celeval.Config{
		Namespace:   ns,
		Context:     opts.Context,
		Now:         opts.Now,
		Trace:       opts.Trace,
		CostBudget:  opts.CostBudget,
		ObjectSizes: opts.ObjectSizes,
		Shared:      ps.shared,
		ExtraSize:   ps.exceptionSize,
		ExactCost:   opts.ExactCost,
	})
	return &evaluation{ctx: ctx, req: req, trace: opts.Trace, rq: rq}
}

// Evaluate decides a request: the validating kinds in admission order
// (Kyverno ValidatingPolicies, ValidatingAdmissionPolicies, Pod Security),
// then one merge of their outcomes into the decision. It never fails:
// problems evaluating a policy become `error` results; a request whose
// context is done stops being evaluated (the policies not yet evaluated
// are errors). The caller must not modify the request's objects while
// Evaluate runs; opts may be nil.
func (ps *PolicySet) Evaluate(ctx context.Context, req *admission.Request, opts *EvalOptions) *Decision {
	ev := ps.newEvaluation(ctx, req, opts)
	var out outcome.Outcome
	for _, k := range ps.validators {
		k.evaluate(ev, &out)
	}
	d := merge(&out)
	d.Cost = ev.rq.Cost()
	return d
}

// merge builds the decision from the kinds' outcomes: denied when any
// kind denied, with the first denial's code and reason and the denials
// joined as the message.
func merge(out *outcome.Outcome) *Decision {
	d := &Decision{Allowed: len(out.Denials) == 0, Results: out.Results, Warnings: out.Warnings, AuditAnnotations: out.AuditAnnotations}
	switch len(out.Denials) {
	case 0:
		return d
	case 1:
		d.Denials = []string{out.Denials[0].Text}
		d.Message = out.Denials[0].Text
	default:
		d.Denials = make([]string, len(out.Denials))
		for i, den := range out.Denials {
			d.Denials[i] = den.Text
		}
		d.Message = strings.Join(d.Denials, "; ")
	}
	d.Code, d.Reason = out.Denials[0].Code, out.Denials[0].Reason
	return d
}

// The validating kinds.

type vpolKind struct{ set *vpol.Set }

func (k vpolKind) evaluate(ev *evaluation, out *outcome.Outcome) { k.set.Evaluate(ev.rq, out) }

func (k vpolKind) applicable(ev *evaluation, evaluate bool, out []Applicable) []Applicable {
	for _, a := range k.set.Applicable(ev.rq, evaluate) {
		ap := Applicable{Kind: a.Policy.Kind, Name: a.Policy.Name, Namespace: a.Policy.Namespace, Policy: a.Policy, Variant: a.Variant, Exceptions: a.Exceptions}
		if a.MatchError != nil {
			ap.MatchError = "failed to execute matching: " + a.MatchError.Error()
		}
		out = append(out, ap)
	}
	return out
}

type vapKind struct{ set *vap.Set }

func (k vapKind) evaluate(ev *evaluation, out *outcome.Outcome) {
	k.set.Evaluate(ev.ctx, ev.req, ev.trace, out)
}

func (k vapKind) applicable(ev *evaluation, _ bool, out []Applicable) []Applicable {
	for _, info := range k.set.Applicable(ev.ctx, ev.req) {
		info := info
		out = append(out, Applicable{Kind: vap.KindPolicy, Name: info.Name, VAP: &info})
	}
	return out
}

type psaKind struct{ set *psa.Set }

func (k psaKind) evaluate(ev *evaluation, out *outcome.Outcome) { k.set.Evaluate(ev.rq, out) }

func (k psaKind) applicable(ev *evaluation, evaluate bool, out []Applicable) []Applicable {
	for _, a := range k.set.Applicable(ev.rq, evaluate) {
		a := a
		out = append(out, Applicable{Kind: psa.KindPodSecurity, Name: a.Info.Level, PodSecurity: &a.Info, Exceptions: a.Exceptions})
	}
	return out
}
