package admission

import (
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Admission operations.
const (
	OpCreate  = "CREATE"
	OpUpdate  = "UPDATE"
	OpDelete  = "DELETE"
	OpConnect = "CONNECT"
)

// Mode is the path a decision stands for.
type Mode int

const (
	// ModeAdmission is an admission request: policies with
	// evaluation.admission.enabled=false are skipped, and a
	// NamespacedValidatingPolicy applies only to requests in its namespace.
	ModeAdmission Mode = iota
	// ModeBackground is a background scan: policies with
	// evaluation.background.enabled=false are skipped, and matchConditions
	// skips are not reported.
	ModeBackground
	// ModeCLI evaluates every policy on every resource, as `kyverno apply`
	// and `kyverno test` do: evaluation gates are not consulted.
	ModeCLI
)

// String returns the PolicyReport process name of the mode.
func (m Mode) String() string {
	switch m {
	case ModeBackground:
		return "background scan"
	case ModeCLI:
		return "cli"
	}
	return "admission review"
}

// Shape says what a request's Object is, and so which kinds evaluate it.
type Shape int

const (
	// ShapeAdmission is a Kubernetes object (or the JSON payload of
	// JSON-mode policies): the admission kinds evaluate it.
	ShapeAdmission Shape = iota
	// ShapeEnvoy is an Envoy external-authorization CheckRequest
	// (envoy.service.auth.v3, as JSON): only the authorization policies of
	// mode Envoy evaluate it.
	ShapeEnvoy
	// ShapeHTTP is the Kyverno Authz Server's HTTP CheckRequest
	// ({"attributes": {method, header, path, ...}}): only the authorization
	// policies of mode HTTP evaluate it.
	ShapeHTTP
)

// String names the shape as the policies' evaluation modes do.
func (s Shape) String() string {
	switch s {
	case ShapeEnvoy:
		return "Envoy"
	case ShapeHTTP:
		return "HTTP"
	}
	return "Kubernetes"
}

// Authorization says whether the request is an authorization request (an
// Envoy or HTTP CheckRequest) rather than an admission request.
func (s Shape) Authorization() bool { return s == ShapeEnvoy || s == ShapeHTTP }

// UserInfo is the requesting user.
type UserInfo struct {
	Username string
	UID      string
	Groups   []string
	Extra    map[string][]string
}

// Request is one admission-shaped request: the attributes every policy
// kind reads (Kubernetes' admission.Attributes, as unstructured objects).
type Request struct {
	Operation string
	// Object is the object being admitted (nil for DELETE).
	Object map[string]any
	// OldObject is the existing object (UPDATE, DELETE).
	OldObject map[string]any
	Kind      schema.GroupVersionKind
	Resource  schema.GroupVersionResource
	// SubResource is the requested subresource, e.g. "status".
	SubResource string
	// RequestKind, RequestResource and RequestSubResource default to Kind,
	// Resource and SubResource.
	RequestKind        *schema.GroupVersionKind
	RequestResource    *schema.GroupVersionResource
	RequestSubResource string
	Name               string
	Namespace          string
	UserInfo           UserInfo
	DryRun             bool
	Options            map[string]any
	// NamespaceObject is the Namespace of the request. When nil, the
	// Namespace object of the policy set (if any) is used.
	NamespaceObject map[string]any
	Mode            Mode
	// Shape says what Object is: an admission object (the zero value), or
	// an Envoy or HTTP CheckRequest, which only the authorization policies
	// of that mode evaluate (with Object as `object`; the other fields are
	// not read).
	Shape Shape
}

// Fill derives what a request leaves unset from its objects: kind from
// apiVersion/kind, resource from the kind, name and namespace from metadata,
// operation CREATE.
func (r *Request) Fill() {
	if r.Operation == "" {
		r.Operation = OpCreate
	}
	obj := r.Object
	if obj == nil {
		obj = r.OldObject
	}
	if r.Kind.Kind == "" && obj != nil {
		apiVersion, _ := obj["apiVersion"].(string)
		kind, _ := obj["kind"].(string)
		r.Kind = schema.FromAPIVersionAndKind(apiVersion, kind)
	}
	if r.Resource.Resource == "" && r.Kind.Kind != "" {
		r.Resource = ResourceFor(r.Kind)
	}
	if obj != nil {
		md, _ := obj["metadata"].(map[string]any)
		if r.Name == "" {
			r.Name, _ = md["name"].(string)
		}
		if r.Namespace == "" {
			r.Namespace, _ = md["namespace"].(string)
		}
	}
}

// knownResources maps common kinds to their resources and scope.
var knownResources = map[schema.GroupKind]struct {
	resource   string
	namespaced bool
}{
	{Kind: "Pod"}:                                                              {"pods", true},
	{Kind: "Service"}:                                                          {"services", true},
	{Kind: "ConfigMap"}:                                                        {"configmaps", true},
	{Kind: "Secret"}:                                                           {"secrets", true},
	{Kind: "ServiceAccount"}:                                                   {"serviceaccounts", true},
	{Kind: "PersistentVolumeClaim"}:                                            {"persistentvolumeclaims", true},
	{Kind: "PersistentVolume"}:                                                 {"persistentvolumes", false},
	{Kind: "Namespace"}:                                                        {"namespaces", false},
	{Kind: "Node"}:                                                             {"nodes", false},
	{Kind: "Endpoints"}:                                                        {"endpoints", true},
	{Kind: "Event"}:                                                            {"events", true},
	{Kind: "LimitRange"}:                                                       {"limitranges", true},
	{Kind: "ResourceQuota"}:                                                    {"resourcequotas", true},
	{Kind: "ReplicationController"}:                                            {"replicationcontrollers", true},
	{Kind: "PodTemplate"}:                                                      {"podtemplates", true},
	{Group: "apps", Kind: "Deployment"}:                                        {"deployments", true},
	{Group: "apps", Kind: "ReplicaSet"}:                                        {"replicasets", true},
	{Group: "apps", Kind: "DaemonSet"}:                                         {"daemonsets", true},
	{Group: "apps", Kind: "StatefulSet"}:                                       {"statefulsets", true},
	{Group: "batch", Kind: "Job"}:                                              {"jobs", true},
	{Group: "batch", Kind: "CronJob"}:                                          {"cronjobs", true},
	{Group: "networking.k8s.io", Kind: "Ingress"}:                              {"ingresses", true},
	{Group: "networking.k8s.io", Kind: "NetworkPolicy"}:                        {"networkpolicies", true},
	{Group: "networking.k8s.io", Kind: "IngressClass"}:                         {"ingressclasses", false},
	{Group: "policy", Kind: "PodDisruptionBudget"}:                             {"poddisruptionbudgets", true},
	{Group: "autoscaling", Kind: "HorizontalPodAutoscaler"}:                    {"horizontalpodautoscalers", true},
	{Group: "rbac.authorization.k8s.io", Kind: "Role"}:                         {"roles", true},
	{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"}:                  {"rolebindings", true},
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:                  {"clusterroles", false},
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}:           {"clusterrolebindings", false},
	{Group: "storage.k8s.io", Kind: "StorageClass"}:                            {"storageclasses", false},
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:          {"customresourcedefinitions", false},
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}: {"validatingadmissionpolicies", false},
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}: {"validatingadmissionpolicybindings", false},
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}:   {"validatingwebhookconfigurations", false},
	{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}:     {"mutatingwebhookconfigurations", false},
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}:                               {"priorityclasses", false},
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "FlowSchema"}:                       {"flowschemas", false},
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "PriorityLevelConfiguration"}:       {"prioritylevelconfigurations", false},
	{Group: "node.k8s.io", Kind: "RuntimeClass"}:                                      {"runtimeclasses", false},
	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}:                 {"certificatesigningrequests", false},
	{Group: "policies.kyverno.io", Kind: "PolicyException"}:                           {"policyexceptions", true},
	{Group: "policies.kyverno.io", Kind: "ValidatingPolicy"}:                          {"validatingpolicies", false},
	{Group: "policies.kyverno.io", Kind: "NamespacedValidatingPolicy"}:                {"namespacedvalidatingpolicies", true},
}

