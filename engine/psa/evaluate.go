package psa

import (
	"fmt"
	"reflect"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/arbiter-pdp/arbiter/engine/admission"
)

// Modes of a namespace's policy.
const (
	ModeEnforce = "enforce"
	ModeAudit   = "audit"
	ModeWarn    = "warn"
)

// Exemption reasons, as the pod-security.kubernetes.io/exempt audit
// annotation names them.
const (
	ExemptNamespace    = "namespace"
	ExemptUser         = "user"
	ExemptRuntimeClass = "runtimeClass"
)

// Outcomes of a Result (PolicyReport words).
const (
	OutcomePass  = "pass"
	OutcomeFail  = "fail"
	OutcomeSkip  = "skip"
	OutcomeError = "error"
)

// Skip reasons of a Result.
const (
	SkipExemption = "exemption"
	SkipException = "exception"
	SkipUpdate    = "update"
)

// Audit annotation keys as kube-apiserver records them (the plugin prefixes
// the admission library's keys with pod-security.kubernetes.io/).
const (
	AnnotationEnforcePolicy   = api.AuditAnnotationPrefix + api.EnforcedPolicyAnnotationKey
	AnnotationAuditViolations = api.AuditAnnotationPrefix + api.AuditViolationsAnnotationKey
	AnnotationExempt          = api.AuditAnnotationPrefix + api.ExemptionReasonAnnotationKey
	AnnotationError           = api.AuditAnnotationPrefix + "error"
)

// checks is the Pod Security Standards evaluator of kube-apiserver: the
// default checks, no emulated version (latest is the newest version a
// check has).
var checks = sync.OnceValue(func() policy.Evaluator {
	e, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		panic(fmt.Sprintf("pod security checks: %v", err))
	}
	return e
})

// input is an admission request as Pod Security Admission sees it.
type input struct {
	*admission.Request
	gr schema.GroupResource
	gk schema.GroupKind
	// namespace is the request's namespace; a Namespace's own name for a
	// Namespace (kube-apiserver admits a Namespace with the request's
	// namespace set to its name).
	namespace string
	// nsLabels are the labels of the request's Namespace; nil when it has
	// none or is not known (the configured defaults apply).
	nsLabels map[string]string
	// exceptions consults the PolicyExceptions of a level; nil means none.
	// It is called at most once per level, only for a level that is about
	// to be checked.
	exceptions func(level api.Level) ExceptionOutcome
}

// ExceptionOutcome is what the PolicyExceptions of a level say about a request.
type ExceptionOutcome struct {
	// Granted are the keys (namespace/name) of the granted exceptions: the
	// level is not checked.
	Granted []string
	// Refused is the key of the first exception refused by its
	// compensating controls; Message is the controls' message, which
	// replaces the checks' detail when the level fails; Error says the
	// refusal was a runtime error.
	Refused string
	Message string
	Error   bool
}

// Response is Pod Security Admission's verdict on a request.
type Response struct {
	// Handled says whether Pod Security Admission handles the request at
	// all (a CREATE or UPDATE of a Namespace, a Pod or a workload resource).
	Handled bool
	Allowed bool
	// Code, Reason and Message are the status of a denial, as kube-apiserver
	// returns it (403 Forbidden for a violation).
	Code    int32
	Reason  string
	Message string
	// Warnings are the admission warnings.
	Warnings []string
	// AuditAnnotations have kube-apiserver's keys (pod-security.kubernetes.io/...).
	AuditAnnotations map[string]string
	// Exemption is the exemption that applied: namespace, user, runtimeClass or "".
	Exemption string
	// Results are one per distinct level and version of the policy's
	// non-privileged modes that apply to the request, in mode order
	// (enforce, audit, warn); a Namespace whose labels are invalid has one
	// with no level.
	Results []Result
}

// Result is the verdict of one level and version of the namespace's policy.
type Result struct {
	Level   string
	Version string
	// Modes are the modes at this level and version (enforce only for Pods).
	Modes   []string
	Outcome string
	Message string
	// Exceptions are the granted exceptions (skip) or the refused one whose
	// message is shown.
	Exceptions []string
	// Skip says why a skip result was skipped: exemption, exception or update.
	Skip string
	// Exemption is the exemption of a skip by exemption.
	Exemption string
}

