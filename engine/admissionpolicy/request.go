package admissionpolicy

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	celtypes "github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/apiserver/pkg/cel/lazy"
	"k8s.io/apiserver/pkg/cel/library"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// Request is the evaluation of one request by a set's policies: what
// every policy evaluated for it shares (the inputs as CEL values, built on
// first use) and what its trace records. It is used by one goroutine.
type Request struct {
	ctx     context.Context
	objects *Objects
	req     *admission.Request
	// gvk, gvr and sub are the kind, resource and subresource of the
	// request as the client sent it.
	gvk schema.GroupVersionKind
	gvr schema.GroupVersionResource
	sub string
	// object is the request's object as mutated so far (req.Object until
	// SetObject).
	object map[string]any
	// trace receives every evaluation and note (nil: not traced).
	trace func(Step)
	// nsVal is the namespace as validations see it (the plugin's
	// CreateNamespaceObject), nsFullVal as audit annotations and mutations
	// see it; null for cluster-scoped requests and requests on Namespaces.
	nsVal      ref.Val
	nsFullVal  ref.Val
	nsComputed bool
	userInfo   user.Info
	// values are object and oldObject by the kind the request is evaluated as.
	values   map[schema.GroupVersionKind][2]ref.Val
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

// NewRequest starts the evaluation of req by policies that consult objs.
// trace, when not nil, receives every evaluation.
func NewRequest(ctx context.Context, objs *Objects, req *admission.Request, trace func(Step)) *Request {
	gvk, gvr, sub := req.Requested()
	rq := &Request{ctx: ctx, objects: objs, req: req, gvk: gvk, gvr: gvr, sub: sub, object: req.Object, trace: trace}
	rq.userInfo = &user.DefaultInfo{Name: req.UserInfo.Username, UID: req.UserInfo.UID, Groups: req.UserInfo.Groups, Extra: req.UserInfo.Extra}
	return rq
}

// Context returns the request's context.
func (rq *Request) Context() context.Context { return rq.ctx }

// Attributes returns the request's attributes.
func (rq *Request) Attributes() *admission.Request { return rq.req }

// Requested returns the kind, resource and subresource the client sent.
func (rq *Request) Requested() (schema.GroupVersionKind, schema.GroupVersionResource, string) {
	return rq.gvk, rq.gvr, rq.sub
}

// Objects returns what the request's policies consult.
func (rq *Request) Objects() *Objects { return rq.objects }

// Object returns the request's object as mutated so far.
func (rq *Request) Object() map[string]any { return rq.object }

// SetObject makes obj the request's object from now on: `object` of the
// expressions evaluated next, and what object selectors read.
func (rq *Request) SetObject(obj map[string]any) {
	rq.object = obj
	rq.values = nil
}

func (rq *Request) operation() string                     { return rq.req.Operation }
func (rq *Request) resource() schema.GroupVersionResource { return rq.gvr }
func (rq *Request) subresource() string                   { return rq.sub }
func (rq *Request) namespace() string                     { return rq.req.Namespace }
func (rq *Request) name() string                          { return rq.req.Name }

// GetName, GetNamespace, GetResource and GetSubresource make the request a
// library.Resource (authorizer.requestResource).
func (rq *Request) GetName() string                          { return rq.req.Name }
func (rq *Request) GetNamespace() string                     { return rq.req.Namespace }
func (rq *Request) GetResource() schema.GroupVersionResource { return rq.gvr }
func (rq *Request) GetSubresource() string                   { return rq.sub }

// namespaceContent returns the request's Namespace: given, held, or
// synthesized.
func (rq *Request) namespaceContent() map[string]any {
	if rq.req.NamespaceObject != nil {
		return rq.req.NamespaceObject
	}
	if ns, ok := rq.objects.namespaces[rq.req.Namespace]; ok {
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

// namespaceValues returns namespaceObject as validations see it and the
// Namespace as audit annotations and mutations see it (null for
// cluster-scoped requests and requests on Namespaces).
func (rq *Request) namespaceValues() (ref.Val, ref.Val) {
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
	} else if held, ok := rq.objects.namespaces[name]; ok {
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
func (rq *Request) objectValues(gvk schema.GroupVersionKind) (ref.Val, ref.Val) {
	if v, ok := rq.values[gvk]; ok {
		return v[0], v[1]
	}
	obj, old := rq.object, rq.req.OldObject
	if gvk != rq.gvk {
		obj, old = ConvertShallow(obj, gvk), ConvertShallow(old, gvk)
	}
	v := [2]ref.Val{ObjectValue(obj), ObjectValue(old)}
	if rq.values == nil {
		rq.values = map[schema.GroupVersionKind][2]ref.Val{}
	}
	rq.values[gvk] = v
	return v[0], v[1]
}

// ConvertShallow is the part of a version conversion Arbiter can do
// without the types' conversion functions: apiVersion and kind (a copy of
// the top level of m).
func ConvertShallow(m map[string]any, gvk schema.GroupVersionKind) map[string]any {
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
func (rq *Request) requestValue(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind) ref.Val {
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

func (rq *Request) paramValue(p *Param) ref.Val {
	if p == nil {
		return celtypes.NullValue
	}
	if v, ok := rq.params[p]; ok {
		return v
	}
	v := ObjectValue(p.Content)
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

	rq          *Request
	gvr         schema.GroupVersionResource
	gvk         schema.GroupVersionKind
	namespaceOf NamespaceView
}

// NamespaceView says which namespaceObject a pass sees.
type NamespaceView int

const (
	// NamespaceNull: matchConditions see null.
	NamespaceNull NamespaceView = iota
	// NamespaceRestricted: validations and messageExpressions see the
	// plugin's restricted Namespace (CreateNamespaceObject).
	NamespaceRestricted
	// NamespaceFull: audit annotations and mutations see the Namespace.
	NamespaceFull
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
			if a.namespaceOf != NamespaceNull {
				restricted, full := a.rq.namespaceValues()
				a.namespace = restricted
				if a.namespaceOf == NamespaceFull {
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

// EvalResult is the plugin's EvaluationResult: a value or an error.
type EvalResult struct {
	// Compiled is false for a placeholder (no expression).
	Compiled bool
	Value    ref.Val
	Err      *apiservercel.Error
}

// ErrOutOfBudget is the error of a pass that ran out of its cost budget.
var ErrOutOfBudget = &apiservercel.Error{
	Type:   apiservercel.ErrorTypeInvalid,
	Detail: "validation failed due to running out of cost budget, no further validation rules will be run",
	Cause:  apiservercel.ErrOutOfBudget,
}

// PassInputs are the bindings of a pass.
type PassInputs struct {
	GVR        schema.GroupVersionResource
	GVK        schema.GroupVersionKind
	Param      *Param
	Authorizer bool
	Namespace  NamespaceView
}

// Pass evaluates compiled expressions in order with a fresh lazy
// `variables` (vars), as the plugins' composited ForInput does; the
// returned error is a budget (or internal) error that stops the pass.
func (rq *Request) Pass(vars []Variable, results []plugincel.CompilationResult, in PassInputs, budget int64) ([]EvalResult, int64, error) {
	out := make([]EvalResult, len(results))
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
	act := &activation{params: rq.paramValue(in.Param), rq: rq, gvr: in.GVR, gvk: in.GVK, namespaceOf: in.Namespace}
	act.object, act.oldObject = rq.objectValues(in.GVK)
	if in.Authorizer {
		if rq.authorizer == nil {
			rq.authorizer = library.NewAuthorizerVal(rq.userInfo, rq.objects.authorizer)
			rq.requestResourceAuthorizer = library.NewResourceAuthorizerVal(rq.userInfo, rq.objects.authorizer, rq)
		}
		act.authorizer, act.requestResourceAuthorizer = rq.authorizer, rq.requestResourceAuthorizer
	}
	if len(vars) == 0 {
		// no variable to evaluate: an empty `variables` is never written
		act.variables = noVariables
		return evalAll(comp, act, results, out, budget)
	}
	lazyVars := lazy.NewMapValue(variablesType)
	for _, v := range vars {
		v := v
		lazyVars.Append(v.Name, func(*lazy.MapValue) ref.Val {
			if v.Result.Error != nil {
				return celtypes.NewErr("composited variable %q fails to compile: %v", v.Name, v.Result.Error)
			}
			val, details, err := v.Result.Program.ContextEval(comp, act)
			if details == nil {
				return celtypes.NewErr("unable to get evaluation details of variable %q", v.Name)
			}
			costPtr := details.ActualCost()
			if costPtr == nil {
				return celtypes.NewErr("unable to calculate cost of variable %q", v.Name)
			}
			cost := int64(*costPtr)
			if *costPtr > math.MaxInt64 {
				cost = math.MaxInt64
			}
			comp.cost += cost
			if err != nil {
				rq.Note(Step{Phase: outcome.PhaseVariable, Name: v.Name, Expression: v.Result.ExpressionAccessor.GetExpression(), Err: err.Error()})
				return celtypes.NewErr("composited variable %q fails to evaluate: %v", v.Name, err)
			}
			if rq.Traced() {
				rq.Note(Step{Phase: outcome.PhaseVariable, Name: v.Name, Expression: v.Result.ExpressionAccessor.GetExpression(), Value: val})
			}
			return val
		})
	}
	act.variables = lazyVars
	return evalAll(comp, act, results, out, budget)
}

// noVariables is the `variables` of a policy without variables.
var noVariables = lazy.NewMapValue(variablesType)

func evalAll(comp *composition, act *activation, results []plugincel.CompilationResult, out []EvalResult, budget int64) ([]EvalResult, int64, error) {
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
func evaluate(comp *composition, act *activation, r plugincel.CompilationResult, remaining int64) (EvalResult, int64, error) {
	var res EvalResult
	if r.ExpressionAccessor == nil {
		return res, remaining, nil
	}
	res.Compiled = true
	if r.Error != nil {
		res.Err = &apiservercel.Error{Type: apiservercel.ErrorTypeInvalid, Detail: fmt.Sprintf("compilation error: %v", r.Error), Cause: r.Error}
		return res, remaining, nil
	}
	if r.Program == nil {
		res.Err = &apiservercel.Error{Type: apiservercel.ErrorTypeInternal, Detail: "unexpected internal error compiling expression"}
		return res, remaining, nil
	}
	val, details, err := r.Program.ContextEval(comp, act)
	if c := comp.takeCost(); c > remaining {
		return res, -1, ErrOutOfBudget
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
		return res, -1, ErrOutOfBudget
	}
	remaining -= int64(*rt)
	if err != nil {
		res.Err = &apiservercel.Error{Type: apiservercel.ErrorTypeInvalid,
			Detail: fmt.Sprintf("expression '%v' resulted in error: %v", r.ExpressionAccessor.GetExpression(), err)}
	} else {
		res.Value = val
	}
	return res, remaining, nil
}
