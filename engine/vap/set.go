package vap

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	ap "github.com/arbiter-pdp/arbiter/engine/admissionpolicy"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// Param is a param object: an object of a kind some policy's paramKind names.
type Param = ap.Param

// Options tune a Set.
type Options = ap.Options

// Set is an immutable set of compiled policies, bindings, params and the
// Namespaces they may consult. It is safe for concurrent use.
type Set struct {
	entries []*entry
	objects *ap.Objects
	// byResource lists the entries whose policy rules may match a
	// resource name; wildcard those with a "*" resource.
	byResource map[string][]*entry
	wildcard   []*entry
	// paramObjects are the objects the params were taken from (Compile).
	paramObjects map[*manifest.Object]bool
}

type entry struct {
	policy   *Policy
	bindings []*Binding
}

// NewSet builds a set. Policies are evaluated in name order, each with its
// bindings in name order; a binding whose policy is not in the set is
// ignored, and a policy without bindings is never evaluated (as in
// kube-apiserver). Params are taken in namespace and name order.
func NewSet(policies []*Policy, bindings []*Binding, params []*Param, namespaces map[string]map[string]any, opts Options) *Set {
	s := &Set{objects: ap.NewObjects(params, namespaces, opts)}
	byPolicy := map[string]*entry{}
	for _, p := range policies {
		e := &entry{policy: p}
		byPolicy[p.Name] = e
		s.entries = append(s.entries, e)
	}
	for _, b := range bindings {
		if e, ok := byPolicy[b.PolicyName]; ok {
			e.bindings = append(e.bindings, b)
		}
	}
	sort.SliceStable(s.entries, func(i, j int) bool { return s.entries[i].policy.Name < s.entries[j].policy.Name })
	for _, e := range s.entries {
		sort.SliceStable(e.bindings, func(i, j int) bool { return e.bindings[i].Name < e.bindings[j].Name })
	}
	s.index()
	return s
}

// index lists entries by the resources their policy's rules name; an
// entry with a "*" resource (or an Equivalent match policy, which may
// match another resource) is in every list.
func (s *Set) index() {
	s.byResource = map[string][]*entry{}
	names := make([]map[string]bool, len(s.entries))
	wild := make([]bool, len(s.entries))
	for i, e := range s.entries {
		if len(e.bindings) == 0 {
			continue
		}
		names[i] = map[string]bool{}
		// (equivalent resources share the resource name)
		ns, w := e.policy.match.IndexNames()
		for _, n := range ns {
			names[i][n] = true
		}
		wild[i] = w
		if wild[i] {
			s.wildcard = append(s.wildcard, e)
		}
	}
	all := map[string]bool{}
	for i := range s.entries {
		for n := range names[i] {
			all[n] = true
		}
	}
	for n := range all {
		for i, e := range s.entries {
			if wild[i] || names[i][n] {
				s.byResource[n] = append(s.byResource[n], e)
			}
		}
	}
}

func (s *Set) candidates(resource string) []*entry {
	if l, ok := s.byResource[resource]; ok {
		return l
	}
	return s.wildcard
}

// Policies returns the compiled policies in evaluation order.
func (s *Set) Policies() []*Policy {
	out := make([]*Policy, len(s.entries))
	for i, e := range s.entries {
		out[i] = e.policy
	}
	return out
}

// Bindings returns the bindings of a policy in evaluation order.
func (s *Set) Bindings(policy string) []*Binding {
	for _, e := range s.entries {
		if e.policy.Name == policy {
			return e.bindings
		}
	}
	return nil
}

// Result words, as in PolicyReports.
const (
	ResultPass  = "pass"
	ResultFail  = "fail"
	ResultError = "error"
	ResultSkip  = "skip"
)

// Messages of results that have no decision message.
const (
	MessageMatchConditions = "match conditions aren't met"
	MessageNoParams        = "no params found for policy binding"
)

// Result is the verdict of one policy and binding (all its params) on a
// request.
type Result struct {
	Policy string
	// Binding is "" for a policy-level configuration error.
	Binding string
	// Result is pass, fail, error or skip: the first decision that is an
	// error or a denial decides (error, fail), else pass; skip when every
	// evaluation was skipped by matchConditions or no param was found.
	Result  string
	Message string
	// ValidationIndex is the index of the validation that decided a fail
	// or error, or -1.
	ValidationIndex int
	// Actions are the binding's validationActions.
	Actions []string
	// Params are the params evaluated (namespace/name).
	Params []string
}