// LevelVersion returns "level:version".
func (r *Result) LevelVersion() string {
	if r.Level == "" {
		return ""
	}
	return r.Level + ":" + r.Version
}

var (
	namespacesResource = corev1.Resource("namespaces")
	podsResource       = corev1.Resource("pods")
)

// Handles says whether Pod Security Admission handles requests on a
// resource: Namespaces, Pods and the workload resources that embed a pod
// template (Deployment, ReplicaSet, DaemonSet, StatefulSet, Job, CronJob,
// ReplicationController, PodTemplate).
func Handles(gr schema.GroupResource) bool {
	return gr == namespacesResource || gr == podsResource || podSpecResources[gr]
}

// HasLabels says whether labels hold a Pod Security label.
func HasLabels(labels map[string]string) bool {
	for k := range labels {
		if strings.HasPrefix(k, api.AuditAnnotationPrefix) {
			return true
		}
	}
	return false
}

// ignoredPodSubresources are the Pod subresources Pod Security Admission
// ignores; every other one is evaluated (as upstream).
var ignoredPodSubresources = map[string]bool{
	"exec":        true,
	"attach":      true,
	"binding":     true,
	"eviction":    true,
	"log":         true,
	"portforward": true,
	"proxy":       true,
	"status":      true,
}

// evaluate decides a request as kube-apiserver's PodSecurity admission
// plugin does with configuration c.
func (c *Config) evaluate(req *input) *Response {
	if req.Operation != "CREATE" && req.Operation != "UPDATE" {
		return &Response{Allowed: true}
	}
	switch req.gr {
	case namespacesResource:
		return c.validateNamespace(req)
	case podsResource:
		return c.validatePod(req)
	}
	if podSpecResources[req.gr] {
		return c.validatePodController(req)
	}
	return &Response{Allowed: true}
}

func allowed() *Response { return &Response{Handled: true, Allowed: true} }

// validateNamespace is admission.ValidateNamespace without the check of the
// existing Pods of a namespace whose enforce level is tightened (Arbiter
// stores no Pods: that check finds none, as upstream with an empty
// namespace).
func (c *Config) validateNamespace(req *input) *Response {
	if req.SubResource != "" {
		return allowed()
	}
	var namespace corev1.Namespace
	if err := decode(req.Object, &namespace); err != nil {
		return errorResponse(err, apierrors.NewBadRequest("failed to decode object").ErrStatus, nil)
	}
	newPolicy, newErrs := api.PolicyToEvaluate(namespace.Labels, c.defaults)
	switch req.Operation {
	case "CREATE":
		if len(newErrs) > 0 {
			return invalidResponse(req, newErrs)
		}
		if c.exemptNamespace(req.namespace) {
			if w := c.exemptNamespaceWarning(namespace.Name, newPolicy, namespace.Labels); w != "" {
				r := allowed()
				r.Warnings = append(r.Warnings, w)
				return r
			}
		}
		return allowed()
	default: // UPDATE
		var oldNamespace corev1.Namespace
		if err := decode(req.OldObject, &oldNamespace); err != nil {
			return errorResponse(err, apierrors.NewBadRequest("failed to decode  old object").ErrStatus, nil)
		}
		oldPolicy, oldErrs := api.PolicyToEvaluate(oldNamespace.Labels, c.defaults)
		if len(newErrs) > 0 && (len(oldErrs) == 0 || !reflect.DeepEqual(newErrs, oldErrs)) {
			return invalidResponse(req, newErrs)
		}
		if newPolicy.Enforce == oldPolicy.Enforce {
			return allowed()
		}
		if newPolicy.Enforce.Level == api.LevelPrivileged {
			return allowed()
		}
		if newPolicy.Enforce.Version == oldPolicy.Enforce.Version &&
			api.CompareLevels(newPolicy.Enforce.Level, oldPolicy.Enforce.Level) < 1 {
			return allowed()
		}
		if c.exemptNamespace(req.namespace) {
			if w := c.exemptNamespaceWarning(namespace.Name, newPolicy, namespace.Labels); w != "" {
				r := allowed()
				r.Warnings = append(r.Warnings, w)
				return r
			}
			return allowed()
		}
		// Upstream evaluates the namespace's existing Pods against the new
		// enforce level here and warns about violations; there are none
		// to list.
		return allowed()
	}
}

