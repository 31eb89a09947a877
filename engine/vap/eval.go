package vap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	celtypes "github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/apiserver/pkg/cel/lazy"
	"k8s.io/apiserver/pkg/cel/library"

	"github.com/arbiter-pdp/arbiter/engine/admission"
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

// evalRequest is what every policy evaluated for one request shares.
type evalRequest struct {
	ctx context.Context
	set *Set
	req *admission.Request
	// gvk, gvr and sub are the kind, resource and subresource of the
	// request as the client sent it.
	gvk schema.GroupVersionKind
	gvr schema.GroupVersionResource
	sub string
	// trace receives every evaluation and note (nil: not traced).
	trace func(Step)
	ns    *corev1.Namespace
	// nsRestricted is the namespace as validations see it (the plugin's
	// CreateNamespaceObject); nil for cluster-scoped requests and requests
	// on Namespaces.
	nsVal      ref.Val
	nsFullVal  ref.Val
	nsComputed bool
	userInfo   user.Info
	// objects and requests by the kind the request is evaluated as.
	objects  map[schema.GroupVersionKind][2]ref.Val
	requests map[requestKey]ref.Val
	params   map[*Param]ref.Val
	// authorizer and requestResourceAuthorizer are the `authorizer`
	// values (stateless: shared by every pass of the request).
	authorizer, requestResourceAuthorizer ref.Val
	// tracePolicy, traceBinding and traceParam name what is being
	// evaluated, for traces.
	tracePolicy, traceBinding, traceParam string
}

type requestKey struct {
	gvr schema.GroupVersionResource
	gvk schema.GroupVersionKind
}

func (rq *evalRequest) operation() string                     { return rq.req.Operation }
func (rq *evalRequest) resource() schema.GroupVersionResource { return rq.gvr }
func (rq *evalRequest) subresource() string                   { return rq.sub }
func (rq *evalRequest) namespace() string                     { return rq.req.Namespace }
func (rq *evalRequest) name() string                          { return rq.req.Name }

// GetName, GetNamespace, GetResource and GetSubresource make the request a
// library.Resource (authorizer.requestResource).
func (rq *evalRequest) GetName() string                          { return rq.req.Name }
func (rq *evalRequest) GetNamespace() string                     { return rq.req.Namespace }
func (rq *evalRequest) GetResource() schema.GroupVersionResource { return rq.gvr }
func (rq *evalRequest) GetSubresource() string                   { return rq.sub }

// namespaceContent returns the request's Namespace: given, held by the
// set, or synthesized.
func (rq *evalRequest) namespaceContent() map[string]any {
	if rq.req.NamespaceObject != nil {
		return rq.req.NamespaceObject
	}
	if ns, ok := rq.set.namespaces[rq.req.Namespace]; ok {
		return ns.content
	}
	return syntheticNamespace(rq.req.Namespace)
}

func syntheticNamespace(name string) map[string]any {
	return map[string]any{
		"apiVersion": "v1",
		"kind":       "Namespace",
		"metadata": map[string]any{
			"name":   name,
			"labels": map[string]any{"kubernetes.io/metadata.name": name},
		},
	}
}