// ResourceFor returns the resource of a kind: from a table of common kinds,
// else the conventional lower-case plural (as `kyverno apply` does offline).
func ResourceFor(gvk schema.GroupVersionKind) schema.GroupVersionResource {
	if r, ok := knownResources[gvk.GroupKind()]; ok {
		return gvk.GroupVersion().WithResource(r.resource)
	}
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	return plural
}

// IsNamespaced says whether objects of a kind live in a namespace: from the
// table of common kinds; unknown kinds are taken as namespaced.
func IsNamespaced(gk schema.GroupKind) bool {
	if r, ok := knownResources[gk]; ok {
		return r.namespaced
	}
	return !strings.HasPrefix(gk.Kind, "Cluster")
}

// Value renders the `request` variable as Kyverno does: the
// AdmissionRequest converted to unstructured data (omitempty fields absent).
func (r *Request) Value() map[string]any {
	gvk := func(k schema.GroupVersionKind) map[string]any {
		return map[string]any{"group": k.Group, "version": k.Version, "kind": k.Kind}
	}
	gvr := func(k schema.GroupVersionResource) map[string]any {
		return map[string]any{"group": k.Group, "version": k.Version, "resource": k.Resource}
	}
	m := map[string]any{
		"uid":       "",
		"kind":      gvk(r.Kind),
		"resource":  gvr(r.Resource),
		"operation": r.Operation,
		"userInfo":  userInfoValue(r.UserInfo),
		"object":    nilIfEmpty(r.Object),
		"oldObject": nilIfEmpty(r.OldObject),
		"dryRun":    r.DryRun,
		"options":   nilIfEmpty(r.Options),
	}
	if r.SubResource != "" {
		m["subResource"] = r.SubResource
	}
	rk := r.Kind
	if r.RequestKind != nil {
		rk = *r.RequestKind
	}
	m["requestKind"] = gvk(rk)
	rr := r.Resource
	if r.RequestResource != nil {
		rr = *r.RequestResource
	}
	m["requestResource"] = gvr(rr)
	sub := r.SubResource
	if r.RequestSubResource != "" {
		sub = r.RequestSubResource
	}
	if sub != "" {
		m["requestSubResource"] = sub
	}
	if r.Name != "" {
		m["name"] = r.Name
	}
	if r.Namespace != "" {
		m["namespace"] = r.Namespace
	}
	return m
}

