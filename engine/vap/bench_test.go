package vap_test

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	arbadmission "github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/vap"
)

// benchPolicy is a VAP with params and three validations on Deployments.
func benchPolicy() (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, *unstructured.Unstructured) {
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deployment-limits"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			ParamKind:        &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{deploymentsV1}},
			Validations: []admissionregistrationv1.Validation{
				{Expression: "object.spec.replicas <= int(params.data.maxReplicas)", MessageExpression: "'at most ' + params.data.maxReplicas + ' replicas'"},
				{Expression: "has(object.metadata.labels) && 'team' in object.metadata.labels", Message: "a team label is required"},
				{Expression: "object.spec.template.spec.containers.all(c, !c.image.endsWith(':latest') && c.image.startsWith(params.data.registry))", Message: "images must be pinned and come from the registry"},
			},
		},
	}
	p = vap.DefaultPolicy(p)
	b := vap.DefaultBinding(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "deployment-limits"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        "deployment-limits",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			ParamRef:          &admissionregistrationv1.ParamRef{Name: "limits", ParameterNotFoundAction: ptr(admissionregistrationv1.DenyAction)},
		},
	})
	param := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "limits", "namespace": "default"},
		"data":     map[string]any{"maxReplicas": "5", "registry": "registry.example.com/"},
	}}
	return p, b, param
}

func benchDeployment() map[string]any {
	return map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "namespace": "default", "labels": map[string]any{"team": "a", "app": "web"}},
		"spec": map[string]any{
			"replicas": int64(3),
			"template": map[string]any{"spec": map[string]any{"containers": []any{
				map[string]any{"name": "web", "image": "registry.example.com/web:1.2.3"},
				map[string]any{"name": "sidecar", "image": "registry.example.com/proxy:2.0"},
			}}},
		},
	}
}

var (
	benchGVK = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	benchGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
)

// BenchmarkVAP evaluates one request (a compliant Deployment) against a
// ValidatingAdmissionPolicy with params and three validations: with
// Arbiter (package vap) and with k8s.io/apiserver's validating-policy
// dispatcher, in the same run. Compare the ns/op of the two.
func BenchmarkVAP(b *testing.B) {
	p, bnd, param := benchPolicy()
	b.Run("arbiter", func(b *testing.B) {
		cp, errs := vap.CompilePolicy(p)
		if len(errs) > 0 {
			b.Fatal(errs)
		}
		cb, errs := vap.CompileBinding(bnd)
		if len(errs) > 0 {
			b.Fatal(errs)
		}
		ns := map[string]map[string]any{"default": {"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "default"}}}
		set := vap.NewSet([]*vap.Policy{cp}, []*vap.Binding{cb},
			[]*vap.Param{{APIVersion: "v1", Kind: "ConfigMap", Namespace: "default", Name: "limits", Content: param.Object}}, ns, vap.Options{})
		obj := benchDeployment()
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			out := set.Decide(ctx, &arbadmission.Request{Operation: arbadmission.OpCreate, Object: obj, Kind: benchGVK, Resource: benchGVR,
				Name: "web", Namespace: "default", UserInfo: arbadmission.UserInfo{Username: "alice", Groups: []string{"devs"}}}, nil)
			if len(out.Denials) != 0 || len(out.Results) != 1 || out.Results[0].Result != vap.ResultPass {
				b.Fatalf("unexpected outcome: %+v", out)
			}
		}
	})
	b.Run("k8s.io/apiserver", func(b *testing.B) {
		nsIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
		_ = nsIdx.Add(ns)
		m := matching.NewMatcher(corelisters.NewNamespaceLister(nsIdx), fake.NewSimpleClientset(ns))
		d := validating.NewDispatcher(vap.Authorizer{}, generic.NewPolicyMatcher(m))
		idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		_ = idx.Add(param)
		hooks := []validating.PolicyHook{{
			Policy: p, Bindings: []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{bnd}, Evaluator: kubeCompilePolicy(p),
			ParamInformer: paramInformer{lister: cache.NewGenericLister(idx, schema.GroupResource{Resource: "configmaps"})},
			ParamScope:    meta.RESTScopeNamespace,
		}}
		oi := newObjectInterfaces()
		obj := benchDeployment()
		ctx := context.Background()
		u := &user.DefaultInfo{Name: "alice", Groups: []string{"devs"}}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			attr := admission.NewAttributesRecord(&unstructured.Unstructured{Object: obj}, nil, benchGVK, "default", "web", benchGVR, "",
				admission.Create, nil, false, u)
			if err := d.Dispatch(ctx, attr, oi, hooks); err != nil {
				b.Fatal(err)
			}
		}
	})
}
