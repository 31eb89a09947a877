package admission

import (
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Matcher is a compiled matchConstraints (admissionregistration/v1
// MatchResources), evaluated as Kyverno's matcher does: namespaceSelector,
// objectSelector, excludeResourceRules, resourceRules (empty matches),
// resourceNames with the generateName fallback.
type Matcher struct {
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

// CompileMatch compiles a matchConstraints; on error it returns the path of
// the offending selector under field.
func CompileMatch(mr *admissionregistrationv1.MatchResources, field string) (*Matcher, string, error) {
	m := &Matcher{}
	var err error
	if m.namespaceSelector, err = compileSelector(mr.NamespaceSelector); err != nil {
		return nil, field + ".namespaceSelector", err
	}
	if m.objectSelector, err = compileSelector(mr.ObjectSelector); err != nil {
		return nil, field + ".objectSelector", err
	}
	for _, r := range mr.ResourceRules {
		m.rules = append(m.rules, compileRule(r))
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

func (c *compiledRule) matches(r *Request) bool {
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

func (c *compiledRule) matchesName(r *Request) bool {
	if len(c.names) == 0 {
		return true
	}
	name := r.Name
	if name == "" {
		generateName := ""
		if md, ok := r.Object["metadata"].(map[string]any); ok {
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

func matchesRules(rules []compiledRule, r *Request) bool {
	for i := range rules {
		if rules[i].matches(r) && rules[i].matchesName(r) {
			return true
		}
	}
	return false
}

// Matches reports whether the request matches; ns is the request's
// Namespace object, or nil when it is not known. An error is a request
// whose namespace cannot be known (ns is another Namespace).
func (m *Matcher) Matches(r *Request, ns map[string]any) (bool, error) {
	var nsErr error
	if m.namespaceSelector != nil {
		ok, err := MatchNamespaceSelector(m.namespaceSelector, r, ns)
		if !ok && err == nil {
			return false, nil
		}
		nsErr = err
	}
	if m.objectSelector != nil {
		if !labelsMatch(m.objectSelector, r.Object) && !labelsMatch(m.objectSelector, r.OldObject) {
			return false, nil
		}
	}
	if matchesRules(m.exclude, r) {
		return false, nil
	}
	if len(m.rules) > 0 && !matchesRules(m.rules, r) {
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
	return sel.Matches(ObjectLabels(obj))
}

// ObjectLabels adapts an object's metadata.labels to labels.Labels without
// copying.
type ObjectLabels map[string]any

func (o ObjectLabels) labels() map[string]any {
	md, _ := map[string]any(o)["metadata"].(map[string]any)
	l, _ := md["labels"].(map[string]any)
	return l
}

func (o ObjectLabels) Has(label string) bool {
	_, ok := o.labels()[label]
	return ok
}

func (o ObjectLabels) Get(label string) string {
	s, _ := o.labels()[label].(string)
	return s
}

func (o ObjectLabels) Lookup(label string) (string, bool) {
	v, ok := o.labels()[label]
	if !ok {
		return "", false
	}
	s, _ := v.(string)
	return s, true
}

// MatchNamespaceSelector follows Kyverno's namespace matcher: cluster-scoped
// requests (other than on Namespaces) match; a Namespace being created or
// updated is matched by its own labels; otherwise the namespace object's
// labels, or a synthetic namespace labelled kubernetes.io/metadata.name when
// none is known.
func MatchNamespaceSelector(sel labels.Selector, r *Request, ns map[string]any) (bool, error) {
	isNamespaces := r.Resource.Resource == "namespaces" && r.Resource.Group == ""
	if r.Namespace == "" && !isNamespaces {
		return true, nil
	}
	if isNamespaces && r.SubResource == "" && (r.Operation == OpCreate || r.Operation == OpUpdate) {
		return sel.Matches(ObjectLabels(r.Object)), nil
	}
	if ns == nil {
		return sel.Matches(labels.Set{"kubernetes.io/metadata.name": r.Namespace}), nil
	}
	md, _ := ns["metadata"].(map[string]any)
	if name, _ := md["name"].(string); name != r.Namespace {
		return false, fmt.Errorf("namespaces %q not found", r.Namespace)
	}
	return sel.Matches(ObjectLabels(ns)), nil
}

// Resources appends to out the resources the matcher's rules name, as
// group/version/resource[/subresource] (version/resource for the core
// group; * where the rule says so), skipping those in seen.
func (m *Matcher) Resources(seen map[string]bool, out []string) []string {
	for _, r := range m.rules {
		for _, g := range r.groups {
			for _, ver := range r.versions {
				for _, res := range r.resources {
					name := res[0]
					if res[1] != "" {
						name += "/" + res[1]
					}
					key := g + "/" + ver + "/" + name
					if g == "" {
						key = ver + "/" + name
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

// IndexNames returns the resource names the matcher's rules name, for an
// index by resource; wildcard says that a rule names "*" or that there is
// no rule (the matcher may match any resource).
func (m *Matcher) IndexNames() (names []string, wildcard bool) {
	if len(m.rules) == 0 {
		return nil, true
	}
	for _, r := range m.rules {
		for _, res := range r.resources {
			if res[0] == "*" {
				wildcard = true
			} else {
				names = append(names, res[0])
			}
		}
	}
	return names, wildcard
}
