// Package kyvernoapi holds what the policies.kyverno.io policy kinds share:
// the API group, its served versions, the kind names, and the spec types
// common to those kinds (evaluation, webhook and autogen configuration).
package kyvernoapi

import "strings"

// Group is the API group of Kyverno's CEL policy kinds.
const Group = "policies.kyverno.io"

// Versions are the served versions of policies.kyverno.io; they share one schema.
var Versions = map[string]bool{"v1alpha1": true, "v1beta1": true, "v1": true}

// VersionsText lists Versions for messages.
const VersionsText = "v1alpha1, v1beta1, v1"

// Kinds.
const (
	KindValidatingPolicy           = "ValidatingPolicy"
	KindNamespacedValidatingPolicy = "NamespacedValidatingPolicy"
	KindPolicyException            = "PolicyException"
	KindMutatingPolicy             = "MutatingPolicy"
	KindNamespacedMutatingPolicy   = "NamespacedMutatingPolicy"
	// KindImageValidatingPolicy and KindNamespacedImageValidatingPolicy
	// verify image signatures and attestations (engine/ivpol).
	KindImageValidatingPolicy           = "ImageValidatingPolicy"
	KindNamespacedImageValidatingPolicy = "NamespacedImageValidatingPolicy"
)

// IsNamespacedKind says whether a policy kind is the namespaced flavour of
// a Kyverno policy kind (NamespacedValidatingPolicy, ...): its policies
// act only in their namespace, and its CEL environment is confined to it.
func IsNamespacedKind(kind string) bool { return strings.HasPrefix(kind, "Namespaced") }

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
	// EvaluationModeEnvoy and EvaluationModeHTTP are the modes of the
	// Kyverno Authz Server's authorization policies: they evaluate Envoy
	// external-authorization CheckRequests and the server's HTTP
	// CheckRequests, not admission requests.
	EvaluationModeEnvoy = "Envoy"
	EvaluationModeHTTP  = "HTTP"
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

// ModeOf returns the evaluation mode, Kubernetes by default.
func (e *EvaluationConfiguration) ModeOf() string {
	if e == nil || e.Mode == "" {
		return EvaluationModeKubernetes
	}
	return e.Mode
}

// AdmissionEnabled is admission.enabled (default true).
func (e *EvaluationConfiguration) AdmissionEnabled() bool {
	if e == nil || e.Admission == nil || e.Admission.Enabled == nil {
		return true
	}
	return *e.Admission.Enabled
}

// BackgroundEnabled is background.enabled (default true).
func (e *EvaluationConfiguration) BackgroundEnabled() bool {
	if e == nil || e.Background == nil || e.Background.Enabled == nil {
		return true
	}
	return *e.Background.Enabled
}
