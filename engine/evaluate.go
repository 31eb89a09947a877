package engine

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	"github.com/arbiter-pdp/arbiter/engine/celenv"
	"github.com/arbiter-pdp/arbiter/engine/jsonval"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// Result words, as in wgpolicyk8s.io PolicyReports.
const (
	ResultPass  = "pass"
	ResultFail  = "fail"
	ResultWarn  = "warn"
	ResultError = "error"
	ResultSkip  = "skip"
)

// Sources of results, as Kyverno names them in PolicyReports.
const SourceValidatingPolicy = "KyvernoValidatingPolicy"

// Report property names.
const (
	PropProcess         = "process"
	PropExceptions      = "exceptions"
	PropValidationIndex = "cel.validationIndex"
)

// Result is one policy's verdict on a request.
type Result struct {
	// Policy is the report name: name, or namespace/name for namespaced policies.
	Policy          string
	PolicyName      string
	PolicyNamespace string
	PolicyKind      string
	// Rule is "" for a plain result, or "exception", "evaluation", "match".
	Rule    string
	Result  string
	Message string
	// Properties are the PolicyReport properties.
	Properties map[string]string
	// Exceptions are namespace/name of the exceptions that decided the
	// result (granted ones for an exemption, the refused one whose control
	// message is shown).
	Exceptions []string
	Actions    []string
	Source     string
	Scored     bool
	Category   string
	Severity   string
	// MatchConditionsSkip marks a skip because the policy's matchConditions
	// were false (background reports leave those out).
	MatchConditionsSkip bool

	policy *Policy
	// status is the engine's outcome (a fail of an unscored policy is
	// reported as warn but still acted on as a fail).
	status string
	// ruleMessage is the engine's message, before report overrides from
	// properties; admission denials and warnings use it.
	ruleMessage string
}

// Decision is the outcome of a request.
type Decision struct {
	Allowed bool
	// Results holds one result per matched policy, in evaluation order.
	Results  []Result
	Warnings []string
	// AuditAnnotations are the audit annotations to record.
	AuditAnnotations map[string]string
	// Denials are the reasons the request is denied.
	Denials []string
	// Message is the denial message (Denials joined as Kyverno does).
	Message string
	// Code and Reason are the HTTP status code and reason of a denial: those
	// of the first denial (400 and "" for a Kyverno policy; a
	// ValidatingAdmissionPolicy's reason, Invalid by default, and its code).
	Code   int32
	Reason string
	// Cost is the CEL cost charged for the decision (see Request.CostBudget).
	Cost uint64
}

// Evaluate decides a request. It never fails: problems evaluating a policy
// become `error` results. The caller must not modify the request's objects
// while Evaluate runs.
func (ps *PolicySet) Evaluate(ctx context.Context, req *Request) *Decision {
	rq := newEvalRequest(ctx, ps, req)
	d := &Decision{Allowed: true}
	cands := ps.candidates(req.Resource.Resource)
	d.Results = make([]Result, 0, len(cands))
	for _, e := range cands {
		p := e.policy
		switch req.Mode {
		case ModeAdmission:
			if !p.Spec.AdmissionEnabled() || p.Namespaced() && req.Namespace != p.Namespace {
				continue
			}
		case ModeBackground:
			if !p.Spec.BackgroundEnabled() || p.Namespaced() && req.Namespace != p.Namespace {
				continue
			}
		}
		r, ok := rq.evalPolicy(e)
		if !ok {
			continue
		}
		if req.Mode == ModeBackground && r.MatchConditionsSkip {
			continue
		}
		if req.Trace != nil {
			rq.note(p, "", PhaseResult, strings.Join(r.Exceptions, ", "), explainResult(&r))
		}
		d.Results = append(d.Results, r)
	}
	d.applyActions()
	ps.finishDecision(ctx, req, d)
	ps.evaluatePSA(rq, d)
	d.Cost = rq.cost
	return d
}

