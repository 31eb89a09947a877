package vpol

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/exception"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// applies says whether a policy applies in the request's mode: its
// evaluation gates (admission, background) and, for a namespaced policy,
// the request's namespace. The CLI mode evaluates every policy.
func applies(p *Policy, req *admission.Request) bool {
	switch req.Mode {
	case admission.ModeAdmission:
		return p.Spec.AdmissionEnabled() && (!p.Namespaced() || req.Namespace == p.Namespace)
	case admission.ModeBackground:
		return p.Spec.BackgroundEnabled() && (!p.Namespaced() || req.Namespace == p.Namespace)
	}
	return true
}

// match returns the variant of the policy that matches the request (the
// policy itself, then its autogen variants), nil when none does; an error
// when matching fails (the request's namespace cannot be known).
func (p *Policy) match(rq *celeval.Request) (*variant, error) {
	if p.jsonMode {
		return p.variants[0], nil
	}
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

// resultInfo is what the evaluation knows of a result beyond what it reports.
type resultInfo struct {
	policy *Policy
	// status is the engine's outcome (a fail of an unscored policy is
	// reported as warn but still acted on as a fail).
	status string
	// ruleMessage is the engine's message, before report overrides from
	// properties; admission denials and warnings use it.
	ruleMessage string
}

// Evaluate evaluates the policies that apply to the request and adds their
// results, denials and warnings to out. It never fails: problems
// evaluating a policy become error results.
func (s *Set) Evaluate(rq *celeval.Request, out *outcome.Outcome) {
	req := rq.Attributes()
	cands := s.candidates(req.Resource.Resource)
	if len(cands) == 0 {
		return
	}
	out.Reserve(len(cands))
	var infoBuf [16]resultInfo
	infos := infoBuf[:0]
	for _, e := range cands {
		p := e.policy
		if !applies(p, req) {
			continue
		}
		v, err := p.match(rq)
		if err == nil && v == nil {
			continue
		}
		// The result is made in its place among the results.
		out.Results = append(out.Results, outcome.Result{})
		r := &out.Results[len(out.Results)-1]
		var info resultInfo
		switch {
		case err != nil:
			info = result(r, rq, p, outcome.RuleMatch, outcome.Error, "failed to execute matching: "+err.Error(), nil)
			r.Cause = outcome.CauseMatch
		default:
			if rq.Traced() {
				what := "matched the policy's resource rules"
				if v.config != "" {
					what = "matched the resource rules of the autogen " + v.config + " variant (pod template at " + v.templatePath + ")"
				}
				rq.Note(p.Key(), v.config, outcome.PhaseMatch, "", what)
			}
			info = evalVariant(r, rq, e, v)
		}
		if req.Mode == admission.ModeBackground && r.Cause == outcome.CauseMatchConditions {
			out.Results = out.Results[:len(out.Results)-1]
			continue
		}
		r.Expired = e.bound.Expired(rq.Now())
		if rq.Traced() {
			rq.Note(p.Key(), "", outcome.PhaseResult, strings.Join(r.Exceptions(), ", "), Explain(r))
		}
		infos = append(infos, info)
	}
	applyActions(out, infos)
}

// applyActions adds the denials and warnings of the results' policies'
// validationActions.
func applyActions(out *outcome.Outcome, infos []resultInfo) {
	size := 0
	for i := range infos {
		if in := &infos[i]; in.actionable() && in.policy.deny {
			size += len("Policy ") + len(in.policy.Name) + len(" ") + len(in.verb()) + len(": ") + len(in.ruleMessage) + len("; ")
		}
	}
	if size > 0 {
		out.GrowMessage(size)
	}
	for i := range infos {
		in := &infos[i]
		if !in.actionable() {
			continue
		}
		if in.policy.deny {
			out.Deny(400, "", "Policy ", in.policy.Name, " ", in.verb(), ": ", in.ruleMessage)
		}
		if in.policy.warn {
			out.Warnings = append(out.Warnings, "Policy "+in.policy.Name+" "+in.verb()+": "+in.ruleMessage)
		}
	}
}

// actionable says whether the result's policy actions apply: it failed or
// erred.
func (in *resultInfo) actionable() bool {
	return in.status == outcome.Fail || in.status == outcome.Error
}

// verb is how an actionable result is worded in denials and warnings.
func (in *resultInfo) verb() string {
	if in.status == outcome.Error {
		return "error"
	}
	return "failed"
}

func result(r *outcome.Result, rq *celeval.Request, p *Policy, rule, res, message string, props map[string]string) resultInfo {
	*r = outcome.Result{
		Policy:          p.Key(),
		PolicyName:      p.Name,
		PolicyNamespace: p.Namespace,
		PolicyKind:      p.Kind,
		Rule:            rule,
		Result:          res,
		Message:         message,
		Properties:      props,
		Source:          outcome.SourceValidatingPolicy,
		Scored:          p.scored,
		Category:        p.category,
		Severity:        p.severity,
		Actions:         p.actionNames,
	}
	proc := process(rq.Attributes().Mode, p)
	if r.Properties == nil {
		// Shared, read-only: results' properties are never modified in place.
		r.Properties = processProps[proc]
	} else if proc != "" {
		r.Properties[outcome.PropProcess] = proc
	}
	if res == outcome.Fail && !p.scored {
		r.Result = outcome.Warn
	}
	return resultInfo{policy: p, status: res, ruleMessage: message}
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

// evalVariant evaluates a matched policy variant: exceptions (with their
// compensating controls), matchConditions, validations, audit annotations.
func evalVariant(r *outcome.Result, rq *celeval.Request, e *entry, v *variant) resultInfo {
	p := v.policy
	if err := rq.Stopped(); err != nil {
		info := result(r, rq, p, outcome.RuleEvaluation, outcome.Error, err.Error()+"; the policy was not evaluated", nil)
		r.Cause = outcome.CauseEvaluation
		return info
	}
	if rq.BudgetSpent() {
		info := result(r, rq, p, outcome.RuleEvaluation, outcome.Error, fmt.Sprintf("decision cost budget of %d exceeded (the policies before this one cost %d); the policy was not evaluated", rq.Budget(), rq.Cost()), nil)
		r.Cause = outcome.CauseEvaluation
		return info
	}
	return celeval.Run(rq, &v.scope, func(st *celeval.State) resultInfo {
		return evalVariantOnce(r, rq, e, v, st)
	})
}

func evalVariantOnce(r *outcome.Result, rq *celeval.Request, e *entry, v *variant, st *celeval.State) resultInfo {
	p := v.policy
	ver := e.bound.Evaluate(st, p.Namespaced(), p.failurePolicy, exception.ErrorStops)
	if ver.Err != nil {
		info := result(r, rq, p, outcome.RuleEvaluation, outcome.Error, "failed to load context: "+ver.Err.Error(), nil)
		r.Cause = outcome.CauseEvaluation
		return info
	}
	if ver.Full {
		res, msg, props, keys := exception.Exemption(ver.Granted)
		info := result(r, rq, p, outcome.RuleException, res, msg, props)
		r.Cause, r.Granted = outcome.CauseException, keys
		return info
	}
	st.SetExceptions(ver.AllowedImages, ver.AllowedValues)

	st.Label(outcome.PhaseMatchCondition, "", "")
	matched, err := st.Match(v.matchConditions, p.failurePolicy)
	if err != nil {
		info := result(r, rq, p, outcome.RuleEvaluation, outcome.Error, "failed to load context: "+err.Error(), nil)
		r.Cause = outcome.CauseEvaluation
		return info
	}
	if !matched {
		info := result(r, rq, p, "", outcome.Skip, "skip", nil)
		r.Cause = outcome.CauseMatchConditions
		return info
	}
	for i, val := range v.validations {
		st.Label(outcome.PhaseValidation, celeval.Index(i), "")
		out, err := st.Eval(val.prog)
		var ok bool
		if err == nil {
			ok, err = celeval.AsBool(out)
		}
		if err != nil {
			info := indexedResult(r, rq, p, outcome.Error, "error: "+err.Error(), nil, i)
			return withRefusal(r, info, v, ver)
		}
		if ok {
			continue
		}
		message := val.message
		if val.msgProg != nil {
			st.Label(outcome.PhaseMessageExpression, celeval.Index(i), "")
			out, err := st.Eval(val.msgProg)
			if err != nil {
				message = "failed to evaluate message expression: " + err.Error()
			} else if s, err := celeval.AsString(out); err != nil {
				message = "failed to convert message expression to string: " + err.Error()
			} else {
				message = s
			}
		}
		if message == "" {
			message = fmt.Sprintf("CEL expression validation failed at index %d", i)
		}
		annotations, err := auditAnnotations(st, v)
		if err != nil {
			info := indexedResult(r, rq, p, outcome.Error, "error: "+err.Error(), nil, i)
			return withRefusal(r, info, v, ver)
		}
		info := indexedResult(r, rq, p, outcome.Fail, message, annotations, i)
		return withRefusal(r, info, v, ver)
	}
	annotations, err := auditAnnotations(st, v)
	if err != nil {
		info := result(r, rq, p, outcome.RuleEvaluation, outcome.Error, "failed to load context: "+err.Error(), nil)
		r.Cause = outcome.CauseEvaluation
		return info
	}
	info := result(r, rq, p, "", outcome.Pass, "success", annotations)
	applyMessageProperties(r, info.status)
	return info
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
			return nil, fmt.Errorf("failed to evaluate auditAnnotation '%s': %w", a.key, err)
		}
		s, err := celeval.AsString(val)
		if err != nil {
			return nil, fmt.Errorf("failed to convert auditAnnotation '%s' expression: %w", a.key, err)
		}
		if s != "" {
			out[a.key] = s
		}
	}
	return out, nil
}

