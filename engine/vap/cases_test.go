package vap_test

import (
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/vap"
)

type P = admissionregistrationv1.ValidatingAdmissionPolicy
type B = admissionregistrationv1.ValidatingAdmissionPolicyBinding

// nested is an expression of n nested all() over ten elements: about
// 10^n iterations.
func nested(n int) string {
	vars := "abcdefgh"
	expr := "true"
	for i := n - 1; i >= 0; i-- {
		expr = "[1,2,3,4,5,6,7,8,9,10].all(" + string(vars[i]) + ", " + expr + ")"
	}
	return expr
}

// heavyAnnotation costs about 837,000: under the per-call limit; twelve
// exceed the budget of 10,000,000.
const heavyAnnotation = "[1,2,3,4,5,6,7,8,9,10,11,12].all(a, [1,2,3,4,5,6,7,8,9,10,11,12].all(b, [1,2,3,4,5,6,7,8,9,10,11,12].all(c, [1,2,3,4,5,6,7,8,9,10,11,12].all(d, [1,2,3,4,5,6,7,8,9,10,11,12].all(e, true))))) ? 'y' : 'n'"

// nested(5) costs 344,441: 29 fit in the budget of 10,000,000, 30 do not.

func validations(n int, v admissionregistrationv1.Validation) []admissionregistrationv1.Validation {
	out := make([]admissionregistrationv1.Validation, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func mc(name, expr string) admissionregistrationv1.MatchCondition {
	return admissionregistrationv1.MatchCondition{Name: name, Expression: expr}
}

func variable(name, expr string) admissionregistrationv1.Variable {
	return admissionregistrationv1.Variable{Name: name, Expression: expr}
}

func aa(key, expr string) admissionregistrationv1.AuditAnnotation {
	return admissionregistrationv1.AuditAnnotation{Key: key, ValueExpression: expr}
}

func selector(labels map[string]string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: labels}
}

func withParamKind(p *P, apiVersion, kind string) *P {
	p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: apiVersion, Kind: kind}
	return p
}

func withRef(c *diffCase, ref *admissionregistrationv1.ParamRef) *diffCase {
	c.bindings[0].Spec.ParamRef = ref
	return c
}

func withParams(c *diffCase, params ...*unstructured.Unstructured) *diffCase {
	c.params = params
	return c
}

// clusterRequest is a CREATE of a ClusterRole.
func clusterRequest(r *admission.Request) {
	r.Object = map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": "reader", "labels": map[string]any{"env": "dev"}}}
	r.Kind = schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}
	r.Resource = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
	r.Name, r.Namespace = "reader", ""
}

var clusterroles = rule([]string{"rbac.authorization.k8s.io"}, []string{"v1"}, []string{"clusterroles"})

// namespaceRequest is a CREATE of the Namespace "team-a".
func namespaceRequest(r *admission.Request) {
	r.Object = map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "team-a", "labels": map[string]any{"env": "dev"}}}
	r.Kind = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	r.Resource = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	r.Name, r.Namespace = "team-a", ""
}

var namespacesRule = rule([]string{""}, []string{"v1"}, []string{"namespaces"})

// deploymentRequest is a CREATE of a Deployment at apiVersion (group/version).
func deploymentRequest(apiVersion string) func(r *admission.Request) {
	return func(r *admission.Request) {
		gv, _ := schema.ParseGroupVersion(apiVersion)
		r.Object = map[string]any{"apiVersion": apiVersion, "kind": "Deployment",
			"metadata": map[string]any{"name": "web", "namespace": "default", "labels": map[string]any{"app": "web"}},
			"spec":     map[string]any{"replicas": int64(5)}}
		r.Kind = gv.WithKind("Deployment")
		r.Resource = gv.WithResource("deployments")
		r.Name = "web"
	}
}

var deploymentsV1 = rule([]string{"apps"}, []string{"v1"}, []string{"deployments"})

func matchOn(p *P, rules ...admissionregistrationv1.NamedRuleWithOperations) *P {
	p.Spec.MatchConstraints.ResourceRules = rules
	return p
}

func seedDenied(message string) *outcome {
	return &outcome{allowed: false, code: 422, reason: "Invalid", message: "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: " + message}
}

