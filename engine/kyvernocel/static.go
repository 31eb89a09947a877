package kyvernocel

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Static is a Context backed by in-memory data, for `arbiter test` and
// `arbiter apply`: what the Kyverno CLI serves to CEL policies from a test's
// context file (spec.resources, spec.images), clusterResources files,
// apiCallResponses and globalContextEntries. It never reaches a network.
//
// Build it with NewStatic and the Add/Set methods (or LoadTestContext), then
// use it read-only: after construction it is safe for concurrent use.
//
// Resource semantics follow the Kyverno CLI, which has two modes:
//
//   - without clusterResources (Kyverno's fake context provider): objects are
//     mapped to resources with the CLI's built-in discovery data (an unknown
//     kind is an error); Get matches group/version/resource, namespace and
//     name exactly; List returns the objects of exactly that namespace ("" =
//     cluster-scoped objects) and ignores the label selector, and fails with
//     "<resource> resource not found" when the context holds no object of the
//     resource at all.
//   - with clusterResources (Kyverno's fake cluster client, SetClusterMode):
//     List honours the label selector, lists all namespaces for namespace "",
//     returns an empty list for a resource with no objects, and the list
//     carries apiVersion, kind (<Kind>List) and metadata as a cluster's does.
//
// In both modes a missing object is a NotFound error (null in CEL), a
// subresource ("pods/status") reads the object itself, and ToGVR uses the
// discovery data plus registered CRDs. Post fails: there is nothing to create
// objects in.
type Static struct {
	mapper   *meta.DefaultRESTMapper
	kinds    map[schema.GroupVersionResource]schema.GroupVersionKind
	versions map[schema.GroupKind][]string // registered versions, preferred first
	cluster  bool
	objects  map[schema.GroupVersionResource]map[string]map[string]*unstructured.Unstructured
	images   map[string]map[string]any
	globals  map[string]any
	mocks    map[string]any
}

var _ Context = (*Static)(nil)

// NewStatic returns an empty Static context in the CLI's default (fake
// provider) mode.
func NewStatic() *Static {
	s := &Static{
		mapper:   meta.NewDefaultRESTMapper(nil),
		kinds:    map[schema.GroupVersionResource]schema.GroupVersionKind{},
		versions: map[schema.GroupKind][]string{},
		objects:  map[schema.GroupVersionResource]map[string]map[string]*unstructured.Unstructured{},
		images:   map[string]map[string]any{},
		globals:  map[string]any{},
		mocks:    map[string]any{},
	}
	for _, r := range builtinResources {
		gvk := schema.GroupVersionKind{Group: r.group, Version: r.version, Kind: r.kind}
		s.RegisterKind(gvk, r.resource, r.namespaced)
		if r.preferred {
			vs := s.versions[gvk.GroupKind()]
			copy(vs[1:], vs[:len(vs)-1])
			vs[0] = r.version
		}
	}
	return s
}

type builtinResource struct {
	group, version, kind, resource string
	namespaced, preferred          bool
}

// SetClusterMode selects the semantics Kyverno's CLI uses when a test has
// clusterResources (see Static).
func (s *Static) SetClusterMode(on bool) { s.cluster = on }

// ClusterMode reports whether cluster mode is on.
func (s *Static) ClusterMode() bool { return s.cluster }

// RegisterKind maps a kind to its resource (plural) name and scope, as a
// CRD's spec.names does.
func (s *Static) RegisterKind(gvk schema.GroupVersionKind, resource string, namespaced bool) {
	scope := meta.RESTScopeRoot
	if namespaced {
		scope = meta.RESTScopeNamespace
	}
	s.mapper.AddSpecific(gvk, gvk.GroupVersion().WithResource(resource),
		gvk.GroupVersion().WithResource(strings.ToLower(gvk.Kind)), scope)
	s.kinds[gvk.GroupVersion().WithResource(resource)] = gvk
	gk := gvk.GroupKind()
	for _, v := range s.versions[gk] {
		if v == gvk.Version {
			return
		}
	}
	s.versions[gk] = append(s.versions[gk], gvk.Version)
}

