package engine_test

import (
	"strings"
	"testing"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

const namespacedHTTPPolicies = `apiVersion: policies.kyverno.io/v1
kind: NamespacedValidatingPolicy
metadata: {name: calls-out, namespace: team}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  variables:
  - name: verdict
    expression: "http.Get('https://policy.example.com/verdict')"
  validations:
  - expression: "variables.verdict.allowed == true"
---
apiVersion: policies.kyverno.io/v1
kind: NamespacedValidatingPolicy
metadata: {name: http-in-message-only, namespace: team}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
  - expression: "true"
    messageExpression: "string(http.client('').get('https://policy.example.com/m'))"
---
apiVersion: policies.kyverno.io/v1
kind: NamespacedValidatingPolicy
metadata: {name: http-beside-optional, namespace: team}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
  - expression: "object.?data.?x.orValue('') == string(http.Get('https://policy.example.com/x').value)"
---
apiVersion: policies.kyverno.io/v1
kind: NamespacedValidatingPolicy
metadata: {name: http-is-a-field, namespace: team}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
  - expression: "!has(object.data) || !has(object.data.http)"
---
apiVersion: policies.kyverno.io/v1beta1
kind: NamespacedMutatingPolicy
metadata: {name: label-from-http, namespace: team}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{metadata: Object.metadata{labels: {'owner': string(http.Get('https://owners.example.com/').owner)}}}"
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: cluster-calls-out}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
  - expression: "http.Get('https://policy.example.com/verdict').allowed == true"
`

// TestRefuseNamespacedHTTP: with Options.RefuseNamespacedHTTP, Compile
// refuses the namespaced policies whose expressions use the http variable
// (anywhere Kyverno's validation looks: variables, messageExpression,
// mutations), with Kyverno's message on "spec"; a field named http is not
// the variable; cluster policies may call out. Without the option every
// policy loads.
func TestRefuseNamespacedHTTP(t *testing.T) {
	docs, err := manifest.Parse("policies.yaml", []byte(namespacedHTTPPolicies))
	if err != nil {
		t.Fatal(err)
	}
	objs := manifest.FromDocuments(docs)
	if _, err := engine.Compile(objs, engine.Options{}); err != nil {
		t.Fatalf("without RefuseNamespacedHTTP: %v", err)
	}
	_, err = engine.Compile(objs, engine.Options{RefuseNamespacedHTTP: true})
	errs := manifest.AsLoadErrors(err)
	var refused []string
	for _, e := range errs {
		if e.Field != "spec" || e.Detail != kyvernocel.HTTPNotAllowedValidationMessage {
			t.Errorf("unexpected error: %v", e)
		}
		refused = append(refused, e.Object)
	}
	want := []string{
		"NamespacedValidatingPolicy team/calls-out",
		"NamespacedValidatingPolicy team/http-in-message-only",
		"NamespacedValidatingPolicy team/http-beside-optional",
		"NamespacedMutatingPolicy team/label-from-http",
	}
	if strings.Join(refused, "\n") != strings.Join(want, "\n") {
		t.Errorf("refused:\n%s\nwant:\n%s", strings.Join(refused, "\n"), strings.Join(want, "\n"))
	}
	if err == nil || !strings.Contains(err.Error(), "http.* is not allowed in namespaced policies; set --allowHTTPInNamespacedPolicies to enable") {
		t.Errorf("error text: %v", err)
	}
}