func (d *Decision) applyActions() {
	// The message joins the denials; each denial is a slice of it (one
	// allocation for all of them).
	size, denials := 0, 0
	for i := range d.Results {
		if r := &d.Results[i]; r.actionable() && r.policy.deny {
			size += len("Policy ") + len(r.policy.Name) + len(" ") + len(r.verb()) + len(": ") + len(r.ruleMessage) + len("; ")
			denials++
		}
	}
	if denials > 0 {
		var msg strings.Builder
		msg.Grow(size)
		ends := make([]int, 0, denials)
		for i := range d.Results {
			if r := &d.Results[i]; r.actionable() && r.policy.deny {
				if msg.Len() > 0 {
					msg.WriteString("; ")
				}
				msg.WriteString("Policy ")
				msg.WriteString(r.policy.Name)
				msg.WriteString(" ")
				msg.WriteString(r.verb())
				msg.WriteString(": ")
				msg.WriteString(r.ruleMessage)
				ends = append(ends, msg.Len())
			}
		}
		d.Allowed = false
		d.Message = msg.String()
		d.Denials = make([]string, denials)
		start := 0
		for i, end := range ends {
			d.Denials[i] = d.Message[start:end]
			start = end + len("; ")
		}
	}
	k := 0 // denials seen
	for i := range d.Results {
		r := &d.Results[i]
		if !r.actionable() {
			continue
		}
		if r.policy.warn {
			if r.policy.deny {
				d.Warnings = append(d.Warnings, d.Denials[k])
			} else {
				d.Warnings = append(d.Warnings, "Policy "+r.policy.Name+" "+r.verb()+": "+r.ruleMessage)
			}
		}
		if r.policy.deny {
			k++
		}
	}
}

// actionable says whether the result's policy actions apply: it failed or
// erred.
func (r *Result) actionable() bool { return r.status == ResultFail || r.status == ResultError }

// verb is how an actionable result is worded in denials and warnings.
func (r *Result) verb() string {
	if r.status == ResultError {
		return "error"
	}
	return "failed"
}

// evalRequest holds what is shared by every policy evaluated for a request.
type evalRequest struct {
	ctx             context.Context
	req             *Request
	now             time.Time
	object          any
	oldObject       any
	request         any
	namespaceObject map[string]any
	namespaceVal    any
	libCtx          kyvernocel.Context
	shared          map[string]bool
	// memo holds results of request-pure expressions, by canonical form.
	memo map[string]ref.Val
	// sizeLevel is the size level of the inputs (-2: not computed yet).
	sizeLevel int
	extraSize uint64
	// cost is the CEL cost of the policies evaluated so far.
	cost uint64
	// st is the state of the policy being evaluated (one at a time: one
	// allocation per request rather than per policy).
	st policyState
}

// level returns the index of the size level bounding the request's inputs.
func (rq *evalRequest) level() int {
	if rq.sizeLevel == -2 {
		var sizes manifest.Sizes
		others := []any{rq.req.Object, rq.req.OldObject, rq.namespaceObject, rq.req.Options}
		if h := rq.req.ObjectSizes; h != nil {
			sizes, others = *h, others[2:]
		}
		for _, v := range others {
			sizes = sizes.Max(manifest.SizesOf(v))
		}
		c, s := sizes.Entries, sizes.Length
		u := rq.req.UserInfo
		c = max(c, rq.extraSize, uint64(len(u.Groups)), uint64(len(u.Extra)))
		s = max(s, rq.extraSize, uint64(len(rq.req.Name)), uint64(len(rq.req.Namespace)), uint64(len(u.Username)),
			uint64(len(u.UID)), uint64(len(rq.req.Operation)), uint64(len(rq.req.SubResource)), uint64(len(rq.req.RequestSubResource)))
		// request.kind, request.resource (CRD groups run to 253 characters).
		for _, gvk := range []*schema.GroupVersionKind{&rq.req.Kind, rq.req.RequestKind} {
			if gvk != nil {
				s = max(s, uint64(len(gvk.Group)), uint64(len(gvk.Version)), uint64(len(gvk.Kind)))
			}
		}
		for _, gvr := range []*schema.GroupVersionResource{&rq.req.Resource, rq.req.RequestResource} {
			if gvr != nil {
				s = max(s, uint64(len(gvr.Group)), uint64(len(gvr.Version)), uint64(len(gvr.Resource)))
			}
		}
		for _, g := range u.Groups {
			s = max(s, uint64(len(g)))
		}
		for k, vs := range u.Extra {
			c = max(c, uint64(len(vs)))
			s = max(s, uint64(len(k)))
			for _, v := range vs {
				s = max(s, uint64(len(v)))
			}
		}
		rq.sizeLevel = levelFor(c, s)
	}
	return rq.sizeLevel
}

