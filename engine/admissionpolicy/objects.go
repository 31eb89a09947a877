package admissionpolicy

import (
	"errors"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// Param is a param object: an object of a kind some policy's paramKind names.
type Param struct {
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
	Content    map[string]any
}

// Key is namespace/name, or name.
func (p *Param) Key() string {
	if p.Namespace != "" {
		return p.Namespace + "/" + p.Name
	}
	return p.Name
}

func (p *Param) labels() labels.Labels { return admission.ObjectLabels(p.Content) }

// Options tune the objects policies consult.
type Options struct {
	// Namespaced says whether objects of a kind live in namespaces, for
	// param kinds of which the set holds no object (nil: every kind whose
	// name does not start with "Cluster").
	Namespaced func(schema.GroupKind) bool
	// Authorizer answers `authorizer` checks (nil: Authorizer{}).
	Authorizer authorizer.UnconditionalAuthorizer
}

// Objects are what the policies of a set consult besides the request:
// their params (by kind, in namespace and name order), the Namespaces, the
// scope of param kinds and the authorizer. It is immutable.
type Objects struct {
	params     map[schema.GroupVersionKind][]*Param
	namespaces map[string]heldNamespace
	namespaced func(schema.GroupKind) bool
	authorizer authorizer.UnconditionalAuthorizer
}

type heldNamespace struct {
	content map[string]any
	typed   *corev1.Namespace
}

// NewObjects holds params and Namespaces (by name).
func NewObjects(params []*Param, namespaces map[string]map[string]any, opts Options) *Objects {
	o := &Objects{
		params:     map[schema.GroupVersionKind][]*Param{},
		namespaces: make(map[string]heldNamespace, len(namespaces)),
		namespaced: opts.Namespaced,
		authorizer: opts.Authorizer,
	}
	if o.authorizer == nil {
		o.authorizer = Authorizer{}
	}
	if o.namespaced == nil {
		o.namespaced = func(gk schema.GroupKind) bool { return !strings.HasPrefix(gk.Kind, "Cluster") }
	}
	for name, ns := range namespaces {
		o.namespaces[name] = heldNamespace{content: ns, typed: typedNamespace(ns)}
	}
	for _, p := range params {
		gvk := schema.FromAPIVersionAndKind(p.APIVersion, p.Kind)
		o.params[gvk] = append(o.params[gvk], p)
	}
	for _, l := range o.params {
		sort.SliceStable(l, func(i, j int) bool {
			if l[i].Namespace != l[j].Namespace {
				return l[i].Namespace < l[j].Namespace
			}
			return l[i].Name < l[j].Name
		})
	}
	return o
}

// typedNamespace converts a Namespace object to its typed form.
func typedNamespace(content map[string]any) *corev1.Namespace {
	ns := &corev1.Namespace{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(content, ns); err != nil {
		// A Namespace that does not convert keeps its name and labels.
		md, _ := content["metadata"].(map[string]any)
		ns = &corev1.Namespace{}
		ns.Name, _ = md["name"].(string)
		if l, ok := md["labels"].(map[string]any); ok {
			ns.Labels = map[string]string{}
			for k, v := range l {
				if s, ok := v.(string); ok {
					ns.Labels[k] = s
				}
			}
		}
	}
	return ns
}

// paramScopeNamespaced says whether the params of a kind live in
// namespaces: as the objects of that kind held, else by Options.
func (o *Objects) paramScopeNamespaced(gvk schema.GroupVersionKind) bool {
	if l := o.params[gvk]; len(l) > 0 {
		return l[0].Namespace != ""
	}
	return o.namespaced(gvk.GroupKind())
}

// CollectParams returns the params a binding evaluates its policy with
// ([nil] when there are none to look up: no paramKind or no paramRef), as
// the plugins' CollectParams (pkg/admission/plugin/policy/generic): by name
// (in paramRef.namespace, else the request's namespace, for a namespaced
// kind), or every param its selector (sel, compiled from ref.Selector)
// selects in namespace and name order; none found with
// parameterNotFoundAction Deny is an error. Every paramKind is taken as
// served.
func (o *Objects) CollectParams(paramKind *schema.GroupVersionKind, ref *admissionregistrationv1.ParamRef, sel labels.Selector, namespace string) ([]*Param, error) {
	if paramKind == nil || ref == nil {
		return []*Param{nil}, nil
	}
	gvk := *paramKind
	namespaced := o.paramScopeNamespaced(gvk)
	paramsNamespace := ""
	if namespaced {
		paramsNamespace = namespace
		if ref.Namespace != "" {
			paramsNamespace = ref.Namespace
		} else if paramsNamespace == "" {
			return nil, errors.New("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources")
		}
	} else if ref.Namespace != "" {
		return nil, errors.New("paramRef.namespace must not be provided for a cluster-scoped `paramKind`")
	}
	var params []*Param
	switch {
	case ref.Name != "":
		for _, x := range o.params[gvk] {
			if x.Name == ref.Name && (!namespaced || x.Namespace == paramsNamespace) {
				params = []*Param{x}
				break
			}
		}
	case sel != nil || ref.Selector != nil:
		if sel == nil {
			sel = labels.Everything()
		}
		for _, x := range o.params[gvk] {
			if (!namespaced || x.Namespace == paramsNamespace) && sel.Matches(x.labels()) {
				params = append(params, x)
			}
		}
	default:
		return nil, errors.New("one of name or selector must be provided")
	}
	if len(params) == 0 && ref.ParameterNotFoundAction != nil && *ref.ParameterNotFoundAction == admissionregistrationv1.DenyAction {
		return nil, errors.New("no params found for policy binding with `Deny` parameterNotFoundAction")
	}
	return params, nil
}

// AdmissionConfigResources are never subject to API-defined policies (the
// policies and bindings themselves), nor are the reviews, which are not
// persisted.
var AdmissionConfigResources = map[schema.GroupResource]bool{
	{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"}:       true,
	{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicybindings"}: true,
	{Group: "admissionregistration.k8s.io", Resource: "mutatingadmissionpolicies"}:         true,
	{Group: "admissionregistration.k8s.io", Resource: "mutatingadmissionpolicybindings"}:   true,
	{Group: "authentication.k8s.io", Resource: "tokenreviews"}:                             true,
	{Group: "authentication.k8s.io", Resource: "selfsubjectreviews"}:                       true,
	{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}:                      true,
	{Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"}:                  true,
	{Group: "authorization.k8s.io", Resource: "localsubjectaccessreviews"}:                 true,
	{Group: "authorization.k8s.io", Resource: "selfsubjectrulesreviews"}:                   true,
}

// ReasonCode returns the HTTP code kube-apiserver answers a denial with
// reason r (the engine does not link net/http for four numbers).
func ReasonCode(r metav1.StatusReason) int32 {
	switch r {
	case metav1.StatusReasonForbidden:
		return 403
	case metav1.StatusReasonUnauthorized:
		return 401
	case metav1.StatusReasonRequestEntityTooLarge:
		return 413
	}
	return 422 // Unprocessable Entity
}

// ParamKindOf returns the apiVersion and kind of a policy object's
// paramKind, if it names one (read from the content, before compilation).
func ParamKindOf(o *manifest.Object) (apiVersion, kind string, ok bool) {
	spec, _ := o.Content["spec"].(map[string]any)
	pk, _ := spec["paramKind"].(map[string]any)
	apiVersion, _ = pk["apiVersion"].(string)
	kind, _ = pk["kind"].(string)
	return apiVersion, kind, kind != ""
}
