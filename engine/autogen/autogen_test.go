package autogen_test

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/arbiter-pdp/arbiter/engine/autogen"
)

func podRule() *admissionregistrationv1.MatchResources {
	return &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
		RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
		},
	}}}
}

// TestRewriteMutation: the cases of Kyverno's mpol autogen tests
// (pkg/cel/policies/mpol/autogen/autogen_test.go), except that the inner
// type name of a metadata constructor is rewritten (Kyverno 1.19 keeps it,
// and the mutation then fails its type check).
func TestRewriteMutation(t *testing.T) {
	configs := autogen.Configs(podRule(), nil)
	if len(configs) != 2 || configs[0].Name != "cronjobs" || configs[1].Name != "defaults" {
		t.Fatalf("configs: %+v", configs)
	}
	cron, defaults := configs[0], configs[1]
	for _, c := range []struct {
		cfg        autogen.Config
		expr, want string
	}{
		{defaults, `Object{metadata: Object.metadata{labels: Object.metadata.labels{foo: 'bar'}}}`,
			`Object{spec: Object.spec{template: Object.spec.template{metadata: Object.spec.template.metadata{labels: Object.spec.template.metadata.labels{foo: 'bar'}}}}}`},
		{defaults, `Object{spec: Object.spec{containers: object.spec.containers.map(c, Object.spec.containers{name: c.name})}}`,
			`Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: object.spec.template.spec.containers.map(c, Object.spec.template.spec.containers{name: c.name})}}}}`},
		{cron, `object.metadata.labels['app'] == 'x' && has(object.spec.hostNetwork)`,
			`object.spec.jobTemplate.spec.template.metadata.labels['app'] == 'x' && has(object.spec.jobTemplate.spec.template.spec.hostNetwork)`},
		{defaults, `namespaceObject.spec.finalizers.size() > 0 && object.metadata.namespace == 'x'`,
			`namespaceObject.spec.finalizers.size() > 0 && object.metadata.namespace == 'x'`},
		{defaults, `Object {spec: Object.spec{runtimeClassName: 'gvisor'}}`,
			`Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{runtimeClassName: 'gvisor'}}}}`},
	} {
		if got := c.cfg.RewriteMutation(c.expr); got != c.want {
			t.Errorf("%s: %s\n got %s\nwant %s", c.cfg.Name, c.expr, got, c.want)
		}
	}
}