func newEvalRequest(ctx context.Context, ps *PolicySet, req *Request) *evalRequest {
	rq := &evalRequest{ctx: ctx, req: req, now: req.Now, sizeLevel: -2, extraSize: ps.exceptionSize}
	if rq.now.IsZero() {
		rq.now = time.Now()
	}
	rq.object = toVal(req.Object)
	rq.oldObject = toVal(req.OldObject)

	ns := req.NamespaceObject
	if ns == nil && req.Namespace != "" {
		ns = ps.namespaces[req.Namespace]
	}
	rq.namespaceObject = ns
	if ns != nil && req.Namespace != "" && !(req.Resource.Resource == "namespaces" && req.Resource.Group == "") {
		rq.namespaceVal = jsonval.Of(ns)
	} else {
		rq.namespaceVal = types.NullValue
	}
	rq.libCtx = req.Context
	if rq.libCtx == nil {
		rq.libCtx = kyvernocel.Offline
	}
	rq.shared = ps.shared
	return rq
}

// toVal returns the activation value of an object: a lazily converted,
// cached view shared by every policy of the request. An absent object
// (oldObject on CREATE, object on DELETE) is an empty map, as Kyverno
// passes it; request.object and request.oldObject are null then.
func toVal(m map[string]any) any {
	if m == nil {
		return jsonval.NewMap(map[string]any{})
	}
	return jsonval.NewMap(m)
}

// evalPolicy evaluates one policy; ok is false when it does not apply.
func (rq *evalRequest) evalPolicy(e *entry) (Result, bool) {
	p := e.policy
	if p.jsonMode {
		return rq.evalVariant(e, p.variants[0]), true
	}
	for _, v := range p.variants {
		ok, err := v.match.matches(rq)
		if err != nil {
			return rq.result(p, "match", ResultError, "failed to execute matching: "+err.Error(), nil), true
		}
		if ok {
			if rq.req.Trace != nil {
				what := "matched the policy's resource rules"
				if v.config != "" {
					what = "matched the resource rules of the autogen " + v.config + " variant (pod template at " + v.templatePath + ")"
				}
				rq.note(p, v.config, PhaseMatch, "", what)
			}
			return rq.evalVariant(e, v), true
		}
	}
	return Result{}, false
}

func (rq *evalRequest) result(p *Policy, rule, result, message string, props map[string]string) Result {
	r := Result{
		Policy:          p.Key(),
		PolicyName:      p.Name,
		PolicyNamespace: p.Namespace,
		PolicyKind:      p.Kind,
		Rule:            rule,
		Result:          result,
		Message:         message,
		Properties:      props,
		Source:          SourceValidatingPolicy,
		Scored:          p.scored,
		Category:        p.category,
		Severity:        p.severity,
		policy:          p,
		status:          result,
		ruleMessage:     message,
		Actions:         p.actionNames,
	}
	proc := rq.process(p)
	if r.Properties == nil {
		// Shared, read-only: results' properties are never modified in place.
		r.Properties = processProps[proc]
	} else if proc != "" {
		r.Properties[PropProcess] = proc
	}
	if result == ResultFail && !p.scored {
		r.Result = ResultWarn
	}
	return r
}