// withRefusal applies compensating-control refusals to a failing result:
// when no exception was granted and at least one matched exception was
// refused, the message of the first refused exception (by namespace, then
// name) replaces the policy's, and a refusal by a runtime error makes the
// result an error.
func withRefusal(r *outcome.Result, info resultInfo, v *variant, ver exception.Verdict) resultInfo {
	if len(ver.Refused) == 0 || len(ver.Granted) > 0 || info.status != outcome.Fail {
		applyMessageProperties(r, info.status)
		return info
	}
	first := exception.FirstRefusal(ver.Refused)
	msg := first.Message
	if first.Err != nil {
		r.Result, info.status = outcome.Error, outcome.Error
		msg = first.Err.Error()
	}
	if v.templatePath != "" {
		msg = fmt.Sprintf("%s (pod template at %s)", msg, v.templatePath)
	}
	r.Message, info.ruleMessage = msg, msg
	r.Refused = first.Exception.Key()
	props := make(map[string]string, len(r.Properties)+1)
	for k, v := range r.Properties {
		props[k] = v
	}
	props[outcome.PropExceptions] = first.Exception.Name
	r.Properties = props
	return info
}

// applyMessageProperties applies Kyverno's report message overrides from
// result properties (audit annotations): first the one named after the
// result's status before any warn conversion (passMessage, failMessage,
// ...), then "message", which wins.
func applyMessageProperties(r *outcome.Result, status string) {
	if m, ok := r.Properties[status+"Message"]; ok {
		r.Message = m
	}
	if m, ok := r.Properties["message"]; ok {
		r.Message = m
	}
}

