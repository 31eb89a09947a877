package mapol_test

import (
	"fmt"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/admission"
)

type mutation = admissionregistrationv1.Mutation

func addLabel(k, v string) mutation {
	return JP(fmt.Sprintf(`[JSONPatch{op: "add", path: "/metadata/labels/%s", value: %q}]`, k, v))
}

func acLabel(k, valueExpr string) mutation {
	return AC(fmt.Sprintf(`Object{metadata: Object.metadata{labels: {%q: %s}}}`, k, valueExpr))
}

// counter increments label n (a string) by one.
var counter = JP(`[JSONPatch{op: "replace", path: "/metadata/labels/n", value: string(int(object.metadata.labels.n) + 1)}]`)

func policies(ps ...*admissionregistrationv1.MutatingAdmissionPolicy) []*admissionregistrationv1.MutatingAdmissionPolicy {
	return ps
}

func bindings(bs ...*admissionregistrationv1.MutatingAdmissionPolicyBinding) []*admissionregistrationv1.MutatingAdmissionPolicyBinding {
	return bs
}

func named(name string, p *admissionregistrationv1.MutatingAdmissionPolicy) *admissionregistrationv1.MutatingAdmissionPolicy {
	p.Name = name
	return p
}

func withConditions(p *admissionregistrationv1.MutatingAdmissionPolicy, exprs ...string) *admissionregistrationv1.MutatingAdmissionPolicy {
	for i, e := range exprs {
		p.Spec.MatchConditions = append(p.Spec.MatchConditions, admissionregistrationv1.MatchCondition{Name: fmt.Sprintf("c%d", i), Expression: e})
	}
	return p
}

func withVars(p *admissionregistrationv1.MutatingAdmissionPolicy, kv ...string) *admissionregistrationv1.MutatingAdmissionPolicy {
	for i := 0; i+1 < len(kv); i += 2 {
		p.Spec.Variables = append(p.Spec.Variables, admissionregistrationv1.Variable{Name: kv[i], Expression: kv[i+1]})
	}
	return p
}

// two is a case with policies a and b, each bound by a binding of its name.
func two(name string, a, b *admissionregistrationv1.MutatingAdmissionPolicy) *diffCase {
	a.Name, b.Name = "a", "b"
	return &diffCase{name: name, policies: policies(a, b), bindings: bindings(bind("a-b", "a"), bind("b-b", "b"))}
}

