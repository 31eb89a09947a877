package kyvernoapi

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ValidatingPolicy is policies.kyverno.io ValidatingPolicy and
// NamespacedValidatingPolicy (v1alpha1, v1beta1 and v1 share this schema).
// Its spec.evaluation.mode says which kind of the engine evaluates it:
// Kubernetes and JSON are admission policies (engine/vpol), Envoy and HTTP
// are authorization policies of the Kyverno Authz Server (engine/authz).
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

// EvaluationMode returns Kubernetes (default), JSON, Envoy or HTTP.
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

// EvaluationModeOf reads spec.evaluation.mode of a ValidatingPolicy
// manifest without decoding it (Kubernetes when absent); ok is false when
// the field is there but not a string.
func EvaluationModeOf(content map[string]any) (mode string, ok bool) {
	spec, _ := content["spec"].(map[string]any)
	ev, _ := spec["evaluation"].(map[string]any)
	switch m := ev["mode"].(type) {
	case nil:
		return EvaluationModeKubernetes, true
	case string:
		if m == "" {
			return EvaluationModeKubernetes, true
		}
		return m, true
	}
	return "", false
}
