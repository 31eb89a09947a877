// Package gpol is the GeneratingPolicy kind: policies.kyverno.io
// GeneratingPolicy and NamespacedGeneratingPolicy, Kyverno's CEL
// generation policies (pkg/cel/policies/gpol in Kyverno 1.19). A
// GeneratingPolicy creates resources when a trigger resource is admitted:
// its generate expressions call generator.Apply(namespace, objects).
//
// Arbiter evaluates them offline only (`arbiter test`, `arbiter apply`), as
// Kyverno's CLI does: the objects a trigger would generate are computed
// and reported, nothing is created. A server refuses them (creating and
// synchronizing downstream resources needs write access to the cluster).
package gpol

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
)

// Kinds of the package.
const (
	KindGeneratingPolicy           = "GeneratingPolicy"
	KindNamespacedGeneratingPolicy = "NamespacedGeneratingPolicy"
)

// IsKind says whether kind is GeneratingPolicy or NamespacedGeneratingPolicy.
func IsKind(kind string) bool {
	return kind == KindGeneratingPolicy || kind == KindNamespacedGeneratingPolicy
}

// GeneratingPolicy is policies.kyverno.io GeneratingPolicy (v1alpha1,
// v1beta1, v1) and NamespacedGeneratingPolicy (v1beta1, v1): one schema.
type GeneratingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GeneratingPolicySpec `json:"spec"`
	// Status is accepted and ignored.
	Status map[string]any `json:"status,omitempty"`
}

// GeneratingPolicySpec is the spec of a GeneratingPolicy.
type GeneratingPolicySpec struct {
	MatchConstraints     *admissionregistrationv1.MatchResources   `json:"matchConstraints,omitempty"`
	MatchConditions      []admissionregistrationv1.MatchCondition  `json:"matchConditions,omitempty"`
	Variables            []admissionregistrationv1.Variable        `json:"variables,omitempty"`
	Evaluation           *EvaluationConfiguration                  `json:"evaluation,omitempty"`
	WebhookConfiguration *kyvernoapi.WebhookConfiguration          `json:"webhookConfiguration,omitempty"`
	Generation           []Generation                              `json:"generate"`
	AuditAnnotations     []admissionregistrationv1.AuditAnnotation `json:"auditAnnotations,omitempty"`
	UseServerSideApply   bool                                      `json:"useServerSideApply,omitempty"`
}

// EvaluationConfiguration is spec.evaluation of a GeneratingPolicy. Only
// admission.enabled bears on what Arbiter evaluates; the others configure
// Kyverno's background controller (generate existing, synchronization).
type EvaluationConfiguration struct {
	Admission                      *kyvernoapi.EnabledToggle `json:"admission,omitempty"`
	GenerateExisting               *kyvernoapi.EnabledToggle `json:"generateExisting,omitempty"`
	Synchronize                    *kyvernoapi.EnabledToggle `json:"synchronize,omitempty"`
	OrphanDownstreamOnPolicyDelete *kyvernoapi.EnabledToggle `json:"orphanDownstreamOnPolicyDelete,omitempty"`
	SkipBackgroundRequests         *bool                     `json:"skipBackgroundRequests,omitempty"`
}

// Generation is one spec.generate entry: an expression (which calls
// generator.Apply) or a YAML template.
type Generation struct {
	Expression string              `json:"expression,omitempty"`
	Template   *GenerationTemplate `json:"template,omitempty"`
}

// GenerationTemplate is spec.generate[].template: YAML documents, with
// `(( expr ))` CEL placeholders when Interpolate is "cel" (template.go).
type GenerationTemplate struct {
	Value       string `json:"value"`
	Interpolate string `json:"interpolate,omitempty"`
}

// AdmissionEnabled is evaluation.admission.enabled (default true).
func (s *GeneratingPolicySpec) AdmissionEnabled() bool {
	e := s.Evaluation
	if e == nil || e.Admission == nil || e.Admission.Enabled == nil {
		return true
	}
	return *e.Admission.Enabled
}