func nilIfEmpty(m map[string]any) any {
	if m == nil {
		return nil
	}
	return m
}

func userInfoValue(u UserInfo) map[string]any {
	m := map[string]any{}
	if u.Username != "" {
		m["username"] = u.Username
	}
	if u.UID != "" {
		m["uid"] = u.UID
	}
	if len(u.Groups) > 0 {
		g := make([]any, len(u.Groups))
		for i, s := range u.Groups {
			g[i] = s
		}
		m["groups"] = g
	}
	if len(u.Extra) > 0 {
		e := make(map[string]any, len(u.Extra))
		for k, vs := range u.Extra {
			l := make([]any, len(vs))
			for i, s := range vs {
				l[i] = s
			}
			e[k] = l
		}
		m["extra"] = e
	}
	return m
}

// Requested returns the kind, resource and subresource of the request as
// the client sent it: RequestKind, RequestResource and RequestSubResource
// where given, else Kind, Resource and SubResource.
func (r *Request) Requested() (schema.GroupVersionKind, schema.GroupVersionResource, string) {
	gvk, gvr, sub := r.Kind, r.Resource, r.SubResource
	if r.RequestKind != nil {
		gvk = *r.RequestKind
	}
	if r.RequestResource != nil {
		gvr = *r.RequestResource
	}
	if r.RequestSubResource != "" {
		sub = r.RequestSubResource
	}
	return gvk, gvr, sub
}

// IsNamespace says whether the request is on core Namespaces.
func (r *Request) IsNamespace() bool {
	return r.Resource.Group == "" && r.Resource.Resource == "namespaces"
}