// Denial is one denied decision whose binding has the Deny action.
type Denial struct {
	Policy  string
	Binding string
	Message string
	Reason  metav1.StatusReason
	Code    int32
}

// Text is the denial as kube-apiserver words it.
func (d Denial) Text() string {
	if d.Binding == "" {
		return fmt.Sprintf("ValidatingAdmissionPolicy '%s' denied request: %s", d.Policy, d.Message)
	}
	return fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s", d.Policy, d.Binding, d.Message)
}

// Verdict is what the set decides for a request.
type Verdict struct {
	Results []Result
	// Denials in evaluation order; kube-apiserver reports the first.
	Denials  []Denial
	Warnings []string
	// AuditAnnotations: POLICY/KEY values and
	// validation.policy.admission.k8s.io/validation_failure.
	AuditAnnotations map[string]string
}

// ValidationFailureAnnotation is the audit annotation key of Audit actions.
const ValidationFailureAnnotation = "validation.policy.admission.k8s.io/validation_failure"

type validationFailure struct {
	Message           string                                     `json:"message"`
	Policy            string                                     `json:"policy"`
	Binding           string                                     `json:"binding"`
	ExpressionIndex   int                                        `json:"expressionIndex"`
	ValidationActions []admissionregistrationv1.ValidationAction `json:"validationActions"`
}

// Empty says whether the set has no policy with a binding.
func (s *Set) Empty() bool {
	if s == nil {
		return true
	}
	for _, e := range s.entries {
		if len(e.bindings) > 0 {
			return false
		}
	}
	return true
}

