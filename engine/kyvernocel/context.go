package kyvernocel

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ResourceContext is what the resource library reads and writes: Kubernetes
// objects by API version and resource (plural) name, as Kyverno's
// resource.ContextInterface, with a context.Context first.
//
// GetResource must return an error for which
// k8s.io/apimachinery/pkg/api/errors.IsNotFound is true when the object does
// not exist: the library then returns null, as Kyverno does. Forbidden and
// Unauthorized errors are reported as "permission denied".
type ResourceContext interface {
	// ListResources lists the objects of a resource in a namespace ("" for
	// cluster-scoped resources, or all namespaces), filtered by labels when
	// labels is not empty.
	ListResources(ctx context.Context, apiVersion, resource, namespace string, labels map[string]string) (*unstructured.UnstructuredList, error)
	// GetResource gets one object. resource may name a subresource
	// ("pods/status").
	GetResource(ctx context.Context, apiVersion, resource, namespace, name string) (*unstructured.Unstructured, error)
	// PostResource creates an object (Kyverno uses it for
	// SubjectAccessReview and similar virtual resources).
	PostResource(ctx context.Context, apiVersion, resource, namespace string, data map[string]any) (*unstructured.Unstructured, error)
	// ToGVR maps an API version and kind to the group, version and resource.
	ToGVR(ctx context.Context, apiVersion, kind string) (*schema.GroupVersionResource, error)
}

// ResourceValueContext is implemented by a ResourceContext that can give
// the CEL value of an object itself (a snapshot of context objects, which
// never change, keeps one value per object for every read). resource.Get
// then calls GetResourceValue instead of GetResource, with the same errors
// (NotFound for a missing object); a nil value with a nil error is null.
// The value must be safe for concurrent use and read as
// jsonval.Of(object) does (jsonval.Shared).
type ResourceValueContext interface {
	GetResourceValue(ctx context.Context, apiVersion, resource, namespace, name string) (ref.Val, error)
}

// GlobalContext is what globalContext.Get reads: Kyverno GlobalContextEntry
// data by entry name and projection name ("" for the whole entry). A missing
// entry is (nil, nil) in Kyverno, which the library returns as null.
type GlobalContext interface {
	GetGlobalReference(ctx context.Context, name, projection string) (any, error)
}

// ImageDataContext is what image.GetMetadata reads: the registry metadata of
// an image reference, shaped as Kyverno's imagedataloader.ImageData JSON
// (image, resolvedImage, registry, repository, tag, digest, imageIndex,
// manifest, config).
type ImageDataContext interface {
	GetImageData(ctx context.Context, image string) (map[string]any, error)
}

// HTTPContext is what the http library calls, as Kyverno's
// http.ContextInterface with a context.Context first.
//
// Get and Post return the decoded response: Kyverno's real client returns the
// JSON body object with a "statusCode" key added, or {"body": <non-object
// body>, "statusCode": N}; its CLI mocks return {"body": ..., "statusCode": N}.
// data is the request body as plain JSON values (map[string]any, []any,
// float64, string, bool, nil), to be sent JSON-encoded.
type HTTPContext interface {
	Get(ctx context.Context, url string, headers map[string]string) (any, error)
	Post(ctx context.Context, url string, data any, headers map[string]string) (any, error)
	// Client returns a context whose requests trust caBundle (PEM). An empty
	// bundle returns the receiver.
	Client(ctx context.Context, caBundle string) (HTTPContext, error)
}

// HTTPNamespacer is implemented by an HTTPContext that serves the calls of
// namespaced policies apart, as Kyverno's NewLazyCELHTTPContext(namespace)
// does (pkg/cel/compiler/http.go: with --allowHTTPInNamespacedPolicies off,
// Get and Post of a namespaced policy fail with HTTPNotAllowedMessage).
// Bind gives the "http" variable of a policy of namespace ns (ns != "")
// ForNamespace(ns) instead of the context itself. An HTTPContext that does not
// implement it — the mocks of `arbiter test`, which Kyverno's CLI serves
// before that rule — serves every policy alike.
type HTTPNamespacer interface {
	ForNamespace(ns string) HTTPContext
}

// Context is everything the context-bound libraries read. Every method takes
// a context.Context first; Bind passes context.Background(), BindContext the
// caller's.
type Context interface {
	ResourceContext
	GlobalContext
	ImageDataContext
	// HTTP returns the context of the http library.
	HTTP() HTTPContext
}

// Bind returns the activation values of the context-bound variables
// ("resource", "http", "globalContext", "image") for a policy in namespace ns
// ("" for a cluster policy). Merge them into the activation of every
// evaluation of expressions compiled with Libraries.
//
// For a namespaced policy (ns != ""), resource.* is confined to ns (compile
// with Options{Namespaced: true}) and globalContext.* fails with Kyverno's
// "globalContext.* is not allowed in namespaced policies"; http.* is served by
// c.HTTP().ForNamespace(ns) when c.HTTP() implements HTTPNamespacer, by
// c.HTTP() unchanged otherwise (wrap it with NamespacedHTTPNotAllowed to
// refuse it).
//
// The values are immutable: one map may serve any number of evaluations,
// concurrently, of the policies of namespace ns against c.
func Bind(c Context, ns string) map[string]any {
	return BindContext(context.Background(), c, ns)
}