// processProps are the read-only properties of results that carry only the process.
var processProps = map[string]map[string]string{
	"admission review": {PropProcess: "admission review"},
	"background scan":  {PropProcess: "background scan"},
	"":                 {},
}

func (rq *evalRequest) process(p *Policy) string {
	switch rq.req.Mode {
	case ModeAdmission:
		return "admission review"
	case ModeBackground:
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

// refusal is a matched exception whose compensating controls refused it.
type refusal struct {
	exception *Exception
	message   string
	err       error
}

// evalVariant evaluates a matched policy variant: exceptions (with their
// compensating controls), matchConditions, validations, audit annotations.
func (rq *evalRequest) evalVariant(e *entry, v *variant) Result {
	if b := rq.req.CostBudget; b > 0 && rq.cost > b {
		return rq.result(v.policy, "evaluation", ResultError, fmt.Sprintf("decision cost budget of %d exceeded (the policies before this one cost %d); the policy was not evaluated", b, rq.cost), nil)
	}
	st := &rq.st
	*st = policyState{rq: rq, v: v, exact: rq.req.exact}
	r := rq.evalVariantOnce(e, v, st)
	if st.inexact {
		// Charged estimates exceeded the budget: redo the policy with
		// exact cost tracking, which decides whether it really does.
		*st = policyState{rq: rq, v: v, exact: true}
		r = rq.evalVariantOnce(e, v, st)
	}
	rq.cost += st.cost
	return r
}

func (rq *evalRequest) evalVariantOnce(e *entry, v *variant, st *policyState) Result {
	p := v.policy
	fl := flavour(p.Namespaced())
	var granted []*Exception
	var refused []refusal
	full := false
	allowedImages, allowedValues := []string{}, []string{}
	var buf [8]int
	for _, i := range e.index.candidates(rq.req.Object, buf[:0]) {
		ex := e.exceptions[i]
		if ex.Expired(rq.now) {
			rq.note(p, v.config, PhaseExceptionCondition, ex.Key(), "expired at "+ex.ExpiresAt.Format(time.RFC3339)+": ignored")
			continue
		}
		if ex.refuted(rq.req.Object) {
			rq.note(p, v.config, PhaseExceptionCondition, ex.Key(), "does not match: a matchCondition compares a field of the object with other values")
			continue
		}
		st.at(PhaseExceptionCondition, "", ex.Key())
		matched, err := st.match(ex.conds[fl], p.failurePolicy)
		if err != nil {
			if full {
				continue
			}
			return rq.result(p, "evaluation", ResultError, "failed to load context: "+err.Error(), nil)
		}
		if !matched {
			continue
		}
		if controls := ex.controls[fl]; len(controls) > 0 {
			if r, ok := st.controls(ex, controls); !ok {
				rq.note(p, v.config, PhaseExceptionControl, ex.Key(), "refused: "+refusalText(r))
				refused = append(refused, r)
				continue
			}
		}
		rq.note(p, v.config, PhaseExceptionCondition, ex.Key(), "granted")
		granted = append(granted, ex)
		if ex.full {
			full = true
		} else if !full {
			allowedImages = append(allowedImages, ex.Spec.Images...)
			allowedValues = append(allowedValues, ex.Spec.AllowedValues...)
		}
	}
	if full {
		return rq.exemption(p, granted)
	}
	if len(allowedImages) == 0 && len(allowedValues) == 0 {
		st.exceptions = &noExceptions
	} else {
		st.exceptions = &celenv.Exception{AllowedImages: allowedImages, AllowedValues: allowedValues}
	}
	st.varsStore = varsValue{st: st}
	if n := len(v.variables); n <= len(st.varsArray) {
		st.varsStore.values = st.varsArray[:n]
	} else {
		st.varsStore.values = make([]ref.Val, n)
	}
	st.vars = &st.varsStore

	st.at(PhaseMatchCondition, "", "")
	matched, err := st.match(v.matchConditions, p.failurePolicy)
	if err != nil {
		return rq.result(p, "evaluation", ResultError, "failed to load context: "+err.Error(), nil)
	}
	if !matched {
		r := rq.result(p, "", ResultSkip, "skip", nil)
		r.MatchConditionsSkip = true
		return r
	}
	for i, val := range v.validations {
		st.at(PhaseValidation, index(i), "")
		out, err := st.eval(val.prog)
		var ok bool
		if err == nil {
			ok, err = asBool(out)
		}
		if err != nil {
			return rq.withRefusal(rq.indexedResult(p, ResultError, "error: "+err.Error(), nil, i), v, granted, refused)
		}
		if ok {
			continue
		}
		message := val.message
		if val.msgProg != nil {
			st.at(PhaseMessageExpression, index(i), "")
			out, err := st.eval(val.msgProg)
			if err != nil {
				message = "failed to evaluate message expression: " + err.Error()
			} else if s, err := asString(out); err != nil {
				message = "failed to convert message expression to string: " + err.Error()
			} else {
				message = s
			}
		}
		if message == "" {
			message = fmt.Sprintf("CEL expression validation failed at index %d", i)
		}
		annotations, err := st.auditAnnotations()
		if err != nil {
			return rq.withRefusal(rq.indexedResult(p, ResultError, "error: "+err.Error(), nil, i), v, granted, refused)
		}
		return rq.withRefusal(rq.indexedResult(p, ResultFail, message, annotations, i), v, granted, refused)
	}
	annotations, err := st.auditAnnotations()
	if err != nil {
		return rq.result(p, "evaluation", ResultError, "failed to load context: "+err.Error(), nil)
	}
	r := rq.result(p, "", ResultPass, "success", annotations)
	applyMessageProperties(&r)
	return r
}

// exemption is the result of a granted full exemption: skip, or pass when
// the selected exception (highest priority label, else the first) says so.
func (rq *evalRequest) exemption(p *Policy, granted []*Exception) Result {
	selected := granted[0]
	best := 0
	keys := make([]string, len(granted))
	names := make([]string, len(granted))
	for i, ex := range granted {
		keys[i] = ex.Key()
		names[i] = ex.Name
		if ex.priority > best {
			best = ex.priority
			selected = ex
		}
	}
	verb, result := "skipped", ResultSkip
	if selected.Spec.ReportResult == ResultPass {
		verb, result = "passed", ResultPass
	}
	r := rq.result(p, "exception", result,
		fmt.Sprintf("rule is %s due to policy exception: %s", verb, strings.Join(keys, ", ")),
		map[string]string{PropExceptions: strings.Join(names, ",")})
	r.Exceptions = keys
	return r
}

// withRefusal applies compensating-control refusals to a failing result:
// when no exception was granted and at least one matched exception was
// refused, the message of the first refused exception (by namespace, then
// name) replaces the policy's, and a refusal by a runtime error makes the
// result an error.
func (rq *evalRequest) withRefusal(r Result, v *variant, granted []*Exception, refused []refusal) Result {
	if len(refused) == 0 || len(granted) > 0 || r.status != ResultFail {
		applyMessageProperties(&r)
		return r
	}
	sort.SliceStable(refused, func(i, j int) bool {
		a, b := refused[i].exception, refused[j].exception
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	first := refused[0]
	msg := first.message
	if first.err != nil {
		r.Result, r.status = ResultError, ResultError
		msg = first.err.Error()
	}
	if v.templatePath != "" {
		msg = fmt.Sprintf("%s (pod template at %s)", msg, v.templatePath)
	}
	r.Message, r.ruleMessage = msg, msg
	r.Exceptions = []string{first.exception.Key()}
	props := make(map[string]string, len(r.Properties)+1)
	for k, v := range r.Properties {
		props[k] = v
	}
	props[PropExceptions] = first.exception.Name
	r.Properties = props
	return r
}

// applyMessageProperties applies Kyverno's report message overrides from
// result properties (audit annotations): first the one named after the
// result's status before any warn conversion (passMessage, failMessage,
// ...), then "message", which wins.
func applyMessageProperties(r *Result) {
	if m, ok := r.Properties[r.status+"Message"]; ok {
		r.Message = m
	}
	if m, ok := r.Properties["message"]; ok {
		r.Message = m
	}
}

// indexedResult is the result of validation i: its properties carry the
// index (and the audit annotations).
func (rq *evalRequest) indexedResult(p *Policy, result, message string, annotations map[string]string, i int) Result {
	if len(annotations) > 0 {
		return rq.result(p, "", result, message, indexProps(annotations, i))
	}
	r := rq.result(p, "", result, message, nil)
	r.Properties = indexedProcessProps(rq.process(p), i)
	return r
}

// indexedProps holds the shared, read-only properties of results of the
// first validations, by process and validation index.
var indexedProps = func() map[string][]map[string]string {
	out := map[string][]map[string]string{}
	for proc := range processProps {
		for i := range 16 {
			props := map[string]string{PropValidationIndex: strconv.Itoa(i)}
			if proc != "" {
				props[PropProcess] = proc
			}
			out[proc] = append(out[proc], props)
		}
	}
	return out
}()

// indexedProcessProps returns the properties of a result of validation i
// under process proc, without annotations; shared and read-only where it
// can be (results' properties are never modified in place).
func indexedProcessProps(proc string, i int) map[string]string {
	if l := indexedProps[proc]; i < len(l) {
		return l[i]
	}
	props := indexProps(nil, i)
	if proc != "" {
		props[PropProcess] = proc
	}
	return props
}

func indexProps(props map[string]string, i int) map[string]string {
	out := make(map[string]string, len(props)+2)
	for k, v := range props {
		out[k] = v
	}
	if _, ok := out[PropValidationIndex]; !ok {
		out[PropValidationIndex] = strconv.Itoa(i)
	}
	return out
}

// policyState is the evaluation of one policy variant for one request.
type policyState struct {
	rq         *evalRequest
	v          *variant
	vars       *varsValue
	varsStore  varsValue
	varsArray  [8]ref.Val
	exceptions *celenv.Exception
	cost       uint64
	libs       map[string]any
	// exact runs every program with cost tracking.
	exact bool
	// inexact is set when charged estimates exceeded the budget.
	inexact bool
	// lbl says what is being evaluated (for traces).
	lbl traceLabel
}

var (
	errBudget = errors.New("validation failed due to running out of cost budget, no further validation rules will be run")
	// errInexact aborts an evaluation whose charged estimates exceeded the
	// budget, so it is redone with exact cost tracking.
	errInexact = errors.New("cost estimates exceeded the budget")
)

// estimateCheck, when set (by tests), is called after every untracked
// evaluation, to check the estimate charged bounds the exact cost.
var estimateCheck func(st *policyState, p *program, level int)

// eval evaluates a program in this policy's activation, sharing the
// results of request-pure expressions across policies.
func (st *policyState) eval(p *program) (ref.Val, error) {
	if p.constant != nil {
		return p.constant, nil
	}
	memo := p.memoKey != "" && st.rq.shared[p.memoKey]
	if memo {
		if v, ok := st.rq.memo[p.memoKey]; ok {
			return v, nil
		}
	}
	var out ref.Val
	var err error
	if lvl := st.rq.level(); p.fast != nil && lvl >= 0 && p.est[lvl] <= fastCostLimit && !st.exact {
		// Proven cheap for inputs of this size: run untracked, charge the estimate.
		st.cost += p.est[lvl]
		if st.cost > celconfig.RuntimeCELCostBudget {
			// The estimates overcharge; the policy is redone exactly.
			st.inexact = true
			return nil, errInexact
		}
		out, _, err = p.fast.Eval(st)
		if estimateCheck != nil {
			estimateCheck(st, p, lvl)
		}
	} else {
		prg, perr := p.trackedProgram()
		if perr != nil {
			return nil, perr
		}
		var det *cel.EvalDetails
		out, det, err = prg.Eval(st)
		if det != nil {
			if c := det.ActualCost(); c != nil {
				st.cost += *c
				if st.cost > celconfig.RuntimeCELCostBudget {
					return nil, errBudget
				}
			}
		}
	}
	st.traced(p, out, err)
	if err != nil {
		return nil, err
	}
	if memo {
		if st.rq.memo == nil {
			st.rq.memo = map[string]ref.Val{}
		}
		st.rq.memo[p.memoKey] = out
	}
	return out, nil
}

// match evaluates conditions as Kyverno does: any false is no match; errors
// without a false follow failurePolicy (Ignore: no match; Fail: error).
func (st *policyState) match(conds []*program, fp admissionregistrationv1.FailurePolicyType) (bool, error) {
	var errs []string
	for i, c := range conds {
		st.lbl.name = index(i)
		out, err := st.eval(c)
		var ok bool
		if err == nil {
			ok, err = asBool(out)
		}
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if !ok {
			return false, nil
		}
	}
	if len(errs) == 0 {
		return true, nil
	}
	if fp == admissionregistrationv1.Ignore {
		return false, nil
	}
	return false, errors.New(strings.Join(errs, "; "))
}

// controls evaluates an exception's compensating controls in order; the
// exception is granted only if every one is true.
func (st *policyState) controls(ex *Exception, controls []*control) (refusal, bool) {
	for i, c := range controls {
		st.at(PhaseExceptionControl, index(i), ex.Key())
		out, err := st.eval(c.prog)
		var ok bool
		if err == nil {
			ok, err = asBool(out)
		}
		if err != nil {
			return refusal{exception: ex, err: fmt.Errorf("compensating control at index %d of policy exception %s: %v", i, ex.Key(), err)}, false
		}
		if ok {
			continue
		}
		msg := c.message
		if c.msgProg != nil {
			st.at(PhaseExceptionControlMessage, index(i), ex.Key())
			if out, err := st.eval(c.msgProg); err == nil {
				if s, err := asString(out); err == nil {
					msg = s
				}
			}
		}
		if strings.TrimSpace(msg) == "" {
			msg = fmt.Sprintf("compensating control at index %d failed for policy exception %s", i, ex.Key())
		}
		return refusal{exception: ex, message: strings.TrimSpace(msg)}, false
	}
	return refusal{}, true
}

func (st *policyState) auditAnnotations() (map[string]string, error) {
	if len(st.v.auditAnnotations) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(st.v.auditAnnotations))
	for _, a := range st.v.auditAnnotations {
		st.at(PhaseAuditAnnotation, a.key, "")
		v, err := st.eval(a.prog)
		if err != nil {
			return nil, fmt.Errorf("failed to evaluate auditAnnotation '%s': %w", a.key, err)
		}
		s, err := asString(v)
		if err != nil {
			return nil, fmt.Errorf("failed to convert auditAnnotation '%s' expression: %w", a.key, err)
		}
		if s != "" {
			out[a.key] = s
		}
	}
	return out, nil
}

// ResolveName implements interpreter.Activation.
func (st *policyState) ResolveName(name string) (any, bool) {
	switch name {
	case celenv.ObjectVar:
		return st.rq.object, true
	case celenv.OldObjectVar:
		return st.rq.oldObject, true
	case celenv.RequestVar:
		if st.rq.request == nil {
			st.rq.request = jsonval.Of(st.rq.req.requestValue())
		}
		return st.rq.request, true
	case celenv.NamespaceObjectVar:
		return st.rq.namespaceVal, true
	case celenv.VariablesVar:
		if st.vars == nil {
			return nil, false
		}
		return st.vars, true
	case celenv.ExceptionsVar:
		if st.exceptions == nil {
			return nil, false
		}
		return st.exceptions, true
	}
	if st.libs == nil {
		st.libs = kyvernocel.BindContext(st.rq.ctx, st.rq.libCtx, st.v.policy.Namespace)
	}
	v, ok := st.libs[name]
	return v, ok
}

// Parent implements interpreter.Activation.
func (st *policyState) Parent() interpreter.Activation { return nil }

// varsValue is the lazily evaluated `variables` object of a policy: a
// variable is computed on first use, in the policy's activation.
type varsValue struct {
	st     *policyState
	values []ref.Val
}

var varsTypeValue = types.NewTypeValue(celenv.VariablesTypeName, traits.IndexerType|traits.FieldTesterType|traits.IterableType)

// noExceptions is the `exceptions` value when no image- or value-based
// exception applies (read-only).
var noExceptions = celenv.Exception{AllowedImages: []string{}, AllowedValues: []string{}}

func (m *varsValue) index(name string) int {
	for i, v := range m.st.v.variables {
		if v.name == name {
			return i
		}
	}
	return -1
}

func (m *varsValue) resolve(i int) ref.Val {
	if v := m.values[i]; v != nil {
		return v
	}
	prev := m.st.at(PhaseVariable, m.st.v.variables[i].name, "")
	out, err := m.st.eval(m.st.v.variables[i].prog)
	m.st.lbl = prev
	if err != nil {
		out = types.WrapErr(err)
	}
	m.values[i] = out
	return out
}

// Find implements traits.Mapper.
func (m *varsValue) Find(key ref.Val) (ref.Val, bool) {
	n, ok := key.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(key), true
	}
	i := m.index(string(n))
	if i < 0 {
		return nil, false
	}
	return m.resolve(i), true
}

// Get implements traits.Indexer.
func (m *varsValue) Get(key ref.Val) ref.Val {
	if v, found := m.Find(key); found {
		return v
	}
	return types.ValOrErr(key, "no such key: %v", key)
}

// Contains implements traits.Container.
func (m *varsValue) Contains(key ref.Val) ref.Val {
	v, found := m.Find(key)
	if v != nil && types.IsUnknownOrError(v) {
		return v
	}
	return types.Bool(found)
}

// IsSet implements traits.FieldTester.
func (m *varsValue) IsSet(field ref.Val) ref.Val { return m.Contains(field) }

// Size implements traits.Sizer.
func (m *varsValue) Size() ref.Val { return types.Int(len(m.values)) }

// Iterator implements traits.Iterable.
func (m *varsValue) Iterator() traits.Iterator {
	names := make([]string, len(m.st.v.variables))
	for i, v := range m.st.v.variables {
		names[i] = v.name
	}
	return types.NewStringList(types.DefaultTypeAdapter, names).(traits.Lister).Iterator()
}

// ConvertToNative implements ref.Val.
func (m *varsValue) ConvertToNative(typeDesc reflect.Type) (any, error) {
	return nil, fmt.Errorf("disallowed conversion from %q to %q", celenv.VariablesTypeName, typeDesc.Name())
}

// ConvertToType implements ref.Val.
func (m *varsValue) ConvertToType(typeVal ref.Type) ref.Val {
	switch typeVal {
	case varsTypeValue:
		return m
	case types.TypeType:
		return varsTypeValue
	}
	return types.NewErr("disallowed conversion from %q to %q", celenv.VariablesTypeName, typeVal.TypeName())
}

// Equal implements ref.Val.
func (m *varsValue) Equal(other ref.Val) ref.Val {
	o, ok := other.(*varsValue)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	return types.Bool(m == o)
}

// Type implements ref.Val.
func (m *varsValue) Type() ref.Type { return varsTypeValue }

// Value implements ref.Val.
func (m *varsValue) Value() any { return types.NoSuchOverloadErr() }

var (
	boolType   = reflect.TypeFor[bool]()
	stringType = reflect.TypeFor[string]()
)