// Decide decides a request as the API server's validating admission
// policy plugin does: every policy, binding and param, in order. The
// request's kind, resource and subresource are those the client sent
// (Request.Requested); trace, when not nil, receives every evaluation.
func (s *Set) Decide(ctx context.Context, req *admission.Request, trace func(Step)) *Verdict {
	out := &Verdict{}
	_, gvr, _ := req.Requested()
	if ap.AdmissionConfigResources[gvr.GroupResource()] {
		return out
	}
	cands := s.candidates(gvr.Resource)
	if len(cands) == 0 {
		return out
	}
	rq := ap.NewRequest(ctx, s.objects, req, trace)
	var failures []validationFailure
	for _, e := range cands {
		if len(e.bindings) == 0 {
			continue
		}
		p := e.policy
		ok, gvr, gvk := p.match.Matches(rq)
		if !ok {
			continue
		}
		if rq.Traced() {
			rq.TraceScope(p.Name, "", "")
			rq.Note(Step{Phase: outcome.PhaseMatch, Note: "matched the policy's matchConstraints as " + gvk.GroupVersion().String() + " " + gvk.Kind})
		}
		collector := map[string][]string{}
		var keys []string
		for _, b := range e.bindings {
			rq.TraceScope(p.Name, b.Name, "")
			if b.match != nil {
				if ok, _, _ := b.match.Matches(rq); !ok {
					rq.Note(Step{Phase: outcome.PhaseBindingMatch, Note: "the binding's matchResources do not match: not evaluated"})
					continue
				}
			}
			res := Result{Policy: p.Name, Binding: b.Name, ValidationIndex: -1, Actions: actionNames(b.Actions)}
			params, err := s.objects.CollectParams(p.paramKind, b.paramRef, b.paramSelector, req.Namespace)
			if err != nil {
				msg := fmt.Errorf("failed to configure binding: %w", err).Error()
				res.Result, res.Message = ResultError, msg
				out.Results = append(out.Results, res)
				if p.failurePolicy != admissionregistrationv1.Ignore {
					out.Denials = append(out.Denials, Denial{Policy: p.Name, Binding: b.Name, Message: msg,
						Reason: metav1.StatusReasonInvalid, Code: ap.ReasonCode(metav1.StatusReasonInvalid)})
				}
				continue
			}
			var first *decision
			firstIndex := -1
			evaluated := false
			for _, param := range params {
				if param != nil {
					res.Params = append(res.Params, param.Key())
					rq.TraceScope(p.Name, b.Name, param.Key())
				}
				vr := p.validate(rq, gvr, gvk, param)
				if vr.skipped {
					rq.Note(Step{Phase: outcome.PhaseResult, Note: "skipped: a matchCondition is false (or failed with failurePolicy Ignore)"})
					continue
				}
				evaluated = true
				for i := range vr.decisions {
					d := vr.decisions[i]
					if first == nil && (d.evaluation == evalError || d.action == actionDeny) {
						first, firstIndex = &vr.decisions[i], i
					}
					if d.action != actionDeny {
						continue
					}
					for _, a := range b.Actions {
						switch a {
						case admissionregistrationv1.Deny:
							reason := d.reason
							if reason == "" {
								reason = metav1.StatusReasonInvalid
							}
							out.Denials = append(out.Denials, Denial{Policy: p.Name, Binding: b.Name, Message: d.message, Reason: reason, Code: ap.ReasonCode(reason)})
						case admissionregistrationv1.Audit:
							failures = append(failures, validationFailure{Message: d.message, Policy: b.PolicyName, Binding: b.Name,
								ExpressionIndex: i, ValidationActions: b.Actions})
						case admissionregistrationv1.Warn:
							out.Warnings = append(out.Warnings, fmt.Sprintf("Validation failed for ValidatingAdmissionPolicy '%s' with binding '%s': %s", p.Name, b.Name, d.message))
						}
					}
				}
				for _, a := range vr.annotations {
					switch a.action {
					case auditPublish:
						v := a.value
						if len(v) > maxAuditAnnotationValueLength {
							v = v[:maxAuditAnnotationValueLength]
						}
						if _, seen := collector[a.key]; !seen {
							keys = append(keys, a.key)
						}
						if !contains(collector[a.key], v) {
							collector[a.key] = append(collector[a.key], v)
						}
					case auditError:
						out.Denials = append(out.Denials, Denial{Policy: p.Name, Binding: b.Name, Message: a.err,
							Reason: metav1.StatusReasonInvalid, Code: ap.ReasonCode(metav1.StatusReasonInvalid)})
						if first == nil {
							first = &decision{action: actionDeny, evaluation: evalError, message: a.err}
						}
					}
				}
			}
			switch {
			case first != nil && first.evaluation == evalError:
				res.Result, res.Message, res.ValidationIndex = ResultError, first.message, firstIndex
			case first != nil:
				res.Result, res.Message, res.ValidationIndex = ResultFail, first.message, firstIndex
			case evaluated:
				res.Result = ResultPass
			case len(params) == 0:
				res.Result, res.Message = ResultSkip, MessageNoParams
			default:
				res.Result, res.Message = ResultSkip, MessageMatchConditions
			}
			if rq.Traced() {
				rq.TraceScope(p.Name, b.Name, "")
				note := res.Result
				if res.Message != "" {
					note += ": " + res.Message
				}
				if res.Result == ResultFail || res.Result == ResultError {
					note += " (validationActions " + strings.Join(res.Actions, ", ") + ")"
				}
				rq.Note(Step{Phase: outcome.PhaseResult, Note: note})
			}
			out.Results = append(out.Results, res)
		}
		for _, k := range keys {
			if out.AuditAnnotations == nil {
				out.AuditAnnotations = map[string]string{}
			}
			out.AuditAnnotations[p.Name+"/"+k] = strings.Join(collector[k], ", ")
		}
	}
	if len(failures) > 0 {
		if len(failures) > maxValidationFailures {
			failures = failures[:maxValidationFailures]
		}
		if b, err := json.Marshal(failures); err == nil {
			if out.AuditAnnotations == nil {
				out.AuditAnnotations = map[string]string{}
			}
			out.AuditAnnotations[ValidationFailureAnnotation] = string(b)
		}
	}
	return out
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func actionNames(as []admissionregistrationv1.ValidationAction) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = string(a)
	}
	return out
}

// ReasonCode returns the HTTP code kube-apiserver answers a denial with reason r.
func ReasonCode(r metav1.StatusReason) int32 { return ap.ReasonCode(r) }