// typedNamespace converts a Namespace object to its typed form.
func typedNamespace(content map[string]any) *corev1.Namespace {
	ns := &corev1.Namespace{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(content, ns); err != nil {
		// A Namespace that does not convert keeps its name and labels.
		md, _ := content["metadata"].(map[string]any)
		ns = &corev1.Namespace{}
		ns.Name, _ = md["name"].(string)
		if l, ok := md["labels"].(map[string]any); ok {
			ns.Labels = map[string]string{}
			for k, v := range l {
				if s, ok := v.(string); ok {
					ns.Labels[k] = s
				}
			}
		}
	}
	return ns
}

// namespaceValues returns namespaceObject as validations see it and the
// Namespace as audit annotations see it (null for cluster-scoped requests
// and requests on Namespaces).
func (rq *evalRequest) namespaceValues() (ref.Val, ref.Val) {
	if rq.nsComputed {
		return rq.nsVal, rq.nsFullVal
	}
	rq.nsComputed = true
	rq.nsVal, rq.nsFullVal = celtypes.NullValue, celtypes.NullValue
	name := rq.req.Namespace
	if k := rq.gvk; k.Kind == "Namespace" && k.Version == "v1" && k.Group == "" {
		name = ""
	}
	if name == "" {
		return rq.nsVal, rq.nsFullVal
	}
	var ns *corev1.Namespace
	if rq.req.NamespaceObject != nil {
		ns = typedNamespace(rq.req.NamespaceObject)
	} else if held, ok := rq.set.namespaces[name]; ok {
		ns = held.typed
	} else {
		// An unknown Namespace: namespaceObject is null (selectors see
		// the synthetic kubernetes.io/metadata.name label).
		return rq.nsVal, rq.nsFullVal
	}
	rq.nsVal = common.SchemalessTypedToVal(plugincel.CreateNamespaceObject(ns))
	rq.nsFullVal = common.SchemalessTypedToVal(ns)
	return rq.nsVal, rq.nsFullVal
}

// objectValues returns object and oldObject as seen under kind gvk: the
// request's objects, with apiVersion and kind set to gvk when the policy
// matched an equivalent resource.
func (rq *evalRequest) objectValues(gvk schema.GroupVersionKind) (ref.Val, ref.Val) {
	if v, ok := rq.objects[gvk]; ok {
		return v[0], v[1]
	}
	obj, old := rq.req.Object, rq.req.OldObject
	if gvk != rq.gvk {
		obj, old = convertShallow(obj, gvk), convertShallow(old, gvk)
	}
	v := [2]ref.Val{objectValue(obj), objectValue(old)}
	if rq.objects == nil {
		rq.objects = map[schema.GroupVersionKind][2]ref.Val{}
	}
	rq.objects[gvk] = v
	return v[0], v[1]
}

// convertShallow is the part of a version conversion Arbiter can do
// without the types' conversion functions: apiVersion and kind.
func convertShallow(m map[string]any, gvk schema.GroupVersionKind) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	out["apiVersion"], out["kind"] = gvk.GroupVersion().String(), gvk.Kind
	return out
}

// requestValue returns `request` for the resource and kind the request is
// evaluated as (the plugin's CreateAdmissionRequest).
func (rq *evalRequest) requestValue(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind) ref.Val {
	key := requestKey{gvr, gvk}
	if v, ok := rq.requests[key]; ok {
		return v
	}
	r := rq.req
	userInfo := authenticationv1.UserInfo{
		Username: r.UserInfo.Username,
		UID:      r.UserInfo.UID,
		Groups:   r.UserInfo.Groups,
		Extra:    make(map[string]authenticationv1.ExtraValue, len(r.UserInfo.Extra)),
	}
	for k, v := range r.UserInfo.Extra {
		userInfo.Extra[k] = authenticationv1.ExtraValue(v)
	}
	dryRun := r.DryRun
	ar := &admissionv1.AdmissionRequest{
		Kind:               metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		Resource:           metav1.GroupVersionResource{Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource},
		SubResource:        rq.sub,
		RequestKind:        &metav1.GroupVersionKind{Group: rq.gvk.Group, Version: rq.gvk.Version, Kind: rq.gvk.Kind},
		RequestResource:    &metav1.GroupVersionResource{Group: rq.gvr.Group, Version: rq.gvr.Version, Resource: rq.gvr.Resource},
		RequestSubResource: rq.sub,
		Name:               r.Name,
		Namespace:          r.Namespace,
		Operation:          admissionv1.Operation(r.Operation),
		UserInfo:           userInfo,
		DryRun:             &dryRun,
	}
	if r.Options != nil {
		if raw, err := json.Marshal(r.Options); err == nil {
			ar.Options = runtime.RawExtension{Raw: raw}
		}
	}
	v := common.SchemalessTypedToVal(ar)
	if rq.requests == nil {
		rq.requests = map[requestKey]ref.Val{}
	}
	rq.requests[key] = v
	return v
}

