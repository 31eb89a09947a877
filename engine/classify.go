package engine

import (
	"github.com/arbiter-pdp/arbiter/engine/authz"
	"github.com/arbiter-pdp/arbiter/engine/gpol"
	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/mapol"
	"github.com/arbiter-pdp/arbiter/engine/psa"
	"github.com/arbiter-pdp/arbiter/engine/vap"
)

// Class says what role an object plays.
type Class int

// Object classes.
const (
	// ClassResource is an object to evaluate.
	ClassResource Class = iota
	// ClassPolicy is a ValidatingPolicy or NamespacedValidatingPolicy in
	// Kubernetes or JSON mode (engine/vpol).
	ClassPolicy
	// ClassException is a policies.kyverno.io PolicyException.
	ClassException
	// ClassNamespace is a v1 Namespace: the namespaceObject of requests in it.
	ClassNamespace
	// ClassUnsupported is a policy kind Arbiter does not evaluate.
	ClassUnsupported
	// ClassVAP is a Kubernetes ValidatingAdmissionPolicy.
	ClassVAP
	// ClassVAPBinding is a ValidatingAdmissionPolicyBinding.
	ClassVAPBinding
	// ClassPodSecurityConfiguration is the Pod Security Admission
	// configuration (pod-security.admission.config.k8s.io PodSecurityConfiguration).
	ClassPodSecurityConfiguration
	// ClassAuthzPolicy is an authorization policy of the Kyverno Authz
	// Server: a ValidatingPolicy whose spec.evaluation.mode is Envoy or
	// HTTP (engine/authz). It evaluates Envoy and HTTP CheckRequests, not
	// admission requests.
	ClassAuthzPolicy
	// ClassMutatingPolicy is a MutatingPolicy or NamespacedMutatingPolicy.
	ClassMutatingPolicy
	// ClassMAP is a Kubernetes MutatingAdmissionPolicy.
	ClassMAP
	// ClassMAPBinding is a MutatingAdmissionPolicyBinding.
	ClassMAPBinding
	// ClassImagePolicy is an ImageValidatingPolicy or
	// NamespacedImageValidatingPolicy (engine/ivpol).
	ClassImagePolicy
	// ClassGlobalContextEntry is a Kyverno GlobalContextEntry (kyverno.io):
	// the data globalContext.Get serves. It is stored and consulted
	// (package clusterdata), not compiled by the engine.
	ClassGlobalContextEntry
	// ClassDeletingPolicy is a DeletingPolicy or NamespacedDeletingPolicy
	// (engine/dpol): compiled and listed, never evaluated at admission; the
	// Kubernetes source runs it on its schedule.
	ClassDeletingPolicy
	// ClassGeneratingPolicy is a GeneratingPolicy or
	// NamespacedGeneratingPolicy (engine/gpol): evaluated offline only
	// (PolicySet.Generate), refused by a server (Options.Generating).
	ClassGeneratingPolicy
)

// Kyverno's GlobalContextEntry kind and group.
const (
	globalContextGroup     = "kyverno.io"
	kindGlobalContextEntry = "GlobalContextEntry"
)

// unsupportedGroups hold policy kinds Arbiter refuses rather than evaluating
// them as resources.
var unsupportedGroups = map[string]bool{
	"kyverno.io":     true,
	"cli.kyverno.io": true,
}

// Classify says what role an object plays. Kinds of policies.kyverno.io that
// Arbiter does not evaluate, and kyverno.io policies, are ClassUnsupported.
func Classify(o *manifest.Object) Class {
	group := o.Group()
	switch {
	case group == kyvernoapi.Group:
		switch o.Kind {
		case kyvernoapi.KindValidatingPolicy, kyvernoapi.KindNamespacedValidatingPolicy:
			if authz.IsAuthorization(o) {
				return ClassAuthzPolicy
			}
			return ClassPolicy
		case kyvernoapi.KindMutatingPolicy, kyvernoapi.KindNamespacedMutatingPolicy:
			return ClassMutatingPolicy
		case kyvernoapi.KindPolicyException:
			return ClassException
		case kyvernoapi.KindDeletingPolicy, kyvernoapi.KindNamespacedDeletingPolicy:
			return ClassDeletingPolicy
		case kyvernoapi.KindImageValidatingPolicy, kyvernoapi.KindNamespacedImageValidatingPolicy:
			return ClassImagePolicy
		case gpol.KindGeneratingPolicy, gpol.KindNamespacedGeneratingPolicy:
			return ClassGeneratingPolicy
		}
		return ClassUnsupported
	case group == globalContextGroup && o.Kind == kindGlobalContextEntry:
		return ClassGlobalContextEntry
	case unsupportedGroups[group]:
		return ClassUnsupported
	case group == "" && o.Kind == "Namespace" && o.APIVersion == "v1":
		return ClassNamespace
	case group == psa.Group:
		if o.Kind == psa.KindConfig {
			return ClassPodSecurityConfiguration
		}
		return ClassUnsupported
	}
	if isPolicy, isBinding := vap.Classify(o); isPolicy {
		return ClassVAP
	} else if isBinding {
		return ClassVAPBinding
	}
	if isPolicy, isBinding := mapol.Classify(o); isPolicy {
		return ClassMAP
	} else if isBinding {
		return ClassMAPBinding
	}
	return ClassResource
}

// ParamObjects returns which of objs are params of a
// ValidatingAdmissionPolicy or MutatingAdmissionPolicy among objs: objects
// (not policies, exceptions or Namespaces) whose apiVersion and kind are
// some policy's paramKind. Params are stored and consulted, not evaluated
// as resources.
func ParamObjects(objs []*manifest.Object) map[*manifest.Object]bool {
	kinds := ParamKinds(objs)
	if len(kinds) == 0 {
		return nil
	}
	out := map[*manifest.Object]bool{}
	for _, o := range objs {
		if Classify(o) == ClassResource && kinds[[2]string{o.APIVersion, o.Kind}] {
			out[o] = true
		}
	}
	return out
}

// ParamKinds returns the param kinds ({apiVersion, kind}) of the
// ValidatingAdmissionPolicies and MutatingAdmissionPolicies among objs.
func ParamKinds(objs []*manifest.Object) map[[2]string]bool {
	var kinds map[[2]string]bool
	for _, o := range objs {
		var apiVersion, kind string
		var ok bool
		switch Classify(o) {
		case ClassVAP:
			apiVersion, kind, ok = vap.ParamKindOf(o)
		case ClassMAP:
			apiVersion, kind, ok = mapol.ParamKindOf(o)
		}
		if ok {
			if kinds == nil {
				kinds = map[[2]string]bool{}
			}
			kinds[[2]string{apiVersion, kind}] = true
		}
	}
	return kinds
}
