package engine

import (
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// matcher is a compiled matchConstraints (admissionregistration/v1
// MatchResources), evaluated as Kyverno's matcher does: namespaceSelector,
// objectSelector, excludeResourceRules, resourceRules (empty matches),
// resourceNames with the generateName fallback.
type matcher struct {
	namespaceSelector labels.Selector // nil: everything
	objectSelector    labels.Selector // nil: everything
	rules             []compiledRule
	exclude           []compiledRule
}

type compiledRule struct {
	operations []string
	groups     []string
	versions   []string
	resources  [][2]string // resource, subresource
	scope      admissionregistrationv1.ScopeType
	names      []string
}

func compileMatch(mr *admissionregistrationv1.MatchResources, field string) (*matcher, string, error) {
	m := &matcher{}
	var err error
	if m.namespaceSelector, err = compileSelector(mr.NamespaceSelector); err != nil {
		return nil, field + ".namespaceSelector", err
	}
	if m.objectSelector, err = compileSelector(mr.ObjectSelector); err != nil {
		return nil, field + ".objectSelector", err
	}
	for i, r := range mr.ResourceRules {
		m.rules = append(m.rules, compileRule(r))
		_ = i
	}
	for _, r := range mr.ExcludeResourceRules {
		m.exclude = append(m.exclude, compileRule(r))
	}
	return m, "", nil
}

func compileSelector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return nil, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return nil, err
	}
	if sel.Empty() {
		return nil, nil
	}
	return sel, nil
}

func compileRule(r admissionregistrationv1.NamedRuleWithOperations) compiledRule {
	c := compiledRule{
		groups:   r.APIGroups,
		versions: r.APIVersions,
		names:    r.ResourceNames,
	}
	for _, op := range r.Operations {
		c.operations = append(c.operations, string(op))
	}
	for _, res := range r.Resources {
		main, sub, _ := strings.Cut(res, "/")
		c.resources = append(c.resources, [2]string{main, sub})
	}
	if r.Scope != nil {
		c.scope = *r.Scope
	}
	return c
}

func exactOrWildcard(items []string, requested string) bool {
	for _, item := range items {
		if item == "*" || item == requested {
			return true
		}
	}
	return false
}

func (c *compiledRule) matches(rq *evalRequest) bool {
	r := rq.req
	isNamespaceResource := r.Resource.Group == "" && r.Resource.Version == "v1" && r.Resource.Resource == "namespaces"
	switch c.scope {
	case "", admissionregistrationv1.AllScopes:
	case admissionregistrationv1.NamespacedScope:
		if isNamespaceResource || r.Namespace == "" {
			return false
		}
	case admissionregistrationv1.ClusterScope:
		if !isNamespaceResource && r.Namespace != "" {
			return false
		}
	default:
		return false
	}
	if !exactOrWildcard(c.operations, r.Operation) {
		return false
	}
	if !exactOrWildcard(c.groups, r.Resource.Group) || !exactOrWildcard(c.versions, r.Resource.Version) {
		return false
	}
	for _, res := range c.resources {
		if (res[0] == "*" || res[0] == r.Resource.Resource) && (res[1] == "*" || res[1] == r.SubResource) {
			return true
		}
	}
	return false
}

func (c *compiledRule) matchesName(rq *evalRequest) bool {
	if len(c.names) == 0 {
		return true
	}
	name := rq.req.Name
	if name == "" {
		generateName := ""
		if md, ok := rq.req.Object["metadata"].(map[string]any); ok {
			generateName, _ = md["generateName"].(string)
		}
		if generateName == "" {
			return false
		}
		for _, n := range c.names {
			if strings.HasPrefix(generateName, n) {
				return true
			}
		}
		return false
	}
	for _, n := range c.names {
		if n == name {
			return true
		}
	}
	return false
}

func matchesRules(rules []compiledRule, rq *evalRequest) bool {
	for i := range rules {
		if rules[i].matches(rq) && rules[i].matchesName(rq) {
			return true
		}
	}
	return false
}

// matches reports whether the request matches. An error is a request whose
// namespace cannot be known (the namespace object given is another one).
func (m *matcher) matches(rq *evalRequest) (bool, error) {
	var nsErr error
	if m.namespaceSelector != nil {
		ok, err := rq.matchNamespaceSelector(m.namespaceSelector)
		if !ok && err == nil {
			return false, nil
		}
		nsErr = err
	}
	if m.objectSelector != nil {
		if !labelsMatch(m.objectSelector, rq.req.Object) && !labelsMatch(m.objectSelector, rq.req.OldObject) {
			return false, nil
		}
	}
	if matchesRules(m.exclude, rq) {
		return false, nil
	}
	if len(m.rules) > 0 && !matchesRules(m.rules, rq) {
		return false, nil
	}
	if nsErr != nil {
		return false, nsErr
	}
	return true, nil
}

func labelsMatch(sel labels.Selector, obj map[string]any) bool {
	if obj == nil {
		return false
	}
	return sel.Matches(objectLabels(obj))
}

// objectLabels adapts metadata.labels to labels.Labels without copying.
type objectLabels map[string]any

func (o objectLabels) labels() map[string]any {
	md, _ := map[string]any(o)["metadata"].(map[string]any)
	l, _ := md["labels"].(map[string]any)
	return l
}

func (o objectLabels) Has(label string) bool {
	_, ok := o.labels()[label]
	return ok
}

func (o objectLabels) Get(label string) string {
	s, _ := o.labels()[label].(string)
	return s
}

func (o objectLabels) Lookup(label string) (string, bool) {
	v, ok := o.labels()[label]
	if !ok {
		return "", false
	}
	s, _ := v.(string)
	return s, true
}

// matchNamespaceSelector follows Kyverno's namespace matcher: cluster-scoped
// requests (other than on Namespaces) match; a Namespace being created or
// updated is matched by its own labels; otherwise the namespace object's
// labels, or a synthetic namespace labelled kubernetes.io/metadata.name when
// none is known.
func (rq *evalRequest) matchNamespaceSelector(sel labels.Selector) (bool, error) {
	r := rq.req
	isNamespaces := r.Resource.Resource == "namespaces" && r.Resource.Group == ""
	if r.Namespace == "" && !isNamespaces {
		return true, nil
	}
	if isNamespaces && r.SubResource == "" && (r.Operation == OpCreate || r.Operation == OpUpdate) {
		return sel.Matches(objectLabels(r.Object)), nil
	}
	ns := rq.namespaceObject
	if ns == nil {
		return sel.Matches(labels.Set{"kubernetes.io/metadata.name": r.Namespace}), nil
	}
	md, _ := ns["metadata"].(map[string]any)
	if name, _ := md["name"].(string); name != r.Namespace {
		return false, fmt.Errorf("namespaces %q not found", r.Namespace)
	}
	return sel.Matches(objectLabels(ns)), nil
}
