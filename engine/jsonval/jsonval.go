// Package jsonval adapts JSON-shaped data (map[string]any, []any, string,
// int64, float64, bool, nil — unstructured Kubernetes objects) to CEL values.
//
// Maps and lists convert their elements on first access and keep them, so
// the policies evaluated for one request share one conversion of the
// object instead of re-wrapping every field they touch. Values are not safe
// for concurrent use: build one per request. Map iteration is in sorted key
// order, so two replicas evaluating the same object iterate it alike.
//
// A mutation's result shares the subtrees it did not change with the object
// it was made from: Map.Derive wraps it so that those subtrees' conversions
// are taken over from the previous object's wrapper, not made again. The
// data must not change in place while it is wrapped (a container's
// conversion is taken over by identity).
//
// Shared wraps data that never changes (a context object of a snapshot)
// once for every reader: its maps and lists keep their conversions in
// atomically published caches, so one value serves concurrent evaluations
// and each field is converted once, not once per read.
package jsonval

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// Of returns the CEL value of JSON-shaped data.
func Of(v any) ref.Val {
	switch t := v.(type) {
	case nil:
		return types.NullValue
	case string:
		return types.String(t)
	case bool:
		return types.Bool(t)
	case int64:
		return types.Int(t)
	case float64:
		return types.Double(t)
	case map[string]any:
		return &Map{m: t}
	case []any:
		return &List{l: t}
	case ref.Val:
		return t
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

// Shared returns the CEL value of JSON-shaped data that never changes, safe
// for concurrent use: its maps and lists convert their elements on first
// access and publish the conversions to every reader. It reads as Of's
// value does.
func Shared(v any) ref.Val {
	switch t := v.(type) {
	case map[string]any:
		return SharedMap(t)
	case []any:
		return &List{l: t, shared: &sharedList{elems: make([]atomic.Pointer[ref.Val], len(t))}}
	}
	return Of(v)
}

// SharedMap is Shared for a map.
func SharedMap(m map[string]any) *Map { return &Map{m: m, shared: true} }

// Map is a lazily converted JSON object.
type Map struct {
	m map[string]any
	// cache holds the converted maps and lists accessed so far (a small
	// slice: policies touch few fields of any one object).
	cache []entry
	// A shared map (SharedMap) keeps its conversions in sharedCache
	// instead, replaced as a whole (copy on write) when one is added.
	shared      bool
	sharedCache atomic.Pointer[[]entry]
}

type entry struct {
	key string
	val ref.Val
}

var (
	_ traits.Mapper = (*Map)(nil)
	_ traits.Lister = (*List)(nil)
)

// NewMap wraps m.
func NewMap(m map[string]any) *Map { return &Map{m: m} }

// Derive returns the wrapper of n, an object made from m's (a mutation's
// result): it starts with the conversions m made of the values n shares
// with m's object (the same containers, equal scalars), and of the
// containers that replace m's at the same place, wrappers derived from
// theirs in turn. Neither object may change in place while wrapped.
func (m *Map) Derive(n map[string]any) *Map {
	if sameMap(m.m, n) {
		return m
	}
	d := &Map{m: n}
	if len(m.cache) == 0 {
		return d
	}
	for _, e := range m.cache {
		raw, ok := n[e.key]
		if !ok {
			continue
		}
		if v := takeOver(e.val, raw); v != nil {
			if d.cache == nil {
				d.cache = make([]entry, 0, max(len(m.cache), min(len(n), 8)))
			}
			d.cache = append(d.cache, entry{key: e.key, val: v})
		}
	}
	return d
}

func (m *Map) get(k string) (ref.Val, bool) {
	if m.shared {
		return m.getShared(k)
	}
	for i := range m.cache {
		if m.cache[i].key == k {
			return m.cache[i].val, true
		}
	}
	raw, ok := m.m[k]
	if !ok {
		return nil, false
	}
	v := Of(raw)
	if m.cache == nil {
		m.cache = make([]entry, 0, min(len(m.m), 8))
	}
	m.cache = append(m.cache, entry{key: k, val: v})
	return v, true
}

// maxSharedEntries bounds the conversions a shared map keeps (each added
// one copies the cache, and lookups scan it): the values of further keys
// are converted on each read, as shared values in turn.
const maxSharedEntries = 32

func (m *Map) getShared(k string) (ref.Val, bool) {
	cached := m.sharedCache.Load()
	if v, ok := findEntry(cached, k); ok {
		return v, true
	}
	raw, ok := m.m[k]
	if !ok {
		return nil, false
	}
	v := Shared(raw)
	// The cache outlives the evaluation: a key that is a slice of a
	// request's bytes must not keep them.
	k = strings.Clone(k)
	for cached == nil || len(*cached) < maxSharedEntries {
		var n []entry
		if cached == nil {
			n = make([]entry, 0, 1)
		} else {
			n = make([]entry, len(*cached), len(*cached)+1)
			copy(n, *cached)
		}
		n = append(n, entry{key: k, val: v})
		if m.sharedCache.CompareAndSwap(cached, &n) {
			return v, true
		}
		// Another reader added conversions meanwhile: keep its
		// conversion of k if it made one.
		cached = m.sharedCache.Load()
		if w, ok := findEntry(cached, k); ok {
			return w, true
		}
	}
	return v, true
}

func findEntry(es *[]entry, k string) (ref.Val, bool) {
	if es == nil {
		return nil, false
	}
	for i := range *es {
		if (*es)[i].key == k {
			return (*es)[i].val, true
		}
	}
	return nil, false
}

// takeOver returns the conversion of raw from prev, the conversion of the
// value at the same place in an earlier object: prev itself when it
// converts raw (the same container, an equal scalar); for a container in
// place of one of the same type, a wrapper derived from prev's; nil
// otherwise.
func takeOver(prev ref.Val, raw any) ref.Val {
	switch t := raw.(type) {
	case map[string]any:
		if pm, ok := prev.(*Map); ok && t != nil {
			return pm.Derive(t)
		}
	case []any:
		if pl, ok := prev.(*List); ok && t != nil {
			return pl.derive(t)
		}
	case string:
		if ps, ok := prev.(types.String); ok && string(ps) == t {
			return ps
		}
	case int64:
		if pi, ok := prev.(types.Int); ok && int64(pi) == t {
			return pi
		}
	case float64:
		if pd, ok := prev.(types.Double); ok && float64(pd) == t {
			return pd
		}
	case bool:
		if pb, ok := prev.(types.Bool); ok && bool(pb) == t {
			return pb
		}
	}
	return nil
}

// An Owner says which containers (maps and slices) of an object it may
// change in place (a patch.Patcher).
type Owner interface {
	Owns(c any) bool
}

// Refresh drops the conversions of m that no longer convert its object's
// values, after containers of the object changed in place: those the owner
// owns are looked into (the conversions of their values are refreshed in
// turn); every other container must not have changed since it was
// wrapped.
func (m *Map) Refresh(owner Owner) {
	keep := m.cache[:0]
	for _, e := range m.cache {
		if raw, ok := m.m[e.key]; ok && converts(e.val, raw) {
			refresh(e.val, raw, owner)
			keep = append(keep, e)
		}
	}
	clear(m.cache[len(keep):])
	m.cache = keep
}

func (l *List) refresh(owner Owner) {
	for i, v := range l.cache {
		if v == nil {
			continue
		}
		if raw := l.l[i]; converts(v, raw) {
			refresh(v, raw, owner)
		} else {
			l.cache[i] = nil
		}
	}
}

// refresh refreshes v, the conversion of raw, if raw may have changed.
func refresh(v ref.Val, raw any, owner Owner) {
	switch t := v.(type) {
	case *Map:
		if owner.Owns(raw) {
			t.Refresh(owner)
		}
	case *List:
		if owner.Owns(raw) {
			t.refresh(owner)
		}
	}
}

// converts says whether v is the conversion of raw.
func converts(v ref.Val, raw any) bool {
	switch t := v.(type) {
	case *Map:
		r, ok := raw.(map[string]any)
		return ok && sameMap(t.m, r)
	case *List:
		r, ok := raw.([]any)
		return ok && sameList(t.l, r)
	case types.String:
		r, ok := raw.(string)
		return ok && string(t) == r
	case types.Int:
		r, ok := raw.(int64)
		return ok && int64(t) == r
	case types.Double:
		r, ok := raw.(float64)
		return ok && float64(t) == r
	case types.Bool:
		r, ok := raw.(bool)
		return ok && bool(t) == r
	case types.Null:
		return raw == nil
	}
	return false
}

func sameMap(a, b map[string]any) bool {
	return *(*unsafe.Pointer)(unsafe.Pointer(&a)) == *(*unsafe.Pointer)(unsafe.Pointer(&b))
}

func sameList(a, b []any) bool {
	return len(a) == len(b) && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// Find implements traits.Mapper.
func (m *Map) Find(key ref.Val) (ref.Val, bool) {
	k, ok := key.(types.String)
	if !ok {
		if types.IsUnknownOrError(key) {
			return key, true
		}
		return nil, false
	}
	return m.get(string(k))
}

// Get implements traits.Indexer.
func (m *Map) Get(key ref.Val) ref.Val {
	if v, ok := m.Find(key); ok {
		return v
	}
	return types.ValOrErr(key, "no such key: %v", key)
}

// Contains implements traits.Container.
func (m *Map) Contains(key ref.Val) ref.Val {
	v, found := m.Find(key)
	if v != nil && types.IsUnknownOrError(v) {
		return v
	}
	return types.Bool(found)
}

// Size implements traits.Sizer.
func (m *Map) Size() ref.Val { return types.Int(len(m.m)) }

// Iterator implements traits.Iterable, over the keys in sorted order.
func (m *Map) Iterator() traits.Iterator {
	keys := make([]string, 0, len(m.m))
	for k := range m.m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return types.NewStringList(types.DefaultTypeAdapter, keys).Iterator()
}

// ConvertToNative implements ref.Val.
func (m *Map) ConvertToNative(t reflect.Type) (any, error) {
	if t == reflect.TypeOf(m.m) || t.Kind() == reflect.Interface && reflect.TypeOf(m.m).Implements(t) {
		return m.m, nil
	}
	return types.DefaultTypeAdapter.NativeToValue(m.m).ConvertToNative(t)
}

// ConvertToType implements ref.Val.
func (m *Map) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.MapType:
		return m
	case types.TypeType:
		return types.MapType
	}
	return types.NewErr("type conversion error from '%s' to '%s'", types.MapType, t)
}

// Equal implements ref.Val (CEL map equality).
func (m *Map) Equal(other ref.Val) ref.Val {
	o, ok := other.(traits.Mapper)
	if !ok {
		return types.False
	}
	if o.Size() != m.Size() {
		return types.False
	}
	for k := range m.m {
		ov, found := o.Find(types.String(k))
		if !found {
			return types.False
		}
		v, _ := m.get(k)
		if eq := v.Equal(ov); eq != types.True {
			return types.False
		}
	}
	return types.True
}

// Type implements ref.Val.
func (m *Map) Type() ref.Type { return types.MapType }

// Value implements ref.Val: the underlying map.
func (m *Map) Value() any { return m.m }

// String renders the map for messages.
func (m *Map) String() string { return fmt.Sprint(m.m) }

// List is a lazily converted JSON array.
type List struct {
	l     []any
	cache []ref.Val
	// shared, for a list made by Shared, holds the conversions instead of
	// cache.
	shared *sharedList
}

// sharedList holds the conversions of a shared list's elements, each
// published once.
type sharedList struct {
	elems []atomic.Pointer[ref.Val]
}

// derive is Map.Derive for a list.
func (l *List) derive(n []any) *List {
	if sameList(l.l, n) {
		return l
	}
	d := &List{l: n}
	if l.cache == nil {
		return d
	}
	for i, v := range l.cache[:min(len(l.cache), len(n))] {
		if v == nil {
			continue
		}
		if w := takeOver(v, n[i]); w != nil {
			if d.cache == nil {
				d.cache = make([]ref.Val, len(n))
			}
			d.cache[i] = w
		}
	}
	return d
}

func (l *List) at(i int) ref.Val {
	if l.shared != nil {
		e := &l.shared.elems[i]
		if p := e.Load(); p != nil {
			return *p
		}
		v := Shared(l.l[i])
		if e.CompareAndSwap(nil, &v) {
			return v
		}
		return *e.Load()
	}
	if l.cache == nil {
		l.cache = make([]ref.Val, len(l.l))
	}
	if v := l.cache[i]; v != nil {
		return v
	}
	v := Of(l.l[i])
	l.cache[i] = v
	return v
}

// Get implements traits.Indexer.
func (l *List) Get(index ref.Val) ref.Val {
	i, err := types.IndexOrError(index)
	if err != nil {
		return types.WrapErr(err)
	}
	if i < 0 || i >= len(l.l) {
		return types.NewErr("index out of bounds: %v", index)
	}
	return l.at(i)
}

// Size implements traits.Sizer.
func (l *List) Size() ref.Val { return types.Int(len(l.l)) }

// Contains implements traits.Container.
func (l *List) Contains(elem ref.Val) ref.Val {
	var err ref.Val
	for i := range l.l {
		eq := l.at(i).Equal(elem)
		if eq == types.True {
			return types.True
		}
		if types.IsUnknownOrError(eq) && err == nil {
			err = eq
		}
	}
	if err != nil {
		return err
	}
	return types.False
}

// Add implements traits.Adder (list concatenation).
func (l *List) Add(other ref.Val) ref.Val {
	o, ok := other.(traits.Lister)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	n := int(o.Size().(types.Int))
	if n == 0 {
		return l
	}
	if len(l.l) == 0 {
		return o
	}
	elems := make([]ref.Val, 0, len(l.l)+n)
	for i := range l.l {
		elems = append(elems, l.at(i))
	}
	for i := 0; i < n; i++ {
		elems = append(elems, o.Get(types.Int(i)))
	}
	return types.NewRefValList(types.DefaultTypeAdapter, elems)
}

// Iterator implements traits.Iterable.
func (l *List) Iterator() traits.Iterator { return &listIterator{l: l} }

// ConvertToNative implements ref.Val.
func (l *List) ConvertToNative(t reflect.Type) (any, error) {
	if t == reflect.TypeOf(l.l) || t.Kind() == reflect.Interface && reflect.TypeOf(l.l).Implements(t) {
		return l.l, nil
	}
	return types.DefaultTypeAdapter.NativeToValue(l.l).ConvertToNative(t)
}

// ConvertToType implements ref.Val.
func (l *List) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.ListType:
		return l
	case types.TypeType:
		return types.ListType
	}
	return types.NewErr("type conversion error from '%s' to '%s'", types.ListType, t)
}

