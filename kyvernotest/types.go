// Package kyvernotest runs Kyverno CLI test suites (kyverno-test.yaml,
// cli.kyverno.io/v1alpha1 Test) on Arbiter's engine, with the semantics of
// `kyverno test` (Kyverno 1.19, cmd/cli/kubectl-kyverno/commands/test): the
// same inputs (policies, resources, exceptions, values/variables, userinfo,
// context, clusterResources, apiCallResponses, globalContextEntries, JSON
// payloads, targetResources), the same way of matching expected results to
// engine responses (policy by its last "/" segment, resource by name or
// namespace/name among the resources and the targets of mutate-existing
// policies, the rule ignored for rule-less policy kinds, "Excluded"
// passes, "Not found" failures), the same comparison of patchedResources
// (found by apiVersion, kind, namespace and name, a missing one skipping
// the row; labels fixed up, tidied, equal as JSON) and the same counting.
package kyvernotest

import (
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/arbiter-pdp/arbiter/kyvernotest/fixtures"
)

// DefaultFileName is the name of the test files a folder is searched for.
const DefaultFileName = "kyverno-test.yaml"

// Test is a cli.kyverno.io/v1alpha1 Test: one document of a kyverno-test.yaml.
// The JSON names are Kyverno's; the file is decoded strictly (an unknown or
// duplicate field is an error), as `kyverno test` does.
type Test struct {
	metav1.TypeMeta   `json:",inline,omitempty"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Name is the deprecated test name (metadata.name replaces it); a test
	// that sets it uses the deprecated schema and is refused, as by Kyverno.
	Name string `json:"name,omitempty"`

	Policies  []string `json:"policies,omitempty"`
	Resources []string `json:"resources,omitempty"`
	// JSONPayload is deprecated; it is folded into JSONPayloads.
	JSONPayload      string       `json:"jsonPayload,omitempty"`
	JSONPayloads     []string     `json:"jsonPayloads,omitempty"`
	HTTPPayloads     []string     `json:"httpPayloads,omitempty"`
	EnvoyPayloads    []string     `json:"envoyPayloads,omitempty"`
	TargetResources  []string     `json:"targetResources,omitempty"`
	Variables        string       `json:"variables,omitempty"`
	ParamResources   []string     `json:"paramResources,omitempty"`
	UserInfo         string       `json:"userinfo,omitempty"`
	Results          []TestResult `json:"results,omitempty"`
	Values           *ValuesSpec  `json:"values,omitempty"`
	PolicyExceptions []string     `json:"exceptions,omitempty"`
	Context          string       `json:"context,omitempty"`
	ClusterResources []string     `json:"clusterResources,omitempty"`

	APICallResponses     []fixtures.APICallResponseEntry    `json:"apiCallResponses,omitempty"`
	GlobalContextEntries []fixtures.GlobalContextEntryValue `json:"globalContextEntries,omitempty"`
}

// TestResult is one expected result of a Test.
type TestResult struct {
	Policy                      string `json:"policy"`
	Rule                        string `json:"rule,omitempty"`
	IsValidatingAdmissionPolicy bool   `json:"isValidatingAdmissionPolicy,omitempty"`
	IsMutatingAdmissionPolicy   bool   `json:"isMutatingAdmissionPolicy,omitempty"`
	IsValidatingPolicy          bool   `json:"isValidatingPolicy,omitempty"`
	IsDeletingPolicy            bool   `json:"isDeletingPolicy,omitempty"`
	IsImageValidatingPolicy     bool   `json:"isImageValidatingPolicy,omitempty"`
	IsGeneratingPolicy          bool   `json:"isGeneratingPolicy,omitempty"`
	IsMutatingPolicy            bool   `json:"isMutatingPolicy,omitempty"`
	// Result is pass, fail, warn, error or skip.
	Result string `json:"result"`
	// Kind is informative: Kyverno does not use it to select resources.
	Kind string `json:"kind"`
	// Operation is CREATE, UPDATE or DELETE: the result is checked against a
	// dedicated evaluation of every resource with that operation.
	Operation              string `json:"operation,omitempty"`
	PatchedResources       string `json:"patchedResources,omitempty"`
	GeneratedResource      string `json:"generatedResource,omitempty"`
	CloneSourceResource    string `json:"cloneSourceResource,omitempty"`
	FailOnMissingResources bool   `json:"failOnMissingResources,omitempty"`

	// Resources are resource names or namespace/name (or JSON payload names).
	Resources          []string           `json:"resources,omitempty"`
	ResourceSpecs      []TestResourceSpec `json:"resourceSpecs,omitempty"`
	GeneratedResources []string           `json:"generatedResources,omitempty"`
}

// TestResourceSpec selects a resource by group, version, namespace and name.
type TestResourceSpec struct {
	Group       string `json:"group,omitempty"`
	Version     string `json:"version,omitempty"`
	Kind        string `json:"kind,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	Subresource string `json:"subresource,omitempty"`
	Name        string `json:"name,omitempty"`
}

// Values is a cli.kyverno.io/v1alpha1 Values file (a test's `variables`).
type Values struct {
	metav1.TypeMeta   `json:",inline,omitempty"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	ValuesSpec        `json:",inline"`
}

// ValuesSpec is the content of a Values file, or a test's inline `values`.
type ValuesSpec struct {
	// GlobalValues are variables of every policy; "request.operation" sets
	// the default admission operation (CREATE, UPDATE, DELETE, CONNECT).
	GlobalValues map[string]any `json:"globalValues,omitempty"`
	// Policies are per policy/resource/rule variables (kyverno.io policies;
	// CEL policies do not read them).
	Policies []ValuesPolicy `json:"policies,omitempty"`
	// NamespaceSelectors give namespaces' labels.
	NamespaceSelectors []NamespaceSelector `json:"namespaceSelector,omitempty"`
	// Namespaces are whole Namespace objects (namespaceObject).
	Namespaces   []corev1.Namespace `json:"namespaces,omitempty"`
	Subresources []Subresource      `json:"subresources,omitempty"`
}

// ValuesPolicy holds variables of one policy.
type ValuesPolicy struct {
	Name      string           `json:"name"`
	Resources []ValuesResource `json:"resources,omitempty"`
	Rules     []ValuesRule     `json:"rules,omitempty"`
}

// ValuesResource holds variables of one policy for one resource.
type ValuesResource struct {
	Name   string         `json:"name"`
	Values map[string]any `json:"values,omitempty"`
}

// ValuesRule holds variables of one rule.
type ValuesRule struct {
	Name          string           `json:"name"`
	Values        map[string]any   `json:"values,omitempty"`
	ForeachValues map[string][]any `json:"foreachValues,omitempty"`
}

// NamespaceSelector gives the labels of a namespace.
type NamespaceSelector struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
}

// Subresource maps a subresource kind to its parent resource.
type Subresource struct {
	Subresource    metav1.APIResource `json:"subresource"`
	ParentResource metav1.APIResource `json:"parentResource"`
}

// UserInfo is a cli.kyverno.io/v1alpha1 UserInfo file (a test's `userinfo`).
type UserInfo struct {
	metav1.TypeMeta   `json:",inline,omitempty"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Roles             []string                  `json:"roles,omitempty"`
	ClusterRoles      []string                  `json:"clusterRoles,omitempty"`
	AdmissionUserInfo authenticationv1.UserInfo `json:"userInfo,omitempty"`
}
