package schema

import (
	"maps"
	"strconv"
	"strings"
	"sync"

	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"

	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
)

// The fast path of ApplyConfiguration.
//
// structured-merge-diff converts both objects to typed values (validating
// every node of the live object), merges them by walking both whole, and
// rebuilds every map and list of the result: ~1000 allocations for a Pod.
// The fast path gives the same result with much less work:
//
//   - the schema is compiled once into a graph of nodes (fields in Go maps,
//     types resolved);
//   - the live object is validated by an allocation-free walk that accepts
//     exactly what structured-merge-diff's validation accepts, or less;
//   - the apply configuration is validated the same way, and checked for
//     atomics as findAtomics does;
//   - the merge walks the apply configuration only: it copies the maps and
//     lists along its paths, and shares everything else with obj (the merge of
//     an untouched subtree is equal to it) and with the apply configuration
//     (likewise).
//
// Whenever anything is outside what the fast path knows to be equivalent
// (an error of any kind, a Go type other than JSON's, a list key that is not
// a string or an int64, duplicate keys in a list the apply configuration
// touches…), it gives up and ApplyConfiguration takes the structured-merge-diff
// path, which then produces the result or the exact error. The tests compare
// the two paths on every differential case and on random apply configurations.

// fastTyper is implemented by the converters whose schema the fast path can
// compile: the built-in and the CRD converters.
type fastTyper interface {
	fastType(gvk k8sschema.GroupVersionKind) *cnode
}

// cnode is a compiled structured-merge-diff atom: a scalar, a list and/or a
// map (an untyped atom has the three).
type cnode struct {
	invalid   bool // the type reference does not resolve
	hasScalar bool
	scalar    smdschema.Scalar
	list      *clist
	mp        *cmap
}

type cmap struct {
	fields map[string]*cnode
	elem   *cnode // nil: no element type (undeclared fields are invalid)
	atomic bool
}

type clist struct {
	elem        *cnode
	atomic      bool
	associative bool
	keys        []string // in schema order
	// keyDefaults[i] is the default of keys[i] (nil: none); keysOK is false
	// when structured-merge-diff could not look the defaults up (the element
	// type is not a map).
	keyDefaults []any
	keysOK      bool
}

// compiler compiles the types of one schema, once.
type compiler struct {
	s     *smdschema.Schema
	mu    sync.Mutex
	named map[string]*cnode
	refs  map[smdschema.TypeRef]*cnode
	roots sync.Map // type name → *cnode
}

func newCompiler(s *smdschema.Schema) *compiler {
	return &compiler{s: s, named: map[string]*cnode{}, refs: map[smdschema.TypeRef]*cnode{}}
}

