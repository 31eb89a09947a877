package engine

import (
	"slices"
	"sort"
	"sync"

	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/admissionpolicy"
	"github.com/arbiter-pdp/arbiter/engine/authz"
	"github.com/arbiter-pdp/arbiter/engine/celenv"
	"github.com/arbiter-pdp/arbiter/engine/dpol"
	"github.com/arbiter-pdp/arbiter/engine/exception"
	"github.com/arbiter-pdp/arbiter/engine/gpol"
	"github.com/arbiter-pdp/arbiter/engine/ivpol"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/mapol"
	"github.com/arbiter-pdp/arbiter/engine/mpol"
	"github.com/arbiter-pdp/arbiter/engine/psa"
	"github.com/arbiter-pdp/arbiter/engine/schema"
	"github.com/arbiter-pdp/arbiter/engine/vap"
	"github.com/arbiter-pdp/arbiter/engine/vpol"
	"github.com/arbiter-pdp/arbiter/internal/parallel"
)

// Compiler compiles objects into policy sets. It remembers what it compiled
// (by object identity and version), so compiling a set that differs from the
// previous one by a few objects recompiles only those. It is safe for
// concurrent use.
type Compiler struct {
	env *celenv.Env

	mu         sync.Mutex
	policies   map[string]cachedPolicy
	exceptions map[string]cachedException
	vap        vap.Cache
	mapol      mapol.Cache
	authz      map[string]cached[*authz.Policy]
	dpol       map[string]cached[*dpol.Policy]
	gpol       map[string]cached[*gpol.Policy]
	// indexes are the exception indexes of the last compilation, by
	// policy: a policy whose exceptions are the same (compiled) ones
	// keeps its index.
	indexes map[exception.PolicyRef]cachedIndex
}

type cachedIndex struct {
	exceptions []*exception.Exception
	index      *exception.Index
}

type cachedPolicy struct {
	version string
	vpol    *vpol.Policy
	mpol    *mpol.Policy
	ivpol   *ivpol.Policy
}

// cached is a compiled policy of a kind with one policy type, and the
// version of the object it was compiled from.
type cached[P any] struct {
	version string
	policy  P
}

// compileCached returns the policy compiled from o: the one in cache when
// it was compiled from o's version, or compile's (then cached).
func compileCached[P any](c *Compiler, cache map[string]cached[P], o *manifest.Object, compile func(*manifest.Object) (P, *manifest.LoadError)) (P, *manifest.LoadError) {
	id, ver := o.ID(), o.ContentVersion()
	c.mu.Lock()
	e, ok := cache[id]
	c.mu.Unlock()
	if ok && e.version == ver {
		return e.policy, nil
	}
	p, lerr := compile(o)
	if lerr != nil {
		return p, lerr
	}
	c.mu.Lock()
	cache[id] = cached[P]{version: ver, policy: p}
	c.mu.Unlock()
	return p, nil
}

type cachedException struct {
	version   string
	exception *exception.Exception
}

// NewCompiler returns a compiler on the process-wide CEL environment.
func NewCompiler() (*Compiler, error) {
	env, err := celenv.Default()
	if err != nil {
		return nil, err
	}
	return &Compiler{
		env:        env,
		policies:   map[string]cachedPolicy{},
		exceptions: map[string]cachedException{},
		authz:      map[string]cached[*authz.Policy]{},
		dpol:       map[string]cached[*dpol.Policy]{},
		gpol:       map[string]cached[*gpol.Policy]{},
	}, nil
}