// exemptNamespaceWarning is admission's: a warning when an exempt
// namespace sets a non-privileged policy that differs from the defaults.
func (c *Config) exemptNamespaceWarning(exemptNamespace string, p api.Policy, nsLabels map[string]string) string {
	if p.FullyPrivileged() || p.Equivalent(&c.defaults) {
		return ""
	}
	sb := strings.Builder{}
	_, hasEnforceLevel := nsLabels[api.EnforceLevelLabel]
	_, hasEnforceVersion := nsLabels[api.EnforceVersionLabel]
	if p.Enforce.Level != api.LevelPrivileged && (hasEnforceLevel || hasEnforceVersion) {
		sb.WriteString("enforce=")
		sb.WriteString(p.Enforce.String())
	}
	_, hasAuditLevel := nsLabels[api.AuditLevelLabel]
	_, hasAuditVersion := nsLabels[api.AuditVersionLabel]
	if p.Audit.Level != api.LevelPrivileged && (hasAuditLevel || hasAuditVersion) {
		if sb.Len() > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("audit=")
		sb.WriteString(p.Audit.String())
	}
	_, hasWarnLevel := nsLabels[api.WarnLevelLabel]
	_, hasWarnVersion := nsLabels[api.WarnVersionLabel]
	if p.Warn.Level != api.LevelPrivileged && (hasWarnLevel || hasWarnVersion) {
		if sb.Len() > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("warn=")
		sb.WriteString(p.Warn.String())
	}
	return fmt.Sprintf("namespace %q is exempt from Pod Security, and the policy (%s) will be ignored",
		exemptNamespace, sb.String())
}

// validatePod is admission.ValidatePod.
func (c *Config) validatePod(req *input) *Response {
	if ignoredPodSubresources[req.SubResource] {
		return allowed()
	}
	nsPolicy, nsPolicyErrs := api.PolicyToEvaluate(req.nsLabels, c.defaults)
	if c.exemptNamespace(req.namespace) {
		return exempt(ExemptNamespace, fmt.Sprintf("namespace %q is exempt", req.namespace), nsPolicy, true)
	}
	if c.exemptUser(req.UserInfo.Username) {
		return exempt(ExemptUser, fmt.Sprintf("user %q is exempt", req.UserInfo.Username), nsPolicy, true)
	}
	if len(nsPolicyErrs) == 0 && nsPolicy.FullyPrivileged() {
		r := allowed()
		r.AuditAnnotations = map[string]string{
			AnnotationEnforcePolicy: api.LevelVersion{Level: api.LevelPrivileged, Version: api.LatestVersion()}.String(),
		}
		return r
	}
	var pod corev1.Pod
	if err := decodePod(req.Object, &pod); err != nil {
		r := errorResponse(err, apierrors.NewBadRequest("failed to decode object").ErrStatus, nil)
		r.Results = results(nsPolicy, true, OutcomeError, "failed to decode object: "+err.Error())
		return r
	}
	if req.Operation == "UPDATE" {
		var oldPod corev1.Pod
		if err := decodePod(req.OldObject, &oldPod); err != nil {
			r := errorResponse(err, apierrors.NewBadRequest("failed to decode old object").ErrStatus, nil)
			r.Results = results(nsPolicy, true, OutcomeError, "failed to decode old object: "+err.Error())
			return r
		}
		if !SignificantPodUpdate(&pod, &oldPod) {
			r := allowed()
			r.Results = results(nsPolicy, true, OutcomeSkip, "the update changes no field that Pod Security checks")
			for i := range r.Results {
				r.Results[i].Skip = SkipUpdate
			}
			return r
		}
	}
	return c.evaluatePod(req, nsPolicy, nsPolicyErrs.ToAggregate(), &pod.ObjectMeta, &pod.Spec, true)
}

