package kubesource

import (
	"encoding/json"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/arbiter-pdp/arbiter/engine/autogen"
	"github.com/arbiter-pdp/arbiter/engine/ivpol"
	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/mpol"
	vpolengine "github.com/arbiter-pdp/arbiter/engine/vpol"
	"github.com/arbiter-pdp/arbiter/store"
)

// statusKinds are the policy kinds whose status the primary writes and
// whose matchConstraints make the managed webhook configurations: the
// policies.kyverno.io kinds Arbiter evaluates at admission.
var statusKinds = []string{
	kyvernoapi.KindValidatingPolicy, kyvernoapi.KindNamespacedValidatingPolicy,
	kyvernoapi.KindMutatingPolicy, kyvernoapi.KindNamespacedMutatingPolicy,
	kyvernoapi.KindImageValidatingPolicy, kyvernoapi.KindNamespacedImageValidatingPolicy,
}

func isStatusKind(group, kind string) bool {
	if group != kyvernoapi.Group {
		return false
	}
	for _, k := range statusKinds {
		if k == kind {
			return true
		}
	}
	return false
}

// policyInfo is what the webhook configurations and the status read of a
// ValidatingPolicy, NamespacedValidatingPolicy, MutatingPolicy,
// NamespacedMutatingPolicy, ImageValidatingPolicy or
// NamespacedImageValidatingPolicy.
type policyInfo struct {
	key       store.Key
	kind      string
	namespace string
	name      string
	// mutating: a MutatingPolicy or NamespacedMutatingPolicy (the
	// MutatingWebhookConfiguration), else the ValidatingWebhookConfiguration.
	mutating bool
	// digest: an ImageValidatingPolicy that pins image digests
	// (validationConfigurations.mutateDigest, default true), so it is in
	// the MutatingWebhookConfiguration too, as Kyverno's ivpol.mutate
	// webhooks.
	digest     bool
	admission  bool // spec.evaluation.admission.enabled
	background bool // spec.evaluation.background.enabled
	generated  bool // status.generated: Kyverno leaves the policy to the VAP/MAP it generated
	match      *admissionregistrationv1.MatchResources
	conditions []admissionregistrationv1.MatchCondition
	failure    admissionregistrationv1.FailurePolicyType
	timeout    *int32
	// reinvocation is a MutatingPolicy's spec.reinvocationPolicy.
	reinvocation admissionregistrationv1.ReinvocationPolicyType
	// variants are the autogen configurations, in Kyverno's (sorted) order.
	variants []variantInfo
}

// variantInfo is one autogen configuration of a policy.
type variantInfo struct {
	name       string
	targets    []autogen.Target
	match      *admissionregistrationv1.MatchResources
	conditions []admissionregistrationv1.MatchCondition
	// spec is the variant's whole spec, as status.autogen.configs[name].spec.
	spec map[string]any
}

// backgroundOnly is Kyverno's test for leaving WebhookConfigured out of
// the status: the policy is not evaluated at admission.
func (p *policyInfo) backgroundOnly() bool {
	if p.mutating {
		return !p.admission
	}
	return !p.admission && p.background
}

// inWebhook says whether the policy gets webhook rules (Kyverno's
// selection: admission enabled and not generated).
func (p *policyInfo) inWebhook() bool { return p.admission && !p.generated }