// root is the compiled named type (and every type it refers to).
func (c *compiler) root(name string) *cnode {
	if n, ok := c.roots.Load(name); ok {
		return n.(*cnode)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.compile(smdschema.TypeRef{NamedType: &name})
	c.roots.Store(name, n)
	return n
}

func (c *compiler) compile(tr smdschema.TypeRef) *cnode {
	plain := tr.NamedType != nil && tr.ElementRelationship == nil
	if plain {
		if n := c.named[*tr.NamedType]; n != nil {
			return n
		}
	} else if n := c.refs[tr]; n != nil {
		return n
	}
	n := &cnode{}
	if plain {
		c.named[*tr.NamedType] = n
	} else {
		c.refs[tr] = n
	}
	a, ok := c.s.Resolve(tr)
	if !ok {
		n.invalid = true
		return n
	}
	if a.Scalar != nil {
		n.hasScalar = true
		n.scalar = *a.Scalar
	}
	if al := a.List; al != nil {
		l := &clist{
			atomic:      al.ElementRelationship == smdschema.Atomic,
			associative: al.ElementRelationship == smdschema.Associative,
			keys:        al.Keys,
		}
		n.list = l
		l.elem = c.compile(al.ElementType)
		if len(l.keys) > 0 {
			// typed.getAssociativeKeyDefault
			if ea, ok := c.s.Resolve(al.ElementType); ok && ea.Map != nil {
				l.keysOK = true
				l.keyDefaults = make([]any, len(l.keys))
				for i, k := range l.keys {
					f, _ := ea.FindField(k)
					l.keyDefaults[i] = f.Default
				}
			}
		}
	}
	if am := a.Map; am != nil {
		m := &cmap{atomic: am.ElementRelationship == smdschema.Atomic, fields: make(map[string]*cnode, len(am.Fields))}
		n.mp = m
		for _, f := range am.Fields {
			m.fields[f.Name] = c.compile(f.Type)
		}
		if am.ElementType != (smdschema.TypeRef{}) {
			m.elem = c.compile(am.ElementType)
		}
	}
	return n
}

// valid says whether structured-merge-diff's validation accepts v as a value
// of n (true only if it does; false also when the fast path does not know).
func (n *cnode) valid(v any, allowDuplicates bool) bool {
	if n.invalid {
		return false
	}
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return n.hasScalar && (n.scalar == smdschema.String || n.scalar == smdschema.Untyped)
	case bool:
		return n.hasScalar && (n.scalar == smdschema.Boolean || n.scalar == smdschema.Untyped)
	case int64, float64:
		return n.hasScalar && (n.scalar == smdschema.Numeric || n.scalar == smdschema.Untyped)
	case map[string]any:
		m := n.mp
		if m == nil {
			return false
		}
		for k, e := range x {
			t := m.fields[k]
			if t == nil {
				t = m.elem
				if t == nil {
					return false
				}
			}
			if !t.valid(e, allowDuplicates) {
				return false
			}
		}
		return true
	case []any:
		l := n.list
		if l == nil {
			return false
		}
		for i, e := range x {
			if l.associative {
				if !l.validItem(e) {
					return false
				}
				if !allowDuplicates {
					for _, prev := range x[:i] {
						eq, ok := l.sameKey(prev, e)
						if !ok || eq {
							return false
						}
					}
				}
			}
			if !l.elem.valid(e, allowDuplicates) {
				return false
			}
		}
		return true
	default:
		return false
	}
}

// validItem: structured-merge-diff can make a path element of the item.
func (l *clist) validItem(e any) bool {
	if len(l.keys) == 0 {
		switch e.(type) {
		case string, bool, int64, float64:
			return true
		}
		return false // maps, lists, nulls, other types
	}
	m, ok := e.(map[string]any)
	if !ok || !l.keysOK {
		return false
	}
	for i, k := range l.keys {
		if _, ok := m[k]; ok || l.keyDefaults[i] != nil {
			return true
		}
	}
	return false
}

// keyOf encodes an item's path element (its key fields, with their defaults,
// or its value in a set). ok is false when the fast path does not know the
// equality of the values (anything but strings and int64s).
func (l *clist) keyOf(e any) (string, bool) {
	if len(l.keys) == 0 {
		return scalarKey(e)
	}
	m, ok := e.(map[string]any)
	if !ok || !l.keysOK {
		return "", false
	}
	type kv struct {
		name string
		val  any
	}
	var buf [4]kv
	kvs := buf[:0]
	for i, k := range l.keys {
		if v, ok := m[k]; ok {
			kvs = append(kvs, kv{k, v})
		} else if d := l.keyDefaults[i]; d != nil {
			kvs = append(kvs, kv{k, d})
		}
	}
	if len(kvs) == 0 {
		return "", false
	}
	for i := 1; i < len(kvs); i++ { // insertion sort: a few keys
		for j := i; j > 0 && kvs[j].name < kvs[j-1].name; j-- {
			kvs[j], kvs[j-1] = kvs[j-1], kvs[j]
		}
	}
	if len(l.keys) == 1 {
		return scalarKey(kvs[0].val) // the list's only key: no name needed
	}
	var b strings.Builder
	for _, p := range kvs {
		s, ok := scalarKey(p.val)
		if !ok {
			return "", false
		}
		b.WriteString(p.name)
		b.WriteByte(0)
		b.WriteString(s)
		b.WriteByte(0)
	}
	return b.String(), true
}

