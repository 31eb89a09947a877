package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"runtime"
	"slices"
	"sort"
	"sync"

	"github.com/arbiter-pdp/arbiter/engine/celenv"
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
	vap        vapCache
	// indexes are the exception indexes of the last compilation, by
	// policy: a policy whose exceptions are the same (compiled) ones
	// keeps its index.
	indexes map[PolicyRef]cachedIndex
}

type cachedIndex struct {
	exceptions []*Exception
	index      *exceptionIndex
}

type cachedPolicy struct {
	version string
	policy  *Policy
}

type cachedException struct {
	version   string
	exception *Exception
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
	}, nil
}

// Options tune a compilation.
type Options struct {
	// KeepOrder keeps policies and exceptions in the order given (as the
	// Kyverno CLI does with files); by default they are sorted by kind,
	// namespace and name, so a set's results are in a fixed order.
	KeepOrder bool
}

// Compile builds an immutable PolicySet from objects: policies, exceptions
// and the objects they refer to (Namespaces). Objects of other classes are
// ignored. Every object that cannot be loaded is reported (LoadErrors) and
// no set is returned.
func (c *Compiler) Compile(objs []*Object, opts Options) (*PolicySet, error) {
	ps := &PolicySet{namespaces: map[string]map[string]any{}}
	var errs LoadErrors
	seen := make(map[string]bool, len(objs))
	// First pass: classify, find what is cached; second: compile the rest
	// in parallel; third: assemble in input order.
	type slot struct {
		o       *Object
		id, ver string
		class   Class
		policy  *Policy
		exc     *Exception
		err     *LoadError
	}
	slots := make([]slot, 0, len(objs))
	var todo []int
	var vapObjs, others, psaObjs []*Object
	c.mu.Lock()
	for _, o := range objs {
		class := Classify(o)
		switch class {
		case ClassPolicy, ClassException:
			id := o.id
			if id == "" {
				id = identity(o)
			}
			if seen[id] {
				errs = append(errs, loadErr(o, "metadata.name", "duplicate %s", o.Ref()))
				continue
			}
			seen[id] = true
			version := o.Version
			if version == "" {
				sum := sha256.Sum256(canonicalJSON(o.Content))
				version = hex.EncodeToString(sum[:])
			}
			s := slot{o: o, id: id, ver: version, class: class}
			if class == ClassPolicy {
				if cached, ok := c.policies[id]; ok && cached.version == version {
					s.policy = cached.policy
				}
			} else if cached, ok := c.exceptions[id]; ok && cached.version == version {
				s.exc = cached.exception
			}
			if s.policy == nil && s.exc == nil {
				todo = append(todo, len(slots))
			}
			slots = append(slots, s)
		case ClassNamespace:
			if o.Name != "" {
				ps.namespaces[o.Name] = o.Content
			}
		case ClassUnsupported:
			errs = append(errs, loadErr(o, "kind", "unsupported kind %s (apiVersion %s)", o.Kind, o.APIVersion))
		case ClassVAP, ClassVAPBinding:
			if id := identity(o); seen[id] {
				errs = append(errs, loadErr(o, "metadata.name", "duplicate %s", o.Ref()))
			} else {
				seen[id] = true
				vapObjs = append(vapObjs, o)
			}
		case ClassPodSecurityConfiguration:
			psaObjs = append(psaObjs, o)
		case ClassResource:
			others = append(others, o)
		}
	}
	c.mu.Unlock()
	compileSlot := func(s *slot) {
		if s.class == ClassPolicy {
			s.policy, s.err = compilePolicy(c.env, s.o)
		} else {
			s.exc, s.err = compileException(c.env, s.o)
		}
	}
	if workers := min(runtime.GOMAXPROCS(0), len(todo)/8); workers > 1 {
		var wg sync.WaitGroup
		next := make(chan int)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					compileSlot(&slots[i])
				}
			}()
		}
		for _, i := range todo {
			next <- i
		}
		close(next)
		wg.Wait()
	} else {
		for _, i := range todo {
			compileSlot(&slots[i])
		}
	}
	var pols []*Policy
	var excs []*Exception
	var vapErrs LoadErrors
	c.mu.Lock()
	for i := range slots {
		s := &slots[i]
		switch {
		case s.err != nil:
			errs = append(errs, s.err)
		case s.policy != nil:
			c.policies[s.id] = cachedPolicy{version: s.ver, policy: s.policy}
			pols = append(pols, s.policy)
		case s.exc != nil:
			c.exceptions[s.id] = cachedException{version: s.ver, exception: s.exc}
			excs = append(excs, s.exc)
		}
	}
	c.mu.Unlock()
	ps.vap, vapErrs = c.vap.compileVAP(vapObjs, others, ps.namespaces)
	errs = append(errs, vapErrs...)
	var psaErrs LoadErrors
	ps.psa, psaErrs = compilePSA(psaObjs)
	if errs = append(errs, psaErrs...); len(errs) > 0 {
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
		sort.SliceStable(excs, func(i, j int) bool {
			if excs[i].Namespace != excs[j].Namespace {
				return excs[i].Namespace < excs[j].Namespace
			}
			return excs[i].Name < excs[j].Name
		})
	}
	ps.exceptions = excs
	ps.psa.bind(excs)
	var images, values uint64
	for _, ex := range excs {
		images += uint64(len(ex.Spec.Images))
		values += uint64(len(ex.Spec.AllowedValues))
		for _, s := range ex.Spec.Images {
			ps.exceptionSize = max(ps.exceptionSize, uint64(len(s)))
		}
		for _, s := range ex.Spec.AllowedValues {
			ps.exceptionSize = max(ps.exceptionSize, uint64(len(s)))
		}
	}
	ps.exceptionSize = max(ps.exceptionSize, images, values)
	// Bind exceptions to the policies they name (exact kind and name).
	byRef := map[PolicyRef][]*Exception{}
	for _, ex := range excs {
		for i, r := range ex.Spec.PolicyRefs {
			if !slices.Contains(ex.Spec.PolicyRefs[:i], r) {
				byRef[r] = append(byRef[r], ex)
			}
		}
	}
	c.mu.Lock()
	indexes := make(map[PolicyRef]cachedIndex, len(pols))
	for _, p := range pols {
		ref := PolicyRef{Name: p.Name, Kind: p.Kind}
		excs := byRef[ref]
		cached, ok := c.indexes[ref]
		if !ok || !slices.Equal(cached.exceptions, excs) {
			cached = cachedIndex{exceptions: excs, index: newExceptionIndex(excs)}
		}
		indexes[ref] = cached
		ps.entries = append(ps.entries, &entry{policy: p, exceptions: excs, index: cached.index})
	}
	c.indexes = indexes
	c.mu.Unlock()
	ps.index()
	return ps, nil
}

