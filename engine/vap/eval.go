package vap

import (
	"errors"
	"fmt"
	"strings"

	celtypes "github.com/google/cel-go/common/types"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"

	ap "github.com/arbiter-pdp/arbiter/engine/admissionpolicy"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// Decision actions and evaluations (the validating plugin's words).
const (
	actionAdmit = "admit"
	actionDeny  = "deny"
	evalAdmit   = "admit"
	evalError   = "error"
	evalDeny    = "deny"
)

// decision is the validating plugin's PolicyDecision.
type decision struct {
	action     string
	evaluation string
	message    string
	reason     metav1.StatusReason
}

const (
	auditPublish = "publish"
	auditError   = "error"
	auditExclude = "exclude"
)

type auditResult struct {
	key    string
	value  string
	action string
	err    string
}

// validateResult is the validating plugin's ValidateResult, plus whether
// the matchConditions skipped the evaluation.
type validateResult struct {
	decisions   []decision
	annotations []auditResult
	skipped     bool
}

func (p *Policy) actionForError() string {
	if p.failurePolicy == admissionregistrationv1.Ignore {
		return actionAdmit
	}
	return actionDeny
}

func (p *Policy) auditActionForError() string {
	if p.failurePolicy == admissionregistrationv1.Ignore {
		return auditExclude
	}
	return auditError
}

func (p *Policy) errorResult(msg string) validateResult {
	return validateResult{decisions: []decision{{action: p.actionForError(), evaluation: evalError, message: msg}}}
}

// validate evaluates the policy for one binding and param: the plugin's
// validator.Validate.
func (p *Policy) validate(rq *ap.Request, gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, param *Param) validateResult {
	if len(p.matchConditions) > 0 {
		// matchConditions see the request's own resource, the matched kind
		// and no namespaceObject.
		_, requested, _ := rq.Requested()
		results, _, err := rq.Pass(p.variables, p.matchConditions, ap.PassInputs{GVR: requested, GVK: gvk, Param: param, Authorizer: true, Namespace: ap.NamespaceNull},
			celconfig.RuntimeCELCostBudgetMatchConditions)
		if err != nil {
			rq.Note(Step{Phase: outcome.PhaseMatchCondition, Err: err.Error()})
			if p.failurePolicy == admissionregistrationv1.Ignore {
				return validateResult{skipped: true}
			}
			return p.errorResult(err.Error())
		}
		rq.TraceResults(outcome.PhaseMatchCondition, p.matchConditionName, p.matchConditions, results)
		var errs []error
		for _, r := range results {
			if r.Err != nil {
				errs = append(errs, r.Err)
			}
			if r.Value == celtypes.False {
				return validateResult{skipped: true}
			}
		}
		if len(errs) > 0 {
			if p.failurePolicy == admissionregistrationv1.Ignore {
				return validateResult{skipped: true}
			}
			return p.errorResult(utilerrors.NewAggregate(errs).Error())
		}
	}

	conds := make([]plugincel.CompilationResult, len(p.validations))
	msgs := make([]plugincel.CompilationResult, len(p.validations))
	for i := range p.validations {
		conds[i] = p.validations[i].result
		msgs[i] = p.validations[i].messageExpression
	}
	evals, remaining, err := rq.Pass(p.variables, conds, ap.PassInputs{GVR: gvr, GVK: gvk, Param: param, Authorizer: true, Namespace: ap.NamespaceRestricted}, celconfig.RuntimeCELCostBudget)
	if err != nil {
		return p.errorResult(err.Error())
	}
	rq.TraceResults(outcome.PhaseValidation, ap.IndexName, conds, evals)
	messages, _, msgErr := rq.Pass(p.variables, msgs, ap.PassInputs{GVR: gvr, GVK: gvk, Param: param, Namespace: ap.NamespaceRestricted}, remaining)
	if messages != nil {
		rq.TraceResults(outcome.PhaseMessageExpression, ap.IndexName, msgs, messages)
	}
	decisions := make([]decision, len(evals))
	for i, ev := range evals {
		d := &decisions[i]
		v := &p.validations[i]
		switch {
		case ev.Err != nil:
			d.action, d.evaluation, d.message = p.actionForError(), evalError, ev.Err.Error()
		case errors.Is(msgErr, apiservercel.ErrInternal) || errors.Is(msgErr, apiservercel.ErrOutOfBudget):
			d.action, d.evaluation, d.message = p.actionForError(), evalError, fmt.Sprintf("failed messageExpression: %s", msgErr)
		case ev.Value != celtypes.True:
			d.action, d.evaluation = actionDeny, evalDeny
			d.reason = metav1.StatusReasonInvalid
			if v.reason != nil {
				d.reason = *v.reason
			}
			d.message = failureMessage(v, messages, i)
		default:
			d.action, d.evaluation = actionAdmit, evalAdmit
		}
	}

	auditExprs := p.auditResults()
	annotations, _, err := rq.Pass(p.variables, auditExprs, ap.PassInputs{GVR: gvr, GVK: gvk, Param: param, Namespace: ap.NamespaceFull}, celconfig.RuntimeCELCostBudget)
	if err != nil {
		return p.errorResult(err.Error())
	}
	rq.TraceResults(outcome.PhaseAuditAnnotation, func(i int) string { return p.auditAnnotations[i].key }, auditExprs, annotations)
	audits := make([]auditResult, len(annotations))
	for i, ev := range annotations {
		if !ev.Compiled {
			continue
		}
		a := &audits[i]
		a.key = p.auditAnnotations[i].key
		if ev.Err != nil {
			a.action, a.err = p.auditActionForError(), ev.Err.Error()
			continue
		}
		switch ev.Value.Type() {
		case celtypes.StringType:
			if s := strings.TrimSpace(ev.Value.Value().(string)); s == "" {
				a.action = auditExclude
			} else {
				a.action, a.value = auditPublish, s
			}
		case celtypes.NullType:
			a.action = auditExclude
		default:
			a.action = auditError
			a.err = fmt.Sprintf("valueExpression '%v' resulted in unsupported return type: %v. Return type must be either string or null.",
				p.auditAnnotations[i].result.ExpressionAccessor.GetExpression(), ev.Value.Type())
		}
	}
	return validateResult{decisions: decisions, annotations: audits}
}

func (p *Policy) auditResults() []plugincel.CompilationResult {
	out := make([]plugincel.CompilationResult, len(p.auditAnnotations))
	for i := range p.auditAnnotations {
		out[i] = p.auditAnnotations[i].result
	}
	return out
}

// failureMessage is the message of a failed validation: the
// messageExpression's result if usable, else message, else
// "failed expression: EXPR".
func failureMessage(v *validation, messages []ap.EvalResult, i int) string {
	var message string
	if i < len(messages) && messages[i].Err == nil && messages[i].Value != nil {
		if s, ok := messages[i].Value.Value().(string); ok {
			message = strings.TrimSpace(s)
			if len(message) > celconfig.MaxEvaluatedMessageExpressionSizeBytes || strings.ContainsAny(message, "\n") {
				message = ""
			}
		}
	}
	if message == "" && v.message != "" {
		message = strings.TrimSpace(v.message)
	}
	if message == "" {
		message = fmt.Sprintf("failed expression: %v", strings.TrimSpace(v.expression))
	}
	return message
}
