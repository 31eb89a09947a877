package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strconv"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/arbiter-pdp/arbiter/engine/vap"
)

// Kubernetes ValidatingAdmissionPolicy support: classification, loading,
// compilation into the PolicySet and evaluation (package engine/vap does
// the work; this file wires it in).

// Kinds of the Kubernetes admission policy types.
const (
	KindValidatingAdmissionPolicy = vap.KindPolicy
	// AdmissionRegistrationGroup is the API group of ValidatingAdmissionPolicies.
	AdmissionRegistrationGroup           = vap.Group
	KindValidatingAdmissionPolicyBinding = vap.KindBinding
)

// SourceValidatingAdmissionPolicy is the PolicyReport source of VAP results.
const SourceValidatingAdmissionPolicy = "ValidatingAdmissionPolicy"

// PropBinding is the result property naming a VAP binding.
const PropBinding = "binding"

// PropParams is the result property naming the params a binding evaluated.
const PropParams = "params"

// classifyVAP returns the class of admissionregistration.k8s.io policy
// objects (any version: other versions than v1 are refused when loaded).
func classifyVAP(o *Object) (Class, bool) {
	if o.Group() != vap.Group {
		return 0, false
	}
	switch o.Kind {
	case vap.KindPolicy:
		return ClassVAP, true
	case vap.KindBinding:
		return ClassVAPBinding, true
	}
	return 0, false
}

// ParamObjects returns which of objs are params of a
// ValidatingAdmissionPolicy among objs: objects (not policies, exceptions
// or Namespaces) whose apiVersion and kind are some policy's paramKind.
// Params are stored and consulted, not evaluated as resources.
func ParamObjects(objs []*Object) map[*Object]bool {
	kinds := map[[2]string]bool{}
	for _, o := range objs {
		if Classify(o) != ClassVAP {
			continue
		}
		spec, _ := o.Content["spec"].(map[string]any)
		pk, _ := spec["paramKind"].(map[string]any)
		apiVersion, _ := pk["apiVersion"].(string)
		kind, _ := pk["kind"].(string)
		if kind != "" {
			kinds[[2]string{apiVersion, kind}] = true
		}
	}
	if len(kinds) == 0 {
		return nil
	}
	out := map[*Object]bool{}
	for _, o := range objs {
		if Classify(o) == ClassResource && kinds[[2]string{o.APIVersion, o.Kind}] {
			out[o] = true
		}
	}
	return out
}

// vapCache remembers compiled VAP objects by identity and version.
type vapCache struct {
	mu       sync.Mutex
	policies map[string]cachedVAP[*vap.Policy]
	bindings map[string]cachedVAP[*vap.Binding]
}

type cachedVAP[T any] struct {
	version string
	value   T
}

