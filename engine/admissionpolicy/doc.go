// Package admissionpolicy holds what Kubernetes' two API-defined admission
// policy kinds, ValidatingAdmissionPolicy (engine/vap) and
// MutatingAdmissionPolicy (engine/mapol), share in kube-apiserver
// (k8s.io/apiserver v0.37.2, pkg/admission/plugin/policy/{generic,matching}
// and pkg/admission/plugin/cel): the API server's defaults and validation
// of their common fields (names, paramKind, matchConstraints and
// matchResources, paramRef, matchConditions, variables); the policy
// matcher (namespace and object selectors, resource rules, matchPolicy
// Equivalent); params and their collection per binding; the request's
// inputs as CEL values (object, oldObject, params, request,
// namespaceObject, authorizer) and the evaluation of compiled expressions
// with lazily composited variables and the API server's cost budgets, with
// its error texts.
//
// It compiles with k8s.io/apiserver/pkg/admission/plugin/cel and never
// imports the validating or mutating plugins (they link client-go).
//
// Where Arbiter differs from a cluster, on purpose (both kinds):
//
//   - escaped property names (`x__dash__prop`, `__namespace__`, ...) resolve
//     on untyped objects, params included, as the API reference describes
//     them; kube-apiserver without a schema answers "no such key";
//   - the `authorizer` knows only the request's user: see Authorizer;
//   - a Namespace that is not known matches selectors as one labelled
//     kubernetes.io/metadata.name=NAME, and namespaceObject is null
//     (kube-apiserver fails such a request);
//   - matchPolicy Equivalent uses a built-in table of equivalent resources
//     (see EquivalentResources) and converts only apiVersion and kind;
//   - every paramKind is taken as served: the set's objects of that kind
//     are its objects.
package admissionpolicy
