package jsonval

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// randValue is random JSON-shaped data.
func randValue(r *rand.Rand, depth int) any {
	n := 6
	if depth > 3 {
		n = 4
	}
	switch r.IntN(n) {
	case 0:
		return "s" + strconv.Itoa(r.IntN(3))
	case 1:
		return int64(r.IntN(3))
	case 2:
		return float64(r.IntN(3)) + 0.5
	case 3:
		if r.IntN(2) == 0 {
			return nil
		}
		return r.IntN(2) == 0
	case 4:
		m := map[string]any{}
		for i := range r.IntN(4) {
			m["k"+strconv.Itoa(i)] = randValue(r, depth+1)
		}
		return m
	}
	l := make([]any, r.IntN(4))
	for i := range l {
		l[i] = randValue(r, depth+1)
	}
	return l
}

// steps returns the keys or indexes of a container's entries.
func steps(v any) []any {
	switch t := v.(type) {
	case map[string]any:
		out := make([]any, 0, len(t))
		for k := range t {
			out = append(out, k)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i := range t {
			out[i] = i
		}
		return out
	}
	return nil
}

// mutate returns a copy-on-write change of v: the containers on the path to
// the change are copied, the rest shared.
func mutate(r *rand.Rand, v any) any {
	switch t := v.(type) {
	case map[string]any:
		c := maps.Clone(t)
		ks := steps(t)
		switch {
		case len(ks) > 0 && r.IntN(3) > 0:
			k := ks[r.IntN(len(ks))].(string)
			c[k] = mutate(r, t[k])
		case len(ks) > 0 && r.IntN(2) == 0:
			delete(c, ks[r.IntN(len(ks))].(string))
		default:
			c["n"+strconv.Itoa(r.IntN(3))] = randValue(r, 2)
		}
		return c
	case []any:
		if len(t) > 0 && r.IntN(3) > 0 {
			c := append([]any(nil), t...)
			i := r.IntN(len(t))
			c[i] = mutate(r, t[i])
			return c
		}
		return append(append([]any(nil), t...), randValue(r, 2))
	}
	return randValue(r, 2)
}

// walk reads v through w along random paths (as CEL would, filling the
// caches) and checks every value read is v's: the same container, an equal
// scalar.
func walk(t *testing.T, r *rand.Rand, w ref.Val, v any, path string) {
	t.Helper()
	switch raw := v.(type) {
	case map[string]any:
		m, ok := w.(*Map)
		if !ok || !sameMap(m.m, raw) {
			t.Fatalf("%s: %T does not wrap the object's map", path, w)
		}
		if m.Size() != types.Int(len(raw)) {
			t.Fatalf("%s: size %v, want %d", path, m.Size(), len(raw))
		}
		for _, k := range steps(raw) {
			if r.IntN(3) == 0 {
				continue
			}
			e, found := m.Find(types.String(k.(string)))
			if !found {
				t.Fatalf("%s/%s: not found", path, k)
			}
			walk(t, r, e, raw[k.(string)], path+"/"+k.(string))
		}
		if _, found := m.Find(types.String("absent")); found != (raw["absent"] != nil) {
			t.Fatalf("%s/absent: found %v", path, found)
		}
	case []any:
		l, ok := w.(*List)
		if !ok || !sameList(l.l, raw) {
			t.Fatalf("%s: %T does not wrap the object's list", path, w)
		}
		for i := range raw {
			if r.IntN(3) == 0 {
				continue
			}
			walk(t, r, l.Get(types.Int(i)), raw[i], path+"/"+strconv.Itoa(i))
		}
	default:
		if want := Of(raw); w.Equal(want) != types.True || reflect.TypeOf(w) != reflect.TypeOf(want) {
			t.Fatalf("%s: %v (%T), want %v", path, w, w, raw)
		}
	}
}

// TestDerive checks that wrappers derived along chains of copy-on-write
// changes read every object as a fresh wrapper would.
func TestDerive(t *testing.T) {
	for seed := range uint64(2000) {
		r := rand.New(rand.NewPCG(seed, 17))
		obj, _ := randValue(r, 4).(map[string]any)
		if obj == nil {
			obj = map[string]any{"spec": randValue(r, 1)}
		}
		w := NewMap(obj)
		walk(t, r, w, obj, "")
		marks := []*Map{w}
		for range 12 {
			next := mutate(r, obj).(map[string]any)
			if r.IntN(5) == 0 {
				// Back to an earlier object (a policy that failed).
				prev := marks[r.IntN(len(marks))]
				next = prev.m
				w = prev
			} else {
				w = w.Derive(next)
			}
			obj = next
			walk(t, r, w, obj, "")
			marks = append(marks, w)
		}
	}
}

// TestDeriveShares checks that the conversions of unchanged subtrees are
// taken over, not made again.
func TestDeriveShares(t *testing.T) {
	containers := []any{map[string]any{"name": "a"}, map[string]any{"name": "b"}}
	spec := map[string]any{"containers": containers, "volumes": []any{}}
	meta := map[string]any{"name": "p", "labels": map[string]any{"app": "x"}}
	obj := map[string]any{"metadata": meta, "spec": spec}
	w := NewMap(obj)
	get := func(v ref.Val, k string) ref.Val { return v.(traits.Indexer).Get(types.String(k)) }
	c0 := get(get(w, "spec"), "containers").(traits.Indexer).Get(types.Int(0))
	labels := get(get(w, "metadata"), "labels")

	// Add an annotation: metadata and the root are copied.
	meta2 := maps.Clone(meta)
	meta2["annotations"] = map[string]any{"a": "b"}
	obj2 := maps.Clone(obj)
	obj2["metadata"] = meta2
	w2 := w.Derive(obj2)
	if got := get(get(w2, "spec"), "containers").(traits.Indexer).Get(types.Int(0)); got != c0 {
		t.Error("the unchanged container was converted again")
	}
	if got := get(get(w2, "metadata"), "labels"); got != labels {
		t.Error("the unchanged labels were converted again")
	}
	if got := get(get(get(w2, "metadata"), "annotations"), "a"); got != types.String("b") {
		t.Errorf("annotations.a = %v", got)
	}

	// Append a container: the list is new, its first element is the same.
	containers3 := append(append([]any(nil), containers...), map[string]any{"name": "c"})
	spec3 := maps.Clone(spec)
	spec3["containers"] = containers3
	obj3 := maps.Clone(obj2)
	obj3["spec"] = spec3
	w3 := w2.Derive(obj3)
	l := get(get(w3, "spec"), "containers").(traits.Lister)
	if l.Size() != types.Int(3) || l.Get(types.Int(0)) != c0 {
		t.Error("the first container was converted again")
	}
	if got := get(l.Get(types.Int(2)), "name"); got != types.String("c") {
		t.Errorf("containers[2].name = %v", got)
	}
	// Derive of the same object is the wrapper itself.
	if w3.Derive(obj3) != w3 {
		t.Error("Derive of the same object made a new wrapper")
	}
}

// deepCopy copies v, adding the identities of the copies to owned.
func deepCopy(v any, owned map[any]bool) any {
	switch t := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(t))
		for k, e := range t {
			c[k] = deepCopy(e, owned)
		}
		owned[identity(c)] = true
		return c
	case []any:
		c := make([]any, len(t))
		for i, e := range t {
			c[i] = deepCopy(e, owned)
		}
		owned[identity(c)] = true
		return c
	}
	return v
}