// validatePodController is admission.ValidatePodController.
func (c *Config) validatePodController(req *input) *Response {
	if req.SubResource != "" {
		return allowed()
	}
	nsPolicy, nsPolicyErrs := api.PolicyToEvaluate(req.nsLabels, c.defaults)
	if c.exemptNamespace(req.namespace) {
		return exempt(ExemptNamespace, fmt.Sprintf("namespace %q is exempt", req.namespace), nsPolicy, false)
	}
	if c.exemptUser(req.UserInfo.Username) {
		return exempt(ExemptUser, fmt.Sprintf("user %q is exempt", req.UserInfo.Username), nsPolicy, false)
	}
	if len(nsPolicyErrs) == 0 && nsPolicy.Warn.Level == api.LevelPrivileged && nsPolicy.Audit.Level == api.LevelPrivileged {
		return allowed()
	}
	meta, spec, err := extractPodSpec(req.gr, req.Object)
	if err != nil {
		r := allowed()
		r.AuditAnnotations = map[string]string{AnnotationError: fmt.Sprintf("failed to decode object: %v", err)}
		r.Results = results(nsPolicy, false, OutcomeError, "failed to decode object: "+err.Error())
		return r
	}
	if meta == nil && spec == nil {
		return allowed()
	}
	return c.evaluatePod(req, nsPolicy, nsPolicyErrs.ToAggregate(), meta, spec, false)
}

// exempt is the response to an exempt request: allowed, with the exempt
// audit annotation, and a skip result per level that would have applied.
func exempt(reason, why string, p api.Policy, enforce bool) *Response {
	r := allowed()
	r.Exemption = reason
	r.AuditAnnotations = map[string]string{AnnotationExempt: reason}
	r.Results = results(p, enforce, OutcomeSkip, "exempt from Pod Security: "+why)
	for i := range r.Results {
		r.Results[i].Skip = SkipExemption
		r.Results[i].Exemption = reason
	}
	return r
}

// lvResult is the verdict of one level and version.
type lvResult struct {
	allowed    bool
	outcome    string
	detail     string
	exceptions []string
}

// evaluation is one evaluatePod: check results by level and version, and
// exception outcomes by level.
type evaluation struct {
	req   *input
	meta  *metav1.ObjectMeta
	spec  *corev1.PodSpec
	cache map[api.LevelVersion]*lvResult
	exc   map[api.Level]ExceptionOutcome
}

func (e *evaluation) check(lv api.LevelVersion) *lvResult {
	if r, ok := e.cache[lv]; ok {
		return r
	}
	r := &lvResult{allowed: true, outcome: OutcomePass}
	if lv.Level != api.LevelPrivileged {
		var eo ExceptionOutcome
		if e.req.exceptions != nil {
			var ok bool
			if eo, ok = e.exc[lv.Level]; !ok {
				eo = e.req.exceptions(lv.Level)
				if e.exc == nil {
					e.exc = map[api.Level]ExceptionOutcome{}
				}
				e.exc[lv.Level] = eo
			}
		}
		if len(eo.Granted) > 0 {
			r.outcome, r.exceptions = OutcomeSkip, eo.Granted
		} else {
			agg := policy.AggregateCheckResults(checks().EvaluatePod(lv, e.meta, e.spec))
			if !agg.Allowed {
				r.allowed, r.outcome, r.detail = false, OutcomeFail, agg.ForbiddenDetail()
				if eo.Refused != "" {
					r.detail, r.exceptions = eo.Message, []string{eo.Refused}
					if eo.Error {
						r.outcome = OutcomeError
					}
				}
			}
		}
	}
	if e.cache == nil {
		e.cache = make(map[api.LevelVersion]*lvResult, 3)
	}
	e.cache[lv] = r
	return r
}