// Options tune a compilation.
type Options struct {
	// KeepOrder keeps policies and exceptions in the order given (as the
	// Kyverno CLI does with files); by default they are sorted by kind,
	// namespace and name, so a set's results are in a fixed order.
	KeepOrder bool
	// MutateExisting accepts MutatingPolicies that mutate existing
	// resources (targetMatchConstraints, evaluation.mutateExisting):
	// offline (arbiter test, arbiter apply), and a server with the
	// Kubernetes source, which reads and updates the targets through the
	// API server (kubesource). A server without a cluster (push, --load)
	// refuses them: it has no resources to mutate.
	MutateExisting bool
	// RefuseNamespacedHTTP refuses NamespacedValidatingPolicies and
	// NamespacedMutatingPolicies whose expressions use http.*, as Kyverno
	// refuses them at admission unless --allowHTTPInNamespacedPolicies is
	// set ("http.* is not allowed in namespaced policies; ..."). A server
	// sets it when its callout configuration does not allow HTTP calls in
	// namespaced policies; the CLI does not (Kyverno's CLI does not validate
	// policies that way, and serves their calls from mocks).
	RefuseNamespacedHTTP bool
	// Generating accepts GeneratingPolicies and NamespacedGeneratingPolicies,
	// which are evaluated offline (arbiter test, arbiter apply:
	// PolicySet.Generate). A server refuses them: generating resources
	// needs it to create them in the cluster, which it does not do.
	Generating bool
}