// BindContext is Bind with the context.Context passed to every call of c
// (deadlines, cancellation, tracing).
func BindContext(ctx context.Context, c Context, ns string) map[string]any {
	if ctx == nil {
		ctx = context.Background()
	}
	if c == nil {
		c = Offline
	}
	var gc GlobalContext = c
	if ns != "" {
		gc = namespacedGlobalContext{}
	}
	h := c.HTTP()
	if ns != "" {
		if n, ok := h.(HTTPNamespacer); ok {
			h = n.ForNamespace(ns)
		}
	}
	return map[string]any{
		ResourceVar:      &resourceValue{ctx: ctx, c: c, ns: ns},
		HTTPVar:          &httpValue{ctx: ctx, c: h},
		GlobalContextVar: &globalContextValue{ctx: ctx, c: gc},
		ImageDataVar:     &imageDataValue{ctx: ctx, c: c},
	}
}

// Error texts Kyverno uses for the namespaced-policy restrictions.
const (
	// GlobalContextNotAllowedMessage is the error of globalContext.* in a
	// namespaced policy, at evaluation (and, in Kyverno's policy validation,
	// at admission of the policy: see ExpressionsUseGlobalContext).
	GlobalContextNotAllowedMessage = "globalContext.* is not allowed in namespaced policies"
	// HTTPNotAllowedMessage is the error of an http.* call from a namespaced
	// policy when Kyverno's --allowHTTPInNamespacedPolicies is off.
	HTTPNotAllowedMessage = "http calls are not allowed in namespaced policies: set --allowHTTPInNamespacedPolicies to enable"
	// HTTPNotAllowedValidationMessage is the policy-validation error for a
	// namespaced policy that uses http.* (see ExpressionsUseHTTP).
	HTTPNotAllowedValidationMessage = "http.* is not allowed in namespaced policies; set --allowHTTPInNamespacedPolicies to enable"
)

type namespacedGlobalContext struct{}

func (namespacedGlobalContext) GetGlobalReference(context.Context, string, string) (any, error) {
	return nil, errors.New(GlobalContextNotAllowedMessage)
}

// NamespacedHTTPNotAllowed wraps an HTTPContext so that Get and Post fail as
// Kyverno's do for a namespaced policy when --allowHTTPInNamespacedPolicies
// is off. Client still validates its CA bundle first, as in Kyverno.
func NamespacedHTTPNotAllowed(inner HTTPContext) HTTPContext {
	return namespacedHTTP{inner: inner}
}

type namespacedHTTP struct{ inner HTTPContext }

func (namespacedHTTP) Get(context.Context, string, map[string]string) (any, error) {
	return nil, errors.New(HTTPNotAllowedMessage)
}

func (namespacedHTTP) Post(context.Context, string, any, map[string]string) (any, error) {
	return nil, errors.New(HTTPNotAllowedMessage)
}

func (n namespacedHTTP) Client(ctx context.Context, caBundle string) (HTTPContext, error) {
	if n.inner == nil {
		return n, nil
	}
	inner, err := n.inner.Client(ctx, caBundle)
	if err != nil {
		return nil, err
	}
	return namespacedHTTP{inner: inner}, nil
}

// WithHTTP returns c with its HTTP context replaced by h (for example
// NamespacedHTTPNotAllowed(c.HTTP())).
func WithHTTP(c Context, h HTTPContext) Context {
	return withHTTP{Context: c, h: h}
}

type withHTTP struct {
	Context
	h HTTPContext
}

func (w withHTTP) HTTP() HTTPContext { return w.h }

// Offline is the Context of a replica with no cluster, no registry and no
// network access: every call fails with an error naming what is unavailable.
var Offline Context = offline{}

// Errors of the Offline context (wrapped by the library's own message, e.g.
// "failed to get resource: resource.Get: no cluster access in this context").
var (
	ErrNoCluster       = errors.New("no cluster access in this context")
	ErrNoGlobalContext = errors.New("no global context entries in this context")
	ErrNoRegistry      = errors.New("no image registry access in this context")
	ErrNoNetwork       = errors.New("no network access in this context")
)

type offline struct{}

func (offline) ListResources(context.Context, string, string, string, map[string]string) (*unstructured.UnstructuredList, error) {
	return nil, fmt.Errorf("resource.List: %w", ErrNoCluster)
}

func (offline) GetResource(context.Context, string, string, string, string) (*unstructured.Unstructured, error) {
	return nil, fmt.Errorf("resource.Get: %w", ErrNoCluster)
}