// evaluatePod is admission.EvaluatePod, with the PolicyExceptions of each
// level consulted before its checks.
func (c *Config) evaluatePod(req *input, nsPolicy api.Policy, nsPolicyErr error, meta *metav1.ObjectMeta, spec *corev1.PodSpec, enforce bool) *Response {
	if c.exemptRuntimeClass(spec.RuntimeClassName) {
		return exempt(ExemptRuntimeClass, fmt.Sprintf("runtime class %q is exempt", *spec.RuntimeClassName), nsPolicy, enforce)
	}
	annotations := make(map[string]string, 3)
	if nsPolicyErr != nil {
		annotations[AnnotationError] = fmt.Sprintf("Failed to parse policy: %v", nsPolicyErr)
	}
	e := &evaluation{req: req, meta: meta, spec: spec}
	resp := allowed()
	if enforce {
		annotations[AnnotationEnforcePolicy] = nsPolicy.Enforce.String()
		if r := e.check(nsPolicy.Enforce); !r.allowed {
			st := apierrors.NewForbidden(req.gr, req.Name, fmt.Errorf("violates PodSecurity %q: %s", nsPolicy.Enforce.String(), r.detail)).ErrStatus
			resp.Allowed, resp.Code, resp.Reason, resp.Message = false, st.Code, string(st.Reason), st.Message
		}
	}
	if r := e.check(nsPolicy.Audit); !r.allowed {
		annotations[AnnotationAuditViolations] = fmt.Sprintf("would violate PodSecurity %q: %s", nsPolicy.Audit.String(), r.detail)
	}
	if resp.Allowed {
		if r := e.check(nsPolicy.Warn); !r.allowed {
			resp.Warnings = append(resp.Warnings, fmt.Sprintf("would violate PodSecurity %q: %s", nsPolicy.Warn.String(), r.detail))
		}
	}
	resp.AuditAnnotations = annotations
	for _, g := range groups(nsPolicy, enforce) {
		r := e.check(g.lv)
		res := Result{Level: string(g.lv.Level), Version: g.lv.Version.String(), Modes: g.modes, Outcome: r.outcome, Exceptions: r.exceptions}
		switch r.outcome {
		case OutcomePass:
			res.Message = fmt.Sprintf("satisfies PodSecurity %q", g.lv.String())
		case OutcomeSkip:
			res.Skip = SkipException
			res.Message = "rule is skipped due to policy exception: " + strings.Join(r.exceptions, ", ")
		default:
			verb := "would violate"
			if g.modes[0] == ModeEnforce {
				verb = "violates"
			}
			res.Message = fmt.Sprintf("%s PodSecurity %q: %s", verb, g.lv.String(), r.detail)
		}
		resp.Results = append(resp.Results, res)
	}
	return resp
}

// group is a level and version with the modes that use it.
type group struct {
	lv    api.LevelVersion
	modes []string
}

// groups returns the distinct non-privileged levels and versions of a
// policy's modes (enforce only when enforced), in mode order.
func groups(p api.Policy, enforce bool) []group {
	var out []group
	add := func(mode string, lv api.LevelVersion) {
		if lv.Level == api.LevelPrivileged {
			return
		}
		for i := range out {
			if out[i].lv == lv {
				out[i].modes = append(out[i].modes, mode)
				return
			}
		}
		out = append(out, group{lv: lv, modes: []string{mode}})
	}
	if enforce {
		add(ModeEnforce, p.Enforce)
	}
	add(ModeAudit, p.Audit)
	add(ModeWarn, p.Warn)
	return out
}

// results returns one result per group with the same outcome and message.
func results(p api.Policy, enforce bool, outcome, message string) []Result {
	gs := groups(p, enforce)
	if len(gs) == 0 {
		return nil
	}
	out := make([]Result, len(gs))
	for i, g := range gs {
		out[i] = Result{Level: string(g.lv.Level), Version: g.lv.Version.String(), Modes: g.modes, Outcome: outcome, Message: message}
	}
	return out
}

// errorResponse is admission's: a denial with the status and an error
// audit annotation.
func errorResponse(err error, status metav1.Status, results []Result) *Response {
	detail := status.Message
	if err != nil {
		detail = fmt.Sprintf("%s: %v", status.Message, err)
	}
	return &Response{
		Handled: true, Code: status.Code, Reason: string(status.Reason), Message: status.Message,
		AuditAnnotations: map[string]string{AnnotationError: detail},
		Results:          results,
	}
}

// invalidResponse is admission's denial of a Namespace with invalid Pod
// Security labels.
func invalidResponse(req *input, errs field.ErrorList) *Response {
	st := apierrors.NewInvalid(req.gk, req.Name, errs).ErrStatus
	return &Response{
		Handled: true, Code: st.Code, Reason: string(st.Reason), Message: st.Message,
		Results: []Result{{Outcome: OutcomeFail, Message: errs.ToAggregate().Error()}},
	}
}
