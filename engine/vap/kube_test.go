package vap_test

// The reference run: k8s.io/apiserver's own ValidatingAdmissionPolicy
// dispatcher (the validating plugin's NewDispatcher with the generic policy
// matcher), driven in-process as ../shared/reference/deps-and-vap.md
// (Appendix B, vapprobe) describes. Test code only: the plugin links
// client-go, which the arbiter binary must not.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/arbiter-pdp/arbiter/engine/vap"
)

// kubeCompilePolicy mirrors the unexported compilePolicy of
// k8s.io/apiserver/pkg/admission/plugin/policy/validating/plugin.go (v0.37.2).
func kubeCompilePolicy(policy *admissionregistrationv1.ValidatingAdmissionPolicy) validating.Validator {
	hasParam := policy.Spec.ParamKind != nil
	optionalVars := plugincel.OptionalVariableDeclarations{HasParams: hasParam, HasAuthorizer: true}
	expressionOptionalVars := plugincel.OptionalVariableDeclarations{HasParams: hasParam, HasAuthorizer: false}
	fc, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return validating.NewValidator(nil, nil, nil, nil, policy.Spec.FailurePolicy, err)
	}
	vars := make([]plugincel.NamedExpressionAccessor, len(policy.Spec.Variables))
	for i, v := range policy.Spec.Variables {
		vars[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	fc.CompileAndStoreVariables(vars, optionalVars, environment.StoredExpressions)
	var matcher matchconditions.Matcher
	if mcs := policy.Spec.MatchConditions; len(mcs) > 0 {
		acc := make([]plugincel.ExpressionAccessor, len(mcs))
		for i := range mcs {
			acc[i] = (*matchconditions.MatchCondition)(&mcs[i])
		}
		matcher = matchconditions.NewMatcher(fc.CompileCondition(acc, optionalVars, environment.StoredExpressions), policy.Spec.FailurePolicy, "policy", "validate", policy.Name)
	}
	vals := make([]plugincel.ExpressionAccessor, len(policy.Spec.Validations))
	msgs := make([]plugincel.ExpressionAccessor, len(policy.Spec.Validations))
	for i, v := range policy.Spec.Validations {
		vals[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			msgs[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	auds := make([]plugincel.ExpressionAccessor, len(policy.Spec.AuditAnnotations))
	for i, a := range policy.Spec.AuditAnnotations {
		auds[i] = &validating.AuditAnnotationCondition{Key: a.Key, ValueExpression: a.ValueExpression}
	}
	return validating.NewValidator(
		fc.CompileCondition(vals, optionalVars, environment.StoredExpressions),
		matcher,
		fc.CompileCondition(auds, optionalVars, environment.StoredExpressions),
		fc.CompileCondition(msgs, expressionOptionalVars, environment.StoredExpressions),
		policy.Spec.FailurePolicy, nil)
}

// outcome is what a client sees of a request's admission.
type outcome struct {
	allowed     bool
	code        int32
	reason      string
	message     string // the denial (the status cause), without the "... is forbidden: " prefix
	warnings    []string
	annotations map[string]string
}

func (o outcome) String() string {
	var b strings.Builder
	if o.allowed {
		b.WriteString("allowed")
	} else {
		fmt.Fprintf(&b, "DENIED %d %s: %s", o.code, o.reason, o.message)
	}
	for _, w := range o.warnings {
		fmt.Fprintf(&b, "\n  warning: %s", w)
	}
	keys := make([]string, 0, len(o.annotations))
	for k := range o.annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := o.annotations[k]
		if len(v) > 300 {
			v = fmt.Sprintf("%s...(%d bytes)", v[:80], len(v))
		}
		fmt.Fprintf(&b, "\n  annotation: %s = %s", k, v)
	}
	return b.String()
}

type warnings struct{ w []string }

func (r *warnings) AddWarning(_, text string) { r.w = append(r.w, text) }

// annAttrs records the audit annotations the dispatcher adds.
type annAttrs struct {
	admission.Attributes
	ann map[string]string
}

func (a *annAttrs) AddAnnotation(k, v string) error {
	if a.ann == nil {
		a.ann = map[string]string{}
	}
	a.ann[k] = v
	return nil
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

// objectInterfaces are the scheme's, with the equivalent resources of
// Arbiter's table and the conversion Arbiter does between equivalent
// versions (apiVersion and kind): what this test compares is matching.
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

func (unstructuredCreater) New(gvk schema.GroupVersionKind) (runtime.Object, error) {
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
	dst.Object = runtime.DeepCopyJSON(src.Object)
	return nil
}
func (shallowConvertor) ConvertToVersion(in runtime.Object, _ runtime.GroupVersioner) (runtime.Object, error) {
	return in, nil
}
func (shallowConvertor) ConvertFieldLabel(_ schema.GroupVersionKind, label, value string) (string, string, error) {
	return label, value, nil
}

func newObjectInterfaces() admission.ObjectInterfaces {
	ids := map[schema.GroupResource]string{}
	reg := runtime.NewEquivalentResourceRegistryWithIdentity(func(gr schema.GroupResource) string { return ids[gr] })
	seen := map[schema.GroupVersionResource]bool{}
	for _, gvr := range equivalenceSeeds {
		rs, ks := vap.EquivalentResources(gvr, "")
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

// equivalenceSeeds name the equivalence sets the reference run registers.
var equivalenceSeeds = []schema.GroupVersionResource{
	{Group: "apps", Version: "v1", Resource: "deployments"},
	{Group: "apps", Version: "v1", Resource: "statefulsets"},
	{Group: "batch", Version: "v1", Resource: "cronjobs"},
	{Version: "v1", Resource: "events"},
}

// kubeRun evaluates a case with the validating plugin's dispatcher.
func kubeRun(t *testing.T, c *diffCase) outcome {
	t.Helper()
	ctx := context.Background()
	// Namespaces: lister and client.
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
	client := fake.NewSimpleClientset(nsObjs...)
	m := matching.NewMatcher(corelisters.NewNamespaceLister(nsIdx), client)
	d := validating.NewDispatcher(vap.Authorizer{}, generic.NewPolicyMatcher(m))

	// Hooks: policies in name order, each with its bindings in name order.
	policies := append([]*admissionregistrationv1.ValidatingAdmissionPolicy(nil), c.policies...)
	sort.SliceStable(policies, func(i, j int) bool { return policies[i].Name < policies[j].Name })
	var hooks []validating.PolicyHook
	for _, p := range policies {
		p = vap.DefaultPolicy(p)
		var bs []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
		for _, b := range c.bindings {
			if b.Spec.PolicyName == p.Name {
				bs = append(bs, vap.DefaultBinding(b))
			}
		}
		if len(bs) == 0 {
			continue // kube-apiserver evaluates a policy only through its bindings
		}
		sort.SliceStable(bs, func(i, j int) bool { return bs[i].Name < bs[j].Name })
		h := validating.PolicyHook{Policy: p, Bindings: bs, Evaluator: kubeCompilePolicy(p)}
		if pk := p.Spec.ParamKind; pk != nil {
			gvk := schema.FromAPIVersionAndKind(pk.APIVersion, pk.Kind)
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
			h.ParamInformer = paramInformer{lister: cache.NewGenericLister(idx, schema.GroupResource{Group: gvk.Group, Resource: strings.ToLower(gvk.Kind) + "s"})}
			h.ParamScope = meta.RESTScopeNamespace
			if !namespaced {
				h.ParamScope = meta.RESTScopeRoot
			}
		}
		hooks = append(hooks, h)
	}

	r := c.request()
	var obj, old runtime.Object
	if r.Object != nil {
		obj = &unstructured.Unstructured{Object: runtime.DeepCopyJSON(r.Object)}
	}
	if r.OldObject != nil {
		old = &unstructured.Unstructured{Object: runtime.DeepCopyJSON(r.OldObject)}
	}
	var options runtime.Object
	if r.Options != nil {
		options = &unstructured.Unstructured{Object: runtime.DeepCopyJSON(r.Options)}
	}
	u := &user.DefaultInfo{Name: r.UserInfo.Username, UID: r.UserInfo.UID, Groups: r.UserInfo.Groups, Extra: r.UserInfo.Extra}
	attr := &annAttrs{Attributes: admission.NewAttributesRecord(obj, old, r.Kind, r.Namespace, r.Name, r.Resource, r.SubResource,
		admission.Operation(r.Operation), options, r.DryRun, u)}
	rec := &warnings{}
	err := d.Dispatch(warning.WithWarningRecorder(ctx, rec), attr, newObjectInterfaces(), hooks)
	out := outcome{allowed: err == nil, warnings: rec.w, annotations: attr.ann}
	if err != nil {
		var se *apierrors.StatusError
		if !errors.As(err, &se) {
			t.Fatalf("non-status error: %v", err)
		}
		st := se.ErrStatus
		out.code, out.reason = st.Code, string(st.Reason)
		if st.Details == nil || len(st.Details.Causes) != 1 {
			t.Fatalf("status without one cause: %+v", st)
		}
		out.message = st.Details.Causes[0].Message
	}
	return out
}