func (rq *evalRequest) paramValue(p *Param) ref.Val {
	if p == nil {
		return celtypes.NullValue
	}
	if v, ok := rq.params[p]; ok {
		return v
	}
	v := objectValue(p.Content)
	if rq.params == nil {
		rq.params = map[*Param]ref.Val{}
	}
	rq.params[p] = v
	return v
}

// activation binds the CEL variables of one evaluation pass. `request`
// and `namespaceObject` are built on first use.
type activation struct {
	object, oldObject, params, request, namespace ref.Val
	authorizer, requestResourceAuthorizer         ref.Val
	variables                                     ref.Val

	rq          *evalRequest
	gvr         schema.GroupVersionResource
	gvk         schema.GroupVersionKind
	namespaceOf namespaceView
}

// namespaceView says which namespaceObject a pass sees.
type namespaceView int

const (
	namespaceNull       namespaceView = iota // matchConditions
	namespaceRestricted                      // validations, messageExpressions
	namespaceFull                            // audit annotations
)

// ResolveName implements interpreter.Activation.
func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case plugincel.ObjectVarName:
		return a.object, true
	case plugincel.OldObjectVarName:
		return a.oldObject, true
	case plugincel.ParamsVarName:
		return a.params, true
	case plugincel.RequestVarName:
		if a.request == nil {
			a.request = a.rq.requestValue(a.gvr, a.gvk)
		}
		return a.request, true
	case plugincel.NamespaceVarName:
		if a.namespace == nil {
			a.namespace = celtypes.NullValue
			if a.namespaceOf != namespaceNull {
				restricted, full := a.rq.namespaceValues()
				a.namespace = restricted
				if a.namespaceOf == namespaceFull {
					a.namespace = full
				}
			}
		}
		return a.namespace, true
	case plugincel.AuthorizerVarName:
		return a.authorizer, a.authorizer != nil
	case plugincel.RequestResourceAuthorizerVarName:
		return a.requestResourceAuthorizer, a.requestResourceAuthorizer != nil
	case plugincel.VariableVarName:
		return a.variables, true
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (a *activation) Parent() interpreter.Activation { return nil }

// composition is the variables' composition context of one pass: it
// accumulates the cost of the variables evaluated.
type composition struct {
	context.Context
	cost int64
}

func (c *composition) takeCost() int64 {
	cost := c.cost
	c.cost = 0
	return cost
}

var variablesType = celtypes.NewObjectType("kubernetes.variables")

// evalResult is the plugin's EvaluationResult.
type evalResult struct {
	compiled bool // false for a placeholder (no expression)
	value    ref.Val
	err      *apiservercel.Error
}

var errOutOfBudget = &apiservercel.Error{
	Type:   apiservercel.ErrorTypeInvalid,
	Detail: "validation failed due to running out of cost budget, no further validation rules will be run",
	Cause:  apiservercel.ErrOutOfBudget,
}

// passInputs are the bindings of a pass.
type passInputs struct {
	gvr        schema.GroupVersionResource
	gvk        schema.GroupVersionKind
	param      *Param
	authorizer bool
	namespace  namespaceView
}