func identity(v any) any {
	switch t := v.(type) {
	case map[string]any:
		return reflect.ValueOf(t).UnsafePointer()
	case []any:
		if len(t) == 0 {
			return nil
		}
		return &t[0]
	}
	return nil
}

// mutateInPlace changes owned containers of v in place (keys set,
// deleted, elements replaced), deep down or at the top.
func mutateInPlace(r *rand.Rand, v any, owned map[any]bool) {
	switch t := v.(type) {
	case map[string]any:
		ks := steps(t)
		if len(ks) > 0 && r.IntN(2) == 0 {
			mutateInPlace(r, t[ks[r.IntN(len(ks))].(string)], owned)
			return
		}
		if !owned[identity(t)] {
			return
		}
		switch {
		case len(ks) > 0 && r.IntN(2) == 0:
			delete(t, ks[r.IntN(len(ks))].(string))
		case len(ks) > 0 && r.IntN(2) == 0:
			t[ks[r.IntN(len(ks))].(string)] = randValue(r, 3)
		default:
			t["n"+strconv.Itoa(r.IntN(3))] = randValue(r, 3)
		}
	case []any:
		if len(t) == 0 {
			return
		}
		i := r.IntN(len(t))
		if r.IntN(2) == 0 || !owned[identity(t)] {
			mutateInPlace(r, t[i], owned)
			return
		}
		t[i] = randValue(r, 3)
	}
}