func (c *vapCache) forget(keep map[string]bool) {
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

// vapState is the VAP part of a PolicySet.
type vapState struct {
	set      *vap.Set
	policies []*vap.Policy
	params   map[*Object]bool
}

func objectVersion(o *Object) string {
	if o.Version != "" {
		return o.Version
	}
	sum := sha256.Sum256(canonicalJSON(o.Content))
	return hex.EncodeToString(sum[:])
}

func fieldErrors(o *Object, errs field.ErrorList) LoadErrors {
	out := make(LoadErrors, len(errs))
	for i, e := range errs {
		out[i] = &LoadError{Source: o.Source, Object: o.Ref(), Field: e.Field, Detail: e.ErrorBody()}
	}
	return out
}

// compileVAP compiles the ValidatingAdmissionPolicies and bindings of objs
// (VAP objects, in any order) and takes as params the objects of others
// whose kind a policy's paramKind names. It returns nil when objs has no
// VAP object.
func (c *vapCache) compileVAP(objs, others []*Object, namespaces map[string]map[string]any) (*vapState, LoadErrors) {
	if len(objs) == 0 {
		return nil, nil
	}
	var errs LoadErrors
	var policies []*vap.Policy
	var bindings []*vap.Binding
	for _, o := range objs {
		if o.APIVersion != vap.APIVersion {
			errs = append(errs, loadErr(o, "apiVersion", "unsupported version %s: Arbiter reads %s", o.APIVersion, vap.APIVersion))
			continue
		}
		id, version := identity(o), objectVersion(o)
		switch Classify(o) {
		case ClassVAP:
			c.mu.Lock()
			cached, ok := c.policies[id]
			c.mu.Unlock()
			if ok && cached.version == version {
				policies = append(policies, cached.value)
				continue
			}
			var typed admissionregistrationv1.ValidatingAdmissionPolicy
			if err := decodeStrict(o, &typed); err != nil {
				errs = append(errs, err)
				continue
			}
			p, ferrs := vap.CompilePolicy(&typed)
			if len(ferrs) > 0 {
				errs = append(errs, fieldErrors(o, ferrs)...)
				continue
			}
			c.mu.Lock()
			if c.policies == nil {
				c.policies = map[string]cachedVAP[*vap.Policy]{}
			}
			c.policies[id] = cachedVAP[*vap.Policy]{version, p}
			c.mu.Unlock()
			policies = append(policies, p)
		case ClassVAPBinding:
			c.mu.Lock()
			cached, ok := c.bindings[id]
			c.mu.Unlock()
			if ok && cached.version == version {
				bindings = append(bindings, cached.value)
				continue
			}
			var typed admissionregistrationv1.ValidatingAdmissionPolicyBinding
			if err := decodeStrict(o, &typed); err != nil {
				errs = append(errs, err)
				continue
			}
			b, ferrs := vap.CompileBinding(&typed)
			if len(ferrs) > 0 {
				errs = append(errs, fieldErrors(o, ferrs)...)
				continue
			}
			c.mu.Lock()
			if c.bindings == nil {
				c.bindings = map[string]cachedVAP[*vap.Binding]{}
			}
			c.bindings[id] = cachedVAP[*vap.Binding]{version, b}
			c.mu.Unlock()
			bindings = append(bindings, b)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	st := &vapState{policies: policies, params: map[*Object]bool{}}
	kinds := map[schema.GroupVersionKind]bool{}
	for _, p := range policies {
		if gvk, ok := p.ParamKind(); ok {
			kinds[gvk] = true
		}
	}
	var params []*vap.Param
	for _, o := range others {
		if Classify(o) != ClassResource || !kinds[schema.FromAPIVersionAndKind(o.APIVersion, o.Kind)] {
			continue
		}
		st.params[o] = true
		params = append(params, &vap.Param{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Content: o.Content})
	}
	st.set = vap.NewSet(policies, bindings, params, namespaces, vap.Options{Namespaced: IsNamespaced})
	sort.SliceStable(st.policies, func(i, j int) bool { return st.policies[i].Name < st.policies[j].Name })
	return st, nil
}

// ValidatingAdmissionPolicies returns the names of the set's
// ValidatingAdmissionPolicies, in evaluation order.
func (ps *PolicySet) ValidatingAdmissionPolicies() []string {
	if ps.vap == nil {
		return nil
	}
	out := make([]string, len(ps.vap.policies))
	for i, p := range ps.vap.policies {
		out[i] = p.Name
	}
	return out
}

// VAPBindings returns the names of the bindings of a ValidatingAdmissionPolicy, in evaluation order.
func (ps *PolicySet) VAPBindings(policy string) []string {
	if ps.vap == nil {
		return nil
	}
	var out []string
	for _, b := range ps.vap.set.Bindings(policy) {
		out = append(out, b.Name)
	}
	return out
}

// IsParam says whether o is one of the set's params (an object of a kind a
// ValidatingAdmissionPolicy's paramKind names).
func (ps *PolicySet) IsParam(o *Object) bool {
	return ps.vap != nil && ps.vap.params[o]
}

// vapRequest converts a request to the VAP evaluator's: the request as
// the client sent it (requestKind, requestResource when given).
func vapRequest(req *Request) *vap.Request {
	r := &vap.Request{
		Operation:       req.Operation,
		Object:          req.Object,
		OldObject:       req.OldObject,
		Kind:            req.Kind,
		Resource:        req.Resource,
		SubResource:     req.SubResource,
		Name:            req.Name,
		Namespace:       req.Namespace,
		UserInfo:        vap.UserInfo(req.UserInfo),
		DryRun:          req.DryRun,
		Options:         req.Options,
		NamespaceObject: req.NamespaceObject,
	}
	if req.RequestKind != nil {
		r.Kind = *req.RequestKind
	}
	if req.RequestResource != nil {
		r.Resource = *req.RequestResource
	}
	if req.RequestSubResource != "" {
		r.SubResource = req.RequestSubResource
	}
	if t := req.Trace; t != nil {
		r.Trace = func(s vap.Step) {
			variant := ""
			if s.Binding != "" {
				variant = "binding " + s.Binding
				if s.Param != "" {
					variant += " param " + s.Param
				}
			}
			step := TraceStep{Policy: s.Policy, Variant: variant, Phase: s.Phase, Name: s.Name, Expression: s.Expression, Error: s.Err, Note: s.Note}
			if s.Value != nil {
				step.Value = renderVal(s.Value)
			}
			t.add(step)
		}
	}
	return r
}

// finishDecision completes a decision: the HTTP code of Kyverno policy
// denials (400), then the ValidatingAdmissionPolicy results, denials (with
// their reason and code when one is the first denial), warnings and audit
// annotations.
func (ps *PolicySet) finishDecision(ctx context.Context, req *Request, d *Decision) {
	if !d.Allowed && d.Code == 0 {
		d.Code = 400
	}
	if ps.vap == nil || ps.vap.set.Empty() {
		return
	}
	out := ps.vap.set.Evaluate(ctx, vapRequest(req))
	proc := "background scan"
	if req.Mode == ModeAdmission {
		proc = "admission review"
	}
	for _, r := range out.Results {
		props := map[string]string{PropBinding: r.Binding, PropProcess: proc}
		if r.ValidationIndex >= 0 {
			props[PropValidationIndex] = strconv.Itoa(r.ValidationIndex)
		}
		if len(r.Params) > 0 {
			props[PropParams] = strings.Join(r.Params, ",")
		}
		d.Results = append(d.Results, Result{
			Policy:      r.Policy,
			PolicyName:  r.Policy,
			PolicyKind:  KindValidatingAdmissionPolicy,
			Rule:        r.Binding,
			Result:      r.Result,
			Message:     r.Message,
			Properties:  props,
			Actions:     r.Actions,
			Source:      SourceValidatingAdmissionPolicy,
			Scored:      true,
			status:      r.Result,
			ruleMessage: r.Message,
		})
	}
	d.Warnings = append(d.Warnings, out.Warnings...)
	if len(out.AuditAnnotations) > 0 {
		if d.AuditAnnotations == nil {
			d.AuditAnnotations = make(map[string]string, len(out.AuditAnnotations))
		}
		for k, v := range out.AuditAnnotations {
			d.AuditAnnotations[k] = v
		}
	}
	for _, den := range out.Denials {
		if len(d.Denials) == 0 {
			d.Code, d.Reason = den.Code, string(den.Reason)
		}
		d.Denials = append(d.Denials, den.Text())
	}
	if len(d.Denials) > 0 {
		d.Allowed = false
		d.Message = strings.Join(d.Denials, "; ")
	}
}

// VAPInfo describes one ValidatingAdmissionPolicy of a set, for inventories.
type VAPInfo struct {
	Name string
	// Bindings are the names of its bindings, in evaluation order.
	Bindings []string
	// Actions is the union of its bindings' validationActions (Deny, Warn,
	// Audit order); empty when no binding binds it (it is then inert).
	Actions []string
	// Resources are the group/version/resource of its matchConstraints'
	// resource rules, as Policy.Resources words them.
	Resources []string
	// ParamKind is apiVersion/kind of its params, or "".
	ParamKind string
}

// VAPInfos describes the set's ValidatingAdmissionPolicies, by name.
func (ps *PolicySet) VAPInfos() []VAPInfo {
	if ps.vap == nil {
		return nil
	}
	out := make([]VAPInfo, 0, len(ps.vap.policies))
	for _, p := range ps.vap.policies {
		info := VAPInfo{Name: p.Name}
		has := map[string]bool{}
		for _, b := range ps.vap.set.Bindings(p.Name) {
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
		seen := map[string]bool{}
		if mc := p.Spec.MatchConstraints; mc != nil {
			for _, r := range mc.ResourceRules {
				for _, g := range r.APIGroups {
					for _, v := range r.APIVersions {
						for _, res := range r.Resources {
							key := g + "/" + v + "/" + res
							if g == "" {
								key = v + "/" + res
							}
							if !seen[key] {
								seen[key] = true
								info.Resources = append(info.Resources, key)
							}
						}
					}
				}
			}
		}
		if gvk, ok := p.ParamKind(); ok {
			info.ParamKind = gvk.GroupVersion().String() + "/" + gvk.Kind
		}
		out = append(out, info)
	}
	return out
}
