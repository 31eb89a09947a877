// Package mapol evaluates Kubernetes MutatingAdmissionPolicy and
// MutatingAdmissionPolicyBinding (admissionregistration.k8s.io v1, and the
// v1beta1 and v1alpha1 versions kube-apiserver v1.37 still serves) with
// params, as kube-apiserver's MutatingAdmissionPolicy plugin applies them
// (k8s.io/apiserver v0.37.2, pkg/admission/plugin/policy/mutating): the
// API server's defaults and validation, matchConstraints and binding
// matchResources, paramKind/paramRef (one invocation per param),
// matchConditions with failurePolicy, variables recomputed for every
// mutation, JSON patches and apply configurations applied in order to the
// object as mutated so far, a failed mutation not stopping the next, the
// reinvocation of IfNeeded invocations, its cost budgets and its error and
// denial texts. (The package is not named `map`: a Go keyword.)
//
// It compiles with k8s.io/apiserver/pkg/admission/plugin/cel and shares
// its matching, params, namespaces, authorizer and evaluation with
// ValidatingAdmissionPolicies (engine/admissionpolicy). It ports the parts
// of the mutating plugin and its patchers it needs rather than importing
// them (they link client-go): JSON patches go through engine/patch
// (celeval.JSONPatchOps builds them as the plugin does), apply
// configurations through an Applier (the structured-merge-diff merge with
// the kind's schema, engine/schema's; without one they fail as the
// plugin's patcher fails without a type converter).
//
// Decide runs the whole plugin (both passes); the engine runs Mutate (the
// first pass) before Kyverno's MutatingPolicies, as kube-apiserver runs
// the plugin before the mutating webhooks, then Reinvoke. Results (one per
// invocation: rule = binding) use Kyverno CLI's words for these policies:
// pass "mutation is successfully applied", skip "match conditions aren't
// met"; error carries the error's text, with failurePolicy Ignore too
// (the request is then allowed and the other mutations kept); in
// background scans, fail "mutation is not applied" for an invocation that
// would change the stored object.
//
// Where Arbiter differs from a cluster, on purpose (besides those of
// engine/admissionpolicy: escaped names, the authorizer, unknown
// Namespaces, the equivalence table, every paramKind served):
//
//   - invocations run in a fixed order: policies by name, each with its
//     bindings by name, params by namespace and name; kube-apiserver
//     walks policies in a Go map's order and params in its informer
//     cache's, so where two invocations set the same field the cluster's
//     outcome varies from request to request;
//   - objects are untyped: kube-apiserver applies the scheme's defaults to
//     a built-in kind's typed object after every mutation (a mutated Pod
//     gets imagePullPolicy, terminationMessagePath, ...); Arbiter applies
//     none;
//   - kube-apiserver refuses (503) every mutation of a kind its OpenAPI
//     does not describe, JSON patches included; Arbiter applies JSON
//     patches to any kind, and an apply configuration fails with the
//     Applier's error;
//   - a JSON patch that leaves no apiVersion or kind is an internal error
//     (500) in kube-apiserver, which decodes the patched JSON; Arbiter
//     keeps the object;
//   - under matchPolicy Equivalent the object is converted (apiVersion and
//     kind only) for each invocation and back: every invocation sees the
//     mutations of the previous ones, whatever version each matched
//     (kube-apiserver converts the request's object once per version before
//     the invocations run: invocations that matched different versions do
//     not see each other's mutations, and the copy of the last one to run
//     is kept).
package mapol
