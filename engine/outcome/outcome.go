// Package outcome holds what every policy kind's evaluation produces: its
// results (one per policy, binding or level that applied, with typed
// causes and exception outcomes), warnings, audit annotations and denials,
// and the trace of how they were reached. The engine merges the outcomes
// of the kinds into one decision. It is a leaf of the engine.
package outcome

import (
	"slices"
	"strings"
)

// Result words, as in wgpolicyk8s.io PolicyReports.
const (
	Pass  = "pass"
	Fail  = "fail"
	Warn  = "warn"
	Error = "error"
	Skip  = "skip"
)

// Sources of results, as Kyverno names them in PolicyReports.
const (
	SourceValidatingPolicy          = "KyvernoValidatingPolicy"
	SourceValidatingAdmissionPolicy = "ValidatingAdmissionPolicy"
	SourcePodSecurity               = "PodSecurity"
	SourceMutatingPolicy            = "KyvernoMutatingPolicy"
	SourceMutatingAdmissionPolicy   = "MutatingAdmissionPolicy"
	SourceImageValidatingPolicy     = "KyvernoImageValidatingPolicy"
)

// Report property names.
const (
	PropProcess         = "process"
	PropExceptions      = "exceptions"
	PropValidationIndex = "cel.validationIndex"
	// PropBinding names a ValidatingAdmissionPolicy's binding.
	PropBinding = "binding"
	// PropParams names the params a binding evaluated.
	PropParams = "params"
	// Pod Security results.
	PropPSAVersion   = "version"
	PropPSAModes     = "modes"
	PropPSAExemption = "exemption"
)

// Rule names of results that are not decided by a policy's own rules.
const (
	RuleException  = "exception"
	RuleEvaluation = "evaluation"
	RuleMatch      = "match"
)

// Cause says what decided a result.
type Cause uint8

const (
	// CauseRules: the policy's own rules (validations, checks) decided.
	CauseRules Cause = iota
	// CauseException: granted exceptions exempt the resource (rule "exception").
	CauseException
	// CauseEvaluation: the policy could not be evaluated (rule "evaluation"):
	// a context call or an exception's condition failed, the cost budget
	// was spent.
	CauseEvaluation
	// CauseMatch: matching the request failed (rule "match").
	CauseMatch
	// CauseMatchConditions: a matchCondition of the policy is false (a
	// skip that background reports leave out).
	CauseMatchConditions
)

// Result is one policy's verdict on a request.
type Result struct {
	// Policy is the report name: name, or namespace/name for namespaced policies.
	Policy          string
	PolicyName      string
	PolicyNamespace string
	PolicyKind      string
	// Rule is "" for a plain result, "exception", "evaluation", "match", a
	// ValidatingAdmissionPolicy's binding, or Pod Security's "namespace-labels".
	Rule string
	// Result is the reported word (a failure of an unscored policy is a warn).
	Result  string
	Message string
	// Properties are the PolicyReport properties. They are shared and
	// read-only: never modify them in place.
	Properties map[string]string
	Actions    []string
	Source     string
	Category   string
	Severity   string
	// Granted are the namespace/name of the exceptions that exempt the
	// resource (Cause is CauseException).
	Granted []string
	// Refused is the namespace/name of the matched exception refused by
	// its compensating controls whose message (or error) the failing
	// result shows, when no exception was granted.
	Refused string
	// Expired are the namespace/name of the exceptions bound to the policy
	// that were ignored because their expiresAt has passed.
	Expired []string
	// Cause says what decided the result.
	Cause Cause
	// Scored is the report's scored flag. (The small fields are last, side
	// by side: 26 results then fit a smaller allocation.)
	Scored bool
	// Mutated says a mutating policy changed the object.
	Mutated bool
}

// Exceptions returns the exceptions that decided the result: the granted
// ones of an exemption, or the refused one whose message is shown.
func (r *Result) Exceptions() []string {
	if len(r.Granted) > 0 {
		return r.Granted
	}
	if r.Refused != "" {
		return []string{r.Refused}
	}
	return nil
}

// Outcome is what the kinds of a request's evaluation produced, in order:
// results, warnings, audit annotations and denials. The denials' texts are
// written into one message (joined by "; "), so a decision's message and
// its denials share one allocation.
type Outcome struct {
	Results  []Result
	Warnings []string
	// AuditAnnotations are the audit annotations to record.
	AuditAnnotations map[string]string
	// Authorization is the response to an authorization request (an Envoy
	// or HTTP CheckRequest); nil for admission requests.
	Authorization *Authorization

	message strings.Builder
	denials []denial
	buf     [8]denial
}

// Reserve makes room for n more results, so a kind that may add up to n
// grows the results once.
func (o *Outcome) Reserve(n int) {
	if n > cap(o.Results)-len(o.Results) {
		o.Results = slices.Grow(o.Results, n)
	}
}

// Authorization is the answer to an authorization request, as the Kyverno
// Authz Server gives it: the response of the first policy (in the set's
// order) that returned one or failed, or the default (allowed) when none did.
type Authorization struct {
	// Policy is the key of the policy whose response it is; "" for the
	// default response.
	Policy string
	// Allowed says whether the request is allowed: an OK response or none.
	Allowed bool
	// Code is the HTTP status the client is answered with (200 when allowed).
	Code int32
	// JSON is the response: for Envoy, the CheckResponse
	// (envoy.service.auth.v3) in protobuf's JSON mapping; for HTTP, the
	// response the Authz Server writes ({"status": N, "header": {...},
	// "body": "..."}).
	JSON []byte
}

// denial is where a denial's text ends in the message, with its status.
type denial struct {
	end    int
	code   int32
	reason string
}

// GrowMessage makes room for n more bytes of denial texts.
func (o *Outcome) GrowMessage(n int) { o.message.Grow(n) }

// Deny records a denial whose text is the concatenation of parts, with the
// HTTP status code and reason of a denial (400 and "" for a Kyverno
// policy; the first denial's are the decision's).
func (o *Outcome) Deny(code int32, reason string, parts ...string) {
	if o.denials == nil {
		o.denials = o.buf[:0]
	}
	if len(o.denials) > 0 {
		o.message.WriteString("; ")
	}
	for _, p := range parts {
		o.message.WriteString(p)
	}
	o.denials = append(o.denials, denial{end: o.message.Len(), code: code, reason: reason})
}

// Denied says whether a denial was recorded.
func (o *Outcome) Denied() bool { return len(o.denials) > 0 }

// Message returns the denials' texts, the message that joins them, and the
// first denial's code and reason.
func (o *Outcome) Message() (texts []string, message string, code int32, reason string) {
	if len(o.denials) == 0 {
		return nil, "", 0, ""
	}
	message = o.message.String()
	texts = make([]string, len(o.denials))
	start := 0
	for i, d := range o.denials {
		texts[i] = message[start:d.end]
		start = d.end + len("; ")
	}
	return texts, message, o.denials[0].code, o.denials[0].reason
}

// Annotate adds audit annotations.
func (o *Outcome) Annotate(m map[string]string) {
	if len(m) == 0 {
		return
	}
	if o.AuditAnnotations == nil {
		o.AuditAnnotations = make(map[string]string, len(m))
	}
	for k, v := range m {
		o.AuditAnnotations[k] = v
	}
}

// Process returns the PolicyReport process name of a result of a request
// in mode admission (true) or not.
func Process(admission bool) string {
	if admission {
		return "admission review"
	}
	return "background scan"
}