// RESTMapping maps a group/kind at a version ("" for the preferred one) to
// its resource, with the errors of a discovery REST mapper (`no matches for
// kind "X" in version "g/v"`).
func (s *Static) RESTMapping(gk schema.GroupKind, version string) (*meta.RESTMapping, error) {
	if version != "" {
		return s.mapper.RESTMapping(gk, version)
	}
	vs := s.versions[gk]
	if len(vs) == 0 {
		return nil, &meta.NoKindMatchError{GroupKind: gk}
	}
	return s.mapper.RESTMapping(gk, vs...)
}

// AddObject makes obj visible to resource.Get and resource.List. In the
// default mode its kind must be known (built in, or registered from a CRD),
// as in the Kyverno CLI; in cluster mode an unknown kind's resource name is
// guessed from the kind, as Kyverno's fake cluster client does.
func (s *Static) AddObject(obj *unstructured.Unstructured) error {
	if obj == nil {
		return errors.New("nil object")
	}
	gvk := obj.GroupVersionKind()
	var gvr schema.GroupVersionResource
	mapping, err := s.RESTMapping(gvk.GroupKind(), gvk.Version)
	switch {
	case err == nil:
		gvr = mapping.Resource
	case s.cluster && gvk.Kind != "":
		gvr, _ = meta.UnsafeGuessKindToResource(gvk)
		s.kinds[gvr] = gvk
	default:
		return err
	}
	byNS := s.objects[gvr]
	if byNS == nil {
		byNS = map[string]map[string]*unstructured.Unstructured{}
		s.objects[gvr] = byNS
	}
	ns := obj.GetNamespace()
	byName := byNS[ns]
	if byName == nil {
		byName = map[string]*unstructured.Unstructured{}
		byNS[ns] = byName
	}
	byName[obj.GetName()] = obj.DeepCopy()
	return nil
}

// AddImageData serves data to image.GetMetadata(image) (the exact string).
func (s *Static) AddImageData(image string, data map[string]any) {
	s.images[image] = data
}

// SetGlobalContextEntry serves data as the GlobalContextEntry name: the whole
// value for projection "", or its key named projection (data must then be an
// object).
func (s *Static) SetGlobalContextEntry(name string, data any) {
	s.globals[name] = data
}

// SetHTTPMock serves body to http calls of url, for method ("GET", "POST")
// or, with method "", for any method. Kyverno's CLI wraps each
// apiCallResponses body as {"body": <body>, "statusCode": <code>}; see
// AddAPICallResponses.
func (s *Static) SetHTTPMock(method, url string, response any) {
	key := url
	if method = strings.ToUpper(strings.TrimSpace(method)); method != "" {
		key = method + ":" + url
	}
	s.mocks[key] = response
}

// ---- ResourceContext ----

func (s *Static) lookupGVR(apiVersion, resource string) (schema.GroupVersionResource, string, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return schema.GroupVersionResource{}, "", err
	}
	sub := ""
	if i := strings.IndexByte(resource, '/'); i >= 0 {
		resource, sub = resource[:i], resource[i+1:]
	}
	return gv.WithResource(resource), sub, nil
}

