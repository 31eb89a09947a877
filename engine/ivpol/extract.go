package ivpol

import (
	"fmt"
	"sync"

	"github.com/gobwas/glob"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celenv"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
)

// builtinNames are the categories of the built-in image extractors, in
// the order Arbiter lists images (Kyverno's order is a map's).
var builtinNames = []string{"initContainers", "containers", "ephemeralContainers"}

// builtinExtractors are Kyverno's image extractors of the Pod, the pod
// controllers (spec.template) and CronJobs, compiled in one environment.
type builtinExtractors struct {
	pod, template, cronjob []*celeval.Program
}

var builtins [2]struct {
	once sync.Once
	b    *builtinExtractors
	err  error
}

// builtinsFor returns the built-in extractors compiled in the
// environment of a (namespaced) Kubernetes-mode policy; none in the JSON
// mode, which has no oldObject.
func builtinsFor(env *celenv.Env, namespaced, jsonMode bool) (*builtinExtractors, error) {
	if jsonMode {
		return nil, nil
	}
	i := 0
	if namespaced {
		i = 1
	}
	b := &builtins[i]
	b.once.Do(func() {
		pair, err := env.Image(namespaced, false, library)
		if err != nil {
			b.err = err
			return
		}
		out := &builtinExtractors{}
		for _, c := range []struct {
			dst  *[]*celeval.Program
			path string
		}{{&out.pod, "spec"}, {&out.template, "spec.template.spec"}, {&out.cronjob, "spec.jobTemplate.spec.template.spec"}} {
			for _, name := range builtinNames {
				expr := fmt.Sprintf("(object != null ? object : oldObject).%s.?%s.orValue([]).map(e, e.image)", c.path, name)
				prg, _, err := celeval.Compile(pair, expr, nil, nil)
				if err != nil {
					b.err = fmt.Errorf("built-in image extractor %s: %w", name, err)
					return
				}
				*c.dst = append(*c.dst, prg)
			}
		}
		b.b = out
	})
	return b.b, b.err
}

// forResource returns the built-in extractors of a requested resource
// (Kyverno chooses them by the request's GVR), nil for other resources.
func (b *builtinExtractors) forResource(r *admission.Request) []*celeval.Program {
	if b == nil {
		return nil
	}
	gvr := r.Resource
	if r.RequestResource != nil {
		gvr = *r.RequestResource
	}
	switch {
	case gvr.Group == "" && gvr.Version == "v1" && gvr.Resource == "pods":
		return b.pod
	case gvr.Group == "batch" && gvr.Version == "v1" && gvr.Resource == "jobs",
		gvr.Group == "apps" && gvr.Version == "v1" && (gvr.Resource == "deployments" || gvr.Resource == "statefulsets" || gvr.Resource == "daemonsets" || gvr.Resource == "replicasets"):
		return b.template
	case gvr.Group == "batch" && gvr.Version == "v1" && gvr.Resource == "cronjobs":
		return b.cronjob
	}
	return nil
}

// extractImages evaluates the image extractors: by category, and the
// categories in order (built-ins first; a policy extractor of a built-in's
// name replaces it in place).
func extractImages(st *celeval.State, v *variant, req *admission.Request) (map[string][]string, []string, error) {
	out := map[string][]string{}
	var order []string
	for i, prg := range v.builtins.forResource(req) {
		name := builtinNames[i]
		if v.overrides(name) {
			continue
		}
		imgs, err := evalImages(st, prg)
		if err != nil {
			return nil, nil, err
		}
		out[name] = imgs
		order = append(order, name)
	}
	for _, x := range v.extractors {
		imgs, err := evalImages(st, x.prog)
		if err != nil {
			return nil, nil, err
		}
		if _, ok := out[x.name]; !ok {
			order = append(order, x.name)
		}
		out[x.name] = imgs
	}
	return out, order, nil
}

// overrides says whether the policy has an extractor of that name.
func (v *variant) overrides(name string) bool {
	for _, x := range v.extractors {
		if x.name == name {
			return true
		}
	}
	return false
}

func evalImages(st *celeval.State, prg *celeval.Program) ([]string, error) {
	st.Label("images", "", "")
	val, err := st.Eval(prg)
	if err != nil {
		return nil, err
	}
	return toStrings(val)
}

func toStrings(v ref.Val) ([]string, error) {
	l, ok := v.(traits.Lister)
	if !ok {
		return nil, fmt.Errorf("type conversion error from '%s' to '[]string'", v.Type().TypeName())
	}
	n, _ := l.Size().(types.Int)
	out := make([]string, 0, int(n))
	for i := types.Int(0); i < n; i++ {
		s, ok := l.Get(i).(types.String)
		if !ok {
			return nil, fmt.Errorf("type conversion error from '%s' to 'string'", l.Get(i).Type().TypeName())
		}
		out = append(out, string(s))
	}
	return out, nil
}

var (
	globMu    sync.Mutex
	globCache = map[string]glob.Glob{}
)

// globMatch matches s with a glob (gobwas/glob without separators, as
// matchImageReferences); a pattern that does not compile matches nothing.
func globMatch(pattern, s string) bool {
	globMu.Lock()
	g, ok := globCache[pattern]
	if !ok {
		g, _ = glob.Compile(pattern)
		if len(globCache) < 4096 {
			globCache[pattern] = g
		}
	}
	globMu.Unlock()
	return g != nil && g.Match(s)
}
