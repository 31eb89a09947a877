package kyvernocel

import (
	"fmt"

	gojmespath "github.com/kyverno/go-jmespath"
)

// jmespathSearch evaluates a JMESPath expression (the fieldPath and
// projections of the Kyverno CLI's globalContextEntries) as Kyverno's CLI
// does: with github.com/kyverno/go-jmespath, the version Kyverno 1.19.1
// pins. Where that library departs from the JMESPath specification, so does
// this (see TestJMESPath): a field missing from an object at the top of an
// expression is an error (`Unknown key "k" in path`), not null; [], [?...]
// and .* turn an error of their left side into null; avg([]) is NaN;
// keys(), values() and .* list an object's members in no fixed order.
//
// Only the specification's built-in functions are available: Kyverno's CLI
// also registers Kyverno's extension functions (to_upper, split, time_*...,
// and its own sum), which report "unknown function" here.
//
// The one deliberate difference: a panic of the library (contains() and
// comparisons of objects or arrays can panic) is returned as an error.
func jmespathSearch(expr string, data any) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("jmespath %q: %v", expr, r)
		}
	}()
	return gojmespath.Search(expr, data)
}