// TestRefresh checks that a wrapper refreshed after changes in place reads
// the object as a fresh wrapper would.
func TestRefresh(t *testing.T) {
	for seed := range uint64(2000) {
		r := rand.New(rand.NewPCG(seed, 23))
		orig, _ := randValue(r, 4).(map[string]any)
		if orig == nil {
			orig = map[string]any{"spec": randValue(r, 1)}
		}
		w := NewMap(orig)
		walk(t, r, w, orig, "")
		// An owned copy of part of the object, as a Patcher makes it: the
		// root and one of its values; the rest is shared.
		owned := map[any]bool{}
		obj := maps.Clone(orig)
		owned[identity(obj)] = true
		if ks := steps(obj); len(ks) > 0 {
			k := ks[r.IntN(len(ks))].(string)
			obj[k] = deepCopy(obj[k], owned)
		}
		w = w.Derive(obj)
		walk(t, r, w, obj, "")
		for range 8 {
			mutateInPlace(r, obj, owned)
			w.Refresh(ownerSet(owned))
			walk(t, r, w, obj, "")
		}
	}
}

type ownerSet map[any]bool

func (o ownerSet) Owns(c any) bool { return o[identity(c)] }

// native reads v back through CEL's traits (Size, Find, Get) into
// JSON-shaped data.
func native(v ref.Val) any {
	switch t := v.(type) {
	case *Map:
		out := make(map[string]any, len(t.m))
		it := t.Iterator()
		for it.HasNext() == types.True {
			k := it.Next()
			e, found := t.Find(k)
			if !found {
				return fmt.Sprintf("key %v listed, not found", k)
			}
			out[string(k.(types.String))] = native(e)
		}
		return out
	case *List:
		out := make([]any, int(t.Size().(types.Int)))
		for i := range out {
			out[i] = native(t.Get(types.Int(i)))
		}
		return out
	case types.Null:
		return nil
	}
	return v.Value()
}

// TestShared checks that a shared value reads as Of's value does, along
// random paths, read by concurrent readers (go test -race), and that its
// conversions are made once.
func TestShared(t *testing.T) {
	for seed := range uint64(1000) {
		r := rand.New(rand.NewPCG(seed, 29))
		obj, _ := randValue(r, 4).(map[string]any)
		if obj == nil {
			obj = map[string]any{"spec": randValue(r, 1)}
		}
		s := Shared(obj)
		if s.Equal(Of(obj)) != types.True || Of(obj).Equal(s) != types.True {
			t.Fatalf("seed %d: the shared value is not equal to Of's", seed)
		}
		const readers = 4
		got := make(chan any, readers)
		for range readers {
			go func() { got <- native(s) }()
		}
		for range readers {
			if g := <-got; !reflect.DeepEqual(g, obj) {
				t.Fatalf("seed %d: read %v, want %v", seed, g, obj)
			}
		}
		walk(t, r, s, obj, "")
	}
}

func TestSharedConvertsOnce(t *testing.T) {
	obj := map[string]any{"data": map[string]any{"key": "value"}, "items": []any{map[string]any{"a": int64(1)}}}
	// More keys than a shared map keeps conversions of.
	many := map[string]any{}
	for i := range maxSharedEntries + 8 {
		many["k"+strconv.Itoa(i)] = map[string]any{"i": int64(i)}
	}
	obj["many"] = many
	s := SharedMap(obj)
	get := func(v ref.Val, k string) ref.Val { return v.(traits.Indexer).Get(types.String(k)) }
	if get(s, "data") != get(s, "data") {
		t.Error("data was converted twice")
	}
	item := func() ref.Val { return get(s, "items").(traits.Indexer).Get(types.Int(0)) }
	if item() != item() {
		t.Error("items[0] was converted twice")
	}
	if _, ok := item().(*Map); !ok || !item().(*Map).shared {
		t.Errorf("items[0] is %T, not a shared map", item())
	}
	m := get(s, "many")
	for range 2 {
		for i := range maxSharedEntries + 8 {
			if got := get(get(m, "k"+strconv.Itoa(i)), "i"); got != types.Int(i) {
				t.Fatalf("many.k%d.i = %v", i, got)
			}
		}
	}
	if n := len(*m.(*Map).sharedCache.Load()); n != maxSharedEntries {
		t.Errorf("the shared map keeps %d conversions, want %d", n, maxSharedEntries)
	}
	if s.Derive(obj) != s {
		t.Error("Derive of the same object made a new wrapper")
	}
}
