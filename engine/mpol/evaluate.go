package mpol

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/google/cel-go/common/types/ref"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apiserver/pkg/cel/mutation/dynamic"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/exception"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
	"github.com/arbiter-pdp/arbiter/engine/patch"
)

// Report words of MutatingPolicy results, as Kyverno's engine words them
// (pkg/cel/policies/mpol/engine).
const (
	messageSuccess    = "success"
	messageSkip       = "skip"
	messageNotApplied = "mutation is not applied"
	evaluationFailed  = "failed to evaluate policy: "
)

// applies says whether a policy mutates the request in its mode: at
// admission, the admission-enabled policies in scope that mutate the
// admitted object (a policy with targetMatchConstraints mutates other
// resources); in background scans, the background-enabled ones; the CLI
// evaluates every policy, as `kyverno test` does.
func applies(p *Policy, req *admission.Request) bool {
	inScope := !p.Namespaced() || req.Namespace == p.Namespace
	switch req.Mode {
	case admission.ModeAdmission:
		return inScope && p.Spec.AdmissionEnabled() && p.Spec.TargetMatchConstraints == nil
	case admission.ModeBackground:
		return inScope && p.Spec.BackgroundEnabled() && p.Spec.TargetMatchConstraints == nil
	}
	return true
}

// match returns the variant that matches the request, nil when none does.
func (p *Policy) match(rq *celeval.Request) (*variant, error) {
	for _, v := range p.variants {
		ok, err := v.match.Matches(rq.Attributes(), rq.Namespace())
		if err != nil {
			return nil, err
		}
		if ok {
			return v, nil
		}
	}
	return nil, nil
}

// Mutate applies the policies that apply to the request, in order, each
// to the object as the previous ones left it (the request's object as
// mutated so far: rq.Object()), and sets the result as the request's
// object. It adds one result per policy to out, and a denial for the
// errors of policies whose failurePolicy is Fail. A policy that errs
// leaves the object as it found it. In background scans each policy is
// evaluated on the stored object alone, and one that would change it
// fails ("mutation is not applied").
func (s *Set) Mutate(rq *celeval.Request, out *outcome.Outcome) {
	if s.Empty() {
		return
	}
	req := rq.Attributes()
	background := req.Mode == admission.ModeBackground
	original := rq.Object()
	// The JSON patches of the policies are applied in place by one Patcher,
	// which copies a container of the object once for them all (made when
	// a policy first needs it). The object it leaves is never changed once
	// Mutate returns.
	var pt *patch.Patcher
	var failures []string
	cands := s.byResource.Candidates(req.Resource.Resource)
	out.Reserve(len(cands))
	for _, e := range cands {
		p := e.policy
		if !applies(p, req) {
			continue
		}
		var r outcome.Result
		v, err := p.match(rq)
		switch {
		case err != nil:
			r = result(req.Mode, p, outcome.RuleMatch, outcome.Error, "failed to execute matching: "+err.Error(), nil)
			r.Cause = outcome.CauseMatch
		case v == nil:
			continue
		default:
			if rq.Traced() {
				what := "matched the policy's resource rules"
				if v.config != "" {
					what = "matched the resource rules of the autogen " + v.config + " variant (pod template at " + v.templatePath + ")"
				}
				rq.Note(p.Key(), v.config, outcome.PhaseMatch, "", what)
			}
			if !background && v.inPlace() {
				if pt == nil {
					pt = patchers.Get().(*patch.Patcher)
					pt.Reset(rq.Object(), patch.Options{})
				}
				var changed bool
				r, changed = s.evalInPlace(rq, e, v, pt)
				r.Mutated = changed
				break
			}
			var after celeval.ObjectMark
			var mutated bool
			r, after, mutated = s.evalVariant(rq, e, v, v.matchConditions)
			if mutated {
				mutated := after.Object()
				if background {
					if r.Result == outcome.Pass && !patch.Equal(mutated, original) {
						r.Result, r.Message = outcome.Fail, messageNotApplied
					}
				} else {
					r.Mutated = !patch.Equal(mutated, rq.Object())
					rq.Restore(after)
				}
			}
		}
		r.Expired = e.bound.Expired(rq.Now())
		if r.Result == outcome.Error && p.failurePolicy == admissionregistrationv1.Fail {
			failures = append(failures, "Policy "+p.Name+": "+r.Message)
		}
		if rq.Traced() {
			note := r.Result + ": " + r.Message
			if r.Mutated {
				note += " (the object was mutated)"
			}
			rq.Note(p.Key(), "", outcome.PhaseResult, strings.Join(r.Exceptions(), ", "), note)
		}
		out.Results = append(out.Results, r)
	}
	if pt != nil {
		pt.Reset(nil, patch.Options{})
		patchers.Put(pt)
	}
	if len(failures) > 0 {
		out.Deny(400, "", "Resource: ", req.Namespace, "/", req.Name, ", Kind: ", req.Kind.Kind, ", Errors: [", strings.Join(failures, " "), "]")
	}
}

