// Package vap evaluates Kubernetes ValidatingAdmissionPolicy and
// ValidatingAdmissionPolicyBinding (admissionregistration.k8s.io/v1) with
// kube-apiserver's semantics (k8s.io/apiserver v0.37.2,
// pkg/admission/plugin/policy/validating): defaults, API validation,
// matchConstraints and binding matchResources (matchPolicy Exact and
// Equivalent), matchConditions, paramKind/paramRef, variables,
// validations with messageExpression fallbacks and reasons,
// auditAnnotations, validationActions, failurePolicy and the API server's
// cost limits, with its message texts.
//
// It compiles with k8s.io/apiserver/pkg/admission/plugin/cel (the same
// compiler, environment, variable composition and error texts) and
// reimplements the validator and dispatcher logic of the validating plugin,
// which this package does not import (it would link client-go).
//
// Where Arbiter differs from a cluster, on purpose:
//
//   - every policy is evaluated, in a fixed order (policy name, then
//     binding name, then params by namespace and name), and every result
//     is reported; kube-apiserver walks policies in map order and returns
//     the first denial;
//   - escaped property names (`x__dash__prop`, `__namespace__`, ...) resolve
//     on untyped objects, params included, as the API reference describes
//     them; kube-apiserver without a schema answers "no such key";
//   - the `authorizer` knows only the request's user: see Authorizer;
//   - a Namespace that is not known matches selectors as one labelled
//     kubernetes.io/metadata.name=NAME, and namespaceObject is null
//     (kube-apiserver fails such a request);
//   - matchPolicy Equivalent uses a built-in table of equivalent resources
//     (see equivalents) and converts only apiVersion and kind;
//   - what API validation refuses (an expression that does not compile, a
//     binding with both Deny and Warn, ...) cannot be loaded at all.
package vap
