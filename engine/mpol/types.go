package mpol

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
)

// MutatingPolicy is policies.kyverno.io MutatingPolicy and
// NamespacedMutatingPolicy (v1alpha1, v1beta1 and v1 share this schema).
type MutatingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              MutatingPolicySpec `json:"spec"`
	// Status is accepted; status.generated (a MutatingAdmissionPolicy was
	// generated from the policy) makes Kyverno skip the policy itself.
	Status *Status `json:"status,omitempty"`
}

// Status is the part of the status Arbiter reads.
type Status struct {
	ConditionStatus map[string]any `json:"conditionStatus,omitempty"`
	Autogen         map[string]any `json:"autogen,omitempty"`
	Generated       bool           `json:"generated,omitempty"`
}

// MutatingPolicySpec is the spec of a MutatingPolicy.
type MutatingPolicySpec struct {
	MatchConstraints       *admissionregistrationv1.MatchResources        `json:"matchConstraints,omitempty"`
	FailurePolicy          *admissionregistrationv1.FailurePolicyType     `json:"failurePolicy,omitempty"`
	MatchConditions        []admissionregistrationv1.MatchCondition       `json:"matchConditions,omitempty"`
	Variables              []admissionregistrationv1.Variable             `json:"variables,omitempty"`
	Autogen                *AutogenConfiguration                          `json:"autogen,omitempty"`
	TargetMatchConstraints *TargetMatchConstraints                        `json:"targetMatchConstraints,omitempty"`
	TargetMatchConditions  []admissionregistrationv1.MatchCondition       `json:"targetMatchConditions,omitempty"`
	Mutations              []admissionregistrationv1.Mutation             `json:"mutations,omitempty"`
	AuditAnnotations       []admissionregistrationv1.AuditAnnotation      `json:"auditAnnotations,omitempty"`
	WebhookConfiguration   *kyvernoapi.WebhookConfiguration               `json:"webhookConfiguration,omitempty"`
	Evaluation             *EvaluationConfiguration                       `json:"evaluation,omitempty"`
	ReinvocationPolicy     admissionregistrationv1.ReinvocationPolicyType `json:"reinvocationPolicy,omitempty"`
}

// AutogenConfiguration is spec.autogen.
type AutogenConfiguration struct {
	PodControllers          *kyvernoapi.PodControllers `json:"podControllers,omitempty"`
	MutatingAdmissionPolicy *kyvernoapi.VAPGeneration  `json:"mutatingAdmissionPolicy,omitempty"`
}

// TargetMatchConstraints is spec.targetMatchConstraints: the existing
// resources a mutate-existing policy mutates.
type TargetMatchConstraints struct {
	// Expression, when set, computes the targets from the trigger: an
	// object, or a map with `items`.
	Expression                             string `json:"expression,omitempty"`
	admissionregistrationv1.MatchResources `json:",inline"`
}

// EvaluationConfiguration is spec.evaluation of a MutatingPolicy.
type EvaluationConfiguration struct {
	Mode                   string                    `json:"mode,omitempty"`
	Admission              *kyvernoapi.EnabledToggle `json:"admission,omitempty"`
	Background             *kyvernoapi.EnabledToggle `json:"background,omitempty"`
	MutateExisting         *kyvernoapi.EnabledToggle `json:"mutateExisting,omitempty"`
	SkipBackgroundRequests *bool                     `json:"skipBackgroundRequests,omitempty"`
	UseServerSideApply     bool                      `json:"useServerSideApply,omitempty"`
}

func enabled(t *kyvernoapi.EnabledToggle, def bool) bool {
	if t == nil || t.Enabled == nil {
		return def
	}
	return *t.Enabled
}

// AdmissionEnabled is evaluation.admission.enabled (default true).
func (s *MutatingPolicySpec) AdmissionEnabled() bool {
	return s.Evaluation == nil || enabled(s.Evaluation.Admission, true)
}

// BackgroundEnabled is evaluation.background.enabled (default true).
func (s *MutatingPolicySpec) BackgroundEnabled() bool {
	return s.Evaluation == nil || enabled(s.Evaluation.Background, true)
}

// MutateExistingEnabled is evaluation.mutateExisting.enabled (default false).
func (s *MutatingPolicySpec) MutateExistingEnabled() bool {
	return s.Evaluation != nil && enabled(s.Evaluation.MutateExisting, false)
}

// UseServerSideApply is evaluation.useServerSideApply: apply
// configurations may set atomic lists, maps and structs.
func (s *MutatingPolicySpec) UseServerSideApply() bool {
	return s.Evaluation != nil && s.Evaluation.UseServerSideApply
}

// EvaluationMode returns Kubernetes (default) or JSON.
func (s *MutatingPolicySpec) EvaluationMode() string {
	if s.Evaluation == nil || s.Evaluation.Mode == "" {
		return kyvernoapi.EvaluationModeKubernetes
	}
	return s.Evaluation.Mode
}

// GetFailurePolicy returns failurePolicy, defaulting to Fail.
func (s *MutatingPolicySpec) GetFailurePolicy() admissionregistrationv1.FailurePolicyType {
	if s.FailurePolicy == nil {
		return admissionregistrationv1.Fail
	}
	return *s.FailurePolicy
}

// GetReinvocationPolicy returns reinvocationPolicy, defaulting to Never.
func (s *MutatingPolicySpec) GetReinvocationPolicy() admissionregistrationv1.ReinvocationPolicyType {
	if s.ReinvocationPolicy == "" {
		return admissionregistrationv1.NeverReinvocationPolicy
	}
	return s.ReinvocationPolicy
}

// IsMutateExisting says whether the policy mutates existing resources
// (targetMatchConstraints or evaluation.mutateExisting) rather than (only)
// the admitted object.
func (s *MutatingPolicySpec) IsMutateExisting() bool {
	return s.TargetMatchConstraints != nil || s.MutateExistingEnabled()
}
