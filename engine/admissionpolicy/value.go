package admissionpolicy

import (
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	apiservercel "k8s.io/apiserver/pkg/cel"
)

// ObjectValue returns the CEL value of an untyped object (object,
// oldObject, a param): the value kube-apiserver builds for it
// (types.DefaultTypeAdapter.NativeToValue of the unstructured content), with
// one extension: a property that is not found under its name is looked up
// under its unescaped name (cel.Unescape), so the escaped forms the API
// reference documents (`x__dash__prop` for `x-prop`, `__namespace__` for
// `namespace`, ...) resolve on objects that have no schema. Equality,
// iteration, sizes and conversions are the wrapped value's own.
func ObjectValue(m map[string]any) ref.Val {
	if m == nil {
		return types.NullValue
	}
	return wrap(types.DefaultTypeAdapter.NativeToValue(m))
}

// wrap extends a map or list of JSON data with escaped-name lookups; other
// values are returned as they are.
func wrap(v ref.Val) ref.Val {
	switch t := v.(type) {
	case *escMap, *escList:
		return v
	case traits.Mapper:
		if _, ok := t.Value().(map[string]any); ok {
			return &escMap{Mapper: t}
		}
	case traits.Lister:
		if _, ok := t.Value().([]any); ok {
			return &escList{Lister: t}
		}
	}
	return v
}

// escMap is a JSON object whose lookups fall back to the unescaped name.
// The values found are kept (a value is used by one request, on one
// goroutine), so the expressions of a request convert each field once.
type escMap struct {
	traits.Mapper
	cache []escEntry
}

type escEntry struct {
	key string
	val ref.Val
}

// Find implements traits.Mapper: the key as given, else its unescaped form.
func (m *escMap) Find(key ref.Val) (ref.Val, bool) {
	s, isString := key.(types.String)
	if isString {
		for i := range m.cache {
			if m.cache[i].key == string(s) {
				return m.cache[i].val, true
			}
		}
	}
	v, found := m.Mapper.Find(key)
	if !found {
		if !isString {
			return v, found
		}
		name, ok := apiservercel.Unescape(string(s))
		if !ok || name == string(s) {
			return v, found
		}
		if v, found = m.Mapper.Find(types.String(name)); !found {
			return v, found
		}
	}
	v = wrap(v)
	if isString {
		m.cache = append(m.cache, escEntry{key: string(s), val: v})
	}
	return v, true
}

// Get implements traits.Indexer.
func (m *escMap) Get(key ref.Val) ref.Val {
	if v, found := m.Find(key); found {
		return v
	}
	return m.Mapper.Get(key)
}

// Contains implements traits.Container.
func (m *escMap) Contains(key ref.Val) ref.Val {
	_, found := m.Find(key)
	return types.Bool(found)
}

// Iterator implements traits.Iterable (keys are strings: nothing to wrap).
func (m *escMap) Iterator() traits.Iterator { return m.Mapper.Iterator() }

// escList is a JSON array whose elements are wrapped (and kept).
type escList struct {
	traits.Lister
	cache []ref.Val
}

// Get implements traits.Indexer.
func (l *escList) Get(index ref.Val) ref.Val {
	i, ok := index.(types.Int)
	if !ok {
		return wrap(l.Lister.Get(index))
	}
	if l.cache == nil {
		n, _ := l.Size().(types.Int)
		l.cache = make([]ref.Val, n)
	}
	if i < 0 || int(i) >= len(l.cache) {
		return l.Lister.Get(index)
	}
	if v := l.cache[i]; v != nil {
		return v
	}
	v := wrap(l.Lister.Get(index))
	if !types.IsError(v) {
		l.cache[i] = v
	}
	return v
}

// Iterator implements traits.Iterable.
func (l *escList) Iterator() traits.Iterator {
	return &escIterator{Iterator: l.Lister.Iterator(), list: l}
}

type escIterator struct {
	traits.Iterator
	list *escList
	i    int
}

// HasNext implements traits.Iterator.
func (it *escIterator) HasNext() ref.Val {
	n, _ := it.list.Size().(types.Int)
	return types.Bool(it.i < int(n))
}

// Next implements traits.Iterator.
func (it *escIterator) Next() ref.Val {
	v := it.list.Get(types.Int(it.i))
	it.i++
	return v
}
