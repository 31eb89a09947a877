// Package admission holds what every policy kind reads of a request: the
// request's attributes (Request), the admission operations and evaluation
// modes, the resources of common kinds, and the matching of Kyverno's
// matchConstraints with label and namespace selection (Matcher). It is a
// leaf: it imports no other Arbiter package.
package admission
