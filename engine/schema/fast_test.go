package schema

import (
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/structured-merge-diff/v6/typed"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
)

// TestFastPathIsSMD: on every differential case, the fast path answers only
// when structured-merge-diff succeeds, with the same object; and it answers
// most of the cases that merge.
func TestFastPathIsSMD(t *testing.T) {
	ps := converterPairs(t)
	fast, merged := 0, 0
	for _, c := range applyCases() {
		if c.conv != "builtin" && c.conv != "crd" {
			continue
		}
		for _, allowAtomic := range []bool{false, true} {
			tc := ps[c.conv].ours
			obj, ac := mustJSON(t, c.obj), mustJSON(t, c.ac)
			original := &unstructured.Unstructured{Object: obj}
			if original.GroupVersionKind() != (&unstructured.Unstructured{Object: ac}).GroupVersionKind() {
				continue
			}
			want, werr := applySMD(tc, original, &unstructured.Unstructured{Object: ac}, allowAtomic)
			got, ok := fastApply(tc.(fastTyper).fastType(original.GroupVersionKind()), obj, ac, allowAtomic)
			if werr == nil {
				merged++
			}
			if !ok {
				continue
			}
			fast++
			if werr != nil {
				t.Errorf("%s (allowAtomic %v): the fast path merged, structured-merge-diff failed: %v", c.name, allowAtomic, werr)
			} else if !reflect.DeepEqual(got, want) {
				t.Errorf("%s (allowAtomic %v): fast path\n %v\nstructured-merge-diff\n %v", c.name, allowAtomic, got, want)
			}
		}
	}
	t.Logf("fast path: %d of the %d merges", fast, merged)
	if fast*10 < merged*9 {
		t.Errorf("the fast path took only %d of %d merges", fast, merged)
	}
}

// TestApplyConfigurationRandom: random apply configurations (and a few
// random changes to the live object), generated from the schema, give the
// same result and error as kube-apiserver's ApplyStructuredMergeDiff (and
// Kyverno's copy), and the fast path never answers when
// structured-merge-diff would not give the same.
func TestApplyConfigurationRandom(t *testing.T) {
	n := 1500
	if testing.Short() || raceEnabled {
		n = 300
	}
	if s := os.Getenv("ARBITER_RANDOM_CASES"); s != "" { // for longer runs
		n, _ = strconv.Atoi(s)
	}
	ps := converterPairs(t)
	type fixture struct {
		name, conv, src string
		gvk             k8sschema.GroupVersionKind
	}
	fixtures := []fixture{
		{"pod", "builtin", fixturePod, k8sschema.GroupVersionKind{Version: "v1", Kind: "Pod"}},
		{"deployment", "builtin", fixtureDeployment, k8sschema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}},
		{"widget", "crd", fixtureWidget, widgetGVK("v1")},
	}
	stats := map[string]int{}
	for i := 0; i < n; i++ {
		f := fixtures[i%len(fixtures)]
		p := ps[f.conv]
		root := p.ours.(fastTyper).fastType(f.gvk)
		rng := rand.New(rand.NewPCG(uint64(i), 42))
		g := &gen{rng: rng}
		obj := mustJSON(t, f.src)
		if rng.IntN(4) == 0 {
			obj = g.perturb(obj, root, 0).(map[string]any)
		}
		ac := g.applyConfig(obj, root)
		ac["apiVersion"], ac["kind"] = obj["apiVersion"], obj["kind"]
		allowAtomic := rng.IntN(3) == 0
		name := fmt.Sprintf("%s/%d", f.name, i)

		objCopy, acCopy := deepCopy(obj), deepCopy(ac)
		got, gerr := ApplyConfiguration(p.ours, obj, ac, allowAtomic)
		if !reflect.DeepEqual(obj, objCopy) || !reflect.DeepEqual(ac, acCopy) {
			t.Fatalf("%s: an input was modified", name)
		}
		ref := upstreamApply
		if allowAtomic {
			ref = kyvernoApply
		}
		want, werr := ref(p.ref, deepCopy(obj).(map[string]any), deepCopy(ac).(map[string]any))
		if !similarError(gerr, werr) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: allowAtomic %v\napply configuration %v\n got  %v %v\n want %v %v", name, allowAtomic, ac, got, gerr, want, werr)
			continue
		}
		_, fastOK := fastApply(root, obj, ac, allowAtomic)
		switch {
		case werr != nil:
			stats["error"]++
		case fastOK:
			stats["merged, fast path"]++
		default:
			stats["merged, structured-merge-diff path"]++
		}
	}
	t.Logf("%d random cases: %v", n, stats)
	if stats["merged, fast path"] < n/10 || stats["error"] < n/10 {
		t.Errorf("the generator is lopsided: %v", stats)
	}
}

// gen makes random apply configurations from a live object and its schema.
type gen struct {
	rng *rand.Rand
}

func (g *gen) chance(n int) bool { return g.rng.IntN(n) == 0 }

func sortedMapKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func fieldNames(m *cmap) []string {
	names := make([]string, 0, len(m.fields))
	for k := range m.fields {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// applyConfig picks parts of obj (changed or not) and new fields.
func (g *gen) applyConfig(obj map[string]any, root *cnode) map[string]any {
	out := map[string]any{}
	for _, k := range []string{"metadata", "spec", "status"} {
		if g.chance(2) {
			continue
		}
		t := root.mp.fields[k]
		if t == nil {
			continue
		}
		v, ok := obj[k]
		if !ok {
			v = g.value(t, 0)
		}
		out[k] = g.sub(v, t, 0)
	}
	if g.chance(20) {
		out["bogus"] = "x"
	}
	return out
}

// sub is a random part of v, a value of t.
func (g *gen) sub(v any, t *cnode, depth int) any {
	if t == nil || t.invalid {
		return v
	}
	switch {
	case g.chance(40):
		return nil
	case g.chance(60):
		return g.wrongType(v)
	}
	switch x := v.(type) {
	case map[string]any:
		if t.mp == nil {
			return v
		}
		out := map[string]any{}
		for _, k := range sortedMapKeys(x) {
			if g.chance(3) || depth > 6 {
				ft := t.mp.fields[k]
				if ft == nil {
					ft = t.mp.elem
				}
				out[k] = g.sub(x[k], ft, depth+1)
			}
		}
		if len(t.mp.fields) > 0 && g.chance(3) && depth < 5 {
			names := fieldNames(t.mp)
			k := names[g.rng.IntN(len(names))]
			if cur, ok := x[k]; ok {
				out[k] = g.sub(cur, t.mp.fields[k], depth+1)
			} else {
				out[k] = g.value(t.mp.fields[k], depth+1)
			}
		}
		if t.mp.elem != nil && g.chance(3) {
			out[fmt.Sprintf("k%d", g.rng.IntN(4))] = g.value(t.mp.elem, depth+1)
		}
		if g.chance(30) {
			out["unknownField"] = int64(1)
		}
		return out
	case []any:
		if t.list == nil {
			return v
		}
		var out []any
		for _, e := range x {
			if g.chance(2) {
				out = append(out, g.item(e, t.list, depth+1))
			}
		}
		if g.chance(2) {
			out = append(out, g.newItem(t.list, depth+1))
		}
		if g.chance(4) {
			g.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		}
		if g.chance(25) && len(out) > 0 {
			out = append(out, out[0]) // a duplicate
		}
		if out == nil && g.chance(2) {
			out = []any{}
		}
		return out
	default:
		if g.chance(3) {
			return g.value(t, depth)
		}
		return v
	}
}

// item is a random part of a list item, keeping its keys (mostly).
func (g *gen) item(e any, l *clist, depth int) any {
	m, ok := e.(map[string]any)
	if !ok || len(l.keys) == 0 {
		return g.sub(e, l.elem, depth)
	}
	s, _ := g.sub(m, l.elem, depth).(map[string]any)
	if s == nil {
		return s
	}
	for _, k := range l.keys {
		if v, ok := m[k]; ok && !g.chance(15) {
			s[k] = v
		}
	}
	return s
}

func (g *gen) newItem(l *clist, depth int) any {
	v := g.value(l.elem, depth)
	if m, ok := v.(map[string]any); ok {
		for _, k := range l.keys {
			if g.chance(8) {
				continue
			}
			if kt := l.elem.mp.fields[k]; kt != nil && kt.hasScalar && kt.scalar == "numeric" {
				m[k] = int64(g.rng.IntN(3) + 80)
			} else {
				m[k] = fmt.Sprintf("new%d", g.rng.IntN(3))
			}
		}
	}
	return v
}

// value is a random value of t.
func (g *gen) value(t *cnode, depth int) any {
	if t == nil || t.invalid {
		return "x"
	}
	switch {
	case t.mp != nil && (t.list == nil || g.chance(2)):
		out := map[string]any{}
		if depth > 5 {
			return out
		}
		if len(t.mp.fields) > 0 {
			names := fieldNames(t.mp)
			for i := 0; i < 1+g.rng.IntN(2); i++ {
				k := names[g.rng.IntN(len(names))]
				out[k] = g.value(t.mp.fields[k], depth+1)
			}
		} else if t.mp.elem != nil {
			out[fmt.Sprintf("k%d", g.rng.IntN(4))] = g.value(t.mp.elem, depth+1)
		}
		return out
	case t.list != nil:
		if depth > 5 {
			return []any{}
		}
		return []any{g.newItem(t.list, depth+1)}
	case t.hasScalar:
		switch t.scalar {
		case "numeric":
			if g.chance(5) {
				return 1.5
			}
			return int64(g.rng.IntN(100))
		case "boolean":
			return g.chance(2)
		case "string":
			return fmt.Sprintf("s%d", g.rng.IntN(5))
		default:
			return []any{"s", int64(1), true}[g.rng.IntN(3)]
		}
	}
	return nil
}

func (g *gen) wrongType(v any) any {
	switch v.(type) {
	case string:
		return int64(7)
	case map[string]any:
		return []any{"x"}
	case []any:
		return map[string]any{"x": "y"}
	default:
		return "wrong"
	}
}

// perturb makes a live object a little unusual: nulls, duplicates, unknown
// fields, other Go types.
func (g *gen) perturb(v any, t *cnode, depth int) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for _, k := range sortedMapKeys(x) {
			var ft *cnode
			if t != nil && t.mp != nil {
				ft = t.mp.fields[k]
				if ft == nil {
					ft = t.mp.elem
				}
			}
			switch {
			case depth > 0 && g.chance(40):
				out[k] = nil
			case g.chance(150):
				out[k] = int32(3) // a Go type JSON does not give
			default:
				out[k] = g.perturb(x[k], ft, depth+1)
			}
		}
		if depth > 0 && g.chance(60) {
			out["unknownLiveField"] = "x"
		}
		return out
	case []any:
		out := slices.Clone(x)
		var et *cnode
		if t != nil && t.list != nil {
			et = t.list.elem
		}
		for i := range out {
			out[i] = g.perturb(out[i], et, depth+1)
		}
		if len(out) > 0 && g.chance(10) {
			out = append(out, deepCopy(out[0])) // a duplicate key
		}
		return out
	default:
		return v
	}
}