// evalVariant evaluates a matched policy variant on the object as mutated
// so far: exceptions, conditions (the matchConditions, or a target's
// targetMatchConditions), the mutations in order (each on the previous
// one's result), audit annotations. It returns the result and the mutated
// object, as a mark to restore, and whether there is one (not when the
// policy did not apply its mutations: skip, exemption, error); the
// request's object is the one the policy found.
func (s *Set) evalVariant(rq *celeval.Request, e *entry, v *variant, conds []*celeval.Program) (outcome.Result, celeval.ObjectMark, bool) {
	p := v.policy
	mode := rq.Attributes().Mode
	if err := rq.Stopped(); err != nil {
		r := result(mode, p, outcome.RuleEvaluation, outcome.Error, err.Error()+"; the policy was not evaluated", nil)
		r.Cause = outcome.CauseEvaluation
		return r, celeval.ObjectMark{}, false
	}
	if rq.BudgetSpent() {
		r := result(mode, p, outcome.RuleEvaluation, outcome.Error, fmt.Sprintf("decision cost budget of %d exceeded (the policies before this one cost %d); the policy was not evaluated", rq.Budget(), rq.Cost()), nil)
		r.Cause = outcome.CauseEvaluation
		return r, celeval.ObjectMark{}, false
	}
	before := rq.Mark()
	type ret struct {
		r       outcome.Result
		after   celeval.ObjectMark
		mutated bool
	}
	o := celeval.Run(rq, &v.scope, func(st *celeval.State) ret {
		// Each run starts from the object the policy found (a rerun with
		// exact cost tracking discards the first run's mutations).
		rq.Restore(before)
		r, ok := s.evalVariantOnce(rq, e, v, conds, st, nil)
		return ret{r, rq.Mark(), ok}
	})
	rq.Restore(before)
	return o.r, o.after, o.mutated
}

// patchers are the Patchers of the requests being mutated.
var patchers = sync.Pool{New: func() any { return new(patch.Patcher) }}

// copyOnly makes every policy apply its mutations by copying (tests).
var copyOnly bool

// inPlace says whether the variant's mutations may be applied in place by
// a Patcher: they are all JSON patches, and no value computed before one
// of them (a variable's, which holds the object's containers as they were)
// is read after it.
func (v *variant) inPlace() bool {
	if copyOnly {
		return false
	}
	for _, m := range v.mutations {
		if !m.jsonPatch {
			return false
		}
	}
	return len(v.scope.Variables) == 0 || len(v.mutations) == 1 && len(v.auditAnnotations) == 0
}