// indexedResult is the result of validation i: its properties carry the
// index (and the audit annotations).
func indexedResult(r *outcome.Result, rq *celeval.Request, p *Policy, res, message string, annotations map[string]string, i int) resultInfo {
	if len(annotations) > 0 {
		return result(r, rq, p, "", res, message, indexProps(annotations, i))
	}
	info := result(r, rq, p, "", res, message, nil)
	r.Properties = indexedProcessProps(process(rq.Attributes().Mode, p), i)
	return info
}

// indexedProps holds the shared, read-only properties of results of the
// first validations, by process and validation index.
var indexedProps = func() map[string][]map[string]string {
	out := map[string][]map[string]string{}
	for proc := range processProps {
		for i := range 16 {
			props := map[string]string{outcome.PropValidationIndex: strconv.Itoa(i)}
			if proc != "" {
				props[outcome.PropProcess] = proc
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
		props[outcome.PropProcess] = proc
	}
	return props
}

func indexProps(props map[string]string, i int) map[string]string {
	out := make(map[string]string, len(props)+2)
	for k, v := range props {
		out[k] = v
	}
	if _, ok := out[outcome.PropValidationIndex]; !ok {
		out[outcome.PropValidationIndex] = strconv.Itoa(i)
	}
	return out
}

// Explain says why a result is what it is.
func Explain(r *outcome.Result) string {
	switch {
	case r.Cause == outcome.CauseException:
		return r.Result + ": a granted exception exempts the resource (" + r.Message + ")"
	case r.Cause == outcome.CauseEvaluation:
		return r.Result + ": the policy could not be evaluated: " + r.Message
	case r.Cause == outcome.CauseMatch:
		return r.Result + ": matching failed: " + r.Message
	case r.Cause == outcome.CauseMatchConditions:
		return "skip: a matchCondition of the policy is false"
	case r.Result == outcome.Pass:
		return "pass: every validation holds"
	case r.Result == outcome.Fail || r.Result == outcome.Warn:
		why := "validation " + r.Properties[outcome.PropValidationIndex] + " is false"
		if r.Refused != "" {
			why += "; the matching exception " + r.Refused + " was refused by its compensating controls, whose message is shown"
		}
		return r.Result + ": " + why + ": " + r.Message
	case r.Result == outcome.Error:
		return "error: " + r.Message
	}
	return r.Result + ": " + r.Message
}
