// Package dpol is the DeletingPolicy kind: policies.kyverno.io
// DeletingPolicy and NamespacedDeletingPolicy, Kyverno's CEL cleanup
// policies (pkg/cel/policies/dpol in Kyverno 1.19). A DeletingPolicy is not
// evaluated at admission: on its cron schedule, the objects its
// matchConstraints name are listed and each one its conditions hold for
// (and no PolicyException exempts) is deleted. This package loads,
// validates and compiles the policies, computes their schedule, and
// decides for one candidate object whether the policy deletes it
// (Policy.Evaluate); listing, deleting and recording the runs is the
// Kubernetes source's (kubesource/cleanup.go).
package dpol

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeletingPolicy is policies.kyverno.io DeletingPolicy (v1alpha1, v1beta1,
// v1) and NamespacedDeletingPolicy (v1beta1, v1): one schema.
type DeletingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              DeletingPolicySpec `json:"spec"`
	// Status is accepted; the schedule reads lastExecutionTime from the
	// cluster's copy of the policy (the store does not keep the status).
	Status *DeletingPolicyStatus `json:"status,omitempty"`
}

// DeletingPolicySpec is the spec of a DeletingPolicy.
type DeletingPolicySpec struct {
	// MatchConstraints selects the candidates: their resources
	// (resourceRules, excludeResourceRules; operations are ignored),
	// namespaceSelector and objectSelector. Required.
	MatchConstraints *admissionregistrationv1.MatchResources `json:"matchConstraints,omitempty"`
	// Conditions must all be true for a candidate to be deleted.
	Conditions []admissionregistrationv1.MatchCondition `json:"conditions,omitempty"`
	// Variables are visible to the conditions as variables.NAME.
	Variables []admissionregistrationv1.Variable `json:"variables,omitempty"`
	// Schedule is a cron expression. Required.
	Schedule string `json:"schedule"`
	// DeletionPropagationPolicy is Foreground, Background or Orphan (nil:
	// the API server's default for the kind).
	DeletionPropagationPolicy *metav1.DeletionPropagation `json:"deletionPropagationPolicy,omitempty"`
}

// DeletingPolicyStatus is the status of a DeletingPolicy.
type DeletingPolicyStatus struct {
	ConditionStatus   map[string]any `json:"conditionStatus,omitempty"`
	LastExecutionTime *metav1.Time   `json:"lastExecutionTime,omitempty"`
}