// Compile is a convenience for a one-off compilation with a fresh compiler.
func Compile(objs []*Object, opts Options) (*PolicySet, error) {
	c, err := NewCompiler()
	if err != nil {
		return nil, err
	}
	return c.Compile(objs, opts)
}

func identity(o *Object) string {
	return o.Group() + "/" + o.Kind + "/" + o.Namespace + "/" + o.Name
}

// Forget drops cached compilations of objects not in keep (identities as
// returned by ObjectID), bounding the cache to the live set.
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
	c.vap.forget(keep)
}

// ObjectID returns the identity the compiler caches an object under.
func ObjectID(o *Object) string { return identity(o) }

// PolicySet is an immutable, compiled set of policies with their exceptions
// and the Namespaces they may consult. It is safe for concurrent use.
type PolicySet struct {
	entries    []*entry
	exceptions []*Exception
	namespaces map[string]map[string]any
	// byResource indexes entries by the resources their variants may match.
	byResource map[string][]*entry
	wildcard   []*entry
	// exceptionSize bounds the size of exceptions.allowedImages and
	// allowedValues (and of their strings), for cost estimates.
	exceptionSize uint64
	// shared holds the canonical forms of request-pure expressions that
	// occur in more than one place, whose results a request memoizes.
	shared map[string]bool
	// vap holds the ValidatingAdmissionPolicies, bindings and params.
	vap *vapState
	// psa holds the Pod Security configuration and the exceptions of its levels.
	psa *psaState
}