// Equal implements ref.Val (CEL list equality).
func (l *List) Equal(other ref.Val) ref.Val {
	o, ok := other.(traits.Lister)
	if !ok {
		return types.False
	}
	if o.Size() != l.Size() {
		return types.False
	}
	for i := range l.l {
		if eq := l.at(i).Equal(o.Get(types.Int(i))); eq != types.True {
			return types.False
		}
	}
	return types.True
}

// Type implements ref.Val.
func (l *List) Type() ref.Type { return types.ListType }

// Value implements ref.Val: the underlying slice.
func (l *List) Value() any { return l.l }

type listIterator struct {
	l *List
	i int
}

func (it *listIterator) HasNext() ref.Val { return types.Bool(it.i < len(it.l.l)) }

func (it *listIterator) Next() ref.Val {
	if it.i >= len(it.l.l) {
		return nil
	}
	v := it.l.at(it.i)
	it.i++
	return v
}

func (it *listIterator) ConvertToNative(reflect.Type) (any, error) {
	return nil, fmt.Errorf("type conversion on iterators not supported")
}

func (it *listIterator) ConvertToType(ref.Type) ref.Val {
	return types.NewErr("no such overload")
}

func (it *listIterator) Equal(ref.Val) ref.Val { return types.NoSuchOverloadErr() }
func (it *listIterator) Type() ref.Type        { return types.IteratorType }
func (it *listIterator) Value() any            { return nil }