func scalarKey(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return "s" + x, true
	case int64:
		return "i" + strconv.FormatInt(x, 10), true
	}
	return "", false
}

// sameKey compares the path elements of two items without allocating when
// it can.
func (l *clist) sameKey(a, b any) (eq, ok bool) {
	if len(l.keys) == 0 {
		switch x := a.(type) {
		case string:
			y, isStr := b.(string)
			return isStr && x == y, true
		case int64:
			switch y := b.(type) {
			case int64:
				return x == y, true
			case string:
				return false, true
			}
		}
		return false, false
	}
	ka, ok1 := l.keyOf(a)
	kb, ok2 := l.keyOf(b)
	if !ok1 || !ok2 {
		return false, false
	}
	return ka == kb, true
}

// hasAtomics is findAtomics' question: does v set an atomic list, map or
// struct (looking into struct fields and list items, as findAtomics does)?
func (n *cnode) hasAtomics(v any) bool {
	if n.invalid {
		return false
	}
	switch x := v.(type) {
	case map[string]any:
		if n.mp == nil {
			return false
		}
		if n.mp.atomic {
			return true
		}
		for k, e := range x {
			if t := n.mp.fields[k]; t != nil && t.hasAtomics(e) {
				return true
			}
		}
	case []any:
		if n.list == nil {
			return false
		}
		if n.list.atomic {
			return true
		}
		for _, e := range x {
			if n.list.elem.hasAtomics(e) {
				return true
			}
		}
	}
	return false
}

// merge is typed.TypedValue.Merge (ruleKeepRHS) for a right-hand side that
// is present, both sides validated. ok is false when the fast path does not
// know the answer.
func (n *cnode) merge(lhs, rhs any) (any, bool) {
	switch r := rhs.(type) {
	case nil:
		// The whole atom handles a null: map first, then list, then scalar.
		if n.mp != nil {
			if lm, _ := lhs.(map[string]any); !n.mp.atomic && len(lm) > 0 {
				return lhs, true
			}
			return nil, true
		}
		if n.list != nil {
			if ll, _ := lhs.([]any); !n.list.atomic && len(ll) > 0 {
				return lhs, true
			}
			return nil, true
		}
		return nil, true
	case string, bool, int64, float64:
		return rhs, true
	case map[string]any:
		lm, _ := lhs.(map[string]any)
		if n.mp.atomic || len(lm) == 0 {
			// An atomic map, both empty, or nothing to merge with: the
			// right-hand side (rebuilt by structured-merge-diff, equal).
			return rhs, true
		}
		if len(r) == 0 {
			return lhs, true // every key from lhs, unchanged
		}
		out := maps.Clone(lm)
		for k, rv := range r {
			t := n.mp.fields[k]
			if t == nil {
				t = n.mp.elem
			}
			lv := lm[k]
			mv, ok := t.merge(lv, rv)
			if !ok {
				return nil, false
			}
			out[k] = mv
		}
		return out, true
	case []any:
		ll, _ := lhs.([]any)
		if n.list.atomic || len(ll) == 0 {
			return rhs, true
		}
		if len(r) == 0 {
			return lhs, true
		}
		return n.list.mergeItems(ll, r)
	}
	return nil, false
}