// Compile builds an immutable PolicySet from objects: policies of every
// kind, exceptions and the objects they refer to (Namespaces, params).
// Objects of other classes are ignored. Every object that cannot be loaded
// is reported (manifest.LoadErrors) and no set is returned.
func (c *Compiler) Compile(objs []*manifest.Object, opts Options) (*PolicySet, error) {
	ps := &PolicySet{namespaces: map[string]map[string]any{}}
	var errs manifest.LoadErrors
	seen := make(map[string]bool, len(objs))
	// First pass: classify, find what is cached; second: compile the rest
	// in parallel; third: assemble in input order.
	type slot struct {
		o       *manifest.Object
		id, ver string
		class   Class
		policy  *vpol.Policy
		mpol    *mpol.Policy
		ivpol   *ivpol.Policy
		exc     *exception.Exception
		err     *manifest.LoadError
	}
	slots := make([]slot, 0, len(objs))
	var todo []int
	var vapObjs, mapObjs, others, psaObjs, authzObjs, dpolObjs, gpolObjs []*manifest.Object
	c.mu.Lock()
	for _, o := range objs {
		class := Classify(o)
		switch class {
		case ClassPolicy, ClassMutatingPolicy, ClassImagePolicy, ClassException:
			id := o.ID()
			if seen[id] {
				errs = append(errs, manifest.Errorf(o, "metadata.name", "duplicate %s", o.Ref()))
				continue
			}
			seen[id] = true
			version := o.ContentVersion()
			s := slot{o: o, id: id, ver: version, class: class}
			if class == ClassException {
				if cached, ok := c.exceptions[id]; ok && cached.version == version {
					s.exc = cached.exception
				}
			} else if cached, ok := c.policies[id]; ok && cached.version == version {
				s.policy, s.mpol, s.ivpol = cached.vpol, cached.mpol, cached.ivpol
			}
			if s.policy == nil && s.mpol == nil && s.ivpol == nil && s.exc == nil {
				todo = append(todo, len(slots))
			}
			slots = append(slots, s)
		case ClassNamespace:
			if o.Name != "" {
				ps.namespaces[o.Name] = o.Content
			}
		case ClassUnsupported:
			errs = append(errs, manifest.Errorf(o, "kind", "unsupported kind %s (apiVersion %s)", o.Kind, o.APIVersion))
		case ClassVAP, ClassVAPBinding:
			if id := o.ID(); seen[id] {
				errs = append(errs, manifest.Errorf(o, "metadata.name", "duplicate %s", o.Ref()))
			} else {
				seen[id] = true
				vapObjs = append(vapObjs, o)
			}
		case ClassMAP, ClassMAPBinding:
			if id := o.ID(); seen[id] {
				errs = append(errs, manifest.Errorf(o, "metadata.name", "duplicate %s", o.Ref()))
			} else {
				seen[id] = true
				mapObjs = append(mapObjs, o)
			}
		case ClassAuthzPolicy:
			if id := o.ID(); seen[id] {
				errs = append(errs, manifest.Errorf(o, "metadata.name", "duplicate %s", o.Ref()))
			} else {
				seen[id] = true
				authzObjs = append(authzObjs, o)
			}
		case ClassDeletingPolicy:
			if id := o.ID(); seen[id] {
				errs = append(errs, manifest.Errorf(o, "metadata.name", "duplicate %s", o.Ref()))
			} else {
				seen[id] = true
				dpolObjs = append(dpolObjs, o)
			}
		case ClassGeneratingPolicy:
			if id := o.ID(); seen[id] {
				errs = append(errs, manifest.Errorf(o, "metadata.name", "duplicate %s", o.Ref()))
			} else {
				seen[id] = true
				gpolObjs = append(gpolObjs, o)
			}
		case ClassPodSecurityConfiguration:
			psaObjs = append(psaObjs, o)
		case ClassGlobalContextEntry:
			// Consulted by the context (package clusterdata), not compiled.
		case ClassResource:
			others = append(others, o)
		}
	}
	c.mu.Unlock()
	compileSlot := func(s *slot) {
		switch s.class {
		case ClassPolicy:
			s.policy, s.err = vpol.Compile(c.env, s.o)
			return
		case ClassMutatingPolicy:
			s.mpol, s.err = mpol.Compile(c.env, s.o)
			return
		case ClassImagePolicy:
			s.ivpol, s.err = ivpol.Compile(c.env, s.o)
			return
		}
		s.exc, s.err = exception.Compile(c.env, s.o)
		if s.err == nil {
			for i, r := range s.exc.Spec.PolicyRefs {
				if s.err = psa.CheckExceptionRef(s.o, i, r.Kind, r.Name, s.exc.Spec.Images, s.exc.Spec.AllowedValues); s.err != nil {
					s.exc = nil
					return
				}
			}
		}
	}
	parallel.ForGrain(len(todo), 8, func(i int) { compileSlot(&slots[todo[i]]) })
	var pols []*vpol.Policy
	var mpols []*mpol.Policy
	var ivpols []*ivpol.Policy
	var excs []*exception.Exception
	c.mu.Lock()
	for i := range slots {
		s := &slots[i]
		switch {
		case s.err != nil:
			errs = append(errs, s.err)
		case s.policy != nil:
			c.policies[s.id] = cachedPolicy{version: s.ver, vpol: s.policy}
			if opts.RefuseNamespacedHTTP {
				if err := namespacedHTTPRefused(s.o, s.policy, nil); err != nil {
					errs = append(errs, err)
					continue
				}
			}
			pols = append(pols, s.policy)
		case s.mpol != nil:
			c.policies[s.id] = cachedPolicy{version: s.ver, mpol: s.mpol}
			if opts.RefuseNamespacedHTTP {
				if err := namespacedHTTPRefused(s.o, nil, s.mpol); err != nil {
					errs = append(errs, err)
					continue
				}
			}
			if s.mpol.MutateExisting() && !opts.MutateExisting {
				errs = append(errs, mutateExistingRefused(s.o, s.mpol))
				continue
			}
			mpols = append(mpols, s.mpol)
		case s.ivpol != nil:
			c.policies[s.id] = cachedPolicy{version: s.ver, ivpol: s.ivpol}
			if opts.RefuseNamespacedHTTP {
				if err := namespacedImageHTTPRefused(s.o, s.ivpol); err != nil {
					errs = append(errs, err)
					continue
				}
			}
			ivpols = append(ivpols, s.ivpol)
		case s.exc != nil:
			c.exceptions[s.id] = cachedException{version: s.ver, exception: s.exc}
			excs = append(excs, s.exc)
		}
	}
	c.mu.Unlock()
	var kindErrs manifest.LoadErrors
	ps.vap, kindErrs = c.vap.Compile(vapObjs, others, ps.namespaces, admission.IsNamespaced)
	errs = append(errs, kindErrs...)
	// Both mutating kinds merge apply configurations with the schemas of
	// the built-in kinds and of the set's CustomResourceDefinitions.
	var applier *applier
	if len(mpols) > 0 || len(mapObjs) > 0 {
		a, err := newApplier(others, appliesConfigurations(mpols, mapObjs))
		if err != nil {
			return nil, err
		}
		applier = a
	}
	mapOpts := mapol.Options{Options: admissionpolicy.Options{Namespaced: admission.IsNamespaced}}
	if applier != nil {
		mapOpts.Applier = applier
	}
	ps.mapol, kindErrs = c.mapol.Compile(mapObjs, others, ps.namespaces, mapOpts)
	errs = append(errs, kindErrs...)
	ps.psa, kindErrs = psa.Compile(psaObjs)
	errs = append(errs, kindErrs...)
	var authzPols []*authz.Policy
	authzPols, kindErrs = c.compileAuthz(authzObjs)
	errs = append(errs, kindErrs...)
	dpols, kindErrs := c.compileDeleting(dpolObjs, opts)
	errs = append(errs, kindErrs...)
	gpols, kindErrs := c.compileGenerating(gpolObjs, opts)
	if errs = append(errs, kindErrs...); len(errs) > 0 {
		return nil, errs
	}
	if !opts.KeepOrder {
		sort.SliceStable(pols, func(i, j int) bool {
			a, b := pols[i], pols[j]
			if a.Kind != b.Kind {
				return a.Kind > b.Kind // ValidatingPolicy before NamespacedValidatingPolicy
			}
			if a.Namespace != b.Namespace {
				return a.Namespace < b.Namespace
			}
			return a.Name < b.Name
		})
		sort.SliceStable(mpols, func(i, j int) bool {
			a, b := mpols[i], mpols[j]
			if a.Kind != b.Kind {
				return a.Kind < b.Kind // MutatingPolicy before NamespacedMutatingPolicy
			}
			if a.Namespace != b.Namespace {
				return a.Namespace < b.Namespace
			}
			return a.Name < b.Name
		})
		sort.SliceStable(ivpols, func(i, j int) bool {
			a, b := ivpols[i], ivpols[j]
			if a.Kind != b.Kind {
				return a.Kind < b.Kind // ImageValidatingPolicy before NamespacedImageValidatingPolicy
			}
			if a.Namespace != b.Namespace {
				return a.Namespace < b.Namespace
			}
			return a.Name < b.Name
		})
		sort.SliceStable(excs, func(i, j int) bool {
			if excs[i].Namespace != excs[j].Namespace {
				return excs[i].Namespace < excs[j].Namespace
			}
			return excs[i].Name < excs[j].Name
		})
	}
	ps.exceptions = excs
	ps.psa.Bind(excs, ps.namespaces)
	ps.exceptionSize = exception.SizeBound(excs)
	// Bind exceptions to the policies they name (exact kind and name).
	byRef := exception.ByRef(excs)
	c.mu.Lock()
	indexes := make(map[exception.PolicyRef]cachedIndex, len(pols))
	bounds := make([]*exception.Bound, len(pols))
	for i, p := range pols {
		ref := exception.PolicyRef{Name: p.Name, Kind: p.Kind}
		excs := byRef[ref]
		cached, ok := c.indexes[ref]
		if !ok || !slices.Equal(cached.exceptions, excs) {
			cached = cachedIndex{exceptions: excs, index: exception.NewIndex(excs)}
		}
		indexes[ref] = cached
		bounds[i] = exception.Bind(excs, cached.index)
	}
	mbounds := make([]*exception.Bound, len(mpols))
	for i, p := range mpols {
		ref := exception.PolicyRef{Name: p.Name, Kind: p.Kind}
		excs := byRef[ref]
		cached, ok := c.indexes[ref]
		if !ok || !slices.Equal(cached.exceptions, excs) {
			cached = cachedIndex{exceptions: excs, index: exception.NewIndex(excs)}
		}
		indexes[ref] = cached
		mbounds[i] = exception.Bind(excs, cached.index)
	}
	ibounds := make([]*exception.Bound, len(ivpols))
	for i, p := range ivpols {
		ref := exception.PolicyRef{Name: p.Name, Kind: p.Kind}
		excs := byRef[ref]
		cached, ok := c.indexes[ref]
		if !ok || !slices.Equal(cached.exceptions, excs) {
			cached = cachedIndex{exceptions: excs, index: exception.NewIndex(excs)}
		}
		indexes[ref] = cached
		ibounds[i] = exception.Bind(excs, cached.index)
	}
	c.indexes = indexes
	c.mu.Unlock()
	ps.ivpol = ivpol.NewSet(ivpols, ibounds)
	dpolID := func(p *dpol.Policy) (string, string, string) { return p.Kind, p.Namespace, p.Name }
	ps.dpol = dpol.NewSet(dpols, orderAndBind(dpols, opts.KeepOrder, dpolID, byRef))
	gpolID := func(p *gpol.Policy) (string, string, string) { return p.Kind, p.Namespace, p.Name }
	ps.gpol = gpol.NewSet(gpols, orderAndBind(gpols, opts.KeepOrder, gpolID, byRef))
	ps.vpol = vpol.NewSet(pols, bounds)
	var mpolApplier mpol.Applier
	if applier != nil {
		mpolApplier = applier
	}
	ps.mpol = mpol.NewSet(mpols, mbounds, mpolApplier)
	if !opts.KeepOrder {
		sort.SliceStable(authzPols, func(i, j int) bool { return authzPols[i].Name < authzPols[j].Name })
	}
	ps.authz = authz.NewSet(authzPols)
	ps.finish()
	return ps, nil
}