type entry struct {
	policy     *Policy
	exceptions []*Exception
	index      *exceptionIndex
}

// Policies returns the compiled policies, in evaluation order.
func (ps *PolicySet) Policies() []*Policy {
	out := make([]*Policy, len(ps.entries))
	for i, e := range ps.entries {
		out[i] = e.policy
	}
	return out
}

// Exceptions returns the compiled exceptions, in order.
func (ps *PolicySet) Exceptions() []*Exception { return ps.exceptions }

// ExceptionsFor returns the exceptions bound to a policy.
func (ps *PolicySet) ExceptionsFor(p *Policy) []*Exception {
	for _, e := range ps.entries {
		if e.policy == p {
			return e.exceptions
		}
	}
	return nil
}

// Namespace returns the Namespace object named name, if the set has it.
func (ps *PolicySet) Namespace(name string) (map[string]any, bool) {
	ns, ok := ps.namespaces[name]
	return ns, ok
}

// index builds the resource index: an entry is listed under every resource
// name its variants' rules name, or in wildcard when a rule says "*" or the
// policy is in JSON mode.
func (ps *PolicySet) index() {
	counts := map[string]int{}
	for _, e := range ps.entries {
		for _, v := range e.policy.variants {
			for _, vr := range v.variables {
				if vr.prog.memoKey != "" {
					counts[vr.prog.memoKey]++
				}
			}
		}
	}
	ps.shared = map[string]bool{}
	for k, n := range counts {
		if n > 1 {
			ps.shared[k] = true
		}
	}
	ps.byResource = map[string][]*entry{}
	for _, e := range ps.entries {
		names := map[string]bool{}
		wild := e.policy.jsonMode
		for _, v := range e.policy.variants {
			if v.match == nil {
				wild = true
				continue
			}
			if len(v.match.rules) == 0 {
				wild = true
			}
			for _, r := range v.match.rules {
				for _, res := range r.resources {
					if res[0] == "*" {
						wild = true
					} else {
						names[res[0]] = true
					}
				}
			}
		}
		if wild {
			ps.wildcard = append(ps.wildcard, e)
			continue
		}
		for n := range names {
			ps.byResource[n] = append(ps.byResource[n], e)
		}
	}
	if len(ps.wildcard) == 0 {
		return
	}
	// Every per-resource list also holds the wildcard entries, in the global order.
	wild := map[*entry]bool{}
	for _, e := range ps.wildcard {
		wild[e] = true
	}
	for n, l := range ps.byResource {
		in := map[*entry]bool{}
		for _, e := range l {
			in[e] = true
		}
		merged := make([]*entry, 0, len(l)+len(ps.wildcard))
		for _, e := range ps.entries {
			if in[e] || wild[e] {
				merged = append(merged, e)
			}
		}
		ps.byResource[n] = merged
	}
}

// candidates returns, in evaluation order, the entries that may match a
// request on resource.
func (ps *PolicySet) candidates(resource string) []*entry {
	if l, ok := ps.byResource[resource]; ok {
		return l
	}
	return ps.wildcard
}

// HasPolicy says whether the set has a policy of that kind and name (in any
// namespace, as exceptions reference policies by name only).
func (ps *PolicySet) HasPolicy(kind, name string) bool {
	if kind == KindPodSecurity {
		return isPSALevel(name)
	}
	for _, e := range ps.entries {
		if e.policy.Kind == kind && e.policy.Name == name {
			return true
		}
	}
	return false
}
