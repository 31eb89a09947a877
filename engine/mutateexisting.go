package engine

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/mpol"
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

// Mutate-existing policies in a cluster (Kyverno's admission handler and
// background controller; engine/mpol: Triggered, TargetObjects,
// MutateTargetBy). The caller (the Kubernetes source) reads and writes
// the cluster; the engine only evaluates.

// HasMutateExisting says whether the set has a MutatingPolicy with
// evaluation.mutateExisting.enabled (compiled with
// Options.MutateExisting): only then can an admission request set one off.
func (ps *PolicySet) HasMutateExisting() bool { return ps.mpol.HasMutateExisting() }

// MutateExistingTriggers returns the mutate-existing MutatingPolicies an
// admission request sets off, as Kyverno's admission handler selects them
// (engine/mpol Triggered): mutateExisting and admission enabled, in scope,
// matchConstraints matching the request and matchConditions holding. A
// dry-run request, or one not in admission mode, sets off none. opts may
// be nil (opts.Stages is ignored).
func (ps *PolicySet) MutateExistingTriggers(ctx context.Context, req *admission.Request, opts *EvalOptions) []*mpol.Policy {
	if req.DryRun || req.Mode != admission.ModeAdmission || req.Shape.Authorization() || !ps.HasMutateExisting() {
		return nil
	}
	return ps.mpol.Triggered(ps.newRequest(ctx, req, opts))
}

// MutateExistingPolicy returns the mutate-existing MutatingPolicy of the
// set whose key (namespace/name, or name) is key, or nil.
func (ps *PolicySet) MutateExistingPolicy(key string) *mpol.Policy {
	p := ps.mpol.Lookup(key)
	if p == nil || !p.Spec.MutateExistingEnabled() {
		return nil
	}
	return p
}

// MutateExistingTargets evaluates a mutate-existing policy's
// targetMatchConstraints expression on the trigger (its object as the
// cluster holds it: for a DELETE, its old object): the objects it
// returned. A policy without an expression returns none (its targets are
// those its TargetConstraints select).
func (ps *PolicySet) MutateExistingTargets(ctx context.Context, p *mpol.Policy, trigger *admission.Request, opts *EvalOptions) ([]map[string]any, error) {
	req := *trigger
	if req.Object == nil {
		req.Object = req.OldObject
	}
	return ps.mpol.TargetObjects(ps.newRequest(ctx, &req, opts), p)
}

// MutateTargetBy evaluates one mutate-existing policy of the set on a
// target selected for it in a cluster: exceptions, targetMatchConditions,
// the mutations (engine/mpol MutateTargetBy), the target evaluated as
// `object` within the trigger's `request`. The target is not modified;
// Patched is the target as the policy left it. opts may be nil.
func (ps *PolicySet) MutateTargetBy(ctx context.Context, p *mpol.Policy, trigger *admission.Request, t Target, opts *EvalOptions) TargetResult {
	o := EvalOptions{}
	if opts != nil {
		o = *opts
	}
	req := targetRequest(trigger, t)
	req.Mode = admission.ModeAdmission
	req.DryRun = false
	rq := celeval.NewRequest(ctx, req, celeval.Config{
		Context:    o.Context,
		Now:        o.Now,
		Trace:      o.Trace,
		CostBudget: o.CostBudget,
		ExtraSize:  ps.exceptionSize,
		ExactCost:  true,
		Request:    trigger,
	})
	var res outcome.Outcome
	ps.mpol.MutateTargetBy(rq, p, &res)
	return TargetResult{Results: res.Results, Patched: rq.Object()}
}