// compileAuthz compiles the authorization policies (cached by identity
// and version), in the order given. The CEL environments of the
// authorization modes are built on first use.
func (c *Compiler) compileAuthz(objs []*manifest.Object) ([]*authz.Policy, manifest.LoadErrors) {
	if len(objs) == 0 {
		return nil, nil
	}
	env, err := authz.DefaultEnv()
	if err != nil {
		var errs manifest.LoadErrors
		for _, o := range objs {
			errs = append(errs, manifest.Errorf(o, "spec", "building the authorization CEL environment: %v", err))
		}
		return nil, errs
	}
	var out []*authz.Policy
	var errs manifest.LoadErrors
	compile := func(o *manifest.Object) (*authz.Policy, *manifest.LoadError) { return authz.Compile(env, o) }
	for _, o := range objs {
		p, lerr := compileCached(c, c.authz, o, compile)
		if lerr != nil {
			errs = append(errs, lerr)
			continue
		}
		out = append(out, p)
	}
	return out, errs
}

// orderAndBind sorts the policies of a kind whose policies bind their
// exceptions without an index (unless keepOrder) — by kind (the
// cluster-wide kind sorts first), namespace and name — and returns each
// one's bound exceptions.
func orderAndBind[P any](pols []P, keepOrder bool, id func(P) (kind, namespace, name string), byRef map[exception.PolicyRef][]*exception.Exception) []*exception.Bound {
	if !keepOrder {
		sort.SliceStable(pols, func(i, j int) bool {
			ak, an, aname := id(pols[i])
			bk, bn, bname := id(pols[j])
			if ak != bk {
				return ak < bk
			}
			if an != bn {
				return an < bn
			}
			return aname < bname
		})
	}
	bounds := make([]*exception.Bound, len(pols))
	for i, p := range pols {
		kind, _, name := id(p)
		bounds[i] = exception.Bind(byRef[exception.PolicyRef{Name: name, Kind: kind}], nil)
	}
	return bounds
}