// decodePolicy reads a policy of a status kind from its content (JSON-shaped).
func decodePolicy(key store.Key, content map[string]any) (*policyInfo, error) {
	raw, err := json.Marshal(content)
	if err != nil {
		return nil, err
	}
	p := &policyInfo{key: key, kind: key.Kind, namespace: key.Namespace, name: key.Name}
	switch key.Kind {
	case kyvernoapi.KindValidatingPolicy, kyvernoapi.KindNamespacedValidatingPolicy:
		var vp kyvernoapi.ValidatingPolicy
		if err := json.Unmarshal(raw, &vp); err != nil {
			return nil, fmt.Errorf("decoding the %s: %w", key.Kind, err)
		}
		spec := &vp.Spec
		p.admission, p.background = spec.AdmissionEnabled(), spec.BackgroundEnabled()
		p.generated = vp.Status != nil && vp.Status.Generated
		p.match, p.conditions, p.failure = spec.MatchConstraints, spec.MatchConditions, spec.GetFailurePolicy()
		if spec.WebhookConfiguration != nil {
			p.timeout = spec.WebhookConfiguration.TimeoutSeconds
		}
		configs, specs, err := vpolengine.AutogenSpecs(spec)
		if err != nil {
			return nil, fmt.Errorf("the autogen configurations of the %s: %w", key.Kind, err)
		}
		for i, cfg := range configs {
			m, err := toMap(specs[i])
			if err != nil {
				return nil, err
			}
			p.variants = append(p.variants, variantInfo{name: cfg.Name, targets: cfg.Targets(), match: cfg.Match, conditions: specs[i].MatchConditions, spec: m})
		}
	case kyvernoapi.KindMutatingPolicy, kyvernoapi.KindNamespacedMutatingPolicy:
		var mp mpol.MutatingPolicy
		if err := json.Unmarshal(raw, &mp); err != nil {
			return nil, fmt.Errorf("decoding the %s: %w", key.Kind, err)
		}
		spec := &mp.Spec
		p.mutating = true
		p.admission = spec.AdmissionEnabled()
		p.background = spec.Evaluation == nil || spec.Evaluation.Background == nil || spec.Evaluation.Background.Enabled == nil || *spec.Evaluation.Background.Enabled
		p.generated = mp.Status != nil && mp.Status.Generated
		p.match, p.conditions = spec.MatchConstraints, spec.MatchConditions
		p.failure = admissionregistrationv1.Fail
		if spec.FailurePolicy != nil {
			p.failure = *spec.FailurePolicy
		}
		if spec.WebhookConfiguration != nil {
			p.timeout = spec.WebhookConfiguration.TimeoutSeconds
		}
		p.reinvocation = spec.ReinvocationPolicy
		for _, v := range mpol.AutogenVariants(spec) {
			clone := *spec
			clone.MatchConstraints = v.Config.Match
			clone.MatchConditions = v.MatchConditions
			clone.Mutations = v.Mutations
			m, err := toMap(&clone)
			if err != nil {
				return nil, err
			}
			p.variants = append(p.variants, variantInfo{name: v.Config.Name, targets: v.Config.Targets(), match: v.Config.Match, conditions: v.MatchConditions, spec: m})
		}
	case kyvernoapi.KindImageValidatingPolicy, kyvernoapi.KindNamespacedImageValidatingPolicy:
		var ip kyvernoapi.ImageValidatingPolicy
		if err := json.Unmarshal(raw, &ip); err != nil {
			return nil, fmt.Errorf("decoding the %s: %w", key.Kind, err)
		}
		spec := &ip.Spec
		p.admission, p.background = spec.AdmissionEnabled(), spec.BackgroundEnabled()
		p.digest = spec.MutateDigest()
		p.match, p.conditions, p.failure = spec.MatchConstraints, spec.MatchConditions, spec.GetFailurePolicy()
		if spec.WebhookConfiguration != nil {
			p.timeout = spec.WebhookConfiguration.TimeoutSeconds
		}
		configs, specs, err := ivpol.AutogenSpecs(spec)
		if err != nil {
			return nil, fmt.Errorf("the autogen configurations of the %s: %w", key.Kind, err)
		}
		for i, cfg := range configs {
			m, err := toMap(specs[i])
			if err != nil {
				return nil, err
			}
			p.variants = append(p.variants, variantInfo{name: cfg.Name, targets: cfg.Targets(), match: cfg.Match, conditions: specs[i].MatchConditions, spec: m})
		}
	default:
		return nil, fmt.Errorf("%s is not a policy kind with a status", key.Kind)
	}
	return p, nil
}

func toMap(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}
