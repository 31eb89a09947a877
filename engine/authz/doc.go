// Package authz is the kind of the Kyverno Authz Server's authorization
// policies: a policies.kyverno.io ValidatingPolicy whose
// spec.evaluation.mode is Envoy or HTTP. Such a policy does not admit
// Kubernetes objects: it answers an authorization request — an Envoy
// external-authorization CheckRequest, or the Authz Server's HTTP
// CheckRequest — with a response built in CEL (envoy.Allowed(),
// envoy.Denied(403).WithBody(...), http.Denied("reason"), ...).
//
// It has the shape of every kind of the engine:
//
//   - load: the object is decoded strictly into kyvernoapi.ValidatingPolicy
//     (errors name the object and field);
//   - compile: its matchConditions, variables and validations in the mode's
//     CEL environment (celenv.NewAuthz with the envoy.* or http.* response
//     builders and jwt.Decode); autogen does not apply;
//   - evaluate: given a request of shape admission.ShapeEnvoy or ShapeHTTP,
//     each policy of that mode runs as kyverno-authz runs it — a false
//     matchCondition is no opinion, then the validations in order until one
//     returns a response (null is no opinion), errors under failurePolicy
//     Ignore are no opinion;
//   - outcome: one result per policy, in the words of Kyverno's CLI (pass
//     "request allowed", fail "request denied with status code N" /
//     "request denied, reason: …", skip "request does not match", error),
//     and the authorization response (outcome.Authorization): that of the
//     first policy, in the set's order, that responded or failed — the
//     Authz Server's sequential dispatch — or the default (allowed).
//
// `object` is the request as JSON, not the protobuf message (Prepare fills
// in what the message would have by default, and an Envoy request's fields
// are renamed to their protobuf names, so `object.attributes.context_extensions`
// reads as it does in kyverno-authz). PolicyExceptions do not apply to
// authorization policies: kyverno-authz does not bind them (its Kubernetes
// source watches them, but the code that would pass them to the compiler is
// commented out) and neither does Kyverno's CLI.
package authz
