package mapol

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"

	celtypes "github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/mutation/dynamic"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	ap "github.com/arbiter-pdp/arbiter/engine/admissionpolicy"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
	"github.com/arbiter-pdp/arbiter/engine/patch"
)

// Result words, as in PolicyReports.
const (
	ResultPass  = "pass"
	ResultFail  = "fail"
	ResultError = "error"
	ResultSkip  = "skip"
)

// Messages of results, as Kyverno's CLI words those of
// MutatingAdmissionPolicies where it has words for them.
const (
	// MessageApplied: every mutation of the invocation applied (whether or
	// not the object changed).
	MessageApplied = "mutation is successfully applied"
	// MessageMatchConditions: a matchCondition is false (or failed with
	// failurePolicy Ignore).
	MessageMatchConditions = "match conditions aren't met"
	// MessageNoParams: the binding found no param (parameterNotFoundAction Allow).
	MessageNoParams = "no params found for policy binding"
	// MessageNoObject: the request has no object (a CONNECT without one).
	MessageNoObject = "the request has no object to mutate"
	// MessageNotApplied: in a background scan, the policy would change the
	// stored object.
	MessageNotApplied = "mutation is not applied"
)

// Result is the verdict of one invocation (policy, binding and param) on a
// request, or a configuration error of a binding (Param "") or policy
// (Binding "").
type Result struct {
	Policy  string
	Binding string
	Param   string
	// Result is pass (its mutations applied), error (one failed: the
	// first error is Message; with failurePolicy Ignore the request is
	// still allowed and the other mutations kept), skip (matchConditions,
	// no param, no object) or, in background scans, fail (it would change
	// the stored object).
	Result  string
	Message string
	// Reinvoked says it ran again in the reinvocation pass.
	Reinvoked bool

	changed bool
}

// Denial is an error of a policy whose failurePolicy is Fail: it denies
// the request.
type Denial struct {
	Policy  string
	Binding string
	Message string
	// Reason is Invalid for an error evaluating an invocation, Forbidden
	// (the status' own) for a configuration error.
	Reason metav1.StatusReason
	// Code is 403, kube-apiserver's code for every policy denial.
	Code int32
}

// Text is the denial as kube-apiserver words it (generic.PolicyError).
func (d Denial) Text() string {
	if d.Binding == "" {
		return fmt.Sprintf("policy %q denied request: %s", d.Policy, d.Message)
	}
	return fmt.Sprintf("policy '%s' with binding '%s' denied request: %s", d.Policy, d.Binding, d.Message)
}

// Verdict is what the set decides for a request.
type Verdict struct {
	// Results in evaluation order (invocations of the reinvocation pass
	// update theirs).
	Results []Result
	// Denials in kube-apiserver's order (each pass's configuration errors,
	// then its invocations' errors); it answers with the first.
	Denials []Denial
	// Object is the object as the mutations left it (the request's own
	// object, not a copy, when none changed it).
	Object map[string]any
	// Passes is how many times the dispatcher ran: 0 when the request is
	// not one MutatingAdmissionPolicies handle (not a CREATE, UPDATE or
	// CONNECT, or on an admission policy or a review), 2 when it was
	// reinvoked.
	Passes int
}

// Decide decides a request as kube-apiserver's MutatingAdmissionPolicy
// plugin does, reinvocation included: the object the policies leave, the
// denials of those whose failurePolicy is Fail, and one result per
// invocation. trace, when not nil, receives every evaluation.
func (s *Set) Decide(ctx context.Context, req *admission.Request, trace func(ap.Step)) *Verdict {
	if !handles(req) {
		return &Verdict{Object: req.Object}
	}
	d := s.start(ctx, req, req.Object, trace)
	if d == nil {
		// nothing to dispatch: the plugin's one pass finds no policy
		return &Verdict{Object: req.Object, Passes: 1}
	}
	if !d.pass() && d.dirty {
		d.reinvoke()
	}
	return d.verdict
}

// handles says whether the plugin handles the request (it is registered
// for CREATE, UPDATE and CONNECT), and whether API-defined policies apply
// to its resource.
func handles(req *admission.Request) bool {
	switch req.Operation {
	case admission.OpCreate, admission.OpUpdate, admission.OpConnect:
	default:
		return false
	}
	_, gvr, _ := req.Requested()
	return !ap.AdmissionConfigResources[gvr.GroupResource()]
}

// key identifies an invocation (the dispatcher's reinvocation key).
type key struct{ policy, binding, param string }

