package schema

import (
	"errors"
	"fmt"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
	"sigs.k8s.io/structured-merge-diff/v6/value"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Deterministic validation errors.
//
// structured-merge-diff validates maps in Go's map order and stops at a
// map's first undeclared field, so when an object has several schema errors,
// which of them its message lists, and in which order, varies from run to
// run. Arbiter's replicas must give the same answer to the same request, so
// when one of this package's converters refuses an object, ApplyConfiguration
// validates it again with sortedValidation: structured-merge-diff's
// validatingObjectWalker, message for message, visiting map keys in sorted
// order. The text is the one structured-merge-diff gives when Go happens to
// iterate in that order; with one error, it is the same text.

// typedTyper is implemented by the converters whose types
// sortedValidation can look up (this package's).
type typedTyper interface {
	parseableType(obj *unstructured.Unstructured) (typed.ParseableType, bool)
}

func (builtinConverter) parseableType(obj *unstructured.Unstructured) (typed.ParseableType, bool) {
	name, err := openAPIName(obj.GroupVersionKind())
	if err != nil {
		return typed.ParseableType{}, false
	}
	p, err := parsedBuiltin()
	if err != nil {
		return typed.ParseableType{}, false
	}
	return p.Type(name), true
}

func (c *CRDConverter) parseableType(obj *unstructured.Unstructured) (typed.ParseableType, bool) {
	t := c.types[obj.GroupVersionKind()]
	if t == nil {
		return typed.ParseableType{}, false
	}
	return *t, true
}

// deterministic replaces a validation error of ObjectToTyped by the sorted
// one, for this package's converters.
func deterministic(tc any, obj *unstructured.Unstructured, err error, allowDuplicates bool) error {
	var verrs typed.ValidationErrors
	if !errors.As(err, &verrs) {
		return err
	}
	tt, ok := tc.(typedTyper)
	if !ok {
		return err
	}
	pt, ok := tt.parseableType(obj)
	if !ok {
		return err
	}
	w := &sortedValidator{schema: pt.Schema, allowDuplicates: allowDuplicates}
	if errs := w.validate(pt.TypeRef, value.NewValueInterface(obj.Object), nil); len(errs) > 0 {
		return errs
	}
	return err
}

type sortedValidator struct {
	schema          *smdschema.Schema
	allowDuplicates bool
}

func verrorf(format string, args ...any) typed.ValidationErrors {
	return typed.ValidationErrors{{ErrorMessage: fmt.Sprintf(format, args...)}}
}

// validate is validatingObjectWalker.validate: resolveSchema, then the
// handler of the deduced atom, errors prefixed with the path element.
func (w *sortedValidator) validate(tr smdschema.TypeRef, v value.Value, prefix func() string) typed.ValidationErrors {
	a, ok := w.schema.Resolve(tr)
	if !ok {
		typeName := "inlined type"
		if tr.NamedType != nil {
			typeName = *tr.NamedType
		}
		return verrorf("schema error: no type found matching: %v", typeName).WithLazyPrefix(prefix)
	}
	a = deduceAtom(a, v)
	var errs typed.ValidationErrors
	switch {
	case a.Map != nil:
		errs = w.doMap(a.Map, v)
	case a.Scalar != nil:
		errs = validateScalar(a.Scalar, v)
	case a.List != nil:
		errs = w.doList(a.List, v)
	default:
		name := "inlined"
		if tr.NamedType != nil {
			name = "named type: " + *tr.NamedType
		}
		errs = verrorf("schema error: invalid atom: %v", name)
	}
	return errs.WithLazyPrefix(prefix)
}

// deduceAtom is typed's.
func deduceAtom(atom smdschema.Atom, val value.Value) smdschema.Atom {
	switch {
	case val == nil:
	case val.IsFloat(), val.IsInt(), val.IsString(), val.IsBool():
		if atom.Scalar != nil {
			return smdschema.Atom{Scalar: atom.Scalar}
		}
	case val.IsList():
		if atom.List != nil {
			return smdschema.Atom{List: atom.List}
		}
	case val.IsMap():
		if atom.Map != nil {
			return smdschema.Atom{Map: atom.Map}
		}
	}
	return atom
}

// validateScalar is typed's, without a prefix.
func validateScalar(t *smdschema.Scalar, v value.Value) typed.ValidationErrors {
	if v == nil || v.IsNull() {
		return nil
	}
	switch *t {
	case smdschema.Numeric:
		if !v.IsFloat() && !v.IsInt() {
			return verrorf("expected numeric (int or float), got %T", v.Unstructured())
		}
	case smdschema.String:
		if !v.IsString() {
			return verrorf("expected string, got %#v", v)
		}
	case smdschema.Boolean:
		if !v.IsBool() {
			return verrorf("expected boolean, got %v", v)
		}
	case smdschema.Untyped:
		if !v.IsFloat() && !v.IsInt() && !v.IsString() && !v.IsBool() {
			return verrorf("expected any scalar, got %v", v)
		}
	default:
		return verrorf("unexpected scalar type in schema: %v", *t)
	}
	return nil
}

func (w *sortedValidator) doList(t *smdschema.List, v value.Value) typed.ValidationErrors {
	if v.IsNull() {
		return nil
	}
	if !v.IsList() {
		return verrorf("expected list, got %v", v)
	}
	list := v.AsList()
	var errs typed.ValidationErrors
	observed := fieldpath.MakePathElementSet(list.Length())
	for i := 0; i < list.Length(); i++ {
		child := list.At(i)
		var pe fieldpath.PathElement
		if t.ElementRelationship != smdschema.Associative {
			pe.Index = &i
		} else {
			var err error
			pe, err = w.listItemPathElement(t, child)
			if err != nil {
				return append(errs, verrorf("element %v: %v", i, err.Error())...)
			}
			if observed.Has(pe) && !w.allowDuplicates {
				errs = append(errs, verrorf("duplicate entries for key %v", pe.String())...)
			}
			observed.Insert(pe)
		}
		errs = append(errs, w.validate(t.ElementType, child, pe.String)...)
	}
	return errs
}

func (w *sortedValidator) doMap(t *smdschema.Map, v value.Value) typed.ValidationErrors {
	if v == nil {
		return verrorf("expected map, got nil")
	}
	if v.IsNull() {
		return nil
	}
	if !v.IsMap() {
		return verrorf("expected map, got %v", v)
	}
	m := v.AsMap()
	var errs typed.ValidationErrors
	for _, key := range sortedKeys(m) {
		pe := fieldpath.PathElement{FieldName: &key}
		tr := t.ElementType
		if sf, ok := t.FindField(key); ok {
			tr = sf.Type
		} else if (t.ElementType == smdschema.TypeRef{}) {
			errs = append(errs, verrorf("field not declared in schema").WithPrefix(pe.String())...)
			break
		}
		val, _ := m.Get(key)
		errs = append(errs, w.validate(tr, val, pe.String)...)
	}
	return errs
}

// listItemPathElement is typed's listItemToPathElement (for an associative
// list).
func (w *sortedValidator) listItemPathElement(list *smdschema.List, child value.Value) (fieldpath.PathElement, error) {
	pe := fieldpath.PathElement{}
	if len(list.Keys) == 0 {
		switch {
		case child.IsMap():
			return pe, errors.New("associative list without keys has an element that's a map type")
		case child.IsList():
			return pe, errors.New("not supported: associative list with lists as elements")
		case child.IsNull():
			return pe, errors.New("associative list without keys has an element that's an explicit null")
		default:
			pe.Value = &child
			return pe, nil
		}
	}
	if child.IsNull() {
		return pe, errors.New("associative list with keys may not have a null element")
	}
	if !child.IsMap() {
		return pe, errors.New("associative list with keys may not have non-map elements")
	}
	keyMap := value.FieldList{}
	m := child.AsMap()
	for _, fieldName := range list.Keys {
		if val, ok := m.Get(fieldName); ok {
			keyMap = append(keyMap, value.Field{Name: fieldName, Value: val})
		} else if def, err := w.keyDefault(list, fieldName); err != nil {
			return pe, fmt.Errorf("couldn't find default value for %v: %v", fieldName, err)
		} else if def != nil {
			keyMap = append(keyMap, value.Field{Name: fieldName, Value: value.NewValueInterface(def)})
		}
	}
	if len(list.Keys) > 0 && len(keyMap) == 0 {
		return pe, fmt.Errorf("associative list with keys has an element that omits all key fields %q (and doesn't have default values for any key fields)", list.Keys)
	}
	keyMap.Sort()
	pe.Key = &keyMap
	return pe, nil
}

func (w *sortedValidator) keyDefault(list *smdschema.List, fieldName string) (any, error) {
	atom, ok := w.schema.Resolve(list.ElementType)
	if !ok {
		return nil, errors.New("invalid elementType for list")
	}
	if atom.Map == nil {
		return nil, errors.New("associative list may not have non-map types")
	}
	field, _ := atom.FindField(fieldName)
	return field.Default, nil
}
