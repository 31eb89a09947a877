package engine

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// API group and kinds of the Kyverno CEL policy types.
const (
	KyvernoGroup                   = "policies.kyverno.io"
	KindValidatingPolicy           = "ValidatingPolicy"
	KindNamespacedValidatingPolicy = "NamespacedValidatingPolicy"
	KindPolicyException            = "PolicyException"
)

// kyvernoVersions are the served versions of policies.kyverno.io; they share one schema.
var kyvernoVersions = map[string]bool{"v1alpha1": true, "v1beta1": true, "v1": true}

// ValidatingPolicy is policies.kyverno.io ValidatingPolicy and
// NamespacedValidatingPolicy (v1alpha1, v1beta1 and v1 share this schema).
type ValidatingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ValidatingPolicySpec `json:"spec"`
	// Status is accepted and ignored (except status.generated, which Kyverno
	// honours by not evaluating the policy itself).
	Status *ValidatingPolicyStatus `json:"status,omitempty"`
}

// ValidatingPolicyStatus is the part of the status Arbiter reads.
type ValidatingPolicyStatus struct {
	ConditionStatus map[string]any `json:"conditionStatus,omitempty"`
	Autogen         map[string]any `json:"autogen,omitempty"`
	Generated       bool           `json:"generated,omitempty"`
}

// ValidatingPolicySpec is the spec of a ValidatingPolicy.
type ValidatingPolicySpec struct {
	MatchConstraints     *admissionregistrationv1.MatchResources    `json:"matchConstraints,omitempty"`
	Validations          []admissionregistrationv1.Validation       `json:"validations,omitempty"`
	FailurePolicy        *admissionregistrationv1.FailurePolicyType `json:"failurePolicy,omitempty"`
	AuditAnnotations     []admissionregistrationv1.AuditAnnotation  `json:"auditAnnotations,omitempty"`
	MatchConditions      []admissionregistrationv1.MatchCondition   `json:"matchConditions,omitempty"`
	Variables            []admissionregistrationv1.Variable         `json:"variables,omitempty"`
	Autogen              *AutogenConfiguration                      `json:"autogen,omitempty"`
	ValidationActions    []admissionregistrationv1.ValidationAction `json:"validationActions,omitempty"`
	WebhookConfiguration *WebhookConfiguration                      `json:"webhookConfiguration,omitempty"`
	Evaluation           *EvaluationConfiguration                   `json:"evaluation,omitempty"`
}

// AutogenConfiguration is spec.autogen.
type AutogenConfiguration struct {
	PodControllers            *PodControllers `json:"podControllers,omitempty"`
	ValidatingAdmissionPolicy *VAPGeneration  `json:"validatingAdmissionPolicy,omitempty"`
}

// PodControllers is spec.autogen.podControllers. A nil Controllers means
// every pod controller; an empty list means none.
type PodControllers struct {
	Controllers []string `json:"controllers,omitempty"`
}

// VAPGeneration is spec.autogen.validatingAdmissionPolicy.
type VAPGeneration struct {
	Enabled *bool `json:"enabled,omitempty"`
}

// WebhookConfiguration is spec.webhookConfiguration.
type WebhookConfiguration struct {
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`
}

// Evaluation modes.
const (
	EvaluationModeKubernetes = "Kubernetes"
	EvaluationModeJSON       = "JSON"
)

// EvaluationConfiguration is spec.evaluation.
type EvaluationConfiguration struct {
	Mode       string         `json:"mode,omitempty"`
	Admission  *EnabledToggle `json:"admission,omitempty"`
	Background *EnabledToggle `json:"background,omitempty"`
}

// EnabledToggle is {enabled: bool}.
type EnabledToggle struct {
	Enabled *bool `json:"enabled,omitempty"`
}

// EvaluationMode returns Kubernetes (default) or JSON.
func (s *ValidatingPolicySpec) EvaluationMode() string {
	if s.Evaluation == nil || s.Evaluation.Mode == "" {
		return EvaluationModeKubernetes
	}
	return s.Evaluation.Mode
}

// AdmissionEnabled is evaluation.admission.enabled (default true).
func (s *ValidatingPolicySpec) AdmissionEnabled() bool {
	if s.Evaluation == nil || s.Evaluation.Admission == nil || s.Evaluation.Admission.Enabled == nil {
		return true
	}
	return *s.Evaluation.Admission.Enabled
}

// BackgroundEnabled is evaluation.background.enabled (default true).
func (s *ValidatingPolicySpec) BackgroundEnabled() bool {
	if s.Evaluation == nil || s.Evaluation.Background == nil || s.Evaluation.Background.Enabled == nil {
		return true
	}
	return *s.Evaluation.Background.Enabled
}

// Actions returns validationActions, defaulting to [Deny].
func (s *ValidatingPolicySpec) Actions() []admissionregistrationv1.ValidationAction {
	if len(s.ValidationActions) == 0 {
		return []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	}
	return s.ValidationActions
}

// GetFailurePolicy returns failurePolicy, defaulting to Fail.
func (s *ValidatingPolicySpec) GetFailurePolicy() admissionregistrationv1.FailurePolicyType {
	if s.FailurePolicy == nil {
		return admissionregistrationv1.Fail
	}
	return *s.FailurePolicy
}

// PolicyException is policies.kyverno.io PolicyException (v1alpha1,
// v1beta1 and v1 share this schema), with Arbiter's compensating controls
// (spec.validations).
type PolicyException struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PolicyExceptionSpec `json:"spec"`
}

// PolicyExceptionSpec is the spec of a PolicyException.
type PolicyExceptionSpec struct {
	PolicyRefs      []PolicyRef                              `json:"policyRefs"`
	MatchConditions []admissionregistrationv1.MatchCondition `json:"matchConditions,omitempty"`
	Images          []string                                 `json:"images,omitempty"`
	AllowedValues   []string                                 `json:"allowedValues,omitempty"`
	// ReportResult is skip (default) or pass.
	ReportResult   string            `json:"reportResult,omitempty"`
	ExpiresAt      *metav1.Time      `json:"expiresAt,omitempty"`
	Properties     map[string]string `json:"properties,omitempty"`
	EvaluationMode string            `json:"evaluationMode,omitempty"`
	// Validations are compensating controls: every one must hold for a
	// matched exception to be granted.
	Validations []admissionregistrationv1.Validation `json:"validations,omitempty"`
}

// PolicyRef names the policy an exception applies to.
type PolicyRef struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
}

// LabelExceptionPriority selects, among matched exceptions, the one whose
// reportResult decides the result.
const LabelExceptionPriority = "polex.kyverno.io/priority"