// compileDeleting compiles the DeletingPolicies (cached by identity and
// version), in the order given.
func (c *Compiler) compileDeleting(objs []*manifest.Object, opts Options) ([]*dpol.Policy, manifest.LoadErrors) {
	return compileSingle(c, c.dpol, objs, opts, func(o *manifest.Object) (*dpol.Policy, *manifest.LoadError) { return dpol.Compile(c.env, o) }, nil)
}

// compileGenerating compiles the GeneratingPolicies (cached by identity
// and version), in the order given; without opts.Generating each is
// refused.
func (c *Compiler) compileGenerating(objs []*manifest.Object, opts Options) ([]*gpol.Policy, manifest.LoadErrors) {
	var refuse func(*manifest.Object) *manifest.LoadError
	if !opts.Generating {
		refuse = generatingRefused
	}
	return compileSingle(c, c.gpol, objs, opts, func(o *manifest.Object) (*gpol.Policy, *manifest.LoadError) { return gpol.Compile(c.env, o) }, refuse)
}

// compileSingle compiles the objects of a kind whose policies are
// evaluated one at a time (cached by identity and version), in the order
// given: a namespaced policy that calls http.* is refused under
// opts.RefuseNamespacedHTTP, and every policy that compiles is refused
// with refuse's error when refuse is set.
func compileSingle[P interface {
	Namespaced() bool
	UsesHTTP() bool
}](c *Compiler, cache map[string]cached[P], objs []*manifest.Object, opts Options, compile func(*manifest.Object) (P, *manifest.LoadError), refuse func(*manifest.Object) *manifest.LoadError) ([]P, manifest.LoadErrors) {
	var out []P
	var errs manifest.LoadErrors
	for _, o := range objs {
		p, lerr := compileCached(c, cache, o, compile)
		switch {
		case lerr != nil:
			errs = append(errs, lerr)
		case opts.RefuseNamespacedHTTP && p.Namespaced() && p.UsesHTTP():
			errs = append(errs, manifest.Errorf(o, "spec", "Forbidden: %s", kyvernocel.HTTPNotAllowedValidationMessage))
		case refuse != nil:
			errs = append(errs, refuse(o))
		default:
			out = append(out, p)
		}
	}
	return out, errs
}