// evalInPlace is evalVariant for a variant whose mutations pt applies in
// place (v.inPlace()), to the request's object: it returns the result and
// whether the object changed, the request's object being the policy's
// result (as it found it when the policy did not apply its mutations).
func (s *Set) evalInPlace(rq *celeval.Request, e *entry, v *variant, pt *patch.Patcher) (outcome.Result, bool) {
	p := v.policy
	mode := rq.Attributes().Mode
	if err := rq.Stopped(); err != nil {
		r := result(mode, p, outcome.RuleEvaluation, outcome.Error, err.Error()+"; the policy was not evaluated", nil)
		r.Cause = outcome.CauseEvaluation
		return r, false
	}
	if rq.BudgetSpent() {
		r := result(mode, p, outcome.RuleEvaluation, outcome.Error, fmt.Sprintf("decision cost budget of %d exceeded (the policies before this one cost %d); the policy was not evaluated", rq.Budget(), rq.Cost()), nil)
		r.Cause = outcome.CauseEvaluation
		return r, false
	}
	if !sameMap(pt.Object(), rq.Object()) {
		// Another kind or a policy with other mutations set the object.
		pt.SetObject(rq.Object())
	}
	before := rq.Mark()
	sp := pt.Savepoint()
	defer pt.Release()
	runs := 0
	type ret struct {
		r       outcome.Result
		applied bool
	}
	o := celeval.Run(rq, &v.scope, func(st *celeval.State) ret {
		// Each run starts from the object the policy found (a rerun with
		// exact cost tracking discards the first run's mutations).
		if runs++; runs > 1 && pt.Touched(sp) {
			pt.Rollback(sp)
			rq.Rewind(before, pt)
		}
		r, ok := s.evalVariantOnce(rq, e, v, v.matchConditions, st, pt)
		return ret{r, ok}
	})
	if !o.applied {
		if pt.Touched(sp) {
			pt.Rollback(sp)
			rq.Rewind(before, pt)
		}
		return o.r, false
	}
	return o.r, pt.Changed(sp)
}

// evalVariantOnce evaluates the policy; it reports whether it applied its
// mutations (the request's object is then their result). With a Patcher
// (v.inPlace()), the mutations are applied in place by it.
func (s *Set) evalVariantOnce(rq *celeval.Request, e *entry, v *variant, conds []*celeval.Program, st *celeval.State, pt *patch.Patcher) (outcome.Result, bool) {
	p := v.policy
	mode := rq.Attributes().Mode
	fail := func(err error) (outcome.Result, bool) {
		r := result(mode, p, outcome.RuleEvaluation, outcome.Error, evaluationFailed+err.Error(), nil)
		r.Cause = outcome.CauseEvaluation
		return r, false
	}
	ver := e.bound.Evaluate(st, p.Namespaced(), admissionregistrationv1.Fail, exception.ErrorStops)
	if ver.Err != nil {
		return fail(ver.Err)
	}
	if ver.Full {
		res, msg, props, keys := exception.Exemption(ver.Granted)
		r := result(mode, p, outcome.RuleException, res, msg, props)
		r.Cause, r.Granted = outcome.CauseException, keys
		return r, false
	}
	st.SetExceptions(ver.AllowedImages, ver.AllowedValues)
	st.Label(outcome.PhaseMatchCondition, "", "")
	matched, err := st.Match(conds, admissionregistrationv1.Fail)
	if err != nil {
		return fail(err)
	}
	if !matched {
		r := result(mode, p, "", outcome.Skip, messageSkip, nil)
		r.Cause = outcome.CauseMatchConditions
		return r, false
	}
	start := rq.Object()
	obj := start
	// The object's identity as the policy found it (taken before the
	// first change in place), when a mutation changed it.
	var id identity
	changed := false
	for i, m := range v.mutations {
		st.Label(outcome.PhaseMutation, celeval.Index(i), "")
		val, err := st.Eval(m.prog)
		if err != nil {
			return fail(err)
		}
		prev := rq.ObjectSizes()
		var sizes manifest.Sizes
		if pt != nil {
			ops, err := celeval.JSONPatchOps(val)
			if err != nil {
				return fail(err)
			}
			if !changed && touchesIdentity(ops) {
				// Taken before the first change in place that may change
				// the identity: the changes before it did not.
				id, changed = identityOf(obj), true
			}
			applied, err := pt.Apply(ops)
			if err != nil {
				return fail(err)
			}
			if applied && len(ops) > 0 {
				obj = pt.Object()
				rq.SetObjectChanged(obj, patchSizes(obj, ops, prev), pt)
			}
			continue
		}
		if m.jsonPatch {
			obj, sizes, err = applyJSONPatch(obj, val, prev)
		} else {
			obj, sizes, err = s.applyConfiguration(obj, val, p.allowAtomic, prev)
		}
		if err != nil {
			return fail(err)
		}
		rq.SetObjectSized(obj, sizes)
	}
	if pt == nil && !sameMap(obj, start) {
		id, changed = identityOf(start), true
	}
	if changed {
		if err := checkIdentity(id, identityOf(obj)); err != nil {
			return fail(err)
		}
	}
	annotations, err := auditAnnotations(st, v)
	if err != nil {
		return fail(err)
	}
	return result(mode, p, "", outcome.Pass, messageSuccess, annotations), true
}