func (offline) PostResource(context.Context, string, string, string, map[string]any) (*unstructured.Unstructured, error) {
	return nil, fmt.Errorf("resource.Post: %w", ErrNoCluster)
}

func (offline) ToGVR(context.Context, string, string) (*schema.GroupVersionResource, error) {
	return nil, fmt.Errorf("resource.ToGVR: %w", ErrNoCluster)
}

func (offline) GetGlobalReference(context.Context, string, string) (any, error) {
	return nil, fmt.Errorf("globalContext.Get: %w", ErrNoGlobalContext)
}

func (offline) GetImageData(context.Context, string) (map[string]any, error) {
	return nil, fmt.Errorf("image.GetMetadata: %w", ErrNoRegistry)
}

func (offline) HTTP() HTTPContext { return offlineHTTP{} }

type offlineHTTP struct{}

func (offlineHTTP) Get(context.Context, string, map[string]string) (any, error) {
	return nil, fmt.Errorf("http.Get: %w", ErrNoNetwork)
}

func (offlineHTTP) Post(context.Context, string, any, map[string]string) (any, error) {
	return nil, fmt.Errorf("http.Post: %w", ErrNoNetwork)
}

func (o offlineHTTP) Client(_ context.Context, caBundle string) (HTTPContext, error) {
	if err := CheckCABundle(caBundle); err != nil {
		return nil, err
	}
	return o, nil
}

// ---- CEL values of the context-bound variables ----

func convErr(from *types.Type, to any) error {
	return fmt.Errorf("type conversion error from '%s' to '%v'", from, to)
}

type resourceValue struct {
	ctx context.Context
	c   ResourceContext
	ns  string
}

func (v *resourceValue) ConvertToNative(t reflect.Type) (any, error) {
	return nil, convErr(ResourceContextType, t)
}
func (v *resourceValue) ConvertToType(t ref.Type) ref.Val {
	return convertOpaque(v, ResourceContextType, t)
}
func (v *resourceValue) Equal(o ref.Val) ref.Val { return equalOpaque(v, o) }
func (v *resourceValue) Type() ref.Type          { return ResourceContextType }
func (v *resourceValue) Value() any              { return contextHolder{v.c} }

type httpValue struct {
	ctx context.Context
	c   HTTPContext
}

func (v *httpValue) ConvertToNative(t reflect.Type) (any, error) {
	return nil, convErr(HTTPContextType, t)
}
func (v *httpValue) ConvertToType(t ref.Type) ref.Val { return convertOpaque(v, HTTPContextType, t) }
func (v *httpValue) Equal(o ref.Val) ref.Val          { return equalOpaque(v, o) }
func (v *httpValue) Type() ref.Type                   { return HTTPContextType }
func (v *httpValue) Value() any                       { return contextHolder{v.c} }

type globalContextValue struct {
	ctx context.Context
	c   GlobalContext
}

func (v *globalContextValue) ConvertToNative(t reflect.Type) (any, error) {
	return nil, convErr(GlobalContextType, t)
}
func (v *globalContextValue) ConvertToType(t ref.Type) ref.Val {
	return convertOpaque(v, GlobalContextType, t)
}
func (v *globalContextValue) Equal(o ref.Val) ref.Val { return equalOpaque(v, o) }
func (v *globalContextValue) Type() ref.Type          { return GlobalContextType }
func (v *globalContextValue) Value() any              { return contextHolder{v.c} }

type imageDataValue struct {
	ctx context.Context
	c   ImageDataContext
}

func (v *imageDataValue) ConvertToNative(t reflect.Type) (any, error) {
	return nil, convErr(ImageDataContextType, t)
}
func (v *imageDataValue) ConvertToType(t ref.Type) ref.Val {
	return convertOpaque(v, ImageDataContextType, t)
}
func (v *imageDataValue) Equal(o ref.Val) ref.Val { return equalOpaque(v, o) }
func (v *imageDataValue) Type() ref.Type          { return ImageDataContextType }
func (v *imageDataValue) Value() any              { return contextHolder{v.c} }

// contextHolder is the Go value of a library object, shaped as Kyverno's
// (json.marshal(http) gives {"ContextInterface": ...} there too).
type contextHolder struct {
	ContextInterface any
}

func convertOpaque(v ref.Val, own *types.Type, t ref.Type) ref.Val {
	switch t {
	case own:
		return v
	case types.TypeType:
		return own
	}
	if tt, ok := t.(*types.Type); ok && tt.TypeName() == own.TypeName() {
		return v
	}
	return types.NewErr("type conversion error from '%s' to '%s'", own, t)
}

func equalOpaque(v, o ref.Val) ref.Val {
	if o.Type().TypeName() != v.Type().TypeName() {
		return types.MaybeNoSuchOverloadErr(o)
	}
	return types.Bool(v == o)
}