// deepCopy copies maps and lists, whatever the scalars.
func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if x == nil {
			return x
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		if x == nil {
			return x
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	default:
		return v
	}
}

// similarError is sameError, except when structured-merge-diff's validation
// found several problems: which it reports, and in which order, depends on
// Go's map order (it stops at the first undeclared field of a map), so only
// the step that failed is compared.
func similarError(got, want error) bool {
	if sameError(got, want) {
		return true
	}
	if got == nil || want == nil {
		return false
	}
	g, w := got.Error(), want.Error()
	orderDependent := func(s string) bool {
		return strings.Contains(s, "errors:\n") || strings.Contains(s, "field not declared in schema")
	}
	if !orderDependent(g) && !orderDependent(w) {
		return false
	}
	step := func(s string) string {
		i := strings.Index(s, " typed object: ")
		if i < 0 {
			return s
		}
		return s[:i]
	}
	return step(g) == step(w)
}

// TestSortedValidation: the deterministic validation gives structured-merge-
// diff's text whenever that text does not depend on Go's map order (the
// same in 12 runs), and the same text every time.
func TestSortedValidation(t *testing.T) {
	n := 3000
	if testing.Short() || raceEnabled {
		n = 500
	}
	ps := converterPairs(t)
	srcs := []struct{ conv, src string }{{"builtin", fixturePod}, {"builtin", fixtureDeployment}, {"crd", fixtureWidget}}
	same, invalid := 0, 0
	for i := 0; i < n; i++ {
		f := srcs[i%len(srcs)]
		tc := ps[f.conv].ours
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		g := &gen{rng: rng}
		obj := mustJSON(t, f.src)
		root := tc.(fastTyper).fastType((&unstructured.Unstructured{Object: obj}).GroupVersionKind())
		var u *unstructured.Unstructured
		allowDup := i%2 == 0
		if allowDup {
			u = &unstructured.Unstructured{Object: g.perturb(obj, root, 0).(map[string]any)}
		} else {
			ac := g.applyConfig(obj, root)
			ac["apiVersion"], ac["kind"] = obj["apiVersion"], obj["kind"]
			u = &unstructured.Unstructured{Object: ac}
		}
		var opts []typed.ValidationOptions
		if allowDup {
			opts = append(opts, typed.AllowDuplicates)
		}
		seen := map[string]bool{}
		for range 12 {
			_, err := tc.ObjectToTyped(u, opts...)
			seen[errString(err)] = true
		}
		_, err := tc.ObjectToTyped(u, opts...)
		ours := errString(deterministic(tc, u, err, allowDup))
		if again := errString(deterministic(tc, u, err, allowDup)); again != ours {
			t.Fatalf("case %d: not deterministic:\n%s\n%s", i, ours, again)
		}
		if seen[""] != (ours == "") {
			t.Errorf("case %d: structured-merge-diff %v, ours %q", i, seen, ours)
			continue
		}
		if ours != "" {
			invalid++
		}
		if len(seen) == 1 && seen[ours] {
			same++
		}
		// Without undeclared fields (where the walk stops), the errors are
		// the same whatever the order: only their order may differ.
		if strings.Contains(ours, "field not declared") {
			continue
		}
		for text := range seen {
			if strings.Contains(text, "field not declared") || !reflect.DeepEqual(errorLines(text), errorLines(ours)) {
				t.Errorf("case %d: structured-merge-diff\n%v\nours\n%s", i, text, ours)
			}
		}
	}
	t.Logf("%d objects, %d invalid: the same text as structured-merge-diff's %d times", n, invalid, same)
}

func errorLines(s string) []string {
	lines := strings.Split(s, "\n")
	sort.Strings(lines)
	return lines
}