func auditAnnotations(st *celeval.State, v *variant) (map[string]string, error) {
	if len(v.auditAnnotations) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(v.auditAnnotations))
	for _, a := range v.auditAnnotations {
		st.Label(outcome.PhaseAuditAnnotation, a.key, "")
		val, err := st.Eval(a.prog)
		if err != nil {
			return nil, fmt.Errorf("failed to evaluate auditAnnotation %q: %w", a.key, err)
		}
		s, err := celeval.AsString(val)
		if err != nil {
			return nil, fmt.Errorf("failed to convert auditAnnotation %q expression: %w", a.key, err)
		}
		if s != "" {
			out[a.key] = s
		}
	}
	return out, nil
}

// identityFields are what make an object the object it is: a mutation may
// not change them.
var identityFields = [...][]string{{"apiVersion"}, {"kind"}, {"metadata", "name"}, {"metadata", "namespace"}, {"metadata", "uid"}}

// identity is an object's identityFields ("" where missing or no string).
type identity [len(identityFields)]string

func identityOf(obj map[string]any) identity {
	var id identity
	id[0], _ = obj["apiVersion"].(string)
	id[1], _ = obj["kind"].(string)
	if meta, ok := obj["metadata"].(map[string]any); ok {
		id[2], _ = meta["name"].(string)
		id[3], _ = meta["namespace"].(string)
		id[4], _ = meta["uid"].(string)
	}
	return id
}

// touchesIdentity says whether ops may change an identity field: an op
// writes (or, for move, removes) at a path that is not under a top-level
// field other than apiVersion, kind and metadata, or under a metadata
// field other than name, namespace and uid. Paths it cannot read that
// way may.
func touchesIdentity(ops []patch.Op) bool {
	for i := range ops {
		op := &ops[i]
		if op.Op == "test" {
			continue
		}
		if mayReachIdentity(op.Path) || (op.Op == "move" && mayReachIdentity(op.From)) {
			return true
		}
	}
	return false
}

func mayReachIdentity(path string) bool {
	first, rest, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if !strings.HasPrefix(path, "/") || strings.Contains(first, "~") {
		return true
	}
	switch first {
	case "apiVersion", "kind":
		return true
	case "metadata":
		if !ok {
			return true
		}
		second, _, _ := strings.Cut(rest, "/")
		return second == "name" || second == "namespace" || second == "uid" || strings.Contains(second, "~")
	}
	return false
}

// checkIdentity refuses a mutated object that is not the same object: its
// apiVersion, kind, name, namespace or uid changed (a patch may not turn
// the admitted object into another one).
func checkIdentity(before, after identity) error {
	for i, path := range identityFields {
		if b, a := before[i], after[i]; b != a {
			return fmt.Errorf("the mutation changed %s from %q to %q: a mutation may not turn the object into another one", strings.Join(path, "."), b, a)
		}
	}
	return nil
}

// applyJSONPatch applies the JSON patch a mutation evaluated to, as
// kube-apiserver's JSON patcher turns it into one
// (k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch). It also
// bounds the sizes of the result from prev, those of the object: a patch
// adds values and keys, and lengthens the containers it writes into.
func applyJSONPatch(obj map[string]any, val ref.Val, prev manifest.Sizes) (map[string]any, manifest.Sizes, error) {
	ops, err := celeval.JSONPatchOps(val)
	if err != nil {
		return nil, prev, err
	}
	out, err := patch.ApplyJSONPatch(obj, ops)
	if err != nil {
		return nil, prev, err
	}
	return out, patchSizes(out, ops, prev), nil
}

// patchSizes bounds the sizes of out, the result of ops, from prev, those
// of the object they were applied to.
func patchSizes(out map[string]any, ops []patch.Op, prev manifest.Sizes) manifest.Sizes {
	sizes := prev
	for _, op := range ops {
		if _, none := op.Value.(patch.NoValue); !none {
			sizes = sizes.Max(manifest.SizesOf(op.Value))
		}
		parent, key, _ := cutLast(op.Path)
		sizes.Length = max(sizes.Length, uint64(len(key)))
		if n, ok := containerLen(out, parent); ok {
			sizes = sizes.Max(manifest.Sizes{Entries: n, Length: n})
		}
	}
	return sizes
}

