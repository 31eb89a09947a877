package exception

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