// mergeItems is the mergingWalker's visitListItems for an associative list,
// keys unique on both sides.
func (l *clist) mergeItems(lhs, rhs []any) (any, bool) {
	if !l.associative {
		return nil, false
	}
	lKeys, lIdx, ok := l.index(lhs)
	if !ok {
		return nil, false
	}
	rKeys, rIdx, ok := l.index(rhs)
	if !ok {
		return nil, false
	}
	var shared []string
	for _, k := range rKeys {
		if _, ok := lIdx.get(k); ok {
			shared = append(shared, k)
		}
	}
	next := func() (string, bool) {
		if len(shared) == 0 {
			return "", false
		}
		k := shared[0]
		shared = shared[1:]
		return k, true
	}
	nextShared, haveNext := next()
	merged := make([]bool, len(rhs)) // by index in rhs
	n := len(lhs)
	if len(rhs) > n {
		n = len(rhs)
	}
	out := make([]any, 0, n)
	for lI, rI := 0, 0; lI < len(lhs) || rI < len(rhs); {
		if lI < len(lhs) && rI < len(rhs) {
			pe := lKeys[lI]
			if pe == rKeys[rI] {
				merged[rI] = true
				v, ok := l.elem.merge(lhs[lI], rhs[rI])
				if !ok {
					return nil, false
				}
				out = append(out, v)
				lI++
				rI++
				nextShared, haveNext = next()
				continue
			}
			if _, inR := rIdx.get(pe); inR && haveNext && nextShared != pe {
				lI++
				continue
			}
		}
		if lI < len(lhs) {
			pe := lKeys[lI]
			if ri, inR := rIdx.get(pe); !inR {
				out = append(out, lhs[lI])
				lI++
				continue
			} else if merged[ri] {
				lI++
			}
		}
		if rI < len(rhs) {
			pe := rKeys[rI]
			merged[rI] = true
			var v any
			if li, inL := lIdx.get(pe); inL {
				var ok bool
				if v, ok = l.elem.merge(lhs[li], rhs[rI]); !ok {
					return nil, false
				}
			} else {
				v = rhs[rI]
			}
			out = append(out, v)
			rI++
			if haveNext && nextShared == pe {
				nextShared, haveNext = next()
			}
		}
	}
	return out, true
}

// fastApply is ApplyConfiguration's fast path, after the kind checks. ok is
// false when the structured-merge-diff path must answer.
func fastApply(root *cnode, obj, applyConfig map[string]any, allowAtomic bool) (map[string]any, bool) {
	if root == nil || root.mp == nil {
		return nil, false
	}
	if !root.valid(applyConfig, false) {
		return nil, false
	}
	if !allowAtomic && root.hasAtomics(applyConfig) {
		return nil, false
	}
	if !root.valid(obj, true) {
		return nil, false
	}
	out, ok := root.merge(obj, applyConfig)
	if !ok {
		return nil, false
	}
	m, ok := out.(map[string]any)
	return m, ok
}

// The built-in converter's compiled schema.
var (
	builtinCompilerOnce sync.Once
	builtinCompiler     *compiler
)

func (builtinConverter) fastType(gvk k8sschema.GroupVersionKind) *cnode {
	name, err := openAPIName(gvk)
	if err != nil {
		return nil
	}
	p, err := parsedBuiltin()
	if err != nil {
		return nil
	}
	builtinCompilerOnce.Do(func() { builtinCompiler = newCompiler(&p.Schema) })
	return builtinCompiler.root(name)
}

func (c *CRDConverter) fastType(gvk k8sschema.GroupVersionKind) *cnode {
	t := c.types[gvk]
	if t == nil || t.TypeRef.NamedType == nil {
		return nil
	}
	return c.compiler.root(*t.TypeRef.NamedType)
}

// keyIndex finds an item by its key: a linear search for short lists, a map
// for long ones.
type keyIndex struct {
	keys []string
	m    map[string]int
}

func (x keyIndex) get(k string) (int, bool) {
	if x.m != nil {
		i, ok := x.m[k]
		return i, ok
	}
	for i, kk := range x.keys {
		if kk == k {
			return i, true
		}
	}
	return 0, false
}

// index computes the items' keys; ok is false if one is unknown or two are
// the same.
func (l *clist) index(items []any) ([]string, keyIndex, bool) {
	keys := make([]string, len(items))
	x := keyIndex{keys: keys}
	if len(items) > 16 {
		x.m = make(map[string]int, len(items))
	}
	for i, e := range items {
		k, ok := l.keyOf(e)
		if !ok {
			return nil, x, false
		}
		if _, dup := x.get(k); dup {
			return nil, x, false
		}
		keys[i] = k
		if x.m != nil {
			x.m[k] = i
		}
	}
	return keys, x, true
}
