package vap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// Param is a param object: an object of a kind some policy's paramKind names.
type Param struct {
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
	Content    map[string]any
}

// Key is namespace/name, or name.
func (p *Param) Key() string {
	if p.Namespace != "" {
		return p.Namespace + "/" + p.Name
	}
	return p.Name
}

func (p *Param) labels() labels.Labels { return admission.ObjectLabels(p.Content) }

// Options tune a Set.
type Options struct {
	// Namespaced says whether objects of a kind live in namespaces, for
	// param kinds of which the set holds no object (nil: every kind whose
	// name does not start with "Cluster").
	Namespaced func(schema.GroupKind) bool
	// Authorizer answers `authorizer` checks (nil: Authorizer{}).
	Authorizer authorizer.UnconditionalAuthorizer
}

// Set is an immutable set of compiled policies, bindings, params and the
// Namespaces they may consult. It is safe for concurrent use.
type Set struct {
	entries    []*entry
	params     map[schema.GroupVersionKind][]*Param
	namespaces map[string]heldNamespace
	namespaced func(schema.GroupKind) bool
	authorizer authorizer.UnconditionalAuthorizer
	// byResource lists the entries whose policy rules may match a
	// resource name; wildcard those with a "*" resource.
	byResource map[string][]*entry
	wildcard   []*entry
	// paramObjects are the objects the params were taken from (Compile).
	paramObjects map[*manifest.Object]bool
}