// dispatch is one request's dispatch: the state the passes share.
type dispatch struct {
	s       *Set
	rq      *ap.Request
	req     *admission.Request
	gvk     schema.GroupVersionKind
	gvr     schema.GroupVersionResource
	object  map[string]any
	verdict *Verdict
	results map[key]int
	// ifNeeded are the IfNeeded invocations the first pass invoked: the
	// ones a reinvocation runs again.
	ifNeeded map[key]bool
	// dirty says a mutation of the current pass succeeded.
	dirty bool
	// reinvoking says the current pass is the reinvocation.
	reinvoking bool
	// lastOutput is the object the first pass left.
	lastOutput map[string]any
	background bool
}

func (s *Set) start(ctx context.Context, req *admission.Request, object map[string]any, trace func(ap.Step)) *dispatch {
	if s.Empty() || !handles(req) {
		return nil
	}
	gvk, gvr, _ := req.Requested()
	d := &dispatch{s: s, req: req, gvk: gvk, gvr: gvr, object: object, verdict: &Verdict{Object: object},
		results: map[key]int{}, background: req.Mode == admission.ModeBackground}
	d.rq = ap.NewRequest(ctx, s.objects, req, trace)
	return d
}

// policyError is the dispatcher's PolicyError.
type policyError struct {
	policy        *Policy
	binding       string
	message       string
	invocationErr bool
}

// invocation is a policy, binding and param to evaluate, with the
// resource and kind the policy matched the request as.
type invocation struct {
	policy  *Policy
	binding *Binding
	param   *Param
	gvr     schema.GroupVersionResource
	gvk     schema.GroupVersionKind
	key     key
}

// pass runs the dispatcher once over the object as it is now: it selects
// the invocations (matchConstraints, bindings, params), then runs each
// (matchConditions; on a reinvocation only those the first pass invoked
// with reinvocationPolicy IfNeeded; the mutations in order, each on the
// object as the previous left it, a failed one not stopping the next). It
// returns whether a denial was recorded.
func (d *dispatch) pass() bool {
	d.verdict.Passes++
	d.dirty = false
	d.rq.SetObject(d.object)
	var configErrs, invocationErrs []policyError
	var invocations []invocation
	for _, e := range d.s.byResource.Candidates(d.gvr.Resource) {
		p := e.policy
		ok, gvr, gvk := p.match.Matches(d.rq)
		if !ok {
			continue
		}
		if d.rq.Traced() {
			d.rq.TraceScope(p.Name, "", "")
			d.rq.Note(ap.Step{Phase: outcome.PhaseMatch, Note: "matched the policy's matchConstraints as " + gvk.GroupVersion().String() + " " + gvk.Kind})
		}
		for _, b := range e.bindings {
			d.rq.TraceScope(p.Name, b.Name, "")
			if b.match != nil {
				if ok, _, _ := b.match.Matches(d.rq); !ok {
					d.rq.Note(ap.Step{Phase: outcome.PhaseBindingMatch, Note: "the binding's matchResources do not match: not evaluated"})
					continue
				}
			}
			params, err := d.s.objects.CollectParams(p.paramKind, b.paramRef, b.paramSelector, d.req.Namespace)
			k := key{p.Name, b.Name, ""}
			if err != nil {
				msg := "failed to configure binding: " + err.Error()
				configErrs = append(configErrs, policyError{policy: p, binding: b.Name, message: msg})
				d.record(k, ResultError, msg)
				continue
			}
			if len(params) == 0 {
				d.record(k, ResultSkip, MessageNoParams)
				d.rq.Note(ap.Step{Phase: outcome.PhaseResult, Note: "skip: " + MessageNoParams})
				continue
			}
			for _, param := range params {
				inv := invocation{policy: p, binding: b, param: param, gvr: gvr, gvk: gvk, key: k}
				if param != nil {
					inv.key.param = param.Key()
				}
				invocations = append(invocations, inv)
			}
		}
	}
	for i := range invocations {
		invocationErrs = append(invocationErrs, d.invoke(&invocations[i])...)
	}
	if !d.reinvoking {
		d.lastOutput = d.object
	}
	denied := false
	for _, e := range append(configErrs, invocationErrs...) {
		if e.policy.failurePolicy == admissionregistrationv1.Ignore {
			continue
		}
		reason := metav1.StatusReasonForbidden
		if e.invocationErr {
			reason = metav1.StatusReasonInvalid
		}
		d.verdict.Denials = append(d.verdict.Denials, Denial{Policy: e.policy.Name, Binding: e.binding, Message: e.message, Reason: reason, Code: 403})
		denied = true
	}
	d.verdict.Object = d.object
	return denied
}

// reinvoke runs the reinvocation pass: the dispatcher again, running only
// the invocations the first pass invoked with reinvocationPolicy IfNeeded.
func (d *dispatch) reinvoke() bool {
	d.reinvoking = true
	return d.pass()
}

