package engine

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// Target is an existing resource that mutate-existing MutatingPolicies may
// mutate.
type Target struct {
	Object map[string]any
	// Resource is the object's resource (zero: derived from its kind,
	// admission.ResourceFor).
	Resource schema.GroupVersionResource
}

// TargetResult is what the mutate-existing policies did to one target.
type TargetResult struct {
	// Results are those of the policies that selected the target, in
	// evaluation order (none: no policy selected it).
	Results []outcome.Result
	// Patched is the target as the policies left it: each mutated it as
	// the previous ones left it (the target itself when none changed it).
	Patched map[string]any
}

// MutateExistingResult is what a trigger's mutate-existing policies did to
// the targets.
type MutateExistingResult struct {
	// Targets are the results of the targets, in the order given.
	Targets []TargetResult
	// Errors are the results (error) of the policies whose
	// targetMatchConstraints expression could not be evaluated on the
	// trigger: they selected no target.
	Errors []outcome.Result
}

// MutateExisting evaluates, offline, the mutate-existing MutatingPolicies
// (evaluation.mutateExisting.enabled) that a trigger request sets off on
// existing resources, as `kyverno test` does with a test's
// targetResources (engine/mpol: Discover, MutateTarget): the trigger is
// first mutated as Evaluate mutates it, the targetMatchConstraints
// expressions are evaluated on the mutated trigger, then every target is
// mutated by the policies that select it — each target evaluated as
// `object` within the trigger's `request`, its namespace object unknown.
// Every policy of the set applies, as in the CLI (no admission gate): the
// set must have been compiled with Options.MutateExisting. The targets
// are not modified; opts may be nil (opts.Stages is ignored).
func (ps *PolicySet) MutateExisting(ctx context.Context, trigger *admission.Request, targets []Target, opts *EvalOptions) *MutateExistingResult {
	out := &MutateExistingResult{Targets: make([]TargetResult, len(targets))}
	for i, t := range targets {
		out.Targets[i].Patched = t.Object
	}
	if ps.mpol.Empty() || trigger.Shape.Authorization() {
		return out
	}
	o := EvalOptions{}
	if opts != nil {
		o = *opts
	}
	// The trigger as the admission mutations leave it.
	rq := ps.newRequest(ctx, trigger, &o)
	if trigger.Object != nil {
		var discard outcome.Outcome
		for _, m := range ps.mutators {
			m.mutate(rq, &discard)
		}
	}
	found, errs := ps.mpol.Discover(rq)
	out.Errors = errs
	for i, t := range targets {
		req := targetRequest(trigger, t)
		trq := celeval.NewRequest(ctx, req, celeval.Config{
			Context:    o.Context,
			Now:        rq.Now(),
			Trace:      o.Trace,
			CostBudget: o.CostBudget,
			ExtraSize:  ps.exceptionSize,
			ExactCost:  true,
			Request:    trigger,
		})
		var res outcome.Outcome
		ps.mpol.MutateTarget(trq, found, &res)
		out.Targets[i] = TargetResult{Results: res.Results, Patched: trq.Object()}
	}
	return out
}

// targetRequest is the request a target is evaluated in: its kind,
// resource, name and namespace, no operation, no old object, no namespace
// object; the trigger's user and mode.
func targetRequest(trigger *admission.Request, t Target) *admission.Request {
	obj := t.Object
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	namespace, _ := md["namespace"].(string)
	req := &admission.Request{
		Object:    obj,
		Kind:      schema.FromAPIVersionAndKind(apiVersion, kind),
		Resource:  t.Resource,
		Name:      name,
		Namespace: namespace,
		UserInfo:  trigger.UserInfo,
		DryRun:    trigger.DryRun,
		Mode:      trigger.Mode,
	}
	if req.Resource.Resource == "" {
		req.Resource = admission.ResourceFor(req.Kind)
	}
	return req
}
