package psa

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/pod-security-admission/api"
)

// Use is a level and version of a namespace's policy with the modes that
// use it.
type Use struct {
	Level   api.Level
	Version api.Version
	// Modes are enforce, audit and warn, in that order.
	Modes []string
}

func uses(p api.Policy, enforce bool) []Use {
	gs := groups(p, enforce)
	if len(gs) == 0 {
		return nil
	}
	out := make([]Use, len(gs))
	for i, g := range gs {
		out[i] = Use{Level: g.lv.Level, Version: g.lv.Version, Modes: g.modes}
	}
	return out
}

// ExemptNamespace says whether the configuration exempts a namespace.
func (c *Config) ExemptNamespace(name string) bool { return c.exemptNamespace(name) }

// DefaultUses returns the non-privileged levels and versions of the
// configuration's defaults (the policy of a namespace without Pod Security
// labels), in mode order.
func (c *Config) DefaultUses() []Use { return uses(c.defaults, true) }

// NamespaceUses returns the non-privileged levels and versions of the
// policy of a namespace with these labels — api.PolicyToEvaluate with the
// configuration's defaults, invalid labels read as upstream reads them
// (an invalid enforce level is restricted) — in mode order; none for an
// exempt namespace.
func (c *Config) NamespaceUses(name string, labels map[string]string) []Use {
	if c.exemptNamespace(name) {
		return nil
	}
	p, _ := api.PolicyToEvaluate(labels, c.defaults)
	return uses(p, true)
}

// applies returns the levels and versions at which Pod Security would
// check a request, with the modes that use them, without checking it:
// none when it does not handle the request (another operation or
// resource, an ignored subresource, a ReplicationController without a
// template), when an exemption applies
// (namespace, user, runtime class), or when every mode that applies is
// privileged. Enforce applies to Pods only. A Pod or template that cannot
// be decoded has the levels (its results are errors) unless the namespace
// or user is exempt. The update rule (an update that changes no field the
// checks read is skipped) is not applied.
//
// For a Namespace it returns the levels its labels (with the defaults)
// put in effect for the Pods and workload resources created in it: Pod
// Security checks a Namespace's labels, not its content. req.namespace of
// a Namespace request is its name (kube-apiserver sets it so).
func (c *Config) applies(req *input) []Use {
	if req.Operation != "CREATE" && req.Operation != "UPDATE" {
		return nil
	}
	switch {
	case req.gr == namespacesResource:
		if req.SubResource != "" {
			return nil
		}
		var namespace corev1.Namespace
		if err := decode(req.Object, &namespace); err != nil {
			return nil
		}
		return c.NamespaceUses(req.namespace, namespace.Labels)
	case req.gr == podsResource:
		if ignoredPodSubresources[req.SubResource] {
			return nil
		}
		if c.exemptNamespace(req.namespace) || c.exemptUser(req.UserInfo.Username) {
			return nil
		}
		var pod corev1.Pod
		if err := decodePod(req.Object, &pod); err == nil && c.exemptRuntimeClass(pod.Spec.RuntimeClassName) {
			return nil
		}
		p, _ := api.PolicyToEvaluate(req.nsLabels, c.defaults)
		return uses(p, true)
	case podSpecResources[req.gr]:
		if req.SubResource != "" || c.exemptNamespace(req.namespace) || c.exemptUser(req.UserInfo.Username) {
			return nil
		}
		meta, spec, err := extractPodSpec(req.gr, req.Object)
		if err == nil && (meta == nil && spec == nil || c.exemptRuntimeClass(spec.RuntimeClassName)) {
			return nil
		}
		p, _ := api.PolicyToEvaluate(req.nsLabels, c.defaults)
		return uses(p, false)
	}
	return nil
}