// ListResources implements ResourceContext.
func (s *Static) ListResources(_ context.Context, apiVersion, resource, namespace string, lbls map[string]string) (*unstructured.UnstructuredList, error) {
	gvr, _, err := s.lookupGVR(apiVersion, resource)
	if err != nil {
		return nil, err
	}
	byNS := s.objects[gvr]
	if !s.cluster {
		if byNS == nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("%s resource not found", gvr.GroupResource()))
		}
		out := &unstructured.UnstructuredList{Items: []unstructured.Unstructured{}}
		for _, name := range sortedKeys(byNS[namespace]) {
			out.Items = append(out.Items, *byNS[namespace][name])
		}
		return out, nil
	}
	var selector labels.Selector
	if len(lbls) > 0 {
		selector = labels.SelectorFromSet(lbls)
	}
	out := &unstructured.UnstructuredList{Object: map[string]any{}, Items: []unstructured.Unstructured{}}
	kind := gvr.Resource
	if gvk, ok := s.kinds[gvr]; ok {
		kind = gvk.Kind
	}
	out.SetAPIVersion(gvr.GroupVersion().String())
	out.SetKind(kind + "List")
	out.SetResourceVersion("")
	namespaces := []string{namespace}
	if namespace == "" {
		namespaces = sortedKeys(byNS)
	}
	for _, ns := range namespaces {
		for _, name := range sortedKeys(byNS[ns]) {
			obj := byNS[ns][name]
			if selector != nil && !selector.Matches(labels.Set(obj.GetLabels())) {
				continue
			}
			out.Items = append(out.Items, *obj)
		}
	}
	return out, nil
}

// GetResource implements ResourceContext.
func (s *Static) GetResource(_ context.Context, apiVersion, resource, namespace, name string) (*unstructured.Unstructured, error) {
	gvr, _, err := s.lookupGVR(apiVersion, resource)
	if err != nil {
		return nil, err
	}
	if obj, ok := s.objects[gvr][namespace][name]; ok {
		return obj, nil
	}
	return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
}

// PostResource implements ResourceContext: it always fails.
func (s *Static) PostResource(_ context.Context, apiVersion, resource, _ string, _ map[string]any) (*unstructured.Unstructured, error) {
	return nil, fmt.Errorf("resource.Post %s %s: creating objects is not supported in this context", apiVersion, resource)
}

// ToGVR implements ResourceContext.
func (s *Static) ToGVR(_ context.Context, apiVersion, kind string) (*schema.GroupVersionResource, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, err
	}
	m, err := s.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: kind}, gv.Version)
	if err != nil {
		return nil, err
	}
	return &m.Resource, nil
}

// ---- GlobalContext, ImageDataContext ----

// GetGlobalReference implements GlobalContext as Kyverno's CLI mock does: a
// missing entry is null; a projection selects a key of the entry's object.
func (s *Static) GetGlobalReference(_ context.Context, name, projection string) (any, error) {
	data, ok := s.globals[name]
	if !ok {
		return nil, nil
	}
	if projection == "" {
		return data, nil
	}
	m, ok := data.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("projection %q not found in global context entry %q: stored value is not an object", projection, name)
	}
	v, ok := m[projection]
	if !ok {
		return nil, fmt.Errorf("projection %q not found in global context entry %q", projection, name)
	}
	return v, nil
}

// GetImageData implements ImageDataContext.
func (s *Static) GetImageData(_ context.Context, image string) (map[string]any, error) {
	data, ok := s.images[image]
	if !ok {
		return nil, fmt.Errorf("image data for %s not found in the context", image)
	}
	return data, nil
}

// ---- HTTPContext ----

// HTTP implements Context: requests are served from the mocks; a request
// with no mock fails (there is no network).
func (s *Static) HTTP() HTTPContext { return staticHTTP{s} }

type staticHTTP struct{ s *Static }

func (h staticHTTP) lookup(method, url string) (any, error) {
	if len(h.s.mocks) > 0 {
		if body, ok := h.s.mocks[method+":"+url]; ok {
			return body, nil
		}
		if body, ok := h.s.mocks[url]; ok {
			return body, nil
		}
	}
	return nil, fmt.Errorf("%s %s: no apiCallResponses entry matches and there is no network access in this context", method, url)
}

func (h staticHTTP) Get(_ context.Context, url string, _ map[string]string) (any, error) {
	return h.lookup("GET", url)
}

func (h staticHTTP) Post(_ context.Context, url string, _ any, _ map[string]string) (any, error) {
	return h.lookup("POST", url)
}

func (h staticHTTP) Client(_ context.Context, caBundle string) (HTTPContext, error) {
	if err := checkCABundle(caBundle); err != nil {
		return nil, err
	}
	return h, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
