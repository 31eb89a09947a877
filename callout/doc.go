// Package callout makes the calls out of Kyverno's CEL libraries for the
// server: http.Get, http.Post and http.Client(caBundle), and resource.Post
// (SubjectAccessReview, TokenReview and the like). These are calls, not
// data — their answers are not revisioned — so the server makes them
// through one bounded client: an allowlist of URL prefixes and one of
// resources (nothing is allowed by default), a timeout and a response size
// limit for every call, redirects checked against the allowlist, no proxy,
// and a record of every call (Options.Recorder, Collect, a debug log line)
// for the decision log. A failed call is an error naming the call
// ("http.Get \"https://...\": ..."), which the engine makes the policy's
// error result.
//
// The engine reads this package through kyvernocel.HTTPContext,
// kyvernocel.HTTPNamespacer and kyvernocel.ResourceContext; it never
// imports it (network I/O stays out of engine/). Client.Context makes a
// kyvernocel.Context of a Client for engine.EvalOptions.
//
// Responses are shaped as by Kyverno 1.19's http library (kyverno/sdk
// extensions/cel/libs/http): a JSON object body with "statusCode" added,
// anything else as {"body": ..., "statusCode": N}, whatever the status.
// Kyverno's rule for namespaced policies (--allowHTTPInNamespacedPolicies)
// is Config.AllowHTTPInNamespacedPolicies. docs/context.md describes the
// differences from Kyverno.
package callout
