package mapol_test

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/arbiter-pdp/arbiter/engine"
	arbadmission "github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/mapol"
)

// The benchmark policy: a MutatingAdmissionPolicy with a ConfigMap param
// that sets a team label and the replicas of a Deployment, as an apply
// configuration or as a JSON patch.
const benchDocs = `
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: deployment-defaults}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
      - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments]}
  matchConditions:
    - {name: not-system, expression: '!request.userInfo.username.startsWith("system:")'}
  reinvocationPolicy: Never
  mutations:
    - patchType: %s
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: deployment-defaults}
spec:
  policyName: deployment-defaults
  paramRef: {name: deployment-defaults, parameterNotFoundAction: Deny}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: deployment-defaults, namespace: default}
data: {team: payments, replicas: "3"}
`

const (
	benchAC = `ApplyConfiguration
      applyConfiguration:
        expression: 'Object{metadata: Object.metadata{labels: {"team": params.data.team}}, spec: Object.spec{replicas: int(params.data.replicas)}}'`
	benchJP = `JSONPatch
      jsonPatch:
        expression: '[JSONPatch{op: "add", path: "/metadata/labels/team", value: params.data.team}, JSONPatch{op: "replace", path: "/spec/replicas", value: int(params.data.replicas)}]'`
)

func benchObjects(tb testing.TB, mutation string) []*manifest.Object {
	return objects(tb, replaceOnce(benchDocs, "%s", mutation))
}

func replaceOnce(s, old, new string) string {
	for i := 0; i+len(old) <= len(s); i++ {
		if s[i:i+len(old)] == old {
			return s[:i] + new + s[i+len(old):]
		}
	}
	return s
}

func benchRequest() *arbadmission.Request {
	r := &arbadmission.Request{Operation: arbadmission.OpCreate, UserInfo: arbadmission.UserInfo{Username: "alice", Groups: []string{"devs"}}}
	onDeployment(r)
	r.Namespace = "default"
	return r
}

// BenchmarkMAP: one MutatingAdmissionPolicy with a param on a Deployment,
// through Arbiter's engine (PolicySet.Evaluate, mutations only; apply
// configurations merged by engine/schema) and through k8s.io/apiserver's
// dispatcher (both passes, as reinvoker.Admit runs them: a successful
// mutation asks for the reinvocation; apply configurations merged with
// client-go's built-in schema).
func BenchmarkMAP(b *testing.B) {
	for _, bc := range []struct{ name, mutation string }{{"jsonpatch", benchJP}, {"applyconfig", benchAC}} {
		objs := benchObjects(b, bc.mutation)
		b.Run(bc.name+"/arbiter", func(b *testing.B) {
			ctx := context.Background()
			req := benchRequest()
			ps, err := engine.Compile(objs, engine.Options{})
			if err != nil {
				b.Fatal(err)
			}
			opts := &engine.EvalOptions{Stages: engine.MutateOnly}
			if d := ps.Evaluate(ctx, req, opts); !d.Allowed || d.Mutated == nil || d.Mutated["spec"].(map[string]any)["replicas"] != int64(3) {
				b.Fatalf("%+v", d)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				ps.Evaluate(ctx, req, opts)
			}
		})
		b.Run(bc.name+"/k8s.io-apiserver", func(b *testing.B) {
			ctx := context.Background()
			var p *admissionregistrationv1.MutatingAdmissionPolicy
			var bd *admissionregistrationv1.MutatingAdmissionPolicyBinding
			idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			for _, o := range objs {
				switch o.Kind {
				case mapol.KindPolicy:
					p = &admissionregistrationv1.MutatingAdmissionPolicy{}
					if err := manifest.DecodeStrict(o, p); err != nil {
						b.Fatal(err)
					}
				case mapol.KindBinding:
					bd = &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
					if err := manifest.DecodeStrict(o, bd); err != nil {
						b.Fatal(err)
					}
				default:
					_ = idx.Add(&unstructured.Unstructured{Object: runtime.DeepCopyJSON(o.Content)})
				}
			}
			p = mapol.DefaultPolicy(p)
			hooks := []mutating.PolicyHook{{Policy: p, Bindings: []*admissionregistrationv1.MutatingAdmissionPolicyBinding{mapol.DefaultBinding(bd)},
				Evaluator: kubeCompilePolicy(p), ParamScope: meta.RESTScopeNamespace,
				ParamInformer: paramInformer{lister: cache.NewGenericLister(idx, schema.GroupResource{Resource: "configmaps"})}}}
			nsIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			ns := &corev1.Namespace{}
			ns.Name, ns.Labels = "default", map[string]string{"kubernetes.io/metadata.name": "default"}
			_ = nsIdx.Add(ns)
			d := mutating.NewDispatcher(mapol.Authorizer{}, matching.NewMatcher(corelisters.NewNamespaceLister(nsIdx), fake.NewSimpleClientset(ns)),
				typeConverters{builtinConverter})
			oi := newObjectInterfaces()
			r := benchRequest()
			usr := &user.DefaultInfo{Name: r.UserInfo.Username, Groups: r.UserInfo.Groups}
			run := func() *unstructured.Unstructured {
				// The dispatcher never modifies the object it is given (it
				// replaces it): no copy is needed per request.
				obj := &unstructured.Unstructured{Object: r.Object}
				attr := admission.NewAttributesRecord(obj, nil, r.Kind, r.Namespace, r.Name, r.Resource, "", admission.Create, nil, false, usr)
				err := d.Dispatch(ctx, attr, oi, hooks)
				if rc := attr.GetReinvocationContext(); err == nil && rc.ShouldReinvoke() {
					rc.SetIsReinvoke()
					err = d.Dispatch(ctx, attr, oi, hooks)
				}
				if err != nil {
					b.Fatal(err)
				}
				return attr.GetObject().(*unstructured.Unstructured)
			}
			if out := run(); out.Object["spec"].(map[string]any)["replicas"] != int64(3) {
				b.Fatalf("%v", out.Object)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				run()
			}
		})
	}
}
