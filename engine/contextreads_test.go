package engine_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

const readingPolicies = `apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: cm-limit}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  variables:
  - name: core
    expression: "'v1'"
  - name: cms
    expression: "resource.List(variables.core, 'config' + 'maps', object.metadata.namespace)"
  - name: deployGVR
    expression: "resource.ToGVR('apps/v1', 'Deployment')"
  - name: deploys
    expression: "resource.List(variables.deployGVR, object.metadata.namespace)"
  - name: anything
    expression: "resource.Get(object.data.apiVersion, object.data.resource, 'ns', 'n')"
  validations:
  - expression: "size(variables.cms.items) < 10"
    messageExpression: "'status of ' + string(resource.Get('v1', 'pods/status', 'default', 'p').?status.phase.orValue(''))"
  - expression: "size(resource.get('networking.k8s.io/v1', 'ingresses', '', 'x')) > 0"
  - expression: "resource.List(resource.ToGVR(object.apiVersion, 'Service'), 'ns').items.size() >= 0"
---
apiVersion: policies.kyverno.io/v1
kind: NamespacedValidatingPolicy
metadata: {name: quota, namespace: team}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
  - expression: "resource.List('v1', 'resourcequotas', {'tier': 'gold'}).items.size() > 0"
  - expression: "size(resource.Get('v1', object.kind, 'x')) == 0"
---
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata: {name: owner-label}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >-
        Object{metadata: Object.metadata{labels: {'owner':
        string(resource.Get('v1', 'namespaces', '', object.metadata.namespace).metadata.name)}}}
---
apiVersion: policies.kyverno.io/v1
kind: ImageValidatingPolicy
metadata: {name: env-images}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  matchImageReferences:
  - glob: "registry.local/*"
  validationConfigurations: {verifyDigest: false, required: false}
  variables:
  - name: cm
    expression: "resource.Get('v1', 'configmaps', object.metadata.namespace, 'policy-cm')"
  attestors:
  - name: notary
    notary:
      certs:
        value: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"
  validations:
  - expression: "variables.cm.data.env == 'prod'"
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: no-reads}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
  - expression: "has(object.spec) && object.spec.resource != 'x'"
`

// TestResourceReads: the resource.Get and resource.List calls of a set's
// policies, with the apiVersion and resource (or kind) each reads when
// they are constants — literals, concatenations, variables holding
// constants, resource.ToGVR of constants — and the calls whose arguments
// are not constants; ConstantResources lists the distinct constant
// resources. A field named resource is not the library.
func TestResourceReads(t *testing.T) {
	docs, err := manifest.Parse("policies.yaml", []byte(readingPolicies))
	if err != nil {
		t.Fatal(err)
	}
	objs := manifest.FromDocuments(docs)
	set, err := engine.Compile(objs, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	show := func(reads []engine.ResourceRead) string {
		var b strings.Builder
		for _, r := range reads {
			fmt.Fprintf(&b, "%s %s %s const=%v\n", r.Policy(), r.Field, r.ResourceCall, r.Constant)
		}
		return b.String()
	}
	got := show(set.ResourceReads())
	want := `ValidatingPolicy cm-limit spec.variables[1].expression resource.List("v1", "configmaps") const=true
ValidatingPolicy cm-limit spec.variables[3].expression resource.List(resource.ToGVR("apps/v1", "Deployment")) const=true
ValidatingPolicy cm-limit spec.variables[4].expression resource.Get(?, ?) const=false
ValidatingPolicy cm-limit spec.validations[0].messageExpression resource.Get("v1", "pods/status") const=true
ValidatingPolicy cm-limit spec.validations[1].expression resource.Get("networking.k8s.io/v1", "ingresses") const=true
ValidatingPolicy cm-limit spec.validations[2].expression resource.List(resource.ToGVR(?, "Service")) const=false
NamespacedValidatingPolicy team/quota spec.validations[0].expression resource.List("v1", "resourcequotas") const=true
NamespacedValidatingPolicy team/quota spec.validations[1].expression resource.Get("v1", ?) const=false
MutatingPolicy owner-label spec.mutations[0].applyConfiguration.expression resource.Get("v1", "namespaces") const=true
ImageValidatingPolicy env-images spec.variables[0].expression resource.Get("v1", "configmaps") const=true
`
	if got != want {
		t.Fatalf("reads:\n%s\nwant:\n%s", got, want)
	}
	var refs []string
	for _, r := range engine.ConstantResources(set.ResourceReads()) {
		refs = append(refs, r.String())
	}
	wantRefs := []string{"apps/v1 kind Deployment", "networking.k8s.io/v1 ingresses", "v1 configmaps", "v1 namespaces", "v1 pods", "v1 resourcequotas"}
	if strings.Join(refs, "|") != strings.Join(wantRefs, "|") {
		t.Fatalf("constant resources %q, want %q", refs, wantRefs)
	}
	// The same from the objects, before they are compiled.
	var fromObjects []engine.ResourceRead
	for _, o := range objs {
		reads, err := engine.ResourceReadsOf(o)
		if err != nil {
			t.Fatal(err)
		}
		fromObjects = append(fromObjects, reads...)
	}
	if a, b := len(fromObjects), len(set.ResourceReads()); a != b {
		t.Fatalf("ResourceReadsOf found %d reads, the set %d:\n%s", a, b, show(fromObjects))
	}
}
