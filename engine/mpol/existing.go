package mpol

import (
	"errors"
	"fmt"
	"strings"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// Mutate-existing policies, offline: what `kyverno test` does with a
// test's targetResources (Kyverno 1.19, cmd/cli/kubectl-kyverno/processor:
// discoverCELTargets, targetMatchPredicate, and the mutate-existing engine
// Evaluate). A trigger request selects targets; each target is then
// mutated by every mutate-existing policy that selects it, in order, each
// on the target as the previous ones left it.
//
// The mutate-existing policies are those with
// evaluation.mutateExisting.enabled (targetMatchConstraints alone does not
// make one). A policy selects a target
//
//   - with targetMatchConstraints.expression: when the expression,
//     evaluated on the trigger, returned the target (its namespace/name,
//     or name): Discover;
//   - else with the resource rules of targetMatchConstraints, when it has
//     some, or else with its own matchConstraints (an autogen variant's
//     for the pod controllers): every operation matches (operations are
//     not considered) and the namespace is not known (a namespaceSelector
//     sees only the label kubernetes.io/metadata.name).
//
// A target is evaluated as `object` (oldObject and namespaceObject
// absent) within the trigger's request (`request` is the trigger's):
// exceptions, then targetMatchConditions instead of matchConditions, then
// the mutations; the results are those of admission.
//
// Deliberate difference: Kyverno also runs the autogen variants of a
// pod-only policy on a target that targetMatchConstraints selects (the
// variants keep targetMatchConstraints), mutating it up to three times
// with pod-template apply configurations; Arbiter runs the policy once,
// as the policy itself.

// Discovered are the targets the targetMatchConstraints expressions of
// mutate-existing policies selected for one trigger.
type Discovered struct {
	// keys are, by policy, the namespace/name (or name) of the objects
	// its expression returned.
	keys map[*Policy]map[string]bool
}

// Selected says whether a policy's expression selected the object named
// namespace/name.
func (d Discovered) Selected(p *Policy, namespace, name string) bool {
	return d.keys[p][objectKey(namespace, name)]
}

func objectKey(namespace, name string) string {
	if namespace != "" {
		return namespace + "/" + name
	}
	return name
}

// Discover evaluates the targetMatchConstraints expression of every
// mutate-existing policy that has one, on the trigger: rq's `object` is
// the trigger as the admission mutations left it, `variables` the
// policy's. The expression returns an object, or a map whose `items` are
// objects; each is a target. A policy whose expression fails (or returns
// no object) gets an error result: Kyverno's CLI then fails the whole
// test ("failed to discover CEL targets").
func (s *Set) Discover(rq *celeval.Request) (Discovered, []outcome.Result) {
	d := Discovered{keys: map[*Policy]map[string]bool{}}
	if s.Empty() {
		return d, nil
	}
	var errs []outcome.Result
	for _, e := range s.entries {
		p := e.policy
		if !p.Spec.MutateExistingEnabled() || p.target == nil || p.target.expr == nil {
			continue
		}
		keys, err := celeval.Run(rq, &p.variants[0].scope, func(st *celeval.State) targetKeys {
			st.Label(outcome.PhaseMatch, "targetMatchConstraints.expression", "")
			return discover(st, p.target.expr)
		}).get()
		if err != nil {
			r := result(rq.Attributes().Mode, p, outcome.RuleEvaluation, outcome.Error,
				"failed to evaluate the targetMatchConstraints expression: "+err.Error(), nil)
			r.Cause = outcome.CauseEvaluation
			errs = append(errs, r)
			continue
		}
		d.keys[p] = keys
	}
	return d, errs
}

type targetKeys struct {
	keys map[string]bool
	err  error
}

func (t targetKeys) get() (map[string]bool, error) { return t.keys, t.err }

func discover(st *celeval.State, expr *celeval.Program) targetKeys {
	objs, err := discoverObjects(st, expr)
	if err != nil {
		return targetKeys{err: err}
	}
	keys := map[string]bool{}
	for _, obj := range objs {
		md, _ := obj["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		ns, _ := md["namespace"].(string)
		keys[objectKey(ns, name)] = true
	}
	return targetKeys{keys: keys}
}

// discoverObjects evaluates a targetMatchConstraints expression: the
// object it returns, or the objects of the items of the map it returns.
func discoverObjects(st *celeval.State, expr *celeval.Program) ([]map[string]any, error) {
	val, err := st.Eval(expr)
	if err != nil {
		return nil, err
	}
	native, err := celeval.ToJSON(val)
	if err != nil {
		return nil, err
	}
	m, ok := native.(map[string]any)
	if !ok {
		if native == nil {
			return nil, errors.New("the expression returned null, not an object or a list of objects")
		}
		return nil, fmt.Errorf("the expression returned %T, not an object or a list of objects", native)
	}
	items, ok := m["items"].([]any)
	if !ok {
		return []map[string]any{m}, nil
	}
	objs := make([]map[string]any, 0, len(items))
	for _, it := range items {
		if obj, ok := it.(map[string]any); ok {
			objs = append(objs, obj)
		}
	}
	return objs, nil
}

// selectTarget returns the variant of a mutate-existing policy that
// selects a target (rq's request), or nil.
func (p *Policy) selectTarget(req *admission.Request, found Discovered) *variant {
	if t := p.target; t != nil {
		switch {
		case t.expr != nil:
			if found.Selected(p, req.Namespace, req.Name) {
				return p.variants[0]
			}
			return nil
		case t.match != nil:
			if ok, err := t.match.Matches(req, nil); ok && err == nil {
				return p.variants[0]
			}
			return nil
		}
	}
	for _, v := range p.variants {
		if ok, err := v.targetMatch.Matches(req, nil); ok && err == nil {
			return v
		}
	}
	return nil
}

// MutateTarget applies the mutate-existing policies that select a target
// to it, in order, each to the target as the previous ones left it (rq's
// object as mutated so far: rq.Object(), which it updates). rq evaluates
// the target: its request is the target's (kind, resource, name,
// namespace; no operation, no namespace object) and its `request`
// variable the trigger's (celeval.Config.Request). It adds one result
// per policy that selects the target to out; errors deny nothing (the
// target is not being admitted).
func (s *Set) MutateTarget(rq *celeval.Request, found Discovered, out *outcome.Outcome) {
	if s.Empty() {
		return
	}
	req := rq.Attributes()
	for _, e := range s.entries {
		p := e.policy
		if !p.Spec.MutateExistingEnabled() {
			continue
		}
		if p.Namespaced() && req.Mode != admission.ModeCLI && req.Namespace != p.Namespace {
			continue
		}
		v := p.selectTarget(req, found)
		if v == nil {
			continue
		}
		if rq.Traced() {
			what := "selected the target"
			if v.config != "" {
				what = "selected the target with the resource rules of the autogen " + v.config + " variant"
			}
			rq.Note(p.Key(), v.config, outcome.PhaseMatch, "", what)
		}
		var conds []*celeval.Program
		if p.target != nil {
			conds = p.target.conditions
		}
		r, after, mutated := s.evalVariant(rq, e, v, conds)
		if mutated {
			rq.Restore(after)
		}
		r.Expired = e.bound.Expired(rq.Now())
		if rq.Traced() {
			rq.Note(p.Key(), "", outcome.PhaseResult, strings.Join(r.Exceptions(), ", "), r.Result+": "+r.Message)
		}
		out.Results = append(out.Results, r)
	}
}