// invoke runs one invocation; it returns its errors.
func (d *dispatch) invoke(inv *invocation) []policyError {
	p := inv.policy
	d.rq.TraceScope(p.Name, inv.binding.Name, inv.key.param)
	var errs []policyError
	fail := func(msg string) {
		errs = append(errs, policyError{policy: p, binding: inv.binding.Name, message: msg, invocationErr: true})
		d.record(inv.key, ResultError, msg)
	}
	if d.reinvoking && !d.ifNeeded[inv.key] && p.failurePolicy == admissionregistrationv1.Ignore {
		// Not run again: its matchConditions (evaluated first by the
		// plugin) could only skip it, their errors being dropped.
		return nil
	}
	if len(p.matchConditions) > 0 {
		// matchConditions see the request's own resource, the matched kind
		// and no namespaceObject.
		results, _, err := d.rq.Pass(p.variables, p.matchConditions,
			ap.PassInputs{GVR: d.gvr, GVK: inv.gvk, Param: inv.param, Authorizer: true, Namespace: ap.NamespaceNull},
			celconfig.RuntimeCELCostBudgetMatchConditions)
		var matchErr error
		matched := true
		if err != nil {
			d.rq.Note(ap.Step{Phase: outcome.PhaseMatchCondition, Err: err.Error()})
			matchErr = err
		} else {
			d.rq.TraceResults(outcome.PhaseMatchCondition, p.matchConditionName, p.matchConditions, results)
			var list []error
			for _, r := range results {
				if r.Err != nil {
					list = append(list, r.Err)
				}
				if r.Value == celtypes.False {
					matched = false
					break
				}
			}
			if matched && len(list) > 0 {
				matchErr = utilerrors.NewAggregate(list)
			}
		}
		switch {
		case matched && matchErr != nil && p.failurePolicy != admissionregistrationv1.Ignore:
			fail(matchErr.Error())
			return errs
		case !matched || matchErr != nil:
			d.record(inv.key, ResultSkip, MessageMatchConditions)
			d.rq.Note(ap.Step{Phase: outcome.PhaseResult, Note: "skipped: a matchCondition is false (or failed with failurePolicy Ignore)"})
			return nil
		}
	}
	if d.reinvoking && !d.ifNeeded[inv.key] {
		return nil
	}
	if d.object == nil {
		d.record(inv.key, ResultSkip, MessageNoObject)
	} else {
		before := d.object
		for i := range p.mutations {
			if err := d.mutate(inv, i); err != nil {
				d.rq.Note(ap.Step{Phase: outcome.PhaseMutation, Name: ap.IndexName(i), Expression: p.mutations[i].result.ExpressionAccessor.GetExpression(), Err: err.Error()})
				fail(err.Error())
				continue
			}
		}
		d.record(inv.key, ResultPass, MessageApplied)
		if d.background && !sameMap(before, d.object) && !equalJSON(before, d.object) {
			d.verdict.Results[d.results[inv.key]].changed = true
		}
	}
	if p.reinvoke && !d.reinvoking {
		if d.ifNeeded == nil {
			d.ifNeeded = map[key]bool{}
		}
		d.ifNeeded[inv.key] = true
	}
	return errs
}

// record records what became of an invocation (or binding, or policy):
// in the first pass its result (an error overrides a pass, and the first
// error stays); in the reinvocation pass, its errors and that it ran again.
func (d *dispatch) record(k key, result, message string) {
	i, ok := d.results[k]
	if !ok {
		if d.reinvoking && result != ResultError {
			return
		}
		d.results[k] = len(d.verdict.Results)
		d.verdict.Results = append(d.verdict.Results, Result{Policy: k.policy, Binding: k.binding, Param: k.param, Result: result, Message: message, Reinvoked: d.reinvoking})
		return
	}
	r := &d.verdict.Results[i]
	switch {
	case result == ResultError && r.Result != ResultError:
		r.Result, r.Message = ResultError, message
	case d.reinvoking && result == ResultPass:
		// (an invocation the reinvocation runs passed the first pass's
		// matchConditions: its result is pass or error)
	}
	if d.reinvoking && result != ResultSkip {
		r.Reinvoked = true
	}
}