// generatingRefused is the error of a GeneratingPolicy where it is not
// evaluated (a server).
func generatingRefused(o *manifest.Object) *manifest.LoadError {
	return manifest.Errorf(o, "spec.generate", "a %s is evaluated offline only (arbiter test, arbiter apply): the server does not create the resources it generates in the cluster", o.Kind)
}

// Compile is a convenience for a one-off compilation with a fresh compiler.
func Compile(objs []*manifest.Object, opts Options) (*PolicySet, error) {
	c, err := NewCompiler()
	if err != nil {
		return nil, err
	}
	return c.Compile(objs, opts)
}

// Forget drops cached compilations of objects not in keep (identities as
// returned by manifest.Object.ID), bounding the cache to the live set.
func (c *Compiler) Forget(keep map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.policies {
		if !keep[id] {
			delete(c.policies, id)
		}
	}
	for id := range c.exceptions {
		if !keep[id] {
			delete(c.exceptions, id)
		}
	}
	for id := range c.authz {
		if !keep[id] {
			delete(c.authz, id)
		}
	}
	for id := range c.dpol {
		if !keep[id] {
			delete(c.dpol, id)
		}
	}
	for id := range c.gpol {
		if !keep[id] {
			delete(c.gpol, id)
		}
	}
	c.vap.Forget(keep)
	c.mapol.Forget(keep)
}

// PolicySet is an immutable, compiled set of policies of every kind with
// their exceptions and the Namespaces they may consult. It is safe for
// concurrent use.
type PolicySet struct {
	vpol       *vpol.Set
	mpol       *mpol.Set
	ivpol      *ivpol.Set
	vap        *vap.Set
	mapol      *mapol.Set
	psa        *psa.Set
	authz      *authz.Set
	dpol       *dpol.Set
	gpol       *gpol.Set
	exceptions []*exception.Exception
	namespaces map[string]map[string]any
	// exceptionSize bounds the size of exceptions.allowedImages and
	// allowedValues (and of their strings), for cost estimates.
	exceptionSize uint64
	// shared holds the canonical forms of request-pure expressions that
	// occur in more than one place, whose results a request memoizes.
	shared map[string]bool
	// mutators and validators are the mutating and the validating kinds,
	// in admission order: they evaluate admission requests (the
	// authorization kind evaluates authorization requests: kindsFor).
	mutators   []mutator
	validators []kind
}