func sameMap(a, b map[string]any) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func cutLast(path string) (parent, last string, ok bool) {
	i := strings.LastIndexByte(path, '/')
	if i < 0 {
		return "", path, false
	}
	return path[:i], path[i+1:], true
}

// containerLen returns the number of entries of the list or map at a JSON
// pointer of obj.
func containerLen(obj map[string]any, pointer string) (uint64, bool) {
	var cur any = obj
	if pointer != "" {
		rest := pointer[strings.IndexByte(pointer, '/')+1:]
		for more := true; more; {
			var tok string
			tok, rest, more = strings.Cut(rest, "/")
			if strings.IndexByte(tok, '~') >= 0 {
				tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			}
			switch c := cur.(type) {
			case map[string]any:
				cur = c[tok]
			case []any:
				i, err := strconv.Atoi(tok)
				if err != nil || i < 0 || i >= len(c) {
					return 0, false
				}
				cur = c[i]
			default:
				return 0, false
			}
		}
	}
	switch c := cur.(type) {
	case map[string]any:
		return uint64(len(c)), true
	case []any:
		return uint64(len(c)), true
	}
	return 0, false
}

// applyConfiguration merges the apply configuration a mutation evaluated
// to, as kube-apiserver's apply configuration patcher does. The sizes of
// the result are bounded from prev, those of the object: a merge adds the
// entries of the apply configuration to those of the object at most.
func (s *Set) applyConfiguration(obj map[string]any, val ref.Val, allowAtomic bool, prev manifest.Sizes) (map[string]any, manifest.Sizes, error) {
	ov, ok := val.(*dynamic.ObjectVal)
	if !ok {
		return nil, prev, fmt.Errorf("unsupported return type from ApplyConfiguration expression: %v", val.Type())
	}
	if err := ov.CheckTypeNamesMatchFieldPathNames(); err != nil {
		return nil, prev, fmt.Errorf("type mismatch: %w", err)
	}
	ac, ok := ov.Value().(map[string]any)
	if !ok {
		return nil, prev, fmt.Errorf("invalid return type: %T", ov.Value())
	}
	if s.apply == nil {
		return nil, prev, errors.New("error applying patch: type converter must not be nil")
	}
	// The apply configuration is of the object's kind.
	ac["apiVersion"], ac["kind"] = obj["apiVersion"], obj["kind"]
	out, err := s.apply.Apply(obj, ac, allowAtomic)
	if err != nil {
		return nil, prev, fmt.Errorf("error applying patch: %w", err)
	}
	acs := manifest.SizesOf(ac)
	return out, manifest.Sizes{Entries: prev.Entries + acs.Entries, Length: prev.Length + acs.Length}, nil
}

func result(mode admission.Mode, p *Policy, rule, res, message string, props map[string]string) outcome.Result {
	r := outcome.Result{
		Policy:          p.Key(),
		PolicyName:      p.Name,
		PolicyNamespace: p.Namespace,
		PolicyKind:      p.Kind,
		Rule:            rule,
		Result:          res,
		Message:         message,
		Properties:      props,
		Source:          outcome.SourceMutatingPolicy,
		Scored:          true,
	}
	proc := process(mode, p)
	if r.Properties == nil {
		r.Properties = processProps[proc]
	} else if proc != "" {
		r.Properties[outcome.PropProcess] = proc
	}
	return r
}

// processProps are the read-only properties of results that carry only the process.
var processProps = map[string]map[string]string{
	"admission review": {outcome.PropProcess: "admission review"},
	"background scan":  {outcome.PropProcess: "background scan"},
	"":                 {},
}

func process(mode admission.Mode, p *Policy) string {
	switch mode {
	case admission.ModeAdmission:
		return "admission review"
	case admission.ModeBackground:
		return "background scan"
	}
	if p.Spec.BackgroundEnabled() {
		return "background scan"
	}
	if p.Spec.AdmissionEnabled() {
		return "admission review"
	}
	return ""
}