type heldNamespace struct {
	content map[string]any
	typed   *corev1.Namespace
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
	s := &Set{
		params:     map[schema.GroupVersionKind][]*Param{},
		namespaces: make(map[string]heldNamespace, len(namespaces)),
		namespaced: opts.Namespaced,
		authorizer: opts.Authorizer,
	}
	if s.authorizer == nil {
		s.authorizer = Authorizer{}
	}
	if s.namespaced == nil {
		s.namespaced = func(gk schema.GroupKind) bool { return !strings.HasPrefix(gk.Kind, "Cluster") }
	}
	for name, ns := range namespaces {
		s.namespaces[name] = heldNamespace{content: ns, typed: typedNamespace(ns)}
	}
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
	for _, p := range params {
		gvk := schema.FromAPIVersionAndKind(p.APIVersion, p.Kind)
		s.params[gvk] = append(s.params[gvk], p)
	}
	for _, l := range s.params {
		sort.SliceStable(l, func(i, j int) bool {
			if l[i].Namespace != l[j].Namespace {
				return l[i].Namespace < l[j].Namespace
			}
			return l[i].Name < l[j].Name
		})
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
		m := e.policy.match
		for _, r := range m.rules {
			for _, res := range r.Resources {
				main, _, _ := strings.Cut(res, "/")
				if main == "*" {
					wild[i] = true
				}
				names[i][main] = true
				if m.equivalent {
					// equivalent resources share the resource name
					names[i][main] = true
				}
			}
		}
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

// admissionConfigResources are never subject to API-defined policies;
// excludedResources (reviews, not persisted) to no policy.
var (
	admissionConfigResources = map[schema.GroupResource]bool{
		{Group: Group, Resource: "validatingadmissionpolicies"}:                true,
		{Group: Group, Resource: "validatingadmissionpolicybindings"}:          true,
		{Group: Group, Resource: "mutatingadmissionpolicies"}:                  true,
		{Group: Group, Resource: "mutatingadmissionpolicybindings"}:            true,
		{Group: "authentication.k8s.io", Resource: "tokenreviews"}:             true,
		{Group: "authentication.k8s.io", Resource: "selfsubjectreviews"}:       true,
		{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}:      true,
		{Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"}:  true,
		{Group: "authorization.k8s.io", Resource: "localsubjectaccessreviews"}: true,
		{Group: "authorization.k8s.io", Resource: "selfsubjectrulesreviews"}:   true,
	}
)

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
	gvk, gvr, sub := req.Requested()
	if admissionConfigResources[gvr.GroupResource()] {
		return out
	}
	cands := s.candidates(gvr.Resource)
	if len(cands) == 0 {
		return out
	}
	rq := &evalRequest{ctx: ctx, set: s, req: req, gvk: gvk, gvr: gvr, sub: sub, trace: trace}
	rq.userInfo = &user.DefaultInfo{Name: req.UserInfo.Username, UID: req.UserInfo.UID, Groups: req.UserInfo.Groups, Extra: req.UserInfo.Extra}
	var failures []validationFailure
	for _, e := range cands {
		if len(e.bindings) == 0 {
			continue
		}
		p := e.policy
		ok, gvr, gvk := p.match.matches(rq)
		if !ok {
			continue
		}
		if rq.traceOn() {
			rq.tracePolicy, rq.traceBinding, rq.traceParam = p.Name, "", ""
			rq.note(Step{Phase: outcome.PhaseMatch, Note: "matched the policy's matchConstraints as " + gvk.GroupVersion().String() + " " + gvk.Kind})
		}
		collector := map[string][]string{}
		var keys []string
		for _, b := range e.bindings {
			rq.traceBinding, rq.traceParam = b.Name, ""
			if b.match != nil {
				if ok, _, _ := b.match.matches(rq); !ok {
					rq.note(Step{Phase: outcome.PhaseBindingMatch, Note: "the binding's matchResources do not match: not evaluated"})
					continue
				}
			}
			res := Result{Policy: p.Name, Binding: b.Name, ValidationIndex: -1, Actions: actionNames(b.Actions)}
			params, err := s.collectParams(p, b, req.Namespace)
			if err != nil {
				msg := fmt.Errorf("failed to configure binding: %w", err).Error()
				res.Result, res.Message = ResultError, msg
				out.Results = append(out.Results, res)
				if p.failurePolicy != admissionregistrationv1.Ignore {
					out.Denials = append(out.Denials, Denial{Policy: p.Name, Binding: b.Name, Message: msg,
						Reason: metav1.StatusReasonInvalid, Code: reasonToCode(metav1.StatusReasonInvalid)})
				}
				continue
			}
			var first *decision
			firstIndex := -1
			evaluated := false
			for _, param := range params {
				if param != nil {
					res.Params = append(res.Params, param.Key())
					rq.traceParam = param.Key()
				}
				vr := p.validate(rq, gvr, gvk, param)
				if vr.skipped {
					rq.note(Step{Phase: outcome.PhaseResult, Note: "skipped: a matchCondition is false (or failed with failurePolicy Ignore)"})
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
							out.Denials = append(out.Denials, Denial{Policy: p.Name, Binding: b.Name, Message: d.message, Reason: reason, Code: reasonToCode(reason)})
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
							Reason: metav1.StatusReasonInvalid, Code: reasonToCode(metav1.StatusReasonInvalid)})
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
			if rq.traceOn() {
				rq.traceParam = ""
				note := res.Result
				if res.Message != "" {
					note += ": " + res.Message
				}
				if res.Result == ResultFail || res.Result == ResultError {
					note += " (validationActions " + strings.Join(res.Actions, ", ") + ")"
				}
				rq.note(Step{Phase: outcome.PhaseResult, Note: note})
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

// reasonToCode maps a status reason to its HTTP code, as the plugin does
// (the engine does not link net/http for four numbers).
func reasonToCode(r metav1.StatusReason) int32 {
	switch r {
	case metav1.StatusReasonForbidden:
		return 403
	case metav1.StatusReasonUnauthorized:
		return 401
	case metav1.StatusReasonRequestEntityTooLarge:
		return 413
	}
	return 422 // Unprocessable Entity
}

// ReasonCode returns the HTTP code kube-apiserver answers a denial with reason r.
func ReasonCode(r metav1.StatusReason) int32 { return reasonToCode(r) }

// paramScopeNamespaced says whether the params of a kind live in
// namespaces: as the objects of that kind the set holds, else by Options.
func (s *Set) paramScopeNamespaced(gvk schema.GroupVersionKind) bool {
	if l := s.params[gvk]; len(l) > 0 {
		return l[0].Namespace != ""
	}
	return s.namespaced(gvk.GroupKind())
}

// collectParams returns the params a binding evaluates the policy with
// ([nil] when there are none to look up), as the plugin's CollectParams.
// Every paramKind is taken as served: the set's objects of that kind are
// its objects.
func (s *Set) collectParams(p *Policy, b *Binding, namespace string) ([]*Param, error) {
	ref := b.paramRef
	if p.paramKind == nil || ref == nil {
		return []*Param{nil}, nil
	}
	gvk := *p.paramKind
	namespaced := s.paramScopeNamespaced(gvk)
	paramsNamespace := ""
	if namespaced {
		paramsNamespace = namespace
		if ref.Namespace != "" {
			paramsNamespace = ref.Namespace
		} else if paramsNamespace == "" {
			return nil, errors.New("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources")
		}
	} else if ref.Namespace != "" {
		return nil, errors.New("paramRef.namespace must not be provided for a cluster-scoped `paramKind`")
	}
	var params []*Param
	switch {
	case ref.Name != "":
		for _, x := range s.params[gvk] {
			if x.Name == ref.Name && (!namespaced || x.Namespace == paramsNamespace) {
				params = []*Param{x}
				break
			}
		}
	case b.paramSelector != nil || ref.Selector != nil:
		sel := b.paramSelector
		if sel == nil {
			sel = labels.Everything()
		}
		for _, x := range s.params[gvk] {
			if (!namespaced || x.Namespace == paramsNamespace) && sel.Matches(x.labels()) {
				params = append(params, x)
			}
		}
	default:
		return nil, errors.New("one of name or selector must be provided")
	}
	if len(params) == 0 && ref.ParameterNotFoundAction != nil && *ref.ParameterNotFoundAction == admissionregistrationv1.DenyAction {
		return nil, errors.New("no params found for policy binding with `Deny` parameterNotFoundAction")
	}
	return params, nil
}
