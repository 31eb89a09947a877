package mapol

import (
	"context"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	ap "github.com/arbiter-pdp/arbiter/engine/admissionpolicy"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// MutatingAdmissionPolicy as a policy kind of the engine: the policies and
// bindings loaded and compiled with the API server's compiler (load →
// compile, cached by object identity and version), their params taken
// from the other objects, and the mutation of a request's object into
// results and denials (evaluate → outcome; mutate.go).

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

// Classify says whether o is a policy or a binding (any version: versions
// Arbiter does not read are refused when compiled).
func Classify(o *manifest.Object) (policy, binding bool) {
	if o.Group() != Group {
		return false, false
	}
	return o.Kind == KindPolicy, o.Kind == KindBinding
}

// ParamKindOf returns the apiVersion and kind of a policy object's
// paramKind, if it names one (read from the content, before compilation).
func ParamKindOf(o *manifest.Object) (apiVersion, kind string, ok bool) {
	return ap.ParamKindOf(o)
}

// Compile compiles the policies and bindings of objs (in any order) and
// takes as params the objects of others whose kind a policy's paramKind
// names. It returns nil when objs is empty.
func (c *Cache) Compile(objs, others []*manifest.Object, namespaces map[string]map[string]any, opts Options) (*Set, manifest.LoadErrors) {
	if len(objs) == 0 {
		return nil, nil
	}
	var errs manifest.LoadErrors
	var policies []*Policy
	var bindings []*Binding
	for _, o := range objs {
		if !Versions[o.VersionOnly()] {
			errs = append(errs, manifest.Errorf(o, "apiVersion", "unsupported version %s of %s: Arbiter reads %s/v1, v1beta1 and v1alpha1", o.APIVersion, o.Kind, Group))
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
			var typed admissionregistrationv1.MutatingAdmissionPolicy
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
		var typed admissionregistrationv1.MutatingAdmissionPolicyBinding
		if err := manifest.DecodeStrict(o, &typed); err != nil {
			errs = append(errs, err)
			continue
		}
		if o.VersionOnly() == "v1alpha1" {
			defaultV1alpha1Binding(&typed)
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
	s := NewSet(policies, bindings, params, namespaces, opts)
	s.paramObjects = paramObjects
	return s, nil
}

// defaultV1alpha1Binding applies v1alpha1's own default: a paramRef's
// parameterNotFoundAction is Deny (v1 and v1beta1 require it).
func defaultV1alpha1Binding(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
	if pr := b.Spec.ParamRef; pr != nil && pr.ParameterNotFoundAction == nil {
		deny := admissionregistrationv1.DenyAction
		pr.ParameterNotFoundAction = &deny
	}
}

// IsParam says whether o is one of the set's params.
func (s *Set) IsParam(o *manifest.Object) bool { return s != nil && s.paramObjects[o] }

// Info describes one policy of a set, for inventories.
type Info struct {
	Name string
	// Bindings are the names of its bindings, in evaluation order (none:
	// the policy is inert).
	Bindings []string
	// Resources are the group/version/resource of its matchConstraints'
	// resource rules.
	Resources []string
	// ParamKind is apiVersion/kind of its params, or "".
	ParamKind string
	// ReinvocationPolicy is Never or IfNeeded; FailurePolicy Fail or Ignore.
	ReinvocationPolicy string
	FailurePolicy      string
	// Mutations is the number of its mutations.
	Mutations int
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
	info := Info{Name: p.Name, Resources: ap.Resources(p.Spec.MatchConstraints), Mutations: len(p.mutations),
		ReinvocationPolicy: string(p.Spec.ReinvocationPolicy), FailurePolicy: string(p.failurePolicy)}
	for _, b := range e.bindings {
		info.Bindings = append(info.Bindings, b.Name)
	}
	if gvk, ok := p.ParamKind(); ok {
		info.ParamKind = gvk.GroupVersion().String() + "/" + gvk.Kind
	}
	return info
}

// Applicable returns the policies that apply to the request, by the same
// matching as Decide: the request is one the plugin handles, their
// matchConstraints select it and so do the matchResources of at least one
// binding (listed in Info.Bindings); their matchConditions are not
// evaluated.
func (s *Set) Applicable(ctx context.Context, req *admission.Request) []Info {
	if s.Empty() || !handles(req) {
		return nil
	}
	_, gvr, _ := req.Requested()
	rq := ap.NewRequest(ctx, s.objects, req, nil)
	var out []Info
	for _, e := range s.byResource.Candidates(gvr.Resource) {
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