func differentialCases() []*diffCase {
	F, I := fail, ignore
	var cs []*diffCase
	add := func(c ...*diffCase) { cs = append(cs, c...) }

	// ---- messages ----
	add(
		one("message/plain", pol("", F, V("object.metadata.name.startsWith('a')", "name must start with a", ""))),
		one("message/none: failed expression, trimmed", pol("", F, V("  object.metadata.name.startsWith('a')  ", "", ""))),
		one("message/messageExpression", pol("", F, V("false", "static", "'dynamic: ' + object.metadata.name"))),
		one("message/messageExpression blank: message", pol("", F, V("false", "static", "'   '"))),
		one("message/messageExpression empty: message", pol("", F, V("false", "static", "''"))),
		one("message/messageExpression newline: message", pol("", F, V("false", "static", "'a\\nb'"))),
		one("message/messageExpression carriage return kept", pol("", F, V("false", "static", "'a\\rb'"))),
		one("message/messageExpression error: message", pol("", F, V("false", "static", "string(object.metadata.nope)"))),
		one("message/messageExpression error, no message: failed expression", pol("", F, V("false", "", "string(object.metadata.nope)"))),
		one("message/messageExpression over 5KiB: failed expression", pol("", F, V("false", "", "'"+strings.Repeat("m", 5*1024+1)+"'"))),
		one("message/messageExpression over 5KiB: message", pol("", F, V("false", "long", "'"+strings.Repeat("m", 5*1024+1)+"'"))),
		one("message/messageExpression of exactly 5KiB", pol("", F, V("false", "long", "'"+strings.Repeat("m", 5*1024)+"'"))),
		one("message/messageExpression trimmed", pol("", F, V("false", "static", "'  padded  '"))),
		one("message/message trimmed", pol("", F, V("false", "  padded message  ", ""))),
		one("message/messageExpression with a newline inside padding", pol("", F, V("false", "static", "'x\\n'"))),
		one("message/only the failing validations", pol("", F, V("true", "first", ""), V("false", "second", ""), V("false", "third", ""))),
	)

	// ---- reasons and codes ----
	add(
		one("reason/Forbidden 403", pol("", F, VR("false", "nope", metav1.StatusReasonForbidden))),
		one("reason/RequestEntityTooLarge 413", pol("", F, VR("false", "nope", metav1.StatusReasonRequestEntityTooLarge))),
		one("reason/Unauthorized 401", pol("", F, VR("false", "nope", metav1.StatusReasonUnauthorized))),
		one("reason/Invalid 422", pol("", F, VR("false", "nope", metav1.StatusReasonInvalid))),
		one("reason/first failing validation decides", pol("", F, VR("true", "ok", metav1.StatusReasonUnauthorized),
			VR("false", "forbidden", metav1.StatusReasonForbidden), VR("false", "too large", metav1.StatusReasonRequestEntityTooLarge))),
		one("reason/an error has none: Invalid", pol("", F, V("object.metadata.nope == 'x'", "", ""), VR("false", "nope", metav1.StatusReasonForbidden))),
	)

	// ---- validationActions ----
	add(
		one("actions/Warn", pol("", F, V("false", "warned", "")), warn),
		one("actions/Audit", pol("", F, V("true", "ok", ""), V("false", "audited", "")), audit),
		one("actions/Deny+Audit", pol("", F, V("false", "both", "")), deny, audit),
		one("actions/Warn+Audit", pol("", F, V("false", "seen", "")), warn, audit),
		one("actions/Audit of two failures", pol("", F, V("false", "one", ""), V("true", "ok", ""), V("false", "three", "")), audit),
		one("actions/Warn of a runtime error", pol("", F, V("object.metadata.nope == 'x'", "m", "")), warn),
		one("actions/Audit of a runtime error", pol("", F, V("object.metadata.nope == 'x'", "m", "")), audit),
		one("actions/Audit of a runtime error, Ignore", pol("", I, V("object.metadata.nope == 'x'", "m", "")), audit),
		one("actions/Audit message with quotes and markup", pol("", F, V("false", `"quoted" <b>&amp;</b>`, "")), audit),
		&diffCase{name: "actions/two bindings: Deny and Warn",
			policies: []*P{pol("p", F, V("false", "failed", ""))},
			bindings: []*B{bind("b1", "p", deny), bind("b2", "p", warn)}},
		&diffCase{name: "actions/bindings in name order",
			policies: []*P{pol("p", F, V("false", "failed", ""))},
			bindings: []*B{bind("zz", "p", deny), bind("aa", "p", deny, audit)}},
		&diffCase{name: "actions/two policies: the first by name denies",
			policies: []*P{pol("second", F, V("false", "from second", "")), pol("first", F, V("false", "from first", ""))},
			bindings: []*B{bind("b", "second"), bind("b", "first")}},
		&diffCase{name: "actions/two policies: only the second fails",
			policies: []*P{pol("alpha", F, V("true", "", "")), pol("beta", F, V("false", "beta says no", ""))},
			bindings: []*B{bind("b1", "alpha"), bind("b2", "beta")}},
		&diffCase{name: "actions/warnings of two policies in order",
			policies: []*P{pol("p2", F, V("false", "two", "")), pol("p1", F, V("false", "one", ""))},
			bindings: []*B{bind("w", "p2", warn), bind("w", "p1", warn, audit)}},
	)

	// ---- failurePolicy and runtime errors ----
	add(
		one("errors/runtime error, Fail", pol("", F, V("object.metadata.nope == 'x'", "m", ""))),
		one("errors/runtime error, Ignore", pol("", I, V("object.metadata.nope == 'x'", "m", ""))),
		one("errors/runtime error, Ignore, another fails", pol("", I, V("object.metadata.nope == 'x'", "m", ""), V("false", "still denied", ""))),
		one("errors/no such overload", pol("", F, V("object.data.count > 1", "m", ""))),
		one("errors/index out of bounds", pol("", F, V("[1][2] == 1", "m", ""))),
		one("errors/division by zero", pol("", F, V("1 / (size(object.data) - 5) == 1", "m", ""))),
		one("errors/failurePolicy defaults to Fail", with(pol("", F, V("object.metadata.nope == 'x'", "m", "")), func(p *P) { p.Spec.FailurePolicy = nil })),
	)

	// ---- matchConditions ----
	mcPolicy := func(fp admissionregistrationv1.FailurePolicyType, conds ...admissionregistrationv1.MatchCondition) *P {
		return with(pol("", fp, V("false", "evaluated", "")), func(p *P) { p.Spec.MatchConditions = conds })
	}
	add(
		one("matchConditions/false: skipped", mcPolicy(F, mc("is-alpha", "object.metadata.name == 'alpha'"))),
		one("matchConditions/true: evaluated", mcPolicy(F, mc("is-beta", "object.metadata.name == 'beta'"))),
		one("matchConditions/error, Fail", mcPolicy(F, mc("boom", "object.metadata.nope == 'x'"), mc("t", "true"))),
		one("matchConditions/error, Ignore", mcPolicy(I, mc("boom", "object.metadata.nope == 'x'"), mc("t", "true"))),
		one("matchConditions/two errors aggregated", mcPolicy(F, mc("e1", "object.metadata.nope1 == 'x'"), mc("e2", "object.metadata.nope2 == 'x'"))),
		one("matchConditions/identical errors once", mcPolicy(F, mc("e1", "object.metadata.nope == 'x'"), mc("e2", "object.metadata.nope == 'x'"))),
		one("matchConditions/error then false: skipped", mcPolicy(F, mc("e1", "object.metadata.nope1 == 'x'"), mc("f", "false"))),
		one("matchConditions/false then error: skipped", mcPolicy(F, mc("f", "false"), mc("e1", "object.metadata.nope1 == 'x'"))),
		one("matchConditions/namespaceObject is null", with(pol("", F, V("false", "matchConditions saw namespaceObject == null", "")), func(p *P) {
			p.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{mc("ns-null", "namespaceObject == null")}
		})),
		one("matchConditions/authorizer, system:masters", mcPolicy(F, mc("can", "authorizer.group('').resource('pods').namespace('default').check('delete').allowed()"))).withReq(func(r *admission.Request) {
			r.UserInfo.Groups = append(r.UserInfo.Groups, vap.MastersGroup)
		}),
		one("matchConditions/authorizer, no opinion", mcPolicy(F, mc("can", "authorizer.group('').resource('pods').namespace('default').check('delete').allowed()"))),
		one("matchConditions/request fields", mcPolicy(F, mc("op", "request.operation == 'CREATE' && request.userInfo.username == 'alice'"))),
		one("matchConditions/budget exceeded, Fail", mcPolicy(F, mc("c1", nested(5)), mc("c2", nested(5)), mc("c3", nested(5)), mc("c4", nested(5)),
			mc("c5", nested(5)), mc("c6", nested(5)), mc("c7", nested(5)), mc("c8", nested(5)), mc("c9", nested(5)), mc("c10", nested(5)))),
		one("matchConditions/budget exceeded, Ignore", mcPolicy(I, mc("c1", nested(5)), mc("c2", nested(5)), mc("c3", nested(5)), mc("c4", nested(5)),
			mc("c5", nested(5)), mc("c6", nested(5)), mc("c7", nested(5)), mc("c8", nested(5)), mc("c9", nested(5)), mc("c10", nested(5)))),
		one("matchConditions/per-call limit is an error", mcPolicy(F, mc("big", nested(6)))),
		one("matchConditions/64 conditions", mcPolicy(F, func() []admissionregistrationv1.MatchCondition {
			var out []admissionregistrationv1.MatchCondition
			for i := 0; i < 64; i++ {
				out = append(out, mc("c"+strconv.Itoa(i), "true"))
			}
			return out
		}()...)),
	)
	mcParams := withParamKind(mcPolicy(F, mc("enabled", "params.data.enabled == 'true'")), "v1", "ConfigMap")
	add(withParams(withRef(one("matchConditions/with params", mcParams), paramRef("switch", "", admissionregistrationv1.DenyAction)),
		param("ConfigMap", "default", "switch", nil, map[string]any{"enabled": "false"})))

	// ---- variables ----
	add(
		one("variables/lazy, ordered, namespaceObject", with(pol("", F, V("variables.isBeta && variables.nsName == 'default'", "", "'vars: ' + variables.nsName")), func(p *P) {
			p.Spec.Variables = []admissionregistrationv1.Variable{variable("unused", "object.metadata.nope"), variable("isBeta", "object.metadata.name != 'beta'"), variable("nsName", "namespaceObject.metadata.name")}
		})),
		one("variables/runtime error", with(pol("", F, V("variables.bad == 'x'", "m", "")), func(p *P) {
			p.Spec.Variables = []admissionregistrationv1.Variable{variable("bad", "object.metadata.nope")}
		})),
		one("variables/runtime error, Ignore", with(pol("", I, V("variables.bad == 'x'", "m", "")), func(p *P) {
			p.Spec.Variables = []admissionregistrationv1.Variable{variable("bad", "object.metadata.nope")}
		})),
		one("variables/earlier ones", with(pol("", F, V("variables.b > 5", "", "'b is ' + string(variables.b)")), func(p *P) {
			p.Spec.Variables = []admissionregistrationv1.Variable{variable("a", "size(object.data)"), variable("b", "variables.a * 2")}
		})),
		one("variables/in messageExpression, failing: message", with(pol("", F, V("false", "fallback", "'v: ' + variables.bad")), func(p *P) {
			p.Spec.Variables = []admissionregistrationv1.Variable{variable("bad", "object.metadata.nope")}
		})),
		one("variables/in auditAnnotations", with(pol("", F), func(p *P) {
			p.Spec.Variables = []admissionregistrationv1.Variable{variable("who", "request.userInfo.username")}
			p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{aa("who", "'user=' + variables.who")}
		})),
		one("variables/cost charged once per pass", with(pol("", F, validations(28, V("variables.heavy && "+nested(5), "m", ""))...), func(p *P) {
			p.Spec.Variables = []admissionregistrationv1.Variable{variable("heavy", nested(5))}
		})),
		one("variables/cost of a variable exhausts the budget", with(pol("", F, validations(29, V(nested(5)+" && variables.x", "m", ""))...), func(p *P) {
			p.Spec.Variables = []admissionregistrationv1.Variable{variable("x", nested(5))}
		})),
		one("variables/used by matchConditions' neighbours only", with(pol("", F, V("variables.n == 3", "three", "")), func(p *P) {
			p.Spec.Variables = []admissionregistrationv1.Variable{variable("n", "int(object.data['count'])")}
			p.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{mc("always", "true")}
		})),
	)

	// ---- auditAnnotations ----
	big := strings.Repeat("z", 12*1024)
	add(
		one("auditAnnotations/publish, trim, empty, null, truncate", with(pol("", F), func(p *P) {
			p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{aa("who", "'name=' + object.metadata.name"), aa("padded", "'  v  '"),
				aa("empty", "'  '"), aa("nul", "null"), aa("big", "string(object.data.big)")}
		})).withReq(func(r *admission.Request) { r.Object["data"].(map[string]any)["big"] = big }),
		one("auditAnnotations/runtime error, Fail", with(pol("", F), func(p *P) {
			p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{aa("bad", "string(object.metadata.nope)")}
		})),
		one("auditAnnotations/runtime error, Ignore", with(pol("", I), func(p *P) {
			p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{aa("bad", "string(object.metadata.nope)"), aa("ok", "'fine'")}
		})),
		one("auditAnnotations/authorizer is not bound", with(pol("", F), func(p *P) {
			p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{aa("authz", "authorizer.group('').resource('pods').check('get').allowed() ? 'y' : 'n'")}
		})),
		one("auditAnnotations/with a failing validation", with(pol("", F, V("false", "denied", "")), func(p *P) {
			p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{aa("seen", "'yes'")}
		})),
		one("auditAnnotations/error with a Warn binding still denies", with(pol("", F), func(p *P) {
			p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{aa("bad", "string(object.metadata.nope)")}
		}), warn),
		one("auditAnnotations/none when matchConditions are false", with(pol("", F), func(p *P) {
			p.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{mc("never", "false")}
			p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{aa("seen", "'yes'")}
		})),
		one("auditAnnotations/namespaceObject", with(pol("", F), func(p *P) {
			p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{aa("ns", "namespaceObject.metadata.name + '/' + namespaceObject.metadata.labels['env']")}
		})),
		one("auditAnnotations/fresh budget, exhausted", with(pol("", F, V(nested(5), "m", "")), func(p *P) {
			for i := 0; i < 12; i++ {
				p.Spec.AuditAnnotations = append(p.Spec.AuditAnnotations, aa("a"+strconv.Itoa(i), heavyAnnotation))
			}
		})),
		&diffCase{name: "auditAnnotations/identical values of two bindings once",
			policies: []*P{with(pol("p", F), func(p *P) {
				p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{aa("who", "'same'")}
			})},
			bindings: []*B{bind("b1", "p"), bind("b2", "p", audit)}},
	)
	perParam := with(withParamKind(pol("p", F), "v1", "ConfigMap"), func(p *P) {
		p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{aa("tier", "string(params.data.tier)"), aa("fixed", "'f'")}
	})
	add(&diffCase{name: "auditAnnotations/distinct values of two bindings joined",
		policies: []*P{perParam},
		bindings: []*B{
			with(bind("b1", "p"), func(b *B) { b.Spec.ParamRef = paramRef("gold", "", admissionregistrationv1.DenyAction) }),
			with(bind("b2", "p"), func(b *B) { b.Spec.ParamRef = paramRef("silver", "", admissionregistrationv1.DenyAction) }),
			with(bind("b3", "p"), func(b *B) { b.Spec.ParamRef = paramRef("gold", "", admissionregistrationv1.DenyAction) }),
		},
		params: []*unstructured.Unstructured{param("ConfigMap", "default", "gold", nil, map[string]any{"tier": "gold"}),
			param("ConfigMap", "default", "silver", nil, map[string]any{"tier": "silver"})}})

	// ---- cost limits ----
	add(
		one("cost/per-call limit", pol("", F, V(nested(6), "m", ""))),
		one("cost/per-call limit, Ignore", pol("", I, V(nested(6), "m", ""))),
		one("cost/budget across validations", pol("", F, validations(40, V(nested(5), "m", ""))...)),
		one("cost/budget across validations, Ignore", pol("", I, validations(40, V(nested(5), "m", ""))...)),
		one("cost/budget across validations, Warn", pol("", F, validations(40, V(nested(5), "m", ""))...), warn),
		one("cost/within the budget", pol("", F, validations(29, V(nested(5), "m", ""))...)),
		one("cost/just over the budget", pol("", F, validations(30, V(nested(5), "m", ""))...)),
		one("cost/auditAnnotations within their own budget", with(pol("", F, validations(29, V(nested(5), "m", ""))...), func(p *P) {
			for i := 0; i < 11; i++ {
				p.Spec.AuditAnnotations = append(p.Spec.AuditAnnotations, aa("a"+strconv.Itoa(i), heavyAnnotation))
			}
		})),
		one("cost/messageExpressions run out of budget", pol("", F, append(validations(29, V(nested(5), "m", "")),
			V("false", "m", nested(5)+" ? 'x' : 'y'"), V("false", "m", nested(5)+" ? 'x' : 'y'"), V("false", "m", nested(5)+" ? 'x' : 'y'"),
			V("false", "m", nested(5)+" ? 'x' : 'y'"), V("false", "m", nested(5)+" ? 'x' : 'y'"))...)),
		one("cost/messageExpressions out of budget, Audit", pol("", F, append(validations(29, V(nested(5), "m", "")),
			V("false", "m", nested(5)+" ? 'x' : 'y'"), V("false", "m", nested(5)+" ? 'x' : 'y'"), V("false", "m", nested(5)+" ? 'x' : 'y'"),
			V("false", "m", nested(5)+" ? 'x' : 'y'"))...), audit),
	)

	// ---- params ----
	pk := func(vs ...admissionregistrationv1.Validation) *P {
		return withParamKind(pol("", F, vs...), "v1", "ConfigMap")
	}
	limits := param("ConfigMap", "default", "limits", map[string]any{"tier": "a"}, map[string]any{"max": "2"})
	add(
		one("params/paramKind without paramRef: null", pk(V("params != null", "params is null when binding has no paramRef", ""))),
		withParams(withRef(one("params/by name in the request namespace", pk(V("size(object.data) <= int(params.data.max)", "", "'at most ' + params.data.max"))), paramRef("limits", "", admissionregistrationv1.DenyAction)), limits),
		withParams(withRef(one("params/by name in another namespace", pk(V("size(object.data) <= int(params.data.max)", "too many", ""))),
			paramRef("limits", "prod", admissionregistrationv1.DenyAction)), limits, param("ConfigMap", "prod", "limits", nil, map[string]any{"max": "10"})),
		withParams(withRef(one("params/not found, Allow", pk(V("false", "never", ""))), paramRef("missing", "", admissionregistrationv1.AllowAction)), limits),
		withParams(withRef(one("params/not found, Deny", pk(V("false", "never", ""))), paramRef("missing", "", admissionregistrationv1.DenyAction)), limits),
		withParams(withRef(one("params/not found, Deny, Ignore", with(pk(V("false", "never", "")), func(p *P) { p.Spec.FailurePolicy = &I })),
			paramRef("missing", "", admissionregistrationv1.DenyAction)), limits),
		withParams(withRef(one("params/only in another namespace", pk(V("false", "never", ""))), paramRef("limits", "", admissionregistrationv1.DenyAction)),
			param("ConfigMap", "prod", "limits", nil, map[string]any{"max": "10"})),
		withParams(withRef(one("params/selector: each param separately", pk(V("size(object.data) <= int(params.data.max)", "", "'limit ' + params.metadata.name"))),
			&admissionregistrationv1.ParamRef{Selector: selector(map[string]string{"tier": "a"}), ParameterNotFoundAction: ptr(admissionregistrationv1.DenyAction)}),
			limits, param("ConfigMap", "default", "loose", map[string]any{"tier": "a"}, map[string]any{"max": "100"}),
			param("ConfigMap", "default", "other", map[string]any{"tier": "b"}, map[string]any{"max": "0"})),
		withParams(withRef(one("params/selector matching none, Deny", pk(V("false", "never", ""))),
			&admissionregistrationv1.ParamRef{Selector: selector(map[string]string{"tier": "zzz"}), ParameterNotFoundAction: ptr(admissionregistrationv1.DenyAction)}), limits),
		withParams(withRef(one("params/empty selector: all in the namespace", pk(V("params.metadata.name != 'other'", "", "'found ' + params.metadata.name"))),
			&admissionregistrationv1.ParamRef{Selector: &metav1.LabelSelector{}, ParameterNotFoundAction: ptr(admissionregistrationv1.AllowAction)}),
			limits, param("ConfigMap", "default", "other", nil, nil), param("ConfigMap", "prod", "elsewhere", nil, nil)),
		withParams(withRef(one("params/each param warns", pk(V("false", "", "'from ' + params.metadata.name")), warn),
			&admissionregistrationv1.ParamRef{Selector: selector(map[string]string{"tier": "a"}), ParameterNotFoundAction: ptr(admissionregistrationv1.AllowAction)}),
			limits, param("ConfigMap", "default", "second", map[string]any{"tier": "a"}, nil)).unorderedParams(),
		withParams(withRef(one("params/in messageExpression and variables", with(pk(V("variables.max >= 3", "", "'max is ' + string(variables.max)")), func(p *P) {
			p.Spec.Variables = []admissionregistrationv1.Variable{variable("max", "int(params.data.max)")}
		})), paramRef("limits", "", admissionregistrationv1.DenyAction)), limits),
		withParams(withRef(one("params/data key missing", pk(V("int(params.data.min) < 3", "m", ""))), paramRef("limits", "", admissionregistrationv1.DenyAction)), limits),
	)
	clusterParam := func(name string, data map[string]any) *unstructured.Unstructured {
		return param("Limits", "", name, nil, data)
	}
	add(
		func() *diffCase {
			c := withParams(withRef(one("params/cluster-scoped by name", withParamKind(pol("", F, V("size(object.data) <= params.data.max", "", "'max ' + string(params.data.max)")), "example.com/v1", "Limits")),
				paramRef("global", "", admissionregistrationv1.DenyAction)), clusterParam("global", map[string]any{"max": int64(2)}))
			c.clusterParams = true
			return c
		}(),
		func() *diffCase {
			c := withParams(withRef(one("params/cluster-scoped with a namespace", withParamKind(pol("", F, V("false", "never", "")), "example.com/v1", "Limits")),
				paramRef("global", "default", admissionregistrationv1.DenyAction)), clusterParam("global", map[string]any{"max": int64(2)}))
			c.clusterParams = true
			return c
		}(),
		func() *diffCase {
			c := withParams(withRef(one("params/cluster-scoped with a namespace, Ignore", with(withParamKind(pol("", F, V("false", "never", "")), "example.com/v1", "Limits"),
				func(p *P) { p.Spec.FailurePolicy = &I })), paramRef("global", "default", admissionregistrationv1.DenyAction)), clusterParam("global", nil))
			c.clusterParams = true
			return c
		}(),
		withRef(one("params/namespaced paramRef on a cluster-scoped request", matchOn(pk(V("false", "never", "")), clusterroles)),
			paramRef("limits", "", admissionregistrationv1.DenyAction)).withReq(clusterRequest),
		withParams(withRef(one("params/namespaced paramRef with a namespace on a cluster-scoped request", matchOn(pk(V("params.data.max == '2'", "two", "")), clusterroles)),
			paramRef("limits", "default", admissionregistrationv1.DenyAction)), limits).withReq(clusterRequest),
	)

	// ---- matchConstraints ----
	add(
		one("match/resourceNames mismatch", with(pol("", F, V("false", "x", "")), func(p *P) { p.Spec.MatchConstraints.ResourceRules[0].ResourceNames = []string{"alpha"} })),
		one("match/resourceNames match", with(pol("", F, V("false", "named", "")), func(p *P) { p.Spec.MatchConstraints.ResourceRules[0].ResourceNames = []string{"alpha", "beta"} })),
		one("match/resourceNames and generateName", with(pol("", F, V("false", "named", "")), func(p *P) { p.Spec.MatchConstraints.ResourceRules[0].ResourceNames = []string{"beta"} })).withReq(func(r *admission.Request) {
			r.Name = ""
			md := r.Object["metadata"].(map[string]any)
			delete(md, "name")
			md["generateName"] = "beta"
		}),
		one("match/resourceNames on a later rule", with(pol("", F, V("false", "second rule", "")), func(p *P) {
			r1 := configmaps
			r1.ResourceNames = []string{"alpha"}
			p.Spec.MatchConstraints.ResourceRules = []admissionregistrationv1.NamedRuleWithOperations{r1, configmaps}
		})),
		one("match/excludeResourceRules", with(pol("", F, V("false", "x", "")), func(p *P) { p.Spec.MatchConstraints.ExcludeResourceRules = p.Spec.MatchConstraints.ResourceRules })),
		one("match/excludeResourceRules by name", with(pol("", F, V("false", "x", "")), func(p *P) {
			r := configmaps
			r.ResourceNames = []string{"beta"}
			p.Spec.MatchConstraints.ExcludeResourceRules = []admissionregistrationv1.NamedRuleWithOperations{r}
		})),
		one("match/objectSelector", with(pol("", F, V("false", "objsel matched", "")), func(p *P) { p.Spec.MatchConstraints.ObjectSelector = selector(map[string]string{"app-name": "x"}) })),
		one("match/objectSelector no match", with(pol("", F, V("false", "x", "")), func(p *P) { p.Spec.MatchConstraints.ObjectSelector = selector(map[string]string{"app-name": "zzz"}) })),
		one("match/objectSelector on oldObject", with(pol("", F, V("false", "old matched", "")), func(p *P) { p.Spec.MatchConstraints.ObjectSelector = selector(map[string]string{"was": "here"}) })).withReq(func(r *admission.Request) {
			r.Operation = admission.OpUpdate
			r.OldObject = cm("beta", "default", map[string]any{"was": "here"}, nil)
		}),
		one("match/objectSelector on DELETE", with(pol("", F, V("object == null", "x", "")), func(p *P) { p.Spec.MatchConstraints.ObjectSelector = selector(map[string]string{"env": "dev"}) })).withReq(func(r *admission.Request) {
			r.Operation, r.OldObject, r.Object = admission.OpDelete, r.Object, nil
		}),
		one("match/objectSelector with expressions", with(pol("", F, V("false", "exists", "")), func(p *P) {
			p.Spec.MatchConstraints.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"dev", "test"}}}}
		})),
		one("match/namespaceSelector", with(pol("", F, V("false", "dev namespace", "")), func(p *P) { p.Spec.MatchConstraints.NamespaceSelector = selector(map[string]string{"env": "dev"}) })),
		one("match/namespaceSelector no match", with(pol("", F, V("false", "x", "")), func(p *P) { p.Spec.MatchConstraints.NamespaceSelector = selector(map[string]string{"env": "prod"}) })),
		one("match/namespaceSelector, other namespace", with(pol("", F, V("false", "prod namespace", "")), func(p *P) { p.Spec.MatchConstraints.NamespaceSelector = selector(map[string]string{"env": "prod"}) })).withReq(func(r *admission.Request) {
			r.Namespace = "prod"
			r.Object["metadata"].(map[string]any)["namespace"] = "prod"
		}),
		one("match/namespaceSelector on a Namespace being created", with(matchOn(pol("", F, V("false", "new namespace matched", "")), namespacesRule), func(p *P) {
			p.Spec.MatchConstraints.NamespaceSelector = selector(map[string]string{"env": "dev"})
		})).withReq(namespaceRequest),
		one("match/namespaceSelector on a cluster-scoped request", with(matchOn(pol("", F, V("false", "cluster-scoped matched", "")), clusterroles), func(p *P) {
			p.Spec.MatchConstraints.NamespaceSelector = selector(map[string]string{"env": "nowhere"})
		})).withReq(clusterRequest),
		one("match/scope Namespaced, cluster-scoped request", with(matchOn(pol("", F, V("false", "x", "")), clusterroles), func(p *P) {
			p.Spec.MatchConstraints.ResourceRules[0].Scope = ptr(admissionregistrationv1.NamespacedScope)
		})).withReq(clusterRequest),
		one("match/scope Cluster, namespaces", with(matchOn(pol("", F, V("false", "cluster scope", "")), namespacesRule), func(p *P) {
			p.Spec.MatchConstraints.ResourceRules[0].Scope = ptr(admissionregistrationv1.ClusterScope)
		})).withReq(namespaceRequest),
		one("match/scope Namespaced, configmaps", with(pol("", F, V("false", "namespaced scope", "")), func(p *P) {
			p.Spec.MatchConstraints.ResourceRules[0].Scope = ptr(admissionregistrationv1.NamespacedScope)
		})),
		one("match/operation mismatch", matchOn(pol("", F, V("false", "x", "")), rule([]string{""}, []string{"v1"}, []string{"configmaps"}, admissionregistrationv1.Update))),
		one("match/subresource not matched by the resource", pol("", F, V("false", "x", ""))).withReq(func(r *admission.Request) { r.SubResource = "status" }),
		one("match/subresource by res/*", matchOn(pol("", F, V("false", "any subresource", "")), rule([]string{""}, []string{"v1"}, []string{"configmaps/*"}))).withReq(func(r *admission.Request) { r.SubResource = "status" }),
		one("match/subresource by */status", matchOn(pol("", F, V("false", "status of anything", "")), rule([]string{"*"}, []string{"*"}, []string{"*/status"}))).withReq(func(r *admission.Request) { r.SubResource = "status" }),
		one("match/wildcards", matchOn(pol("", F, V("false", "everything", "")), rule([]string{"*"}, []string{"*"}, []string{"*"}))),
		one("match/group mismatch", matchOn(pol("", F, V("false", "x", "")), rule([]string{"apps"}, []string{"v1"}, []string{"configmaps"}))),
		one("match/Exact: an equivalent version does not match", with(matchOn(pol("", F, V("false", "x", "")), deploymentsV1), func(p *P) {
			p.Spec.MatchConstraints.MatchPolicy = ptr(admissionregistrationv1.Exact)
		})).withReq(deploymentRequest("apps/v1beta2")),
		one("match/Equivalent: request as the matched version", matchOn(pol("", F, V("false", "", "request.kind.version + ' ' + request.resource.version + ' ' + request.requestKind.version + ' ' + request.requestResource.version + ' ' + object.apiVersion")), deploymentsV1)).withReq(deploymentRequest("apps/v1beta2")),
		one("match/Equivalent across groups", matchOn(pol("", F, V("false", "", "request.kind.group + '/' + request.requestKind.group")), deploymentsV1)).withReq(deploymentRequest("extensions/v1beta1")),
		one("match/Equivalent with resourceNames", with(matchOn(pol("", F, V("false", "named web", "")), deploymentsV1), func(p *P) {
			p.Spec.MatchConstraints.ResourceRules[0].ResourceNames = []string{"web"}
		})).withReq(deploymentRequest("apps/v1beta1")),
		one("match/Equivalent, matchConditions see the requested resource", with(matchOn(pol("", F, V("false", "mc saw it", "")), deploymentsV1), func(p *P) {
			p.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{mc("res", "request.resource.version == 'v1beta2' && request.kind.version == 'v1'")}
		})).withReq(deploymentRequest("apps/v1beta2")),
		one("match/no equivalents known", matchOn(pol("", F, V("false", "x", "")), rule([]string{"example.com"}, []string{"v2"}, []string{"widgets"}))).withReq(func(r *admission.Request) {
			r.Object = map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w", "namespace": "default"}}
			r.Kind = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
			r.Resource = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
			r.Name = "w"
		}),
	)

	// ---- bindings ----
	add(
		&diffCase{name: "bindings/matchResources narrows by namespace",
			policies: []*P{pol("p", F, V("false", "x", ""))},
			bindings: []*B{with(bind("b", "p"), func(b *B) {
				b.Spec.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: selector(map[string]string{"env": "prod"})}
			})}},
		&diffCase{name: "bindings/matchResources matches the namespace",
			policies: []*P{pol("p", F, V("false", "bound to dev", ""))},
			bindings: []*B{with(bind("b", "p"), func(b *B) {
				b.Spec.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: selector(map[string]string{"env": "dev"})}
			})}},
		&diffCase{name: "bindings/matchResources with other resources",
			policies: []*P{pol("p", F, V("false", "x", ""))},
			bindings: []*B{with(bind("b", "p"), func(b *B) {
				b.Spec.MatchResources = &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{rule([]string{""}, []string{"v1"}, []string{"secrets"})}}
			})}},
		&diffCase{name: "bindings/matchResources exclude",
			policies: []*P{pol("p", F, V("false", "x", ""))},
			bindings: []*B{with(bind("b", "p"), func(b *B) {
				r := configmaps
				r.ResourceNames = []string{"beta"}
				b.Spec.MatchResources = &admissionregistrationv1.MatchResources{ExcludeResourceRules: []admissionregistrationv1.NamedRuleWithOperations{r}}
			})}},
		&diffCase{name: "bindings/matchResources objectSelector, two bindings",
			policies: []*P{pol("p", F, V("false", "", "'through the binding for ' + object.metadata.labels.env"))},
			bindings: []*B{
				with(bind("for-dev", "p", warn), func(b *B) {
					b.Spec.MatchResources = &admissionregistrationv1.MatchResources{ObjectSelector: selector(map[string]string{"env": "dev"})}
				}),
				with(bind("for-prod", "p"), func(b *B) {
					b.Spec.MatchResources = &admissionregistrationv1.MatchResources{ObjectSelector: selector(map[string]string{"env": "prod"})}
				})}},
		&diffCase{name: "bindings/a policy without bindings is not evaluated",
			policies: []*P{pol("p", F, V("false", "x", ""))}},
		&diffCase{name: "bindings/a binding to a missing policy is ignored",
			policies: []*P{pol("p", F, V("true", "", ""))},
			bindings: []*B{bind("b", "p"), bind("orphan", "missing")}},
	)

	// ---- request, variables and values ----
	add(
		one("request/fields and authorizer", pol("", F, V("request.operation == 'CREATE' && request.userInfo.username == 'alice' && request.kind.kind == 'ConfigMap' && request.resource.resource == 'configmaps' && oldObject == null && authorizer.group('').resource('pods').namespace('default').check('create').allowed()", "", "'request: ' + request.name + ' dryRun=' + string(request.dryRun)"))),
		one("request/userInfo", pol("", F, V("false", "", "request.userInfo.username + ' ' + request.userInfo.uid + ' ' + request.userInfo.groups.join(',') + ' ' + request.userInfo.extra['scopes'].join(',')"))).withReq(func(r *admission.Request) {
			r.UserInfo.Extra = map[string][]string{"scopes": {"a", "b"}}
		}),
		one("request/no extra", pol("", F, V("false", "", "string(size(request.userInfo.extra)) + ' ' + string(has(request.userInfo.extra))"))),
		one("request/name and namespace", pol("", F, V("false", "", "request.name + '@' + request.namespace + ' ' + request.requestKind.kind + ' ' + request.requestResource.resource"))),
		one("request/subResource", matchOn(pol("", F, V("false", "", "request.subResource + ' ' + request.requestSubResource")), rule([]string{""}, []string{"v1"}, []string{"configmaps/status"}))).withReq(func(r *admission.Request) { r.SubResource = "status" }),
		one("request/dryRun", pol("", F, V("!request.dryRun", "dry run", ""))).withReq(func(r *admission.Request) { r.DryRun = true }),
		one("request/options", pol("", F, V("false", "", "string(request.options.dryRun)"))).withReq(func(r *admission.Request) {
			r.Options = map[string]any{"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions", "dryRun": []any{"All"}}
		}),
		one("request/no options", pol("", F, V("false", "", "string(request.options == null)"))),
		one("request/uid is not a field", pol("", F, V("has(request.uid)", "", ""))).withLoadError("undefined field 'uid'", "undefined field 'uid'"),
		one("request/DELETE", pol("", F, V("object != null", "", "'DELETE: object is null; oldObject.metadata.name=' + oldObject.metadata.name"))).withReq(func(r *admission.Request) {
			r.Operation, r.OldObject, r.Object = admission.OpDelete, r.Object, nil
		}),
		one("request/UPDATE", pol("", F, V("object.data == oldObject.data", "", "'changed from ' + string(oldObject.data.count) + ' to ' + string(object.data.count)"))).withReq(func(r *admission.Request) {
			r.Operation = admission.OpUpdate
			r.OldObject = cm("beta", "default", nil, map[string]any{"count": "2"})
		}),
		one("request/CONNECT", matchOn(pol("", F, V("false", "", "request.operation + ' ' + request.subResource")), rule([]string{""}, []string{"v1"}, []string{"pods/exec"}, admissionregistrationv1.Connect))).withReq(func(r *admission.Request) {
			r.Operation = admission.OpConnect
			r.Object = map[string]any{"apiVersion": "v1", "kind": "PodExecOptions", "command": []any{"sh"}}
			r.Kind = schema.GroupVersionKind{Version: "v1", Kind: "PodExecOptions"}
			r.Resource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
			r.SubResource, r.Name = "exec", "web"
		}),
		one("values/namespaceObject", pol("", F, V("false", "", "namespaceObject.metadata.name + ' ' + namespaceObject.metadata.labels.env"))),
		one("values/namespaceObject has no spec fields set", pol("", F, V("false", "", "string(has(namespaceObject.spec)) + string(has(namespaceObject.status))"))),
		one("values/namespaceObject null when cluster-scoped", matchOn(pol("", F, V("namespaceObject != null", "null namespaceObject", "")), clusterroles)).withReq(clusterRequest),
		one("values/namespaceObject null on a Namespace", matchOn(pol("", F, V("namespaceObject != null", "null on namespaces", "")), namespacesRule)).withReq(namespaceRequest),
		one("values/namespace without labels", pol("", F, V("false", "", "namespaceObject.metadata.name"))).withReq(func(r *admission.Request) {
			r.Namespace = "extra"
			r.Object["metadata"].(map[string]any)["namespace"] = "extra"
		}).withNamespaces(map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "extra"}}),
		one("values/numbers", pol("", F, V("false", "", "string(object.spec.n + 1) + ' ' + string(object.spec.f * 2.0) + ' ' + string(object.spec.n == 2.0)"))).withReq(func(r *admission.Request) {
			r.Object["spec"] = map[string]any{"n": int64(2), "f": 1.5}
		}),
		one("values/lists of untyped objects keep their order", pol("", F, V("[1, 2] == [2, 1] || object.spec.l == [2, 1]", "", "(object.spec.l + [3]).map(x, string(x)).join(',')"))).withReq(func(r *admission.Request) {
			r.Object["spec"] = map[string]any{"l": []any{int64(1), int64(2)}}
		}),
		one("values/map iteration and two-variable comprehensions", pol("", F, V("false", "", "string(object.metadata.labels.all(k, v, k != '' && v != ''))"))),
		one("values/authorizer, system:masters", pol("", F, V("!authorizer.group('apps').resource('deployments').namespace('prod').check('delete').allowed()", "masters may", ""))).withReq(func(r *admission.Request) {
			r.UserInfo.Groups = []string{vap.MastersGroup}
		}),
		one("values/authorizer, no opinion", pol("", F, V("authorizer.group('').resource('secrets').check('get').allowed() || authorizer.group('').resource('secrets').check('get').reason() != ''", "no opinion, no reason", ""))),
		one("values/authorizer.requestResource", pol("", F, V("!authorizer.requestResource.check('create').allowed()", "may create", ""))).withReq(func(r *admission.Request) {
			r.UserInfo.Groups = []string{vap.MastersGroup}
		}),
		one("values/authorizer errors", pol("", F, V("!authorizer.group('').resource('pods').check('get').errored()", "errored", ""))),
		one("values/k8s libraries", pol("", F, V("quantity('1Gi').isGreaterThan(quantity('1Mi')) && isURL('https://x') && ip('10.0.0.1').family() == 4 && cidr('10.0.0.0/8').containsIP('10.1.2.3') && semver('1.2.3').major() == 1 && [1,2].includes(2) && format.dns1123Label().validate('Bad_') != optional.none() && 'abc'.find('b') == 'b'", "libs", ""))),
		one("values/bracket access to a dashed label", pol("", F, V("object.metadata.labels['app-name'] != 'x'", "bracket works", ""))),
		one("values/keyword as a field: data.namespace", pol("", F, V("object.data.namespace != 'n'", "keyword field works", ""))),
		one("values/in operator on a dashed key", pol("", F, V("!('x-prop' in object.data)", "in-operator works", ""))),
		one("values/missing escaped name", pol("", F, V("object.metadata.labels.not__dash__there == 'x'", "m", ""))),
	)

	// ---- property-name escaping: the API reference, not the reference run ----
	kubeNoKey := "no such key"
	add(
		one("escaping/__dash__", pol("", F, V("object.metadata.labels.app__dash__name != 'x'", "escape works", ""))).withSeed(seedDenied("escape works"), kubeNoKey),
		one("escaping/__dot__ and __slash__", pol("", F, V("object.metadata.labels.app__dot__kubernetes__dot__io__slash__name != 'y'", "escape works", ""))).withSeed(seedDenied("escape works"), kubeNoKey),
		one("escaping/reserved word", pol("", F, V("object.data.__namespace__ != 'n'", "escaped keyword works", ""))).withSeed(seedDenied("escaped keyword works"), kubeNoKey),
		one("escaping/__underscores__", pol("", F, V("object.data.redact__underscores__d != '2'", "underscores work", ""))).withSeed(seedDenied("underscores work"), kubeNoKey),
		one("escaping/x__dash__prop", pol("", F, V("object.data.x__dash__prop != '1'", "dash works", ""))).withSeed(seedDenied("dash works"), kubeNoKey),
		one("escaping/has()", pol("", F, V("!has(object.data.x__dash__prop)", "has works", ""))).withSeed(seedDenied("has works"), "allowed"),
		one("escaping/reserved word 'in' escaped", pol("", F, V("object.data.__in__ != '3'", "escaped in works", ""))).withSeed(seedDenied("escaped in works"), kubeNoKey),
		withParams(withRef(one("escaping/in params", pk(V("params.data.max__dash__count != '7'", "params escape works", ""))),
			paramRef("limits", "", admissionregistrationv1.DenyAction)), param("ConfigMap", "default", "limits", nil, map[string]any{"max-count": "7"})).
			withSeed(seedDenied("params escape works"), kubeNoKey),
		one("escaping/in a messageExpression", pol("", F, V("false", "fallback", "'label ' + object.metadata.labels.app__dash__name"))).withSeed(seedDenied("label x"), "fallback"),
		one("escaping/excluded resources", matchOn(pol("", F, V("false", "never", "")), rule([]string{"admissionregistration.k8s.io"}, []string{"v1"}, []string{"*"}))).withReq(func(r *admission.Request) {
			r.Object = map[string]any{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding", "metadata": map[string]any{"name": "x"}}
			r.Kind = schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicyBinding"}
			r.Resource = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"}
			r.Name, r.Namespace = "x", ""
		}).withSeed(&outcome{allowed: true}, ""),
	)

	// ---- refused at load, as API validation refuses on create ----
	add(
		one("load/syntax error", pol("", F, V("object.metadata.name +", "m", ""))).withLoadError("Syntax error: mismatched input '<EOF>'", "compilation error: compilation failed: ERROR: <input>:1:23: Syntax error: mismatched input '<EOF>'"),
		one("load/non-bool expression", pol("", F, V("'str'", "m", ""))).withLoadError("must evaluate to bool but got string", "compilation error: must evaluate to bool but got string"),
		one("load/authorizer in messageExpression", pol("", F, V("false", "static fallback", "authorizer.group('').resource('pods').check('get').allowed() ? 'y' : 'n'"))).withLoadError("undeclared reference to 'authorizer'", "static fallback"),
		one("load/dyn auditAnnotation", with(pol("", F), func(p *P) {
			p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{aa("dyn", "object.metadata.name")}
		})).withLoadError("must evaluate to one of [string null_type] but got dyn", "must evaluate to one of [string null_type] but got dyn"),
		one("load/keyword in as a field", pol("", F, V("object.data.in != '3'", "in works", ""))).withLoadError("Syntax error: no viable alternative at input '.in'", "no viable alternative at input '.in'"),
		one("load/Deny with Warn", pol("", F, V("false", "m", "")), deny, warn).withLoadError("must not contain both Deny and Warn", ""),
		one("load/no validationActions", pol("", F, V("false", "m", ""))).withBinding(func(b *B) { b.Spec.ValidationActions = nil }).withLoadError("at least one validation action is required", ""),
		one("load/65 matchConditions", with(pol("", F, V("false", "m", "")), func(p *P) {
			for i := 0; i < 65; i++ {
				p.Spec.MatchConditions = append(p.Spec.MatchConditions, mc("c"+strconv.Itoa(i), "true"))
			}
		})).withLoadError("Too many: 65: must have at most 64 items", ""),
		one("load/message with a line break", pol("", F, V("false", "two\nlines", ""))).withLoadError("message must not contain line breaks", ""),
		one("load/unsupported reason", pol("", F, VR("false", "m", "Conflict"))).withLoadError(`Unsupported value: "Conflict"`, ""),
		one("load/audit annotation key", with(pol("", F), func(p *P) {
			p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{aa("bad key!", "'v'")}
		})).withLoadError("spec.auditAnnotations[0].key", ""),
		one("load/duplicate audit annotation keys", with(pol("", F), func(p *P) {
			p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{aa("k", "'v'"), aa("k", "'w'")}
		})).withLoadError("Duplicate value", ""),
		one("load/variables in matchConditions", with(pol("", F, V("false", "m", "")), func(p *P) {
			p.Spec.Variables = []admissionregistrationv1.Variable{variable("t", "true")}
			p.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{mc("uses-var", "variables.t")}
		})).withLoadError("undeclared reference to 'variables'", ""),
		one("load/no matchConstraints", with(pol("", F, V("false", "m", "")), func(p *P) { p.Spec.MatchConstraints = nil })).
			withLoadError("spec.matchConstraints: Required value", "ValidatingAdmissionPolicy 'p' denied request: failed to configure policy: policy contained no match constraints, a required field"),
		one("load/paramRef with name and selector", pk(V("false", "m", ""))).withBinding(func(b *B) {
			b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "x", Selector: &metav1.LabelSelector{}, ParameterNotFoundAction: ptr(admissionregistrationv1.AllowAction)}
		}).withLoadError("name and selector are mutually exclusive", ""),
		one("load/paramRef without parameterNotFoundAction", pk(V("false", "m", ""))).withBinding(func(b *B) {
			b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "x"}
		}).withLoadError("spec.paramRef.parameterNotFoundAction: Required value", ""),
		one("load/variable name", with(pol("", F, V("false", "m", "")), func(p *P) {
			p.Spec.Variables = []admissionregistrationv1.Variable{variable("not-an-ident", "true")}
		})).withLoadError("name is not a valid CEL identifier", ""),
		one("load/later variable", with(pol("", F, V("variables.a", "m", "")), func(p *P) {
			p.Spec.Variables = []admissionregistrationv1.Variable{variable("a", "variables.b"), variable("b", "true")}
		})).withLoadError("undefined field 'b'", ""),
		one("load/no validations nor auditAnnotations", pol("", F)).withLoadError("validations or auditAnnotations must contain at least one item", ""),
	)
	return cs
}

func (c *diffCase) withLoadError(arbiter, kube string) *diffCase {
	c.loadError, c.kubeContains = arbiter, kube
	return c
}

func (c *diffCase) withSeed(o *outcome, kubeContains string) *diffCase {
	c.seed, c.kubeContains = o, kubeContains
	return c
}

func (c *diffCase) unorderedParams() *diffCase {
	c.unordered = true
	return c
}

func (c *diffCase) withBinding(f func(b *B)) *diffCase {
	f(c.bindings[0])
	return c
}

func (c *diffCase) withNamespaces(ns ...map[string]any) *diffCase {
	c.namespaces = append(c.namespaces, ns...)
	return c
}