// mutate applies the i-th mutation of an invocation to the object as
// mutated so far, as the plugin's dispatchOne and patchers do.
func (d *dispatch) mutate(inv *invocation, i int) error {
	p := inv.policy
	m := &p.mutations[i]
	obj := d.object
	if inv.gvk != d.gvk {
		obj = ap.ConvertShallow(obj, inv.gvk)
	}
	evals, _, err := d.rq.Pass(p.variables, []plugincel.CompilationResult{m.result},
		ap.PassInputs{GVR: inv.gvr, GVK: inv.gvk, Param: inv.param, Authorizer: true, Namespace: ap.NamespaceFull},
		celconfig.RuntimeCELCostBudget)
	if err != nil {
		return err
	}
	if ev := evals[0]; ev.Err != nil {
		return ev.Err
	} else if d.rq.Traced() {
		d.rq.Note(ap.Step{Phase: outcome.PhaseMutation, Name: ap.IndexName(i), Expression: m.result.ExpressionAccessor.GetExpression(), Value: ev.Value})
	}
	val := evals[0].Value
	var out map[string]any
	if m.jsonPatch {
		ops, err := celeval.JSONPatchOps(val)
		if err != nil {
			return err
		}
		if out, err = kubeJSONPatch.ApplyJSONPatch(obj, ops); err != nil {
			return err
		}
		// kube-apiserver decodes the patched JSON: integral numbers are
		// int64 again.
		out = jsonNumbers(out)
	} else if out, err = d.s.applyConfiguration(obj, val); err != nil {
		return err
	}
	if inv.gvk != d.gvk {
		out = ap.ConvertShallow(out, d.gvk)
	}
	d.object = out
	d.rq.SetObject(out)
	d.dirty = true
	return nil
}

// kubeJSONPatch applies JSON patches as kube-apiserver does: the values its
// copy operations add are limited to 3 MiB (its JSONPatchMaxCopyBytes).
var kubeJSONPatch = patch.Options{MaxCopyBytes: patch.KubeAPIServerMaxCopyBytes}

// applyConfiguration merges the apply configuration a mutation evaluated
// to, as kube-apiserver's apply configuration patcher does.
func (s *Set) applyConfiguration(obj map[string]any, val ref.Val) (map[string]any, error) {
	ov, ok := val.(*dynamic.ObjectVal)
	if !ok {
		return nil, fmt.Errorf("unsupported return type from ApplyConfiguration expression: %v", val.Type())
	}
	if err := ov.CheckTypeNamesMatchFieldPathNames(); err != nil {
		return nil, fmt.Errorf("type mismatch: %w", err)
	}
	ac, ok := ov.Value().(map[string]any)
	if !ok {
		return nil, fmt.Errorf("invalid return type: %T", val)
	}
	// The apply configuration is of the object's kind.
	ac["apiVersion"], ac["kind"] = obj["apiVersion"], obj["kind"]
	if s.apply == nil {
		return nil, errors.New("error applying patch: type converter must not be nil")
	}
	out, err := s.apply.Apply(obj, ac, false)
	if err != nil {
		return nil, fmt.Errorf("error applying patch: %w", err)
	}
	return out, nil
}

// matchConditionName is the name of the policy's i-th matchCondition.
func (p *Policy) matchConditionName(i int) string {
	if i < len(p.Spec.MatchConditions) {
		return p.Spec.MatchConditions[i].Name
	}
	return ap.IndexName(i)
}

// traceVariant names an invocation in traces.
func traceVariant(binding, param string) string {
	if binding == "" {
		return ""
	}
	v := "binding " + binding
	if param != "" {
		v += " param " + param
	}
	return v
}

// sameMap says whether a and b are the same map (not merely equal).
func sameMap(a, b map[string]any) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// equalJSON says whether two JSON-shaped values are equal, numbers by
// value whatever their Go type (apiequality.Semantic.DeepEqual of the
// objects kube-apiserver decodes).
func equalJSON(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !equalJSON(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	if ia, ok := a.(int64); ok {
		if ib, ok := b.(int64); ok {
			return ia == ib
		}
	}
	if fa, ok := number(a); ok {
		fb, ok := number(b)
		return ok && fa == fb
	}
	return a == b
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case float64:
		return n, true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case float32:
		return float64(n), true
	}
	return 0, false
}

// jsonNumbers returns obj with its integral float64 numbers (those JSON
// writes without a fraction or an exponent, in int64's range) as int64, as
// decoding the object's JSON gives them: obj itself when it has none (it
// is never modified).
func jsonNumbers(obj map[string]any) map[string]any {
	if v, changed := normalizeNumbers(obj); changed {
		return v.(map[string]any)
	}
	return obj
}

func normalizeNumbers(v any) (any, bool) {
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e21 && x >= math.MinInt64 && x < math.MaxInt64 {
			return int64(x), true
		}
	case map[string]any:
		var out map[string]any
		for k, e := range x {
			if n, changed := normalizeNumbers(e); changed {
				if out == nil {
					out = make(map[string]any, len(x))
					for k2, e2 := range x {
						out[k2] = e2
					}
				}
				out[k] = n
			}
		}
		if out != nil {
			return out, true
		}
	case []any:
		var out []any
		for i, e := range x {
			if n, changed := normalizeNumbers(e); changed {
				if out == nil {
					out = append([]any(nil), x...)
				}
				out[i] = n
			}
		}
		if out != nil {
			return out, true
		}
	}
	return v, false
}