func differentialCases() []*diffCase {
	var cs []*diffCase
	add := func(c ...*diffCase) { cs = append(cs, c...) }

	// ---- JSON patch operations ----
	add(
		one("jsonpatch/add label", pol("p", fail, never, addLabel("new", "v"))).expect(allowedWith(2, `"new":"v"`)),
		one("jsonpatch/add to missing parent", pol("p", fail, never,
			JP(`[JSONPatch{op: "add", path: "/metadata/annotations/x", value: "y"}]`))).expect(denied("JSON Patch: ")),
		one("jsonpatch/add to missing parent ignored", pol("p", ignore, never,
			JP(`[JSONPatch{op: "add", path: "/metadata/annotations/x", value: "y"}]`))).expect(allowedWith(1)),
		one("jsonpatch/add map", pol("p", fail, never,
			JP(`[JSONPatch{op: "add", path: "/metadata/annotations", value: {"x": "y", "z": "w"}}]`))).expect(allowedWith(2, `"z":"w"`)),
		one("jsonpatch/replace data", pol("p", fail, never,
			JP(`[JSONPatch{op: "replace", path: "/data/a", value: "changed"}]`))).expect(allowedWith(2, `"a":"changed"`)),
		one("jsonpatch/replace missing key", pol("p", fail, never,
			JP(`[JSONPatch{op: "replace", path: "/data/nope", value: "x"}]`))),
		one("jsonpatch/replace missing parent", pol("p", fail, never,
			JP(`[JSONPatch{op: "replace", path: "/spec/x", value: "x"}]`))),
		one("jsonpatch/remove label", pol("p", fail, never,
			JP(`[JSONPatch{op: "remove", path: "/metadata/labels/app"}]`))).expect(allowedWith(2)),
		one("jsonpatch/remove missing", pol("p", fail, never,
			JP(`[JSONPatch{op: "remove", path: "/metadata/labels/nope"}]`))).expect(denied("JSON Patch")),
		one("jsonpatch/remove missing ignored", pol("p", ignore, never,
			JP(`[JSONPatch{op: "remove", path: "/metadata/labels/nope"}]`))),
		one("jsonpatch/test passes", pol("p", fail, never,
			JP(`[JSONPatch{op: "test", path: "/data/a", value: "1"}, JSONPatch{op: "add", path: "/data/t", value: "ok"}]`))).expect(allowedWith(2, `"t":"ok"`)),
		one("jsonpatch/test fails cancels the patch", pol("p", fail, never,
			JP(`[JSONPatch{op: "add", path: "/data/before", value: "x"}, JSONPatch{op: "test", path: "/data/a", value: "2"}, JSONPatch{op: "add", path: "/data/t", value: "ok"}]`))).expect(allowedWith(2)),
		one("jsonpatch/test missing path", pol("p", fail, never,
			JP(`[JSONPatch{op: "test", path: "/data/zz", value: "2"}, JSONPatch{op: "add", path: "/data/t", value: "ok"}]`))),
		one("jsonpatch/move", pol("p", fail, never,
			JP(`[JSONPatch{op: "move", from: "/data/a", path: "/data/moved"}]`))).expect(allowedWith(2, `"moved":"1"`)),
		one("jsonpatch/move missing", pol("p", fail, never,
			JP(`[JSONPatch{op: "move", from: "/data/zz", path: "/data/moved"}]`))),
		one("jsonpatch/copy", pol("p", fail, never,
			JP(`[JSONPatch{op: "copy", from: "/data/b", path: "/metadata/labels/copied"}]`))).expect(allowedWith(2, `"copied":"2"`)),
		one("jsonpatch/copy a map", pol("p", fail, never,
			JP(`[JSONPatch{op: "copy", from: "/metadata/labels", path: "/metadata/annotations"}]`))),
		one("jsonpatch/escapeKey", pol("p", fail, never,
			JP(`[JSONPatch{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey("example.com/x~y"), value: "e"}]`))).expect(allowedWith(2, `"example.com/x~y":"e"`)),
		one("jsonpatch/unescaped slash", pol("p", fail, never,
			JP(`[JSONPatch{op: "add", path: "/metadata/labels/example.com/x", value: "e"}]`))),
		one("jsonpatch/several ops in order", pol("p", fail, never,
			JP(`[JSONPatch{op: "add", path: "/data/x", value: "1"}, JSONPatch{op: "replace", path: "/data/x", value: "2"}, JSONPatch{op: "copy", from: "/data/x", path: "/data/y"}, JSONPatch{op: "remove", path: "/data/a"}]`))),
		one("jsonpatch/empty patch", pol("p", fail, never, JP(`[JSONPatch{op: "add", path: "/x", value: 1}].filter(p, false)`))).expect(allowedWith(2)),
		one("jsonpatch/null value", pol("p", fail, never,
			JP(`[JSONPatch{op: "add", path: "/data/nul", value: null}]`))),
		one("jsonpatch/conditional list", pol("p", fail, never,
			JP(`has(object.metadata.annotations) ? [] : [JSONPatch{op: "add", path: "/metadata/annotations", value: {"seen": "true"}}]`))),
		one("jsonpatch/list built with map", pol("p", fail, never,
			JP(`object.data.map(k, JSONPatch{op: "add", path: "/metadata/labels/d-" + k, value: object.data[k]})`))),
		one("jsonpatch/list built with filter", pol("p", fail, never,
			JP(`object.metadata.labels.filter(k, k != "n").map(k, JSONPatch{op: "remove", path: "/metadata/labels/" + k})`))),
		one("jsonpatch/whole document path", pol("p", fail, never,
			JP(`[JSONPatch{op: "add", path: "/metadata/labels", value: {"only": "this"}}]`))),
		one("jsonpatch/replace with a number", pol("p", fail, never,
			JP(`[JSONPatch{op: "add", path: "/data/num", value: 42}]`))),
		one("jsonpatch/double value", pol("p", fail, never,
			JP(`[JSONPatch{op: "add", path: "/data/num", value: 1.5}]`))),
		one("jsonpatch/bool value", pol("p", fail, never,
			JP(`[JSONPatch{op: "add", path: "/data/flag", value: true}]`))),
		one("jsonpatch/invalid op", pol("p", fail, never,
			JP(`[JSONPatch{op: "frobnicate", path: "/data/a", value: "x"}]`))).expect(denied("JSON Patch")),
		one("jsonpatch/empty path", pol("p", fail, never,
			JP(`[JSONPatch{op: "add", path: "", value: object}]`))),
	)
	// JSON patches on lists (a Pod, a Deployment).
	add(
		one("jsonpatch/append with dash", on(pol("p", fail, never,
			JP(`[JSONPatch{op: "add", path: "/metadata/finalizers/-", value: "f2"}]`)), pods)).withReq(onPod).expect(allowedWith(2, `["f1","f2"]`)),
		one("jsonpatch/insert at index", on(pol("p", fail, never,
			JP(`[JSONPatch{op: "add", path: "/metadata/finalizers/0", value: "f0"}]`)), pods)).withReq(onPod),
		one("jsonpatch/index out of range", on(pol("p", fail, never,
			JP(`[JSONPatch{op: "add", path: "/metadata/finalizers/5", value: "f5"}]`)), pods)).withReq(onPod).expect(denied("JSON Patch")),
		one("jsonpatch/negative index", on(pol("p", fail, never,
			JP(`[JSONPatch{op: "replace", path: "/metadata/finalizers/-1", value: "last"}]`)), pods)).withReq(onPod),
		one("jsonpatch/replace in list", on(pol("p", fail, never,
			JP(`[JSONPatch{op: "replace", path: "/spec/containers/0/image", value: "c:2"}]`)), pods)).withReq(onPod).expect(allowedWith(2, `"image":"c:2"`)),
		one("jsonpatch/remove from list", on(pol("p", fail, never,
			JP(`[JSONPatch{op: "remove", path: "/metadata/finalizers/0"}]`)), pods)).withReq(onPod),
		one("jsonpatch/add a list", on(pol("p", fail, never,
			JP(`[JSONPatch{op: "add", path: "/spec/tolerations", value: [{"key": "a", "operator": "Exists"}]}]`)), pods)).withReq(onPod),
		one("jsonpatch/add an Object value", on(pol("p", fail, never,
			JP(`[JSONPatch{op: "add", path: "/spec/securityContext", value: Object.spec.securityContext{runAsNonRoot: true}}]`)), pods)).withReq(onPod),
		one("jsonpatch/Object value type mismatch", on(pol("p", fail, never,
			JP(`[JSONPatch{op: "add", path: "/spec/securityContext", value: Object.spec.securityContext{seLinuxOptions: Object.spec.wrong{level: "x"}}}]`)), pods)).withReq(onPod).expect(denied("type mismatch")),
		one("jsonpatch/replicas", on(pol("p", fail, never,
			JP(`[JSONPatch{op: "replace", path: "/spec/replicas", value: object.spec.replicas * 3}]`)), deployments)).withReq(onDeployment).expect(allowedWith(2, `"replicas":6`)),
		one("jsonpatch/env append per container", on(pol("p", fail, never,
			JP(`object.spec.template.spec.containers.map(c, JSONPatch{op: "add", path: "/spec/template/spec/containers/" + string(object.spec.template.spec.containers.indexOf(c)) + "/env", value: [{"name": "INJECTED", "value": string(c.name)}]})`)), deployments)).withReq(onDeployment),
		one("jsonpatch/error in expression", on(pol("p", fail, never,
			JP(`[JSONPatch{op: "add", path: "/spec/x", value: object.spec.nope}]`)), deployments)).withReq(onDeployment).expect(denied("resulted in error")),
	)

	// ---- apply configurations ----
	add(
		one("applyconfig/label", pol("p", fail, never, acLabel("x", `"y"`))).expect(allowedWith(2, `"x":"y"`)),
		one("applyconfig/label overrides", pol("p", fail, never, acLabel("app", `"z"`))),
		one("applyconfig/data", pol("p", fail, never, AC(`Object{data: {"a": "10", "new": "n"}}`))).expect(allowedWith(2, `"new":"n"`)),
		one("applyconfig/annotations", pol("p", fail, never, AC(`Object{metadata: Object.metadata{annotations: {"a": "b"}}}`))),
		one("applyconfig/empty object", pol("p", fail, never, AC(`Object{}`))).expect(allowedWith(2)),
		one("applyconfig/self reference", pol("p", fail, never, acLabel("copy", `object.metadata.labels.app + "-copy"`))),
		one("applyconfig/type mismatch", pol("p", fail, never,
			AC(`Object{metadata: Object.spec{labels: {"a": "b"}}}`))).expect(denied("type mismatch")),
		one("applyconfig/field not in schema", pol("p", fail, never,
			AC(`Object{spec: Object.spec{x: "y"}}`))).expect(denied("error applying patch")),
		one("applyconfig/field not in schema ignored", pol("p", ignore, never,
			AC(`Object{spec: Object.spec{x: "y"}}`))),
		one("applyconfig/managedFields are atomic", pol("p", fail, never,
			AC(`Object{metadata: Object.metadata{managedFields: [Object.metadata.managedFields{manager: "m"}]}}`))).expect(denied("atomic")),
		one("applyconfig/deployment replicas and label", on(pol("p", fail, never,
			AC(`Object{metadata: Object.metadata{labels: {"team": "a"}}, spec: Object.spec{replicas: 5}}`)), deployments)).withReq(onDeployment).expect(allowedWith(2, `"replicas":5`, `"team":"a"`)),
		one("applyconfig/container merged by name", on(pol("p", fail, never,
			AC(`Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: "app", image: "web:2"}]}}}}`)), deployments)).withReq(onDeployment).expect(allowedWith(2, `"web:2"`, `"side:1"`)),
		one("applyconfig/container added", on(pol("p", fail, never,
			AC(`Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: "new", image: "n:1"}]}}}}`)), deployments)).withReq(onDeployment),
		one("applyconfig/env merged by name", on(pol("p", fail, never,
			AC(`Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: "app", env: [Object.spec.template.spec.containers.env{name: "B", value: "2"}]}]}}}}`)), deployments)).withReq(onDeployment),
		one("applyconfig/atomic args", on(pol("p", fail, never,
			AC(`Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: "app", args: ["x"]}]}}}}`)), deployments)).withReq(onDeployment).expect(denied("may not mutate atomic")),
		one("applyconfig/atomic tolerations", on(pol("p", fail, never,
			AC(`Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{tolerations: [Object.spec.template.spec.tolerations{key: "x", operator: "Exists"}]}}}}`)), deployments)).withReq(onDeployment).expect(denied("atomic")),
		one("applyconfig/atomic ignored", on(pol("p", ignore, never,
			AC(`Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{tolerations: [Object.spec.template.spec.tolerations{key: "x", operator: "Exists"}]}}}}`)), deployments)).withReq(onDeployment).expect(allowedWith(1)),
		one("applyconfig/template labels", on(pol("p", fail, never,
			AC(`Object{spec: Object.spec{template: Object.spec.template{metadata: Object.spec.template.metadata{labels: {"injected": "yes"}}}}}`)), deployments)).withReq(onDeployment),
		one("applyconfig/resources map", on(pol("p", fail, never,
			AC(`Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: "side", resources: Object.spec.template.spec.containers.resources{limits: {"cpu": "100m"}}}]}}}}`)), deployments)).withReq(onDeployment),
		one("applyconfig/pod image pull policy", on(pol("p", fail, never,
			AC(`Object{spec: Object.spec{containers: object.spec.containers.map(c, Object.spec.containers{name: c.name, imagePullPolicy: "Always"})}}`)), pods)).withReq(onPod),
		one("applyconfig/finalizers set", on(pol("p", fail, never,
			AC(`Object{metadata: Object.metadata{finalizers: ["f2"]}}`)), pods)).withReq(onPod),
		one("applyconfig/nested type mismatch", on(pol("p", fail, never,
			AC(`Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.wrong{}}}}`)), deployments)).withReq(onDeployment).expect(denied("type mismatch")),
		one("applyconfig/error in expression", pol("p", fail, never,
			AC(`Object{metadata: Object.metadata{labels: {"x": object.data.nope}}}`))).expect(denied("resulted in error: no such key")),
		one("applyconfig/wrong scalar type", on(pol("p", fail, never,
			AC(`Object{spec: Object.spec{replicas: "five"}}`)), deployments)).withReq(onDeployment),
		one("applyconfig/selector labels", on(pol("p", fail, never,
			AC(`Object{spec: Object.spec{selector: Object.spec.selector{matchLabels: {"extra": "x"}}}}`)), deployments)).withReq(onDeployment),
	)

	// ---- several mutations of one policy ----
	add(
		one("mutations/each sees the previous", pol("p", fail, never,
			addLabel("first", "1"),
			acLabel("second", `object.metadata.labels.first + "2"`),
			JP(`[JSONPatch{op: "add", path: "/metadata/labels/third", value: object.metadata.labels.second + "3"}]`))).expect(allowedWith(2, `"third":"123"`)),
		one("mutations/first fails, next applies, Fail", pol("p", fail, never,
			JP(`[JSONPatch{op: "remove", path: "/data/nope"}]`), addLabel("after", "x"))).expect(denied("JSON Patch")),
		one("mutations/first fails, next applies, Ignore", pol("p", ignore, never,
			JP(`[JSONPatch{op: "remove", path: "/data/nope"}]`), addLabel("after", "x"))).expect(allowedWith(2, `"after":"x"`)),
		one("mutations/last fails, Ignore keeps the first", pol("p", ignore, never,
			addLabel("kept", "x"), AC(`Object{spec: Object.spec{x: "y"}}`))).expect(allowedWith(2, `"kept":"x"`)),
		one("mutations/two failures", pol("p", fail, never,
			JP(`[JSONPatch{op: "remove", path: "/data/nope"}]`), AC(`Object{metadata: Object.spec{}}`))).expect(denied("JSON Patch")),
		one("mutations/json then apply config on deployment", on(pol("p", fail, never,
			JP(`[JSONPatch{op: "replace", path: "/spec/replicas", value: 7}]`),
			AC(`Object{metadata: Object.metadata{labels: {"replicas": string(object.spec.replicas)}}}`)), deployments)).withReq(onDeployment).expect(allowedWith(2, `"replicas":"7"`)),
		one("mutations/arithmetic on a patched number", on(pol("p", fail, never,
			JP(`[JSONPatch{op: "replace", path: "/spec/replicas", value: 7}]`),
			JP(`[JSONPatch{op: "replace", path: "/spec/replicas", value: object.spec.replicas + 1}]`)), deployments)).withReq(onDeployment).expect(allowedWith(2, `"replicas":8`)),
		one("mutations/integral float after a JSON patch", on(pol("p", fail, never,
			addLabel("touched", "1"),
			AC(`Object{spec: Object.spec{replicas: object.spec.replicas + 1}}`)), deployments)).withReq(func(r *admission.Request) {
			onDeployment(r)
			r.Object["spec"].(map[string]any)["replicas"] = float64(2)
		}).expect(allowedWith(2, `"replicas":3`)),
		one("mutations/integral float without a JSON patch", on(pol("p", fail, never,
			AC(`Object{spec: Object.spec{replicas: object.spec.replicas + 1}}`)), deployments)).withReq(func(r *admission.Request) {
			onDeployment(r)
			r.Object["spec"].(map[string]any)["replicas"] = float64(2)
		}).expect(denied("no such overload")),
		one("mutations/apply config then json", pol("p", fail, never,
			AC(`Object{metadata: Object.metadata{annotations: {"a": "1"}}}`),
			JP(`[JSONPatch{op: "add", path: "/metadata/annotations/b", value: "2"}]`))).expect(allowedWith(2, `"b":"2"`)),
	)

	// ---- several policies, in name order ----
	add(
		two("policies/second sees the first", pol("", fail, never, addLabel("from-a", "a")),
			pol("", fail, never, acLabel("from-b", `object.metadata.labels["from-a"] + "b"`))).expect(allowedWith(2, `"from-b":"ab"`)),
		two("policies/name order decides", pol("", fail, never, acLabel("who", `"a"`)), pol("", fail, never, acLabel("who", `"b"`))).expect(allowedWith(2, `"who":"b"`)),
		two("policies/first fails", pol("", fail, never, JP(`[JSONPatch{op: "remove", path: "/data/nope"}]`)), pol("", fail, never, addLabel("b", "b"))).expect(denied("policy 'a'")),
		two("policies/second fails", pol("", fail, never, addLabel("a", "a")), pol("", fail, never, JP(`[JSONPatch{op: "remove", path: "/data/nope"}]`))).expect(denied("policy 'b'")),
		two("policies/ignored error then fail", pol("", ignore, never, JP(`[JSONPatch{op: "remove", path: "/data/nope"}]`)), pol("", fail, never, AC(`Object{spec: Object.spec{}}`))).expect(denied("policy 'b'")),
		two("policies/both ignored", pol("", ignore, never, JP(`[JSONPatch{op: "remove", path: "/data/nope"}]`)), pol("", ignore, never, addLabel("b", "b"))).expect(allowedWith(2, `"b":"b"`)),
		func() *diffCase {
			// b's binding configuration error comes before a's mutation
			// error: the dispatcher collects configuration errors first.
			c := two("policies/configuration errors first", pol("", fail, never, JP(`[JSONPatch{op: "remove", path: "/data/nope"}]`)),
				withParams(pol("", fail, never, addLabel("b", "b")), "v1", "ConfigMap"))
			c.bindings[1].Spec.ParamRef = paramRef("missing", "", denyAct)
			return c.expect(denied("policy 'b' with binding 'b-b' denied request: failed to configure binding"))
		}(),
		func() *diffCase {
			c := two("policies/three in order", pol("", fail, never, addLabel("order", "a")), pol("", fail, never, acLabel("order", `object.metadata.labels.order + "b"`)))
			c.policies = append(c.policies, named("c", pol("", fail, never, acLabel("order", `object.metadata.labels.order + "c"`))))
			c.bindings = append(c.bindings, bind("c-b", "c"))
			return c.expect(allowedWith(2, `"order":"abc"`))
		}(),
	)

	// ---- variables ----
	add(
		one("variables/read in a mutation", withVars(pol("p", fail, never, acLabel("v", `variables.app + "!"`)), "app", "object.metadata.labels.app")),
		one("variables/recomputed per mutation", withVars(pol("p", fail, never,
			acLabel("size1", `string(variables.n)`), acLabel("size2", `string(variables.n)`)), "n", "size(object.metadata.labels)")).expect(allowedWith(2, `"size1":"3"`, `"size2":"4"`)),
		one("variables/chained", withVars(pol("p", fail, never, acLabel("v", `variables.b`)), "a", "object.metadata.name", "b", `variables.a + "-x"`)),
		one("variables/error", withVars(pol("p", fail, never, acLabel("v", `variables.bad`)), "bad", "object.data.nope")).expect(denied("composited variable")),
		one("variables/error ignored", withVars(pol("p", ignore, never, acLabel("v", `variables.bad`), addLabel("ok", "1")), "bad", "object.data.nope")).expect(allowedWith(2, `"ok":"1"`)),
		one("variables/unused error", withVars(pol("p", fail, never, addLabel("ok", "1")), "bad", "object.data.nope")),
		one("variables/list", withVars(on(pol("p", fail, never,
			JP(`variables.names.map(n, JSONPatch{op: "add", path: "/metadata/labels/c-" + n, value: "1"})`)), pods), "names", "object.spec.containers.map(c, c.name)")).withReq(onPod),
		one("variables/in matchConditions at runtime", withVars(withConditions(pol("p", fail, never, addLabel("ok", "1")), `object.metadata.name == "beta"`), "x", "1")),
	)

	// ---- matchConditions ----
	add(
		one("matchConditions/false skips", withConditions(pol("p", fail, never, addLabel("x", "1")), `object.metadata.name == "other"`)).expect(allowedWith(1)),
		one("matchConditions/true applies", withConditions(pol("p", fail, never, addLabel("x", "1")), `object.metadata.name == "beta"`)).expect(allowedWith(2, `"x":"1"`)),
		one("matchConditions/error Fail", withConditions(pol("p", fail, never, addLabel("x", "1")), `object.data.nope == "x"`)).expect(denied("resulted in error: no such key")),
		one("matchConditions/error Ignore", withConditions(pol("p", ignore, never, addLabel("x", "1")), `object.data.nope == "x"`)).expect(allowedWith(1)),
		one("matchConditions/error then false", withConditions(pol("p", fail, never, addLabel("x", "1")), `object.data.nope == "x"`, `false`)).expect(allowedWith(1)),
		one("matchConditions/false then error", withConditions(pol("p", fail, never, addLabel("x", "1")), `false`, `object.data.nope == "x"`)),
		one("matchConditions/two errors", withConditions(pol("p", fail, never, addLabel("x", "1")), `object.data.nope == "x"`, `object.data.other == "y"`)).expect(denied("[")),
		one("matchConditions/same error twice", withConditions(pol("p", fail, never, addLabel("x", "1")), `object.data.nope == "x"`, `object.data.nope == "x"`)),
		one("matchConditions/error then true", withConditions(pol("p", fail, never, addLabel("x", "1")), `object.data.nope == "x"`, `true`)),
		one("matchConditions/namespaceObject is null", withConditions(pol("p", fail, never, addLabel("x", "1")), `namespaceObject == null`)).expect(allowedWith(2)),
		one("matchConditions/request", withConditions(pol("p", fail, never, addLabel("x", "1")), `request.operation == "CREATE" && request.userInfo.username == "alice"`)),
		one("matchConditions/authorizer", withConditions(pol("p", fail, never, addLabel("x", "1")), `authorizer.group("").resource("pods").namespace("default").check("get").allowed()`)),
		one("matchConditions/authorizer masters", withConditions(pol("p", fail, never, addLabel("x", "1")), `authorizer.group("").resource("pods").namespace("default").check("get").allowed()`)).withReq(func(r *admission.Request) {
			r.UserInfo.Groups = append(r.UserInfo.Groups, "system:masters")
		}),
		one("matchConditions/oldObject on create", withConditions(pol("p", fail, never, addLabel("x", "1")), `oldObject == null`)),
		func() *diffCase {
			c := two("matchConditions/see earlier mutations", pol("", fail, never, addLabel("gate", "open")),
				withConditions(pol("", fail, never, addLabel("through", "1")), `has(object.metadata.labels.gate)`))
			return c.expect(allowedWith(2, `"through":"1"`))
		}(),
		func() *diffCase {
			c := one("matchConditions/with params", withConditions(withParams(pol("p", fail, never, addLabel("x", "1")), "v1", "ConfigMap"), `params.data.enabled == "true"`))
			c.bindings[0].Spec.ParamRef = paramRef("cfg", "", denyAct)
			c.params = []*unstructured.Unstructured{cmParam("cfg", "default", nil, map[string]any{"enabled": "true"})}
			return c.expect(allowedWith(2, `"x":"1"`))
		}(),
		one("matchConditions/budget", withConditions(pol("p", fail, never, addLabel("x", "1")),
			`[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, a > 0))))))`)),
	)

	// ---- params ----
	cfg := func(name, ns string, labels map[string]any, data map[string]any) *unstructured.Unstructured {
		return cmParam(name, ns, labels, data)
	}
	paramCase := func(name string, ref *admissionregistrationv1.ParamRef, params ...*unstructured.Unstructured) *diffCase {
		c := one(name, withParams(pol("p", fail, never, acLabel("from-param", `params.metadata.name + ":" + params.data.v`)), "v1", "ConfigMap"))
		c.bindings[0].Spec.ParamRef = ref
		c.params = params
		return c
	}
	add(
		paramCase("params/by name", paramRef("cfg", "", denyAct), cfg("cfg", "default", nil, map[string]any{"v": "1"})).expect(allowedWith(2, `"from-param":"cfg:1"`)),
		paramCase("params/by name in another namespace", paramRef("cfg", "prod", denyAct), cfg("cfg", "prod", nil, map[string]any{"v": "p"}), cfg("cfg", "default", nil, map[string]any{"v": "d"})).expect(allowedWith(2, `"cfg:p"`)),
		paramCase("params/not found Allow", paramRef("missing", "", allowAct), cfg("cfg", "default", nil, map[string]any{"v": "1"})).expect(allowedWith(1)),
		paramCase("params/not found Deny", paramRef("missing", "", denyAct), cfg("cfg", "default", nil, map[string]any{"v": "1"})).expect(denied("no params found")),
		paramCase("params/wrong namespace", paramRef("cfg", "", denyAct), cfg("cfg", "prod", nil, map[string]any{"v": "1"})),
		paramCase("params/selector, each param an invocation", selectorRef(map[string]string{"use": "yes"}, denyAct),
			cfg("one", "default", map[string]any{"use": "yes"}, map[string]any{"v": "1"}),
			cfg("two", "default", map[string]any{"use": "yes"}, map[string]any{"v": "2"}),
			cfg("three", "default", map[string]any{"use": "no"}, map[string]any{"v": "3"})).expect(allowedWith(2, `"from-param":"two:2"`)),
		paramCase("params/selector none Allow", selectorRef(map[string]string{"use": "nothing"}, allowAct), cfg("one", "default", map[string]any{"use": "yes"}, map[string]any{"v": "1"})),
		paramCase("params/selector none Deny", selectorRef(map[string]string{"use": "nothing"}, denyAct), cfg("one", "default", map[string]any{"use": "yes"}, map[string]any{"v": "1"})).expect(denied("no params found")),
		paramCase("params/empty selector", &admissionregistrationv1.ParamRef{Selector: &metav1.LabelSelector{}, ParameterNotFoundAction: ptr(denyAct)},
			cfg("one", "default", nil, map[string]any{"v": "1"}), cfg("zz", "default", nil, map[string]any{"v": "2"}), cfg("other", "prod", nil, map[string]any{"v": "3"})),
		paramCase("params/selector in another namespace", &admissionregistrationv1.ParamRef{Namespace: "prod", Selector: &metav1.LabelSelector{}, ParameterNotFoundAction: ptr(denyAct)},
			cfg("one", "default", nil, map[string]any{"v": "1"}), cfg("other", "prod", nil, map[string]any{"v": "3"})),
		paramCase("params/missing field", paramRef("cfg", "", denyAct), cfg("cfg", "default", nil, map[string]any{"w": "1"})).expect(denied("no such key")),
		func() *diffCase {
			c := paramCase("params/cluster-scoped kind with a namespace", paramRef("cfg", "default", denyAct), cfg("cfg", "", nil, map[string]any{"v": "1"}))
			c.clusterParams = true
			return c.expect(denied("must not be provided"))
		}(),
		func() *diffCase {
			c := paramCase("params/cluster-scoped kind", paramRef("cfg", "", denyAct), cfg("cfg", "", nil, map[string]any{"v": "c"}))
			c.clusterParams = true
			return c.expect(allowedWith(2, `"cfg:c"`))
		}(),
		func() *diffCase {
			c := one("params/namespaced kind on a cluster-scoped request", on(withParams(pol("p", fail, never, acLabel("x", `params.data.v`)), "v1", "ConfigMap"),
				rule([]string{"rbac.authorization.k8s.io"}, []string{"v1"}, []string{"clusterroles"})))
			c.bindings[0].Spec.ParamRef = paramRef("cfg", "", denyAct)
			c.params = []*unstructured.Unstructured{cfg("cfg", "default", nil, map[string]any{"v": "1"})}
			return c.withReq(onClusterRole).expect(denied("cannot use namespaced paramRef"))
		}(),
		func() *diffCase {
			c := one("params/no paramRef", withParams(pol("p", fail, never, acLabel("null", `string(params == null)`)), "v1", "ConfigMap"))
			return c.expect(allowedWith(2, `"null":"true"`))
		}(),
		paramCase("params/no params at all Deny", paramRef("missing", "", denyAct)).expect(denied("no params found")),
		func() *diffCase {
			c := paramCase("params/config error ignored", paramRef("missing", "", denyAct))
			c.policies[0].Spec.FailurePolicy = ptr(ignore)
			return c.expect(allowedWith(1))
		}(),
		func() *diffCase {
			c := paramCase("params/two bindings, two params", paramRef("one", "", denyAct),
				cfg("one", "default", nil, map[string]any{"v": "1"}), cfg("two", "default", nil, map[string]any{"v": "2"}))
			c.bindings = append(c.bindings, bindRef("b2", "p", paramRef("two", "", denyAct)))
			return c.expect(allowedWith(2, `"from-param":"two:2"`))
		}(),
		func() *diffCase {
			c := one("params/selector params see each other", withParams(pol("p", fail, never,
				JP(`[JSONPatch{op: "add", path: "/data/" + params.metadata.name, value: string(size(object.data))}]`)), "v1", "ConfigMap"))
			c.bindings[0].Spec.ParamRef = selectorRef(map[string]string{"use": "yes"}, denyAct)
			c.params = []*unstructured.Unstructured{cfg("p1", "default", map[string]any{"use": "yes"}, nil), cfg("p2", "default", map[string]any{"use": "yes"}, nil)}
			return c.expect(allowedWith(2, `"p1":"3"`, `"p2":"4"`))
		}(),
		func() *diffCase {
			c := one("params/custom kind", withParams(pol("p", fail, never, acLabel("tier", `params.spec.tier`)), "example.com/v1", "Tier"))
			c.bindings[0].Spec.ParamRef = paramRef("t", "", denyAct)
			c.params = []*unstructured.Unstructured{{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Tier",
				"metadata": map[string]any{"name": "t", "namespace": "default"}, "spec": map[string]any{"tier": "gold"}}}}
			return c.expect(allowedWith(2, `"tier":"gold"`))
		}(),
	)

	// ---- bindings ----
	add(
		func() *diffCase {
			c := one("bindings/matchResources do not match", pol("p", fail, never, addLabel("x", "1")))
			c.bindings[0].Spec.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}
			return c.expect(allowedWith(1))
		}(),
		func() *diffCase {
			c := one("bindings/matchResources match", pol("p", fail, never, addLabel("x", "1")))
			c.bindings[0].Spec.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}}
			return c.expect(allowedWith(2, `"x":"1"`))
		}(),
		func() *diffCase {
			c := one("bindings/objectSelector", pol("p", fail, never, addLabel("x", "1")))
			c.bindings[0].Spec.MatchResources = &admissionregistrationv1.MatchResources{ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}}
			return c
		}(),
		func() *diffCase {
			c := one("bindings/objectSelector no match", pol("p", fail, never, addLabel("x", "1")))
			c.bindings[0].Spec.MatchResources = &admissionregistrationv1.MatchResources{ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "other"}}}
			return c.expect(allowedWith(1))
		}(),
		func() *diffCase {
			c := one("bindings/excludeResourceRules", pol("p", fail, never, addLabel("x", "1")))
			c.bindings[0].Spec.MatchResources = &admissionregistrationv1.MatchResources{ExcludeResourceRules: []admissionregistrationv1.NamedRuleWithOperations{configmaps}}
			return c.expect(allowedWith(1))
		}(),
		func() *diffCase {
			c := one("bindings/resource rules narrower", pol("p", fail, never, addLabel("x", "1")))
			c.bindings[0].Spec.MatchResources = &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
				rule([]string{""}, []string{"v1"}, []string{"configmaps"}, admissionregistrationv1.Update)}}
			return c.expect(allowedWith(1))
		}(),
		func() *diffCase {
			c := one("bindings/two bindings apply twice", pol("p", fail, never, counter))
			c.bindings = append(c.bindings, bind("b2", "p"))
			return c.expect(allowedWith(2, `"n":"2"`))
		}(),
		func() *diffCase {
			c := one("bindings/binding of a missing policy", pol("p", fail, never, addLabel("x", "1")))
			c.bindings = append(c.bindings, bind("orphan", "missing"))
			return c
		}(),
		func() *diffCase {
			c := one("bindings/policy without binding", pol("p", fail, never, addLabel("x", "1")))
			c.bindings = nil
			return c.expect(allowedWith(1))
		}(),
		func() *diffCase {
			c := one("bindings/binding order", pol("p", fail, never, acLabel("last", `"x"`)))
			c.bindings = bindings(bind("z", "p"), bind("a", "p"))
			return c
		}(),
	)

	// ---- policy matching ----
	add(
		one("match/namespaceSelector", with(pol("p", fail, never, addLabel("x", "1")), func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.MatchConstraints.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
		})).expect(allowedWith(1)),
		one("match/namespaceSelector in prod", with(pol("p", fail, never, addLabel("x", "1")), func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.MatchConstraints.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
		})).withReq(func(r *admission.Request) {
			r.Namespace = "prod"
			r.Object["metadata"].(map[string]any)["namespace"] = "prod"
		}).expect(allowedWith(2)),
		one("match/objectSelector", with(pol("p", fail, never, addLabel("x", "1")), func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.MatchConstraints.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpExists}}}
		})).expect(allowedWith(2)),
		one("match/two rules", on(pol("p", fail, never, addLabel("x", "1")), pods, configmaps)),
		one("match/resourceNames other", with(pol("p", fail, never, addLabel("x", "1")), func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.MatchConstraints.ResourceRules[0].ResourceNames = []string{"alpha"}
		})).expect(allowedWith(1)),
		one("match/resourceNames named", with(pol("p", fail, never, addLabel("x", "1")), func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.MatchConstraints.ResourceRules[0].ResourceNames = []string{"beta"}
		})).expect(allowedWith(2)),
		one("match/UPDATE only on CREATE", on(pol("p", fail, never, addLabel("x", "1")),
			rule([]string{""}, []string{"v1"}, []string{"configmaps"}, admissionregistrationv1.Update))).expect(allowedWith(1)),
		one("match/UPDATE with oldObject", on(pol("p", fail, never, acLabel("old", `oldObject.metadata.labels.app + "-old"`)),
			rule([]string{""}, []string{"v1"}, []string{"configmaps"}, admissionregistrationv1.Update))).withReq(func(r *admission.Request) {
			r.Operation = admission.OpUpdate
			r.OldObject = cm("beta", "default", map[string]any{"app": "before"}, nil)
		}).expect(allowedWith(2, `"old":"before-old"`)),
		one("match/wildcard operations", on(pol("p", fail, never, addLabel("x", "1")),
			rule([]string{""}, []string{"v1"}, []string{"configmaps"}, admissionregistrationv1.OperationAll))),
		one("match/wildcard resources", on(pol("p", fail, never, addLabel("x", "1")),
			rule([]string{"*"}, []string{"*"}, []string{"*"}))),
		one("match/excludeResourceRules", with(pol("p", fail, never, addLabel("x", "1")), func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.MatchConstraints.ExcludeResourceRules = []admissionregistrationv1.NamedRuleWithOperations{configmaps}
		})).expect(allowedWith(1)),
		one("match/scope Cluster", with(pol("p", fail, never, addLabel("x", "1")), func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.MatchConstraints.ResourceRules[0].Scope = ptr(admissionregistrationv1.ClusterScope)
		})).expect(allowedWith(1)),
		one("match/scope Namespaced", with(pol("p", fail, never, addLabel("x", "1")), func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.MatchConstraints.ResourceRules[0].Scope = ptr(admissionregistrationv1.NamespacedScope)
		})).expect(allowedWith(2)),
		one("match/Equivalent version", on(pol("p", fail, never,
			AC(`Object{metadata: Object.metadata{labels: {"seen-as": request.kind.version + "/" + object.apiVersion}}, spec: Object.spec{replicas: 3}}`)),
			rule([]string{"apps"}, []string{"v1beta1"}, []string{"deployments"}))).withReq(onDeployment).expect(allowedWith(2, `"seen-as":"v1beta1/apps/v1beta1"`, `"apiVersion":"apps/v1"`)),
		one("match/Equivalent json patch", on(pol("p", fail, never,
			JP(`[JSONPatch{op: "add", path: "/metadata/labels/seen", value: object.apiVersion}]`)),
			rule([]string{"apps"}, []string{"v1beta2"}, []string{"deployments"}))).withReq(onDeployment),
		one("match/Exact version", with(on(pol("p", fail, never, addLabel("x", "1")),
			rule([]string{"apps"}, []string{"v1beta1"}, []string{"deployments"})), func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.MatchConstraints.MatchPolicy = ptr(admissionregistrationv1.Exact)
		})).withReq(onDeployment).expect(allowedWith(1)),
		one("match/subresource", on(pol("p", fail, never, acLabel("status", `"seen"`)),
			rule([]string{""}, []string{"v1"}, []string{"pods/status"}, admissionregistrationv1.Update))).withReq(func(r *admission.Request) {
			onPod(r)
			r.Operation = admission.OpUpdate
			r.OldObject = pod()
			r.SubResource = "status"
		}).expect(allowedWith(2, `"status":"seen"`)),
		one("match/main resource rule on a subresource", on(pol("p", fail, never, addLabel("x", "1")), pods)).withReq(func(r *admission.Request) {
			onPod(r)
			r.Operation = admission.OpUpdate
			r.OldObject = pod()
			r.SubResource = "status"
		}).expect(allowedWith(1)),
		one("match/other resource", pol("p", fail, never, addLabel("x", "1"))).withReq(onPod).expect(allowedWith(1)),
	)

	// ---- reinvocation ----
	add(
		one("reinvocation/IfNeeded counter", pol("p", fail, ifNeeded, counter)).expect(allowedWith(2, `"n":"2"`)),
		one("reinvocation/Never counter", pol("p", fail, never, counter)).expect(allowedWith(2, `"n":"1"`)),
		one("reinvocation/IfNeeded no-op then counter", pol("p", fail, ifNeeded, AC(`Object{}`), counter)).expect(allowedWith(2, `"n":"2"`)),
		two("reinvocation/IfNeeded then Never", pol("", fail, ifNeeded, counter), pol("", fail, never, addLabel("b", "x"))).expect(allowedWith(2, `"n":"2"`, `"b":"x"`)),
		two("reinvocation/Never then IfNeeded", pol("", fail, never, counter), pol("", fail, ifNeeded, counter)).expect(allowedWith(2, `"n":"3"`)),
		two("reinvocation/both IfNeeded", pol("", fail, ifNeeded, counter), pol("", fail, ifNeeded, counter)).expect(allowedWith(2, `"n":"4"`)),
		one("reinvocation/IfNeeded that only fails", pol("p", ignore, ifNeeded, JP(`[JSONPatch{op: "remove", path: "/data/nope"}]`))).expect(allowedWith(1)),
		two("reinvocation/IfNeeded failing, other succeeds", pol("", ignore, ifNeeded, JP(`[JSONPatch{op: "remove", path: "/data/nope"}]`)), pol("", fail, never, addLabel("b", "x"))).expect(allowedWith(2)),
		one("reinvocation/IfNeeded failing test op", pol("p", fail, ifNeeded,
			JP(`[JSONPatch{op: "test", path: "/data/a", value: "nope"}, JSONPatch{op: "add", path: "/data/t", value: "x"}]`))).expect(allowedWith(2)),
		one("reinvocation/IfNeeded matchCondition false after", withConditions(pol("p", fail, ifNeeded, counter), `object.metadata.labels.n == "0"`)).expect(allowedWith(2, `"n":"1"`)),
		two("reinvocation/Never condition errors in the second pass",
			withConditions(pol("", fail, never, addLabel("a", "x")), `object.data.b == "2"`),
			pol("", fail, never, JP(`[JSONPatch{op: "remove", path: "/data/b"}]`))).expect(denied("no such key")),
		two("reinvocation/second-pass condition error ignored",
			withConditions(pol("", ignore, never, addLabel("a", "x")), `object.data.b == "2"`),
			pol("", fail, never, JP(`[JSONPatch{op: "remove", path: "/data/b"}]`))).expect(allowedWith(2)),
		func() *diffCase {
			// b matches only once a has labelled the object: the
			// reinvocation does not run it (it was not invoked before).
			c := two("reinvocation/newly matching policy is not invoked", pol("", fail, never, addLabel("select", "me")), pol("", fail, ifNeeded, addLabel("b", "ran")))
			c.policies[1].Spec.MatchConstraints.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"select": "me"}}
			return c.expect(allowedWith(2))
		}(),
		func() *diffCase {
			c := two("reinvocation/newly matching binding config error", pol("", fail, never, addLabel("select", "me")), withParams(pol("", fail, never, addLabel("b", "ran")), "v1", "ConfigMap"))
			c.bindings[1].Spec.ParamRef = paramRef("missing", "", denyAct)
			c.bindings[1].Spec.MatchResources = &admissionregistrationv1.MatchResources{ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"select": "me"}}}
			return c.expect(denied("no params found"))
		}(),
		func() *diffCase {
			c := two("reinvocation/unselected after mutation", pol("", fail, never, JP(`[JSONPatch{op: "remove", path: "/metadata/labels/app"}]`)), pol("", fail, ifNeeded, counter))
			c.policies[1].Spec.MatchConstraints.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}
			return c.expect(allowedWith(2, `"n":"1"`))
		}(),
		func() *diffCase {
			c := one("reinvocation/IfNeeded with params", withParams(pol("p", fail, ifNeeded, counter), "v1", "ConfigMap"))
			c.bindings[0].Spec.ParamRef = selectorRef(map[string]string{"use": "yes"}, denyAct)
			c.params = []*unstructured.Unstructured{cfg("p1", "default", map[string]any{"use": "yes"}, nil), cfg("p2", "default", map[string]any{"use": "yes"}, nil)}
			return c.expect(allowedWith(2, `"n":"4"`))
		}(),
		one("reinvocation/IfNeeded list append", on(pol("p", fail, ifNeeded,
			JP(`[JSONPatch{op: "add", path: "/metadata/finalizers/-", value: "x"}]`)), pods)).withReq(onPod).expect(allowedWith(2, `["f1","x","x"]`)),
		one("reinvocation/IfNeeded idempotent apply config", pol("p", fail, ifNeeded, acLabel("fixed", `"v"`))).expect(allowedWith(2)),
		one("reinvocation/no match, one pass", withConditions(pol("p", fail, ifNeeded, counter), `false`)).expect(allowedWith(1, `"n":"0"`)),
		one("reinvocation/IfNeeded error in second pass", pol("p", fail, ifNeeded,
			JP(`object.metadata.labels.n == "0" ? [JSONPatch{op: "replace", path: "/metadata/labels/n", value: "1"}] : [JSONPatch{op: "remove", path: "/data/nope"}]`))).expect(denied("JSON Patch")),
	)

	// ---- errors and budgets ----
	add(
		one("errors/division by zero", pol("p", fail, never, acLabel("x", `string(1 / (size(object.data) - 3))`))).expect(denied("division by zero")),
		one("errors/no such key ignored", pol("p", ignore, never, acLabel("x", `object.data.nope`))).expect(allowedWith(1)),
		one("errors/bad int conversion", pol("p", fail, never, acLabel("x", `string(int(object.data.a + "x"))`))),
		one("errors/null object field", pol("p", fail, never, acLabel("x", `object.metadata.annotations.x`))),
		func() *diffCase {
			c := one("errors/mutation cost budget", on(pol("p", fail, never, JP(
				`[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, [1,2,3,4,5,6,7,8,9,10].all(g, a > 0))))))) ? [JSONPatch{op: "add", path: "/data/x", value: "1"}] : [JSONPatch{op: "add", path: "/data/x", value: "2"}]`)), configmaps))
			c.expensive = true
			return c
		}(),
		func() *diffCase {
			c := one("errors/variable cost budget", withVars(pol("p", fail, never, acLabel("x", `string(variables.big)`)), "big",
				`[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, [1,2,3,4,5,6,7,8,9,10].all(g, a > 0)))))))`))
			c.expensive = true
			return c
		}(),
		func() *diffCase {
			c := one("errors/matchCondition cost budget", withConditions(pol("p", fail, never, addLabel("x", "1")),
				`[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, [1,2,3,4,5,6,7,8,9,10].all(g, a > 0)))))))`))
			c.expensive = true
			return c
		}(),
	)

	// A pass's budget (2.5M for matchConditions, 10M per mutation) spent by
	// expressions that each stay under the per-call limit.
	five := `[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, a > 0)))))`
	add(
		func() *diffCase {
			c := one("errors/matchConditions run out of budget", withConditions(pol("p", fail, never, addLabel("x", "1")), five, five, five, five, five, five))
			c.expensive = true
			return c.expect(denied("running out of cost budget"))
		}(),
		func() *diffCase {
			var kv []string
			var refs []string
			for i := 0; i < 24; i++ {
				kv = append(kv, fmt.Sprintf("v%d", i), five)
				refs = append(refs, fmt.Sprintf("variables.v%d", i))
			}
			c := one("errors/mutation runs out of budget", withVars(pol("p", fail, never, acLabel("x", `string(`+strings.Join(refs, " && ")+`)`)), kv...))
			c.expensive = true
			return c.expect(denied("running out of cost budget"))
		}(),
	)

	// ---- the request: namespaces, users, operations ----
	add(
		one("request/namespaceObject in a mutation", pol("p", fail, never, acLabel("ns-env", `namespaceObject.metadata.labels.env`))).expect(allowedWith(2, `"ns-env":"dev"`)),
		one("request/namespaceObject full", pol("p", fail, never, acLabel("ns", `namespaceObject.metadata.name + string(has(namespaceObject.spec))`))),
		one("request/namespaceObject in prod", pol("p", fail, never, acLabel("ns-env", `namespaceObject.metadata.labels.env`))).withReq(func(r *admission.Request) {
			r.Namespace = "prod"
			r.Object["metadata"].(map[string]any)["namespace"] = "prod"
		}).expect(allowedWith(2, `"ns-env":"prod"`)),
		one("request/Namespace object: namespaceObject is null", on(pol("p", fail, never,
			acLabel("null", `string(namespaceObject == null)`)), rule([]string{""}, []string{"v1"}, []string{"namespaces"}))).withReq(onNamespace).expect(allowedWith(2, `"null":"true"`)),
		one("request/Namespace selector by its own labels", with(on(pol("p", fail, never, addLabel("x", "1")), rule([]string{""}, []string{"v1"}, []string{"namespaces"})),
			func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
				p.Spec.MatchConstraints.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "t"}}
			})).withReq(onNamespace).expect(allowedWith(2)),
		one("request/cluster-scoped object", on(pol("p", fail, never,
			acLabel("null", `string(namespaceObject == null)`)), rule([]string{"rbac.authorization.k8s.io"}, []string{"v1"}, []string{"clusterroles"}))).withReq(onClusterRole).expect(allowedWith(2, `"null":"true"`)),
		one("request/user", pol("p", fail, never, acLabel("user", `request.userInfo.username + "." + request.userInfo.groups[0]`))).expect(allowedWith(2, `"user":"alice.devs"`)),
		one("request/kind and resource", pol("p", fail, never, acLabel("what", `request.kind.kind + "." + request.resource.resource + "." + request.operation`))),
		one("request/dry run", pol("p", fail, never, acLabel("dry", `string(request.dryRun)`))).withReq(func(r *admission.Request) { r.DryRun = true }),
		one("request/name and namespace", pol("p", fail, never, acLabel("id", `request.namespace + "." + request.name`))),
		one("request/authorizer in a mutation", pol("p", fail, never, acLabel("can", `string(authorizer.group("").resource("secrets").namespace("default").check("list").allowed())`))),
		one("request/authorizer masters in a mutation", pol("p", fail, never, acLabel("can", `string(authorizer.group("").resource("secrets").namespace("default").check("list").allowed())`))).withReq(func(r *admission.Request) {
			r.UserInfo.Groups = []string{"system:masters"}
		}).expect(allowedWith(2, `"can":"true"`)),
		one("request/requestResource authorizer", pol("p", fail, never, acLabel("can", `string(authorizer.requestResource.check("create").allowed())`))),
		one("request/UPDATE", pol("p", fail, never, acLabel("op", `request.operation`))).withReq(func(r *admission.Request) {
			r.Operation = admission.OpUpdate
			r.OldObject = configMap()
		}).expect(allowedWith(2, `"op":"UPDATE"`)),
		one("request/DELETE is not handled", on(pol("p", fail, never, addLabel("x", "1")),
			rule([]string{""}, []string{"v1"}, []string{"configmaps"}, admissionregistrationv1.OperationAll))).withReq(func(r *admission.Request) {
			r.Operation = admission.OpDelete
			r.OldObject, r.Object = r.Object, nil
		}).expect(func(t *testing.T, o outcome) {
			if !o.allowed || o.passes != 0 {
				t.Fatalf("a DELETE is not dispatched: %s", o)
			}
		}),
		one("request/CONNECT without an object", on(pol("p", fail, never, addLabel("x", "1")),
			rule([]string{""}, []string{"v1"}, []string{"pods/exec"}, admissionregistrationv1.Connect))).withReq(onConnect).expect(allowedWith(1)),
		one("request/CONNECT matchCondition on null", withConditions(on(pol("p", fail, never, addLabel("x", "1")),
			rule([]string{""}, []string{"v1"}, []string{"pods/exec"}, admissionregistrationv1.Connect)), `object == null`)).withReq(onConnect).expect(allowedWith(1)),
		one("request/CONNECT matchCondition error", withConditions(on(pol("p", fail, never, addLabel("x", "1")),
			rule([]string{""}, []string{"v1"}, []string{"pods/exec"}, admissionregistrationv1.Connect)), `object.metadata.name == "x"`)).withReq(onConnect),
		one("request/CONNECT request options", withConditions(on(pol("p", fail, never, addLabel("x", "1")),
			rule([]string{""}, []string{"v1"}, []string{"pods/exec"}, admissionregistrationv1.Connect)), `request.subResource == "exec"`)).withReq(onConnect),
		one("request/CREATE of a pod binding subresource", on(pol("p", fail, never, addLabel("x", "1")),
			rule([]string{""}, []string{"v1"}, []string{"pods/binding"}, admissionregistrationv1.Create))).withReq(func(r *admission.Request) {
			r.Object = map[string]any{"apiVersion": "v1", "kind": "Binding", "metadata": map[string]any{"name": "p1", "namespace": "default"}, "target": map[string]any{"kind": "Node", "name": "n1"}}
			r.Kind = schema.GroupVersionKind{Version: "v1", Kind: "Binding"}
			r.Resource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
			r.SubResource = "binding"
			r.Name = "p1"
		}),
	)
	// Every JSON patch and apply configuration case again with failurePolicy
	// Ignore and reinvocationPolicy IfNeeded (their errors are dropped;
	// their successes run twice).
	var variants []*diffCase
	for _, c := range cs {
		if !strings.HasPrefix(c.name, "jsonpatch/") && !strings.HasPrefix(c.name, "applyconfig/") {
			continue
		}
		v := *c
		v.name = "ignore-ifneeded/" + c.name
		v.check = nil
		v.policies = nil
		for _, p := range c.policies {
			p = p.DeepCopy()
			p.Spec.FailurePolicy = ptr(ignore)
			p.Spec.ReinvocationPolicy = ifNeeded
			v.policies = append(v.policies, p)
		}
		variants = append(variants, &v)
	}
	add(variants...)

	// ---- refused at load (API validation) ----
	add(
		one("load/DELETE may not be matched", on(pol("p", fail, never, addLabel("x", "1")),
			rule([]string{""}, []string{"v1"}, []string{"configmaps"}, admissionregistrationv1.Delete))).refused(`spec.matchConstraints.resourceRules.operations: Unsupported value: "DELETE": supported values: "*", "CONNECT", "CREATE", "UPDATE"`),
		func() *diffCase {
			c := one("load/binding may not match DELETE", pol("p", fail, never, addLabel("x", "1")))
			c.bindings[0].Spec.MatchResources = &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
				rule([]string{""}, []string{"v1"}, []string{"configmaps"}, admissionregistrationv1.Delete)}}
			return c.refused(`spec.matchResources.resourceRules.operations: Unsupported value: "DELETE"`)
		}(),
		one("load/no mutations", pol("p", fail, never)).refused("spec.mutations: Required value: mutations must contain at least one item"),
		one("load/no reinvocationPolicy", pol("p", fail, "")).refused("spec.reinvocationPolicy: Required value"),
		one("load/bad reinvocationPolicy", pol("p", fail, "Sometimes")).refused(`spec.reinvocationPolicy: Unsupported value: "Sometimes": supported values: "IfNeeded", "Never"`),
		one("load/bad failurePolicy", pol("p", "Maybe", never, addLabel("x", "1"))).refused(`spec.failurePolicy: Unsupported value: "Maybe"`),
		one("load/no patchType", pol("p", fail, never, admissionregistrationv1.Mutation{JSONPatch: &admissionregistrationv1.JSONPatch{Expression: "[]"}})).refused("spec.mutations[0].patchType: Required value"),
		one("load/bad patchType", pol("p", fail, never, admissionregistrationv1.Mutation{PatchType: "Merge"})).refused(`spec.mutations[0].patchType: Unsupported value: "Merge": supported values: "ApplyConfiguration", "JSONPatch"`),
		one("load/JSONPatch without jsonPatch", pol("p", fail, never, admissionregistrationv1.Mutation{PatchType: admissionregistrationv1.PatchTypeJSONPatch})).refused("spec.mutations[0].jsonPatch: Required value: must be specified when patchType is JSONPatch"),
		one("load/both patches", pol("p", fail, never, JP("[]"), admissionregistrationv1.Mutation{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
			ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: "Object{}"}, JSONPatch: &admissionregistrationv1.JSONPatch{Expression: "[]"}})).refused("spec.mutations[1].jsonPatch: Invalid value: \"{jsonPatch}\": must not be specified when patchType is ApplyConfiguration"),
		one("load/empty expression", pol("p", fail, never, AC("  "))).refused("spec.mutations[0].applyConfiguration.expression: Required value"),
		one("load/apply config of the wrong type", pol("p", fail, never, AC(`[JSONPatch{op: "add", path: "/x", value: 1}]`))).refused("spec.mutations[0].applyConfiguration.expression: Invalid value"),
		one("load/json patch of the wrong type", pol("p", fail, never, JP(`Object{}`))).refused("spec.mutations[0].jsonPatch.expression: Invalid value"),
		one("load/compile error", pol("p", fail, never, AC(`Object{metadata: nope}`))).refused("undeclared reference to 'nope'"),
		one("load/variables in matchConditions", withVars(withConditions(pol("p", fail, never, addLabel("x", "1")), `variables.x == 1`), "x", "1")).refused("spec.matchConditions[0].expression: Invalid value"),
		one("load/patch types outside mutations", withVars(pol("p", fail, never, addLabel("x", "1")), "o", "Object{}")).refused("spec.variables[0].expression: Invalid value"),
		one("load/params without paramKind", pol("p", fail, never, acLabel("x", "params.data.v"))).refused("undeclared reference to 'params'"),
		one("load/no matchConstraints", with(pol("p", fail, never, addLabel("x", "1")), func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.MatchConstraints = nil
		})).refused("spec.matchConstraints: Required value"),
		one("load/no resourceRules", with(pol("p", fail, never, addLabel("x", "1")), func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.MatchConstraints.ResourceRules = nil
		})).refused("spec.matchConstraints.resourceRules: Required value"),
		one("load/too many matchConditions", withConditions(pol("p", fail, never, addLabel("x", "1")), strings.Split(strings.Repeat("true,", 65)[:5*65-1], ",")...)).refused("spec.matchConditions: Too many: 65: must have at most 64 items"),
		func() *diffCase {
			c := one("load/binding without policyName", pol("p", fail, never, addLabel("x", "1")))
			c.bindings[0].Spec.PolicyName = ""
			return c.refused("spec.policyName: Required value")
		}(),
		func() *diffCase {
			c := one("load/paramRef name and selector", withParams(pol("p", fail, never, addLabel("x", "1")), "v1", "ConfigMap"))
			c.bindings[0].Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "x", Selector: &metav1.LabelSelector{}, ParameterNotFoundAction: ptr(denyAct)}
			return c.refused("name and selector are mutually exclusive")
		}(),
		func() *diffCase {
			c := one("load/paramRef without parameterNotFoundAction", withParams(pol("p", fail, never, addLabel("x", "1")), "v1", "ConfigMap"))
			c.bindings[0].Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "x"}
			return c.refused("spec.paramRef.parameterNotFoundAction: Required value")
		}(),
		one("load/bad variable name", withVars(pol("p", fail, never, addLabel("x", "1")), "in", "1")).refused("spec.variables[0].name: Invalid value"),
		&diffCase{name: "load/bad policy name", policies: policies(named("Not_A_Name", pol("", fail, never, addLabel("x", "1")))),
			bindings: bindings(bind("b", "Not_A_Name")), loadError: "metadata.name: Invalid value"},
	)
	return cs
}

func (c *diffCase) refused(msg string) *diffCase {
	c.loadError = msg
	return c
}

func onNamespace(r *admission.Request) {
	r.Object = map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "team", "labels": map[string]any{"team": "t"}}}
	r.Kind = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	r.Resource = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	r.Name, r.Namespace = "team", "team"
}

func onConnect(r *admission.Request) {
	r.Operation = admission.OpConnect
	r.Object = nil
	r.Kind = schema.GroupVersionKind{Version: "v1", Kind: "PodExecOptions"}
	r.Resource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	r.SubResource = "exec"
	r.Name = "p1"
}

func onClusterRole(r *admission.Request) {
	r.Object = map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": "cr", "labels": map[string]any{"a": "b"}}}
	r.Kind = schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}
	r.Resource = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
	r.Name, r.Namespace = "cr", ""
}
