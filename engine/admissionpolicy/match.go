package admissionpolicy

import (
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/admission"
)

// Matcher is a compiled MatchResources, evaluated as kube-apiserver's
// policy matcher (pkg/admission/plugin/policy/matching) does. It is
// immutable.
type Matcher struct {
	namespaceSelector labels.Selector // nil: everything
	objectSelector    labels.Selector // nil: everything
	rules             []admissionregistrationv1.NamedRuleWithOperations
	exclude           []admissionregistrationv1.NamedRuleWithOperations
	equivalent        bool
}

// CompileMatch compiles validated, defaulted match resources.
func CompileMatch(m *admissionregistrationv1.MatchResources) *Matcher {
	c := &Matcher{rules: m.ResourceRules, exclude: m.ExcludeResourceRules}
	c.equivalent = m.MatchPolicy != nil && *m.MatchPolicy == admissionregistrationv1.Equivalent
	c.namespaceSelector = selector(m.NamespaceSelector)
	c.objectSelector = selector(m.ObjectSelector)
	return c
}

func selector(s *metav1.LabelSelector) labels.Selector {
	if s == nil {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil || sel.Empty() {
		return nil // validated before: cannot fail
	}
	return sel
}

var namespaceResource = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// attributes is what matching reads of a request.
type attributes interface {
	operation() string
	resource() schema.GroupVersionResource
	subresource() string
	namespace() string
	name() string
}

type overridden struct {
	attributes
	gvr schema.GroupVersionResource
}

func (o overridden) resource() schema.GroupVersionResource { return o.gvr }

// Matches reports whether the request matches and, when it does, the
// resource and kind it matched as (the request's own, or an equivalent one
// under matchPolicy Equivalent). The object selector reads the request's
// object as it is now (Request.Object) and its oldObject.
func (m *Matcher) Matches(rq *Request) (bool, schema.GroupVersionResource, schema.GroupVersionKind) {
	if m.namespaceSelector != nil && !rq.matchNamespace(m.namespaceSelector) {
		return false, schema.GroupVersionResource{}, schema.GroupVersionKind{}
	}
	if m.objectSelector != nil && !labelsMatch(m.objectSelector, rq.object) && !labelsMatch(m.objectSelector, rq.req.OldObject) {
		return false, schema.GroupVersionResource{}, schema.GroupVersionKind{}
	}
	if ok, _, _ := m.matchRules(m.exclude, rq); ok {
		return false, schema.GroupVersionResource{}, schema.GroupVersionKind{}
	}
	if len(m.rules) == 0 {
		return true, rq.gvr, rq.gvk
	}
	return m.matchRules(m.rules, rq)
}

func (m *Matcher) matchRules(rules []admissionregistrationv1.NamedRuleWithOperations, rq *Request) (bool, schema.GroupVersionResource, schema.GroupVersionKind) {
	for i := range rules {
		if !ruleMatches(&rules[i].RuleWithOperations, rq) {
			continue
		}
		if nameMatches(rules[i].ResourceNames, rq.req.Name) {
			return true, rq.gvr, rq.gvk
		}
	}
	if !m.equivalent {
		return false, schema.GroupVersionResource{}, schema.GroupVersionKind{}
	}
	equivalents := equivalentResources(rq.gvr, rq.sub)
	for i := range rules {
		for _, eq := range equivalents {
			if eq.gvr == rq.gvr {
				continue
			}
			if !ruleMatches(&rules[i].RuleWithOperations, overridden{rq, eq.gvr}) {
				continue
			}
			if nameMatches(rules[i].ResourceNames, rq.req.Name) {
				return true, eq.gvr, eq.gvk
			}
		}
	}
	return false, schema.GroupVersionResource{}, schema.GroupVersionKind{}
}

func nameMatches(names []string, name string) bool {
	if len(names) == 0 {
		return true
	}
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

func exactOrWildcard(items []string, requested string) bool {
	for _, item := range items {
		if item == "*" || item == requested {
			return true
		}
	}
	return false
}

// ruleMatches is webhook/predicates/rules Matcher.Matches.
func ruleMatches(r *admissionregistrationv1.RuleWithOperations, a attributes) bool {
	gvr := a.resource()
	if r.Scope != nil && *r.Scope != admissionregistrationv1.AllScopes {
		switch *r.Scope {
		case admissionregistrationv1.NamespacedScope:
			if gvr == namespaceResource || a.namespace() == "" {
				return false
			}
		case admissionregistrationv1.ClusterScope:
			if gvr != namespaceResource && a.namespace() != "" {
				return false
			}
		default:
			return false
		}
	}
	opOK := false
	for _, op := range r.Operations {
		if op == admissionregistrationv1.OperationAll || string(op) == a.operation() {
			opOK = true
			break
		}
	}
	if !opOK || !exactOrWildcard(r.APIGroups, gvr.Group) || !exactOrWildcard(r.APIVersions, gvr.Version) {
		return false
	}
	for _, res := range r.Resources {
		main, sub, _ := strings.Cut(res, "/")
		if (main == "*" || main == gvr.Resource) && (sub == "*" || sub == a.subresource()) {
			return true
		}
	}
	return false
}

func labelsMatch(sel labels.Selector, obj map[string]any) bool {
	if obj == nil {
		return false
	}
	return sel.Matches(admission.ObjectLabels(obj))
}

// matchNamespace is the namespace selector check: cluster-scoped requests
// (other than on Namespaces) match; a Namespace created or updated is
// matched by its own labels; otherwise the Namespace's labels.
func (rq *Request) matchNamespace(sel labels.Selector) bool {
	r := rq.req
	if r.Namespace == "" && rq.gvr.Resource != "namespaces" {
		return true
	}
	if rq.gvr.Resource == "namespaces" && r.SubResource == "" && (r.Operation == admission.OpCreate || r.Operation == admission.OpUpdate) {
		return sel.Matches(admission.ObjectLabels(rq.object))
	}
	return sel.Matches(admission.ObjectLabels(rq.namespaceContent()))
}

// equivalent is a resource served under another group or version, with its kind.
type equivalent struct {
	gvr schema.GroupVersionResource
	gvk schema.GroupVersionKind
}

// equivalenceTable lists resources kube-apiserver serves under several
// group-versions (its EquivalentResourceMapper): each line is one set of
// equivalent resources. Custom resources with several versions, and
// resources not listed, have no equivalents in Arbiter.
var equivalenceTable = [][]equivalent{
	eqSet("deployments", "Deployment", "apps/v1", "apps/v1beta1", "apps/v1beta2", "extensions/v1beta1"),
	eqSet("daemonsets", "DaemonSet", "apps/v1", "apps/v1beta2", "extensions/v1beta1"),
	eqSet("replicasets", "ReplicaSet", "apps/v1", "apps/v1beta2", "extensions/v1beta1"),
	eqSet("statefulsets", "StatefulSet", "apps/v1", "apps/v1beta1", "apps/v1beta2"),
	eqSet("ingresses", "Ingress", "networking.k8s.io/v1", "networking.k8s.io/v1beta1", "extensions/v1beta1"),
	eqSet("networkpolicies", "NetworkPolicy", "networking.k8s.io/v1", "extensions/v1beta1"),
	eqSet("cronjobs", "CronJob", "batch/v1", "batch/v1beta1"),
	eqSet("poddisruptionbudgets", "PodDisruptionBudget", "policy/v1", "policy/v1beta1"),
	eqSet("horizontalpodautoscalers", "HorizontalPodAutoscaler", "autoscaling/v2", "autoscaling/v1", "autoscaling/v2beta2", "autoscaling/v2beta1"),
	eqSet("events", "Event", "v1", "events.k8s.io/v1", "events.k8s.io/v1beta1"),
	eqSet("endpointslices", "EndpointSlice", "discovery.k8s.io/v1", "discovery.k8s.io/v1beta1"),
	eqSet("validatingwebhookconfigurations", "ValidatingWebhookConfiguration", "admissionregistration.k8s.io/v1", "admissionregistration.k8s.io/v1beta1"),
	eqSet("mutatingwebhookconfigurations", "MutatingWebhookConfiguration", "admissionregistration.k8s.io/v1", "admissionregistration.k8s.io/v1beta1"),
	eqSet("customresourcedefinitions", "CustomResourceDefinition", "apiextensions.k8s.io/v1", "apiextensions.k8s.io/v1beta1"),
	eqSet("priorityclasses", "PriorityClass", "scheduling.k8s.io/v1", "scheduling.k8s.io/v1beta1"),
	eqSet("storageclasses", "StorageClass", "storage.k8s.io/v1", "storage.k8s.io/v1beta1"),
	eqSet("csidrivers", "CSIDriver", "storage.k8s.io/v1", "storage.k8s.io/v1beta1"),
	eqSet("runtimeclasses", "RuntimeClass", "node.k8s.io/v1", "node.k8s.io/v1beta1"),
	eqSet("leases", "Lease", "coordination.k8s.io/v1", "coordination.k8s.io/v1beta1"),
	eqSet("roles", "Role", "rbac.authorization.k8s.io/v1", "rbac.authorization.k8s.io/v1beta1"),
	eqSet("rolebindings", "RoleBinding", "rbac.authorization.k8s.io/v1", "rbac.authorization.k8s.io/v1beta1"),
	eqSet("clusterroles", "ClusterRole", "rbac.authorization.k8s.io/v1", "rbac.authorization.k8s.io/v1beta1"),
	eqSet("clusterrolebindings", "ClusterRoleBinding", "rbac.authorization.k8s.io/v1", "rbac.authorization.k8s.io/v1beta1"),
	eqSet("flowschemas", "FlowSchema", "flowcontrol.apiserver.k8s.io/v1", "flowcontrol.apiserver.k8s.io/v1beta3"),
	eqSet("prioritylevelconfigurations", "PriorityLevelConfiguration", "flowcontrol.apiserver.k8s.io/v1", "flowcontrol.apiserver.k8s.io/v1beta3"),
}

func eqSet(resource, kind string, groupVersions ...string) []equivalent {
	out := make([]equivalent, len(groupVersions))
	for i, s := range groupVersions {
		gv, _ := schema.ParseGroupVersion(s)
		out[i] = equivalent{gvr: gv.WithResource(resource), gvk: gv.WithKind(kind)}
	}
	return out
}

// equivalentResources returns the resources equivalent to gvr, including
// gvr itself; none when the table does not know it. Subresources other
// than scale (whose kind differs per version) have the equivalents of
// their resource.
func equivalentResources(gvr schema.GroupVersionResource, sub string) []equivalent {
	if sub == "scale" {
		return nil
	}
	for _, set := range equivalenceTable {
		for _, e := range set {
			if e.gvr == gvr {
				return set
			}
		}
	}
	return nil
}

// EquivalentResources returns the table's resources equivalent to gvr,
// with their kinds (gvr itself included); nil when it has none.
func EquivalentResources(gvr schema.GroupVersionResource, subresource string) ([]schema.GroupVersionResource, []schema.GroupVersionKind) {
	eqs := equivalentResources(gvr, subresource)
	if eqs == nil {
		return nil, nil
	}
	rs := make([]schema.GroupVersionResource, len(eqs))
	ks := make([]schema.GroupVersionKind, len(eqs))
	for i, e := range eqs {
		rs[i], ks[i] = e.gvr, e.gvk
	}
	return rs, ks
}

// IndexNames returns the resource names (without subresource) the
// matcher's rules name, and whether one of them is "*".
func (m *Matcher) IndexNames() (names []string, wildcard bool) {
	for _, r := range m.rules {
		for _, res := range r.Resources {
			main, _, _ := strings.Cut(res, "/")
			if main == "*" {
				wildcard = true
			}
			names = append(names, main)
		}
	}
	return names, wildcard
}

// Resources returns group/version/resource ("version/resource" in the core
// group) of the matcher's resource rules, without duplicates.
func Resources(m *admissionregistrationv1.MatchResources) []string {
	if m == nil {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, r := range m.ResourceRules {
		for _, g := range r.APIGroups {
			for _, v := range r.APIVersions {
				for _, res := range r.Resources {
					key := g + "/" + v + "/" + res
					if g == "" {
						key = v + "/" + res
					}
					if !seen[key] {
						seen[key] = true
						out = append(out, key)
					}
				}
			}
		}
	}
	return out
}
