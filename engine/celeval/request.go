package celeval

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/jsonval"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// Config is how a request is evaluated.
type Config struct {
	// Namespace is the request's Namespace object (nil: not known).
	Namespace map[string]any
	// Context is what Kyverno's context libraries (resource.*, http.*,
	// globalContext, image data) read. Nil means no cluster access.
	Context kyvernocel.Context
	// Now is the time exceptions' expiresAt is compared with (zero: time.Now()).
	Now time.Time
	// Trace, when set, records every evaluation.
	Trace *outcome.Trace
	// CostBudget bounds the CEL cost of every policy of the request
	// together (0: no bound beyond the per-expression and per-policy limits).
	CostBudget uint64
	// ObjectSizes, when set, are the sizes of the request's Object and
	// OldObject together as manifest.DecodeJSONSized measured them.
	ObjectSizes *manifest.Sizes
	// Shared are the memo keys of request-pure expressions that occur in
	// more than one place: their results are computed once per request.
	Shared map[string]bool
	// ExtraSize bounds the size of values the inputs do not show
	// (exceptions.allowedImages and allowedValues), for cost estimates.
	ExtraSize uint64
	// ExactCost runs every program with cost tracking (slower; the
	// untracked fast path is charged static estimates instead).
	ExactCost bool
	// ImageVerifier serves the verification functions of
	// ImageValidatingPolicies (nil: they fail, naming what is unavailable).
	ImageVerifier kyvernocel.ImageVerifier
	// Request, when set, is what the `request` variable renders instead of
	// the evaluated request: a mutate-existing target is evaluated as
	// `object` within its trigger's request. Its objects are not measured
	// for the cost estimates: set ExactCost with it.
	Request *admission.Request
}

// Request is the evaluation of one request by the Kyverno CEL policy kinds:
// what every policy shares — the inputs as CEL values, the memo of
// request-pure expressions, the size level of the inputs, the CEL cost
// charged so far — and the state of the policy being evaluated.
type Request struct {
	ctx  context.Context
	done <-chan struct{}
	req  *admission.Request
	// current is the object as mutated so far (req.Object until a
	// mutation changes it).
	current         map[string]any
	cfg             Config
	now             time.Time
	object          any
	oldObject       any
	request         any
	namespaceObject map[string]any
	namespaceVal    any
	libCtx          kyvernocel.Context
	// memo holds results of request-pure expressions, by canonical form.
	memo map[string]ref.Val
	// sizeLevel is the size level of the inputs (-2: not computed yet).
	sizeLevel int
	// curSizes bound the sizes of the current object when it is not the
	// request's (when curKnown); inputs those of the request's inputs.
	curSizes    manifest.Sizes
	curKnown    bool
	inputs      manifest.Sizes
	inputsKnown bool
	// cost is the CEL cost of the policies evaluated so far.
	cost uint64
	// st is the state of the policy being evaluated (one at a time: one
	// allocation per request rather than per policy).
	st State
}

// NewRequest starts the evaluation of a request. The caller must not
// modify the request's objects while it is evaluated.
func NewRequest(ctx context.Context, req *admission.Request, cfg Config) *Request {
	rq := &Request{}
	rq.init(ctx, req, cfg, nil, nil)
	return rq
}

