package vpol

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
)

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
	Autogen              *kyvernoapi.AutogenConfiguration           `json:"autogen,omitempty"`
	ValidationActions    []admissionregistrationv1.ValidationAction `json:"validationActions,omitempty"`
	WebhookConfiguration *kyvernoapi.WebhookConfiguration           `json:"webhookConfiguration,omitempty"`
	Evaluation           *kyvernoapi.EvaluationConfiguration        `json:"evaluation,omitempty"`
}

// EvaluationMode returns Kubernetes (default) or JSON.
func (s *ValidatingPolicySpec) EvaluationMode() string { return s.Evaluation.ModeOf() }

// AdmissionEnabled is evaluation.admission.enabled (default true).
func (s *ValidatingPolicySpec) AdmissionEnabled() bool { return s.Evaluation.AdmissionEnabled() }

// BackgroundEnabled is evaluation.background.enabled (default true).
func (s *ValidatingPolicySpec) BackgroundEnabled() bool { return s.Evaluation.BackgroundEnabled() }

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
