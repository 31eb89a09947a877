package kubesource

import (
	"context"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// LiveReader reads objects from a live API server, read-only, as
// Kyverno's context provider does: what `arbiter apply --cluster` and
// `arbiter decide --cluster` serve to resource.Get, resource.List and
// resource.ToGVR. Every call is a request to the API server (nothing is
// cached but discovery), so it is for the command line, not the server,
// whose decisions read the context objects of their revision.
type LiveReader struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

// NewLiveReader makes a reader for the API server of cfg.
func NewLiveReader(cfg *rest.Config) (*LiveReader, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &LiveReader{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

func (r *LiveReader) client(apiVersion, resource, namespace string) (dynamic.ResourceInterface, []string, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, nil, err
	}
	parts := strings.Split(resource, "/")
	c := r.dyn.Resource(gv.WithResource(parts[0]))
	if namespace != "" {
		return c.Namespace(namespace), parts[1:], nil
	}
	return c, parts[1:], nil
}

// ListResources lists with the label selector of labels (every key and
// value), as Kyverno does.
func (r *LiveReader) ListResources(ctx context.Context, apiVersion, resource, namespace string, l map[string]string) (*unstructured.UnstructuredList, error) {
	c, _, err := r.client(apiVersion, resource, namespace)
	if err != nil {
		return nil, err
	}
	sel := labels.Everything()
	if len(l) > 0 {
		sel = labels.SelectorFromSet(l)
	}
	return c.List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
}

// GetResource gets an object, or its subresource ("pods/status").
func (r *LiveReader) GetResource(ctx context.Context, apiVersion, resource, namespace, name string) (*unstructured.Unstructured, error) {
	c, sub, err := r.client(apiVersion, resource, namespace)
	if err != nil {
		return nil, err
	}
	return c.Get(ctx, name, metav1.GetOptions{}, sub...)
}

// ToGVR maps a kind to its resource with the API server's discovery.
func (r *LiveReader) ToGVR(_ context.Context, apiVersion, kind string) (*schema.GroupVersionResource, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, err
	}
	m, err := r.mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: kind}, gv.Version)
	if err != nil {
		return nil, err
	}
	return &m.Resource, nil
}