// pass evaluates compiled expressions in order with a fresh lazy
// `variables`, as the plugin's composited ForInput does: the returned
// error is a budget (or internal) error that stops the pass.
func (p *Policy) pass(rq *evalRequest, results []plugincel.CompilationResult, in passInputs, budget int64) ([]evalResult, int64, error) {
	out := make([]evalResult, len(results))
	placeholders := true
	for i := range results {
		if results[i].ExpressionAccessor != nil {
			placeholders = false
			break
		}
	}
	if placeholders {
		// nothing to evaluate (no messageExpression, no audit annotation)
		return out, budget, nil
	}
	comp := &composition{Context: rq.ctx}
	act := &activation{params: rq.paramValue(in.param), rq: rq, gvr: in.gvr, gvk: in.gvk, namespaceOf: in.namespace}
	act.object, act.oldObject = rq.objectValues(in.gvk)
	if in.authorizer {
		if rq.authorizer == nil {
			rq.authorizer = library.NewAuthorizerVal(rq.userInfo, rq.set.authorizer)
			rq.requestResourceAuthorizer = library.NewResourceAuthorizerVal(rq.userInfo, rq.set.authorizer, rq)
		}
		act.authorizer, act.requestResourceAuthorizer = rq.authorizer, rq.requestResourceAuthorizer
	}
	if len(p.variables) == 0 {
		// no variable to evaluate: an empty `variables` is never written
		act.variables = noVariables
		return p.evalAll(comp, act, results, out, budget)
	}
	vars := lazy.NewMapValue(variablesType)
	for _, v := range p.variables {
		v := v
		vars.Append(v.name, func(*lazy.MapValue) ref.Val {
			if v.result.Error != nil {
				return celtypes.NewErr("composited variable %q fails to compile: %v", v.name, v.result.Error)
			}
			val, details, err := v.result.Program.ContextEval(comp, act)
			if details == nil {
				return celtypes.NewErr("unable to get evaluation details of variable %q", v.name)
			}
			costPtr := details.ActualCost()
			if costPtr == nil {
				return celtypes.NewErr("unable to calculate cost of variable %q", v.name)
			}
			cost := int64(*costPtr)
			if *costPtr > math.MaxInt64 {
				cost = math.MaxInt64
			}
			comp.cost += cost
			if err != nil {
				rq.note(Step{Phase: outcome.PhaseVariable, Name: v.name, Expression: v.result.ExpressionAccessor.GetExpression(), Err: err.Error()})
				return celtypes.NewErr("composited variable %q fails to evaluate: %v", v.name, err)
			}
			if rq.traceOn() {
				rq.note(Step{Phase: outcome.PhaseVariable, Name: v.name, Expression: v.result.ExpressionAccessor.GetExpression(), Value: val})
			}
			return val
		})
	}
	act.variables = vars
	return p.evalAll(comp, act, results, out, budget)
}

// noVariables is the `variables` of a policy without variables.
var noVariables = lazy.NewMapValue(variablesType)

func (p *Policy) evalAll(comp *composition, act *activation, results []plugincel.CompilationResult, out []evalResult, budget int64) ([]evalResult, int64, error) {
	remaining := budget
	for i, r := range results {
		var err error
		out[i], remaining, err = evaluate(comp, act, r, remaining)
		if err != nil {
			return nil, -1, err
		}
	}
	return out, remaining, nil
}

