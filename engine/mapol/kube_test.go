package mapol_test

// The reference run: k8s.io/apiserver's own MutatingAdmissionPolicy
// dispatcher (mutating.NewDispatcher with the policy matcher), driven
// in-process as reinvoker.Admit drives the admission chain (a second
// Dispatch when the reinvocation context asks for it). Test code only: the
// plugin links client-go, which the engine must not.
//
// The objects are unstructured, as Arbiter's are. A real kube-apiserver
// hands the dispatcher typed objects for built-in kinds and applies the
// scheme's defaults after every mutation (dispatchOne calls
// GetObjectDefaulter().Default); defaulting is a no-op on unstructured
// objects, so this test does not cover it (Arbiter applies no defaults).

import (
	"context"

	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	ap "github.com/arbiter-pdp/arbiter/engine/admissionpolicy"
	"github.com/arbiter-pdp/arbiter/engine/mapol"
	apppatch "github.com/arbiter-pdp/arbiter/engine/patch"
	"github.com/arbiter-pdp/arbiter/engine/schema"
)

// kubeCompilePolicy mirrors the unexported compilePolicy of
// k8s.io/apiserver/pkg/admission/plugin/policy/mutating/compilation.go (v0.37.2).
func kubeCompilePolicy(policy *admissionregistrationv1.MutatingAdmissionPolicy) mutating.PolicyEvaluator {
	opts := plugincel.OptionalVariableDeclarations{HasParams: policy.Spec.ParamKind != nil, HasAuthorizer: true}
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return mutating.PolicyEvaluator{Error: err}
	}
	vars := make([]plugincel.NamedExpressionAccessor, len(policy.Spec.Variables))
	for i, v := range policy.Spec.Variables {
		vars[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	compiler.CompileAndStoreVariables(vars, opts, environment.StoredExpressions)
	var matcher matchconditions.Matcher
	if mcs := policy.Spec.MatchConditions; len(mcs) > 0 {
		acc := make([]plugincel.ExpressionAccessor, len(mcs))
		for i := range mcs {
			acc[i] = (*matchconditions.MatchCondition)(&mcs[i])
		}
		matcher = matchconditions.NewMatcher(compiler.CompileCondition(acc, opts, environment.StoredExpressions),
			policy.Spec.FailurePolicy, "policy", "validate", policy.Name)
	}
	popts := opts
	popts.HasPatchTypes = true
	var patchers []patch.Patcher
	for _, m := range policy.Spec.Mutations {
		switch m.PatchType {
		case admissionregistrationv1.PatchTypeJSONPatch:
			if m.JSONPatch != nil {
				patchers = append(patchers, patch.NewJSONPatcher(compiler.CompileMutatingEvaluator(
					&patch.JSONPatchCondition{Expression: m.JSONPatch.Expression}, popts, environment.StoredExpressions)))
			}
		case admissionregistrationv1.PatchTypeApplyConfiguration:
			if m.ApplyConfiguration != nil {
				patchers = append(patchers, patch.NewApplyConfigurationPatcher(compiler.CompileMutatingEvaluator(
					&patch.ApplyConfigurationCondition{Expression: m.ApplyConfiguration.Expression}, popts, environment.StoredExpressions)))
			}
		}
	}
	return mutating.PolicyEvaluator{Matcher: matcher, Mutators: patchers, CompositedCompiler: compiler}
}

// builtinConverter is the type converter of the built-in kinds, from
// client-go's embedded structured-merge-diff schema (what
// kube-apiserver's OpenAPI gives for them).
var builtinConverter = applyconfigurations.NewTypeConverter(clientgoscheme.Scheme)

// typeConverters is a fixed patch.TypeConverterManager (never Start the
// dispatcher: Run would poll a nil OpenAPI client).
type typeConverters struct{ tc managedfields.TypeConverter }

func (t typeConverters) GetTypeConverter(k8sschema.GroupVersionKind) managedfields.TypeConverter {
	return t.tc
}
func (t typeConverters) Run(context.Context) {}

// schemaApplier is the engine's Applier: engine/schema's port of the merge
// with its built-in schemas (no client-go).
type schemaApplier struct{ s *schema.Schemas }

func (a schemaApplier) Apply(obj, ac map[string]any, allowAtomic bool) (map[string]any, error) {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	return schema.ApplyConfiguration(a.s.For(k8sschema.FromAPIVersionAndKind(apiVersion, kind)), obj, ac, allowAtomic)
}

func newSchemaApplier() mapol.Applier {
	s, err := schema.NewSchemas()
	if err != nil {
		panic(err)
	}
	return schemaApplier{s}
}

// testApplier is the Applier Arbiter's side of the tests uses: the
// engine's.
var testApplier = newSchemaApplier()

func init() {
	// kube-apiserver limits the values JSON patches copy
	// (JSONPatchMaxCopyBytes); evanphx reads the limit from a variable.
	jsonpatch.AccumulatedCopySizeLimit = apppatch.KubeAPIServerMaxCopyBytes
}

// syncedInformer is a param informer that is always synced.
type syncedInformer struct {
	cache.SharedIndexInformer
}

func (syncedInformer) HasSynced() bool { return true }

type paramInformer struct {
	lister cache.GenericLister
}

func (p paramInformer) Informer() cache.SharedIndexInformer { return syncedInformer{} }
func (p paramInformer) Lister() cache.GenericLister         { return p.lister }

var _ informers.GenericInformer = paramInformer{}

// sortedLister lists params in namespace and name order, the order Arbiter
// evaluates them in; kube-apiserver's informer cache lists them in a map's
// order, which varies (and with it the result when two params' mutations
// touch the same field).
type sortedLister struct{ cache.GenericLister }

func (l sortedLister) List(sel labels.Selector) ([]runtime.Object, error) {
	out, err := l.GenericLister.List(sel)
	sortObjects(out)
	return out, err
}

func (l sortedLister) ByNamespace(ns string) cache.GenericNamespaceLister {
	return sortedNamespaceLister{l.GenericLister.ByNamespace(ns)}
}

type sortedNamespaceLister struct{ cache.GenericNamespaceLister }

func (l sortedNamespaceLister) List(sel labels.Selector) ([]runtime.Object, error) {
	out, err := l.GenericNamespaceLister.List(sel)
	sortObjects(out)
	return out, err
}

func sortObjects(objs []runtime.Object) {
	key := func(o runtime.Object) string {
		m, _ := meta.Accessor(o)
		return m.GetNamespace() + "/" + m.GetName()
	}
	sort.SliceStable(objs, func(i, j int) bool { return key(objs[i]) < key(objs[j]) })
}

// objectInterfaces are the scheme's, with the equivalent resources of
// Arbiter's table, an unstructured creater, and the conversion Arbiter
// does between equivalent versions (apiVersion and kind): Convert copies
// the content into out and keeps out's apiVersion and kind, so converting
// back to the request's version restores them.
type objectInterfaces struct {
	admission.ObjectInterfaces
	mapper runtime.EquivalentResourceMapper
}

func (o objectInterfaces) GetEquivalentResourceMapper() runtime.EquivalentResourceMapper {
	return o.mapper
}
func (o objectInterfaces) GetObjectCreater() runtime.ObjectCreater     { return unstructuredCreater{} }
func (o objectInterfaces) GetObjectConvertor() runtime.ObjectConvertor { return shallowConvertor{} }

type unstructuredCreater struct{}

func (unstructuredCreater) New(gvk k8sschema.GroupVersionKind) (runtime.Object, error) {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

type shallowConvertor struct{}

func (shallowConvertor) Convert(in, out, _ any) error {
	src, ok1 := in.(*unstructured.Unstructured)
	dst, ok2 := out.(*unstructured.Unstructured)
	if !ok1 || !ok2 {
		return errors.New("only unstructured objects convert")
	}
	apiVersion, kind := dst.GetAPIVersion(), dst.GetKind()
	dst.Object = runtime.DeepCopyJSON(src.Object)
	if kind != "" {
		dst.SetAPIVersion(apiVersion)
		dst.SetKind(kind)
	}
	return nil
}
func (shallowConvertor) ConvertToVersion(in runtime.Object, _ runtime.GroupVersioner) (runtime.Object, error) {
	return in, nil
}
func (shallowConvertor) ConvertFieldLabel(_ k8sschema.GroupVersionKind, label, value string) (string, string, error) {
	return label, value, nil
}

func newObjectInterfaces() admission.ObjectInterfaces {
	ids := map[k8sschema.GroupResource]string{}
	reg := runtime.NewEquivalentResourceRegistryWithIdentity(func(gr k8sschema.GroupResource) string { return ids[gr] })
	seen := map[k8sschema.GroupVersionResource]bool{}
	for _, gvr := range []k8sschema.GroupVersionResource{
		{Group: "apps", Version: "v1", Resource: "deployments"},
		{Group: "batch", Version: "v1", Resource: "cronjobs"},
	} {
		rs, ks := ap.EquivalentResources(gvr, "")
		for i, r := range rs {
			ids[r.GroupResource()] = gvr.String()
			if !seen[r] {
				seen[r] = true
				reg.RegisterKindFor(r, "", ks[i])
			}
		}
	}
	return objectInterfaces{ObjectInterfaces: admission.NewObjectInterfacesFromScheme(clientgoscheme.Scheme), mapper: reg}
}

// outcome is what a client sees of a request's admission.
type outcome struct {
	allowed bool
	code    int32
	reason  string
	message string // the denial (the status' first cause)
	// object is the admitted object as JSON (when allowed).
	object string
	passes int
}

func (o outcome) String() string {
	var b strings.Builder
	if o.allowed {
		b.WriteString("allowed")
	} else {
		fmt.Fprintf(&b, "DENIED %d %s: %s", o.code, o.reason, o.message)
	}
	fmt.Fprintf(&b, "\n  passes: %d", o.passes)
	if o.allowed {
		fmt.Fprintf(&b, "\n  object: %s", o.object)
	}
	return b.String()
}

func objectJSON(t testing.TB, m map[string]any) string {
	if m == nil {
		return "null"
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("object: %v", err)
	}
	return string(b)
}

// kubeRun decides a case with the mutating plugin's dispatcher.
func kubeRun(t testing.TB, c *diffCase) outcome {
	t.Helper()
	ctx := context.Background()
	nsIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	var nsObjs []runtime.Object
	for _, n := range c.allNamespaces() {
		ns := &corev1.Namespace{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(n, ns); err != nil {
			t.Fatal(err)
		}
		_ = nsIdx.Add(ns)
		nsObjs = append(nsObjs, ns)
	}
	m := matching.NewMatcher(corelisters.NewNamespaceLister(nsIdx), fake.NewSimpleClientset(nsObjs...))
	d := mutating.NewDispatcher(mapol.Authorizer{}, m, typeConverters{builtinConverter})

	// Hooks: policies in name order, each with its bindings in name order
	// (kube-apiserver's order is a map's).
	policies := append([]*admissionregistrationv1.MutatingAdmissionPolicy(nil), c.policies...)
	sort.SliceStable(policies, func(i, j int) bool { return policies[i].Name < policies[j].Name })
	var hooks []mutating.PolicyHook
	for _, p := range policies {
		p = mapol.DefaultPolicy(p)
		var bs []*admissionregistrationv1.MutatingAdmissionPolicyBinding
		for _, b := range c.bindings {
			if b.Spec.PolicyName == p.Name {
				bs = append(bs, mapol.DefaultBinding(b))
			}
		}
		if len(bs) == 0 {
			continue
		}
		sort.SliceStable(bs, func(i, j int) bool { return bs[i].Name < bs[j].Name })
		h := mutating.PolicyHook{Policy: p, Bindings: bs, Evaluator: kubeCompilePolicy(p)}
		if pk := p.Spec.ParamKind; pk != nil {
			gvk := k8sschema.FromAPIVersionAndKind(pk.APIVersion, pk.Kind)
			idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			namespaced := true
			for _, o := range c.params {
				if o.GroupVersionKind() == gvk {
					_ = idx.Add(o.DeepCopy())
					namespaced = o.GetNamespace() != ""
				}
			}
			if c.clusterParams {
				namespaced = false
			}
			h.ParamInformer = paramInformer{lister: sortedLister{cache.NewGenericLister(idx, k8sschema.GroupResource{Group: gvk.Group, Resource: strings.ToLower(gvk.Kind) + "s"})}}
			h.ParamScope = meta.RESTScopeNamespace
			if !namespaced {
				h.ParamScope = meta.RESTScopeRoot
			}
		}
		hooks = append(hooks, h)
	}

	r := c.request()
	var obj, old runtime.Object
	var u *unstructured.Unstructured
	if r.Object != nil {
		u = &unstructured.Unstructured{Object: runtime.DeepCopyJSON(r.Object)}
		obj = u
	}
	if r.OldObject != nil {
		old = &unstructured.Unstructured{Object: runtime.DeepCopyJSON(r.OldObject)}
	}
	var options runtime.Object
	if r.Options != nil {
		options = &unstructured.Unstructured{Object: runtime.DeepCopyJSON(r.Options)}
	}
	usr := &user.DefaultInfo{Name: r.UserInfo.Username, UID: r.UserInfo.UID, Groups: r.UserInfo.Groups, Extra: r.UserInfo.Extra}
	attr := admission.NewAttributesRecord(obj, old, r.Kind, r.Namespace, r.Name, r.Resource, r.SubResource,
		admission.Operation(r.Operation), options, r.DryRun, usr)
	out := outcome{allowed: true}
	// The plugin handles CREATE, UPDATE and CONNECT (admission.NewHandler).
	if op := admission.Operation(r.Operation); op == admission.Create || op == admission.Update || op == admission.Connect {
		oi := newObjectInterfaces()
		out.passes = 1
		err := d.Dispatch(ctx, attr, oi, hooks)
		if rc := attr.GetReinvocationContext(); err == nil && rc.ShouldReinvoke() {
			rc.SetIsReinvoke()
			out.passes = 2
			err = d.Dispatch(ctx, attr, oi, hooks)
		}
		if err != nil {
			out.allowed = false
			var se *apierrors.StatusError
			if !errors.As(err, &se) {
				t.Fatalf("non-status error: %v", err)
			}
			st := se.ErrStatus
			out.code, out.reason = st.Code, string(st.Reason)
			if st.Details == nil || len(st.Details.Causes) == 0 {
				out.message = st.Message
			} else {
				out.message = st.Details.Causes[0].Message
			}
		}
	}
	if out.allowed {
		var final map[string]any
		if u != nil {
			final = attr.GetObject().(*unstructured.Unstructured).Object
		}
		out.object = objectJSON(t, final)
	}
	return out
}