// finish derives what evaluation needs from the compiled kinds: the
// pipeline of validating kinds, the shared request-pure expressions.
func (ps *PolicySet) finish() {
	counts := map[string]int{}
	ps.vpol.CountMemoKeys(counts)
	ps.shared = map[string]bool{}
	for k, n := range counts {
		if n > 1 {
			ps.shared[k] = true
		}
	}
	// kube-apiserver runs MutatingAdmissionPolicies before the mutating
	// webhooks (Kyverno's among them).
	if !ps.mapol.Empty() {
		ps.mutators = append(ps.mutators, mapolKind{ps.mapol})
	}
	if !ps.mpol.Empty() {
		ps.mutators = append(ps.mutators, mpolKind{ps.mpol})
	}
	// ImageValidatingPolicies pin digests last among the mutating kinds,
	// so that images the other mutations set are pinned too.
	if ps.ivpol.Mutating() {
		ps.mutators = append(ps.mutators, ivpolKind{ps.ivpol})
	}
	ps.validators = []kind{vpolKind{ps.vpol}}
	if !ps.ivpol.Empty() {
		ps.validators = append(ps.validators, ivpolKind{ps.ivpol})
	}
	if !ps.vap.Empty() {
		ps.validators = append(ps.validators, vapKind{ps.vap})
	}
	ps.validators = append(ps.validators, psaKind{ps.psa})
}

// mutateExistingRefused is the error of a mutate-existing MutatingPolicy
// where they are not evaluated (a server without a cluster).
func mutateExistingRefused(o *manifest.Object, p *mpol.Policy) *manifest.LoadError {
	field := "spec.evaluation.mutateExisting.enabled"
	if p.Spec.TargetMatchConstraints != nil {
		field = "spec.targetMatchConstraints"
	}
	return manifest.Errorf(o, field, "a MutatingPolicy that mutates existing resources is evaluated offline only (arbiter test, arbiter apply) and by a server with the Kubernetes source (--kube-source), which updates the targets through the API server; this server has no cluster to read or update them (push or --load, or --kube-mutate-existing=false)")
}

// applier merges the apply configurations of mutations with the schemas
// of the object's kind: the built-in kinds', and those of the
// CustomResourceDefinitions among the set's objects.
type applier struct{ schemas *schema.Schemas }

// appliesConfigurations says whether a mutation of the policies is an
// apply configuration (the others, JSON patches, need no schema).
func appliesConfigurations(mpols []*mpol.Policy, mapObjs []*manifest.Object) bool {
	for _, p := range mpols {
		if p.AppliesConfigurations() {
			return true
		}
	}
	for _, o := range mapObjs {
		spec, _ := o.Content["spec"].(map[string]any)
		muts, _ := spec["mutations"].([]any)
		for _, m := range muts {
			if mm, _ := m.(map[string]any); mm["patchType"] != "JSONPatch" {
				return true
			}
		}
	}
	return false
}

// newApplier returns the applier of the set's mutations; load says some
// are apply configurations, which need the built-in schemas (parsed now,
// else on first use).
func newApplier(objs []*manifest.Object, load bool) (*applier, error) {
	var crds []map[string]any
	for _, o := range objs {
		if o.Group() == "apiextensions.k8s.io" && o.Kind == "CustomResourceDefinition" {
			crds = append(crds, o.Content)
		}
	}
	s, err := schema.NewSchemas(crds...)
	if err != nil {
		return nil, err
	}
	// The built-in schemas are parsed once per process (~0.15 s of CPU),
	// on the first compilation that needs them rather than on the first
	// decision.
	if load {
		if err := schema.LoadBuiltin(); err != nil {
			return nil, err
		}
	}
	return &applier{schemas: s}, nil
}

// Apply implements mpol.Applier and mapol.Applier.
func (a *applier) Apply(obj, applyConfiguration map[string]any, allowAtomic bool) (map[string]any, error) {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	return schema.ApplyConfiguration(a.schemas.For(k8sschema.FromAPIVersionAndKind(apiVersion, kind)), obj, applyConfiguration, allowAtomic)
}