// evaluate is the plugin's evaluationActivation.Evaluate.
func evaluate(comp *composition, act *activation, r plugincel.CompilationResult, remaining int64) (evalResult, int64, error) {
	var res evalResult
	if r.ExpressionAccessor == nil {
		return res, remaining, nil
	}
	res.compiled = true
	if r.Error != nil {
		res.err = &apiservercel.Error{Type: apiservercel.ErrorTypeInvalid, Detail: fmt.Sprintf("compilation error: %v", r.Error), Cause: r.Error}
		return res, remaining, nil
	}
	if r.Program == nil {
		res.err = &apiservercel.Error{Type: apiservercel.ErrorTypeInternal, Detail: "unexpected internal error compiling expression"}
		return res, remaining, nil
	}
	val, details, err := r.Program.ContextEval(comp, act)
	if c := comp.takeCost(); c > remaining {
		return res, -1, errOutOfBudget
	} else {
		remaining -= c
	}
	if details == nil {
		return res, -1, &apiservercel.Error{Type: apiservercel.ErrorTypeInternal,
			Detail: fmt.Sprintf("runtime cost could not be calculated for expression: %v, no further expression will be run", r.ExpressionAccessor.GetExpression())}
	}
	rt := details.ActualCost()
	if rt == nil {
		return res, -1, &apiservercel.Error{Type: apiservercel.ErrorTypeInvalid, Cause: apiservercel.ErrOutOfBudget,
			Detail: fmt.Sprintf("runtime cost could not be calculated for expression: %v, no further expression will be run", r.ExpressionAccessor.GetExpression())}
	}
	if *rt > math.MaxInt64 || int64(*rt) > remaining {
		return res, -1, errOutOfBudget
	}
	remaining -= int64(*rt)
	if err != nil {
		res.err = &apiservercel.Error{Type: apiservercel.ErrorTypeInvalid,
			Detail: fmt.Sprintf("expression '%v' resulted in error: %v", r.ExpressionAccessor.GetExpression(), err)}
	} else {
		res.value = val
	}
	return res, remaining, nil
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
func (p *Policy) validate(rq *evalRequest, gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, param *Param) validateResult {
	if len(p.matchConditions) > 0 {
		// matchConditions see the request's own resource, the matched kind
		// and no namespaceObject.
		results, _, err := p.pass(rq, p.matchConditions, passInputs{gvr: rq.gvr, gvk: gvk, param: param, authorizer: true, namespace: namespaceNull},
			celconfig.RuntimeCELCostBudgetMatchConditions)
		if err != nil {
			rq.note(Step{Phase: outcome.PhaseMatchCondition, Err: err.Error()})
			if p.failurePolicy == admissionregistrationv1.Ignore {
				return validateResult{skipped: true}
			}
			return p.errorResult(err.Error())
		}
		rq.traceResults(outcome.PhaseMatchCondition, p.matchConditionName, p.matchConditions, results)
		var errs []error
		for _, r := range results {
			if r.err != nil {
				errs = append(errs, r.err)
			}
			if r.value == celtypes.False {
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
	evals, remaining, err := p.pass(rq, conds, passInputs{gvr: gvr, gvk: gvk, param: param, authorizer: true, namespace: namespaceRestricted}, celconfig.RuntimeCELCostBudget)
	if err != nil {
		return p.errorResult(err.Error())
	}
	rq.traceResults(outcome.PhaseValidation, indexName, conds, evals)
	messages, _, msgErr := p.pass(rq, msgs, passInputs{gvr: gvr, gvk: gvk, param: param, namespace: namespaceRestricted}, remaining)
	if messages != nil {
		rq.traceResults(outcome.PhaseMessageExpression, indexName, msgs, messages)
	}
	decisions := make([]decision, len(evals))
	for i, ev := range evals {
		d := &decisions[i]
		v := &p.validations[i]
		switch {
		case ev.err != nil:
			d.action, d.evaluation, d.message = p.actionForError(), evalError, ev.err.Error()
		case errors.Is(msgErr, apiservercel.ErrInternal) || errors.Is(msgErr, apiservercel.ErrOutOfBudget):
			d.action, d.evaluation, d.message = p.actionForError(), evalError, fmt.Sprintf("failed messageExpression: %s", msgErr)
		case ev.value != celtypes.True:
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
	annotations, _, err := p.pass(rq, auditExprs, passInputs{gvr: gvr, gvk: gvk, param: param, namespace: namespaceFull}, celconfig.RuntimeCELCostBudget)
	if err != nil {
		return p.errorResult(err.Error())
	}
	rq.traceResults(outcome.PhaseAuditAnnotation, func(i int) string { return p.auditAnnotations[i].key }, auditExprs, annotations)
	audits := make([]auditResult, len(annotations))
	for i, ev := range annotations {
		if !ev.compiled {
			continue
		}
		a := &audits[i]
		a.key = p.auditAnnotations[i].key
		if ev.err != nil {
			a.action, a.err = p.auditActionForError(), ev.err.Error()
			continue
		}
		switch ev.value.Type() {
		case celtypes.StringType:
			if s := strings.TrimSpace(ev.value.Value().(string)); s == "" {
				a.action = auditExclude
			} else {
				a.action, a.value = auditPublish, s
			}
		case celtypes.NullType:
			a.action = auditExclude
		default:
			a.action = auditError
			a.err = fmt.Sprintf("valueExpression '%v' resulted in unsupported return type: %v. Return type must be either string or null.",
				p.auditAnnotations[i].result.ExpressionAccessor.GetExpression(), ev.value.Type())
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
func failureMessage(v *validation, messages []evalResult, i int) string {
	var message string
	if i < len(messages) && messages[i].err == nil && messages[i].value != nil {
		if s, ok := messages[i].value.Value().(string); ok {
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

// ensure the authorizer satisfies the library's interface.
var _ authorizer.UnconditionalAuthorizer = Authorizer{}