// init sets rq up for req, with object and oldObject the conversions of
// its objects (nil: to be made).
func (rq *Request) init(ctx context.Context, req *admission.Request, cfg Config, object, oldObject any) {
	*rq = Request{ctx: ctx, done: ctx.Done(), req: req, cfg: cfg, now: cfg.Now, sizeLevel: -2}
	if rq.now.IsZero() {
		rq.now = time.Now()
	}
	rq.current = req.Object
	rq.object, rq.oldObject = object, oldObject
	if object == nil {
		rq.object = toVal(req.Object)
	}
	if oldObject == nil {
		rq.oldObject = toVal(req.OldObject)
	}
	ns := cfg.Namespace
	rq.namespaceObject = ns
	if ns != nil && req.Namespace != "" && !(req.Resource.Resource == "namespaces" && req.Resource.Group == "") {
		rq.namespaceVal = jsonval.Of(ns)
	} else {
		rq.namespaceVal = types.NullValue
	}
	rq.libCtx = cfg.Context
	if rq.libCtx == nil {
		rq.libCtx = kyvernocel.Offline
	}
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

// Object returns the request's object as mutated so far.
func (rq *Request) Object() map[string]any { return rq.current }

// SetObject makes obj the object the next evaluations read as `object` (a
// mutation's result); `request.object` stays the request's. What was
// memoized or measured of the previous object is dropped.
func (rq *Request) SetObject(obj map[string]any) {
	if sameMap(obj, rq.current) {
		return
	}
	rq.setObject(obj, manifest.Sizes{}, false, nil)
}

// SetObjectSized is SetObject with an upper bound of the sizes of obj
// (every list and map has at most sizes.Entries entries, every string,
// list and map is at most sizes.Length long), which spares a walk of it.
func (rq *Request) SetObjectSized(obj map[string]any, sizes manifest.Sizes) {
	if sameMap(obj, rq.current) {
		return
	}
	rq.setObject(obj, sizes, true, nil)
}

// SetObjectChanged makes obj the object the next evaluations read, after a
// change in place of the containers of the current object that
// owner owns (a patch.Patcher), which obj may be; sizes bound its sizes.
// What was memoized of the object is dropped, and what was converted of
// the containers that changed.
func (rq *Request) SetObjectChanged(obj map[string]any, sizes manifest.Sizes, owner jsonval.Owner) {
	if sameMap(obj, rq.current) {
		rq.changed(sizes, true)
	} else {
		rq.setObject(obj, sizes, true, nil)
	}
	if w, ok := rq.object.(*jsonval.Map); ok {
		w.Refresh(owner)
	}
}

// Rewind makes a marked object current again after the containers owner
// owns (a patch.Patcher) were changed back in place to what they held when
// it was marked.
func (rq *Request) Rewind(m ObjectMark, owner jsonval.Owner) {
	if sameMap(m.obj, rq.current) {
		rq.object = m.val
		rq.changed(m.sizes, m.known)
	} else {
		rq.setObject(m.obj, m.sizes, m.known, m.val)
	}
	if w, ok := rq.object.(*jsonval.Map); ok {
		w.Refresh(owner)
	}
}

// changed drops what was memoized and measured of the current object.
func (rq *Request) changed(sizes manifest.Sizes, known bool) {
	rq.memo = nil
	rq.sizeLevel = -2
	rq.curSizes, rq.curKnown = sizes, known && !sameMap(rq.current, rq.req.Object)
}

// setObject makes obj current, with val its conversion (nil: to be made).
func (rq *Request) setObject(obj map[string]any, sizes manifest.Sizes, known bool, val any) {
	rq.current = obj
	switch prev, ok := rq.object.(*jsonval.Map); {
	case val != nil:
		rq.object = val
	case ok && obj != nil:
		// A mutation's result shares what it did not change with the
		// object before it: so do their conversions.
		rq.object = prev.Derive(obj)
	default:
		rq.object = toVal(obj)
	}
	rq.changed(sizes, known)
}

// ObjectMark is the current object with what is known of its sizes and
// its conversion, to return to (a policy that errs leaves the object as it
// found it).
type ObjectMark struct {
	obj   map[string]any
	sizes manifest.Sizes
	known bool
	val   any
}

// Object returns the marked object.
func (m ObjectMark) Object() map[string]any { return m.obj }

// Mark returns the current object, to Restore later.
func (rq *Request) Mark() ObjectMark {
	return ObjectMark{obj: rq.current, sizes: rq.curSizes, known: rq.curKnown, val: rq.object}
}

// Restore makes a marked object current again.
func (rq *Request) Restore(m ObjectMark) {
	if sameMap(m.obj, rq.current) {
		return
	}
	rq.setObject(m.obj, m.sizes, m.known, m.val)
}

// ObjectSizes returns an upper bound of the sizes of the current object.
func (rq *Request) ObjectSizes() manifest.Sizes {
	if sameMap(rq.current, rq.req.Object) {
		// The request's inputs bound its object.
		return rq.inputSizes()
	}
	if !rq.curKnown {
		rq.curSizes, rq.curKnown = manifest.SizesOf(rq.current), true
	}
	return rq.curSizes
}

// Continue starts the evaluation of req — the same request with its
// mutated object — by the kinds that follow the mutating ones: a fresh
// state (nothing memoized) that charges the cost spent so far to the same
// budget. It reuses rq, which is the new evaluation afterwards.
func (rq *Request) Continue(req *admission.Request) *Request {
	cfg := rq.cfg
	if !sameMap(req.Object, rq.req.Object) {
		// The mutated object's sizes and the old object's bound the new
		// request's objects.
		sizes := rq.ObjectSizes()
		if h := rq.cfg.ObjectSizes; h != nil {
			sizes = sizes.Max(*h)
		} else {
			sizes = sizes.Max(manifest.SizesOf(req.OldObject))
		}
		cfg.ObjectSizes = &sizes
	}
	// The conversions of the objects made so far are the next request's.
	var object, oldObject any
	if sameMap(req.Object, rq.current) {
		object = rq.object
	}
	if sameMap(req.OldObject, rq.req.OldObject) {
		oldObject = rq.oldObject
	}
	now, cost := rq.now, rq.cost
	rq.init(rq.ctx, req, cfg, object, oldObject)
	rq.now, rq.cost = now, cost
	return rq
}

func sameMap(a, b map[string]any) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// Context returns the request's context.
func (rq *Request) Context() context.Context { return rq.ctx }

// ImageVerifier returns what serves the image verification functions, or nil.
func (rq *Request) ImageVerifier() kyvernocel.ImageVerifier { return rq.cfg.ImageVerifier }

// Libraries returns the context the libraries read (never nil).
func (rq *Request) Libraries() kyvernocel.Context { return rq.libCtx }

// Attributes returns the request's attributes.
func (rq *Request) Attributes() *admission.Request { return rq.req }

// Namespace returns the request's Namespace object, or nil.
func (rq *Request) Namespace() map[string]any { return rq.namespaceObject }

// Now returns the time exceptions' expiresAt is compared with.
func (rq *Request) Now() time.Time { return rq.now }

// Traced says whether the request is traced.
func (rq *Request) Traced() bool { return rq.cfg.Trace != nil }

// Trace returns the request's trace, or nil.
func (rq *Request) Trace() *outcome.Trace { return rq.cfg.Trace }

// Note records a note when the request is traced.
func (rq *Request) Note(policy, variant, phase, exception, note string) {
	if rq.cfg.Trace == nil {
		return
	}
	rq.cfg.Trace.Add(outcome.TraceStep{Policy: policy, Variant: variant, Phase: phase, Exception: exception, Note: note})
}

// Cost returns the CEL cost charged so far.
func (rq *Request) Cost() uint64 { return rq.cost }

// Budget returns the request's cost budget (0: none).
func (rq *Request) Budget() uint64 { return rq.cfg.CostBudget }

// Stopped returns the error of a request whose context is done (its
// deadline passed, its caller went away), or nil.
func (rq *Request) Stopped() error {
	select {
	case <-rq.done:
		return fmt.Errorf("evaluation stopped: %w", context.Cause(rq.ctx))
	default:
		return nil
	}
}

// BudgetSpent says whether the policies evaluated so far cost more than
// the budget: the next ones are not evaluated.
func (rq *Request) BudgetSpent() bool {
	return rq.cfg.CostBudget > 0 && rq.cost > rq.cfg.CostBudget
}

// Scope is what a policy's expressions are evaluated in: the policy (for
// traces and the context libraries) and its variables.
type Scope struct {
	// Policy is the policy's report name; Variant is "" or the autogen
	// configuration evaluated.
	Policy  string
	Variant string
	// Namespace is the policy's namespace ("" for cluster policies): the
	// context libraries of a namespaced policy are confined to it.
	Namespace string
	Variables []Variable
}

// Variable is a compiled variable of a policy.
type Variable struct {
	Name string
	Prog *Program
}

// Run evaluates one policy: fn runs with the policy's state; when the
// static estimates charged exceeded the budget, fn runs again with exact
// cost tracking, which decides whether the policy really does. The cost is
// charged to the request.
func Run[T any](rq *Request, scope *Scope, fn func(st *State) T) T {
	st := &rq.st
	st.reset(rq, scope, rq.cfg.ExactCost)
	out := fn(st)
	if st.inexact || rerunAlways {
		st.reset(rq, scope, true)
		out = fn(st)
	}
	rq.cost += st.cost
	return out
}

// rerunAlways makes Run run every policy a second time, exactly (tests:
// SetRerunAlways).
var rerunAlways bool

// SetRerunAlways makes Run run every policy a second time with exact cost
// tracking, as when its estimates exceed the budget, so that tests see
// that a rerun starts where the first run did. Not for concurrent use.
func SetRerunAlways(on bool) { rerunAlways = on }

// level returns the index of the size level bounding the request's inputs.
func (rq *Request) level() int {
	if rq.sizeLevel == -2 {
		sizes := rq.inputSizes()
		if !sameMap(rq.current, rq.req.Object) {
			// object is the mutated one; request.object is still the request's.
			sizes = sizes.Max(rq.ObjectSizes())
		}
		rq.sizeLevel = levelFor(sizes.Entries, sizes.Length)
	}
	return rq.sizeLevel
}

// inputSizes bounds the inputs of the request as it was given — its
// objects, namespace object, options, user and names — and the values the
// inputs do not show; computed once.
func (rq *Request) inputSizes() manifest.Sizes {
	if rq.inputsKnown {
		return rq.inputs
	}
	var sizes manifest.Sizes
	others := []any{rq.req.Object, rq.req.OldObject, rq.namespaceObject, rq.req.Options}
	if h := rq.cfg.ObjectSizes; h != nil {
		sizes, others = *h, others[2:]
	}
	for _, v := range others {
		sizes = sizes.Max(manifest.SizesOf(v))
	}
	c, s := sizes.Entries, sizes.Length
	u := rq.req.UserInfo
	extra := rq.cfg.ExtraSize
	c = max(c, extra, uint64(len(u.Groups)), uint64(len(u.Extra)))
	s = max(s, extra, uint64(len(rq.req.Name)), uint64(len(rq.req.Namespace)), uint64(len(u.Username)),
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
	rq.inputs, rq.inputsKnown = manifest.Sizes{Entries: c, Length: s}, true
	return rq.inputs
}
