package vap

import (
	"context"
	"strconv"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	ap "github.com/arbiter-pdp/arbiter/engine/admissionpolicy"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// ValidatingAdmissionPolicy as a policy kind of the engine: the policies
// and bindings loaded and compiled with the API server's compiler (load →
// compile, cached by object identity and version), their params taken
// from the other objects, and the evaluation of a request into results,
// denials, warnings and audit annotations (evaluate → outcome).

// Cache remembers compiled policies and bindings by identity and version,
// so compiling a set that differs from the previous one by a few objects
// recompiles only those. It is safe for concurrent use.
type Cache struct {
	mu       sync.Mutex
	policies map[string]cached[*Policy]
	bindings map[string]cached[*Binding]
}

type cached[T any] struct {
	version string
	value   T
}

// Forget drops cached compilations of objects not in keep (by Object.ID).
func (c *Cache) Forget(keep map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.policies {
		if !keep[id] {
			delete(c.policies, id)
		}
	}
	for id := range c.bindings {
		if !keep[id] {
			delete(c.bindings, id)
		}
	}
}

// Classify says whether o is a policy or a binding (any version: other
// versions than v1 are refused when compiled).
func Classify(o *manifest.Object) (policy, binding bool) {
	if o.Group() != Group {
		return false, false
	}
	return o.Kind == KindPolicy, o.Kind == KindBinding
}

// ParamKindOf returns the apiVersion and kind of a policy object's
// paramKind, if it names one (read from the content, before compilation).
func ParamKindOf(o *manifest.Object) (apiVersion, kind string, ok bool) { return ap.ParamKindOf(o) }

// Compile compiles the policies and bindings of objs (in any order) and
// takes as params the objects of others whose kind a policy's paramKind
// names. It returns nil when objs is empty.
func (c *Cache) Compile(objs, others []*manifest.Object, namespaces map[string]map[string]any, namespaced func(schema.GroupKind) bool) (*Set, manifest.LoadErrors) {
	if len(objs) == 0 {
		return nil, nil
	}
	var errs manifest.LoadErrors
	var policies []*Policy
	var bindings []*Binding
	for _, o := range objs {
		if o.APIVersion != APIVersion {
			errs = append(errs, manifest.Errorf(o, "apiVersion", "unsupported version %s: Arbiter reads %s", o.APIVersion, APIVersion))
			continue
		}
		id, version := o.ID(), o.ContentVersion()
		if isPolicy, _ := Classify(o); isPolicy {
			c.mu.Lock()
			hit, ok := c.policies[id]
			c.mu.Unlock()
			if ok && hit.version == version {
				policies = append(policies, hit.value)
				continue
			}
			var typed admissionregistrationv1.ValidatingAdmissionPolicy
			if err := manifest.DecodeStrict(o, &typed); err != nil {
				errs = append(errs, err)
				continue
			}
			p, ferrs := CompilePolicy(&typed)
			if len(ferrs) > 0 {
				errs = append(errs, manifest.FieldErrors(o, ferrs)...)
				continue
			}
			c.mu.Lock()
			if c.policies == nil {
				c.policies = map[string]cached[*Policy]{}
			}
			c.policies[id] = cached[*Policy]{version, p}
			c.mu.Unlock()
			policies = append(policies, p)
			continue
		}
		c.mu.Lock()
		hit, ok := c.bindings[id]
		c.mu.Unlock()
		if ok && hit.version == version {
			bindings = append(bindings, hit.value)
			continue
		}
		var typed admissionregistrationv1.ValidatingAdmissionPolicyBinding
		if err := manifest.DecodeStrict(o, &typed); err != nil {
			errs = append(errs, err)
			continue
		}
		b, ferrs := CompileBinding(&typed)
		if len(ferrs) > 0 {
			errs = append(errs, manifest.FieldErrors(o, ferrs)...)
			continue
		}
		c.mu.Lock()
		if c.bindings == nil {
			c.bindings = map[string]cached[*Binding]{}
		}
		c.bindings[id] = cached[*Binding]{version, b}
		c.mu.Unlock()
		bindings = append(bindings, b)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	kinds := map[schema.GroupVersionKind]bool{}
	for _, p := range policies {
		if gvk, ok := p.ParamKind(); ok {
			kinds[gvk] = true
		}
	}
	paramObjects := map[*manifest.Object]bool{}
	var params []*Param
	for _, o := range others {
		if !kinds[schema.FromAPIVersionAndKind(o.APIVersion, o.Kind)] {
			continue
		}
		paramObjects[o] = true
		params = append(params, &Param{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Content: o.Content})
	}
	s := NewSet(policies, bindings, params, namespaces, Options{Namespaced: namespaced})
	s.paramObjects = paramObjects
	return s, nil
}

// IsParam says whether o is one of the set's params.
func (s *Set) IsParam(o *manifest.Object) bool { return s != nil && s.paramObjects[o] }

// Evaluate adds the set's verdict on the request to out: a result per
// policy and binding that applied (PolicyReport words; rule = binding),
// its denials, warnings and audit annotations. trace, when not nil,
// records every evaluation.
func (s *Set) Evaluate(ctx context.Context, req *admission.Request, trace *outcome.Trace, out *outcome.Outcome) {
	if s.Empty() {
		return
	}
	var steps func(Step)
	if trace != nil {
		steps = func(st Step) {
			variant := ""
			if st.Binding != "" {
				variant = "binding " + st.Binding
				if st.Param != "" {
					variant += " param " + st.Param
				}
			}
			ts := outcome.TraceStep{Policy: st.Policy, Variant: variant, Phase: st.Phase, Name: st.Name, Expression: st.Expression, Error: st.Err, Note: st.Note}
			if st.Value != nil {
				ts.Value = outcome.RenderVal(st.Value)
			}
			trace.Add(ts)
		}
	}
	v := s.Decide(ctx, req, steps)
	proc := outcome.Process(req.Mode == admission.ModeAdmission)
	for _, r := range v.Results {
		props := map[string]string{outcome.PropBinding: r.Binding, outcome.PropProcess: proc}
		if r.ValidationIndex >= 0 {
			props[outcome.PropValidationIndex] = strconv.Itoa(r.ValidationIndex)
		}
		if len(r.Params) > 0 {
			props[outcome.PropParams] = strings.Join(r.Params, ",")
		}
		out.Results = append(out.Results, outcome.Result{
			Policy:     r.Policy,
			PolicyName: r.Policy,
			PolicyKind: KindPolicy,
			Rule:       r.Binding,
			Result:     r.Result,
			Message:    r.Message,
			Properties: props,
			Actions:    r.Actions,
			Source:     outcome.SourceValidatingAdmissionPolicy,
			Scored:     true,
		})
	}
	out.Warnings = append(out.Warnings, v.Warnings...)
	out.Annotate(v.AuditAnnotations)
	for _, d := range v.Denials {
		out.Deny(d.Code, string(d.Reason), d.Text())
	}
}

// Info describes one policy of a set, for inventories.
type Info struct {
	Name string
	// Bindings are the names of its bindings, in evaluation order.
	Bindings []string
	// Actions is the union of its bindings' validationActions (Deny, Warn,
	// Audit order); empty when no binding binds it (it is then inert).
	Actions []string
	// Resources are the group/version/resource of its matchConstraints'
	// resource rules, as vpol.Policy.Resources words them.
	Resources []string
	// ParamKind is apiVersion/kind of its params, or "".
	ParamKind string
}

// Infos describes the set's policies, by name.
func (s *Set) Infos() []Info {
	if s == nil {
		return nil
	}
	out := make([]Info, 0, len(s.entries))
	for _, e := range s.entries {
		out = append(out, s.info(e))
	}
	return out
}

func (s *Set) info(e *entry) Info {
	p := e.policy
	info := Info{Name: p.Name}
	has := map[string]bool{}
	for _, b := range e.bindings {
		info.Bindings = append(info.Bindings, b.Name)
		for _, a := range b.Actions {
			has[string(a)] = true
		}
	}
	for _, a := range []string{"Deny", "Warn", "Audit"} {
		if has[a] {
			info.Actions = append(info.Actions, a)
		}
	}
	info.Resources = ap.Resources(p.Spec.MatchConstraints)
	if gvk, ok := p.ParamKind(); ok {
		info.ParamKind = gvk.GroupVersion().String() + "/" + gvk.Kind
	}
	return info
}

// Applicable returns the policies that apply to the request, by the same
// matching as Decide: their matchConstraints select it and so do the
// matchResources of at least one binding (listed in Info.Bindings); their
// matchConditions are not evaluated.
func (s *Set) Applicable(ctx context.Context, req *admission.Request) []Info {
	_, gvr, _ := req.Requested()
	if s.Empty() || ap.AdmissionConfigResources[gvr.GroupResource()] {
		return nil
	}
	rq := ap.NewRequest(ctx, s.objects, req, nil)
	var out []Info
	for _, e := range s.candidates(gvr.Resource) {
		if len(e.bindings) == 0 {
			continue
		}
		if ok, _, _ := e.policy.match.Matches(rq); !ok {
			continue
		}
		var bindings []string
		for _, b := range e.bindings {
			if b.match != nil {
				if ok, _, _ := b.match.Matches(rq); !ok {
					continue
				}
			}
			bindings = append(bindings, b.Name)
		}
		if len(bindings) == 0 {
			continue
		}
		info := s.info(e)
		info.Bindings = bindings
		out = append(out, info)
	}
	return out
}
