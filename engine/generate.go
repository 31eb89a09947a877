package engine

import (
	"context"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/gpol"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// Generate evaluates, offline, the GeneratingPolicies and
// NamespacedGeneratingPolicies on a trigger request, as Kyverno's CLI
// does (engine/gpol: Set.Generate): the trigger is first mutated as
// Evaluate mutates it (Kyverno generates from the admitted object), then
// every policy that selects it has a result — pass with the objects its
// generator.Apply calls would create, skip (or pass) when a
// PolicyException exempts the trigger, error when an expression fails.
// Policies that do not select the trigger (matchConstraints,
// matchConditions) have no result. Nothing is created. The set must have
// been compiled with Options.Generating; opts may be nil (opts.Stages is
// ignored).
func (ps *PolicySet) Generate(ctx context.Context, trigger *admission.Request, opts *EvalOptions) []gpol.Result {
	if ps.gpol.Empty() || trigger.Shape.Authorization() {
		return nil
	}
	o := EvalOptions{}
	if opts != nil {
		o = *opts
	}
	o.ObjectSizes = nil
	rq := ps.newRequest(ctx, trigger, &o)
	if trigger.Object != nil && len(ps.mutators) > 0 {
		var discard outcome.Outcome
		for _, m := range ps.mutators {
			m.mutate(rq, &discard)
		}
		if obj := rq.Object(); !sameObject(obj, trigger.Object) {
			mutated := *trigger
			mutated.Object = obj
			rq = rq.Continue(&mutated)
		}
	}
	return ps.gpol.Generate(rq)
}

// HasGenerating says whether the set has GeneratingPolicies.
func (ps *PolicySet) HasGenerating() bool { return !ps.gpol.Empty() }
