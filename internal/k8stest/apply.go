package k8stest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// Client is a dynamic client that creates, updates and deletes objects
// given as unstructured maps, as kubectl would.
type Client struct {
	Dynamic dynamic.Interface
	mapper  *restmapper.DeferredDiscoveryRESTMapper
}

// NewClient makes a client for cfg.
func NewClient(cfg *rest.Config) (*Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = rest.NoWarnings{} // deprecated CRD versions are listed on purpose
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{Dynamic: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

// Resource is the dynamic client of obj's kind, in its namespace.
func (c *Client) Resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		c.mapper.Reset()
		if m, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return nil, fmt.Errorf("%s: %w", gvk, err)
		}
	}
	if m.Scope.Name() == "namespace" {
		ns := obj.GetNamespace()
		if ns == "" {
			ns = metav1.NamespaceDefault
		}
		return c.Dynamic.Resource(m.Resource).Namespace(ns), nil
	}
	return c.Dynamic.Resource(m.Resource), nil
}

// Apply creates obj, or updates it when it exists; it returns the object
// as stored.
func (c *Client) Apply(ctx context.Context, obj map[string]any) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{Object: obj}
	r, err := c.Resource(u)
	if err != nil {
		return nil, err
	}
	out, err := r.Create(ctx, u, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		cur, gerr := r.Get(ctx, u.GetName(), metav1.GetOptions{})
		if gerr != nil {
			return nil, gerr
		}
		u = u.DeepCopy()
		u.SetResourceVersion(cur.GetResourceVersion())
		out, err = r.Update(ctx, u, metav1.UpdateOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return out, nil
}

// Delete deletes obj (absent: no error).
func (c *Client) Delete(ctx context.Context, obj map[string]any) error {
	u := &unstructured.Unstructured{Object: obj}
	r, err := c.Resource(u)
	if err != nil {
		return err
	}
	if err := r.Delete(ctx, u.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

// ReadObjects reads the objects of YAML or JSON files (several YAML
// documents per file).
func ReadObjects(paths ...string) ([]map[string]any, error) {
	var out []map[string]any
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		docs := [][]byte{b}
		if !strings.HasSuffix(p, ".json") {
			if docs, err = manifest.SplitNonEmptyDocuments(b); err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
		}
		for _, d := range docs {
			var m map[string]any
			if err := yaml.Unmarshal(d, &m); err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			if len(m) > 0 {
				out = append(out, m)
			}
		}
	}
	return out, nil
}

// InstallCRDs applies the CustomResourceDefinitions in files (globs
// allowed) and waits, up to a minute, until the API server serves every
// one of them (Established, and a list of the new resource answers).
func (c *Client) InstallCRDs(ctx context.Context, globs ...string) error {
	var files []string
	for _, g := range globs {
		m, err := filepath.Glob(g)
		if err != nil {
			return err
		}
		files = append(files, m...)
	}
	objs, err := ReadObjects(files...)
	if err != nil {
		return err
	}
	if len(objs) == 0 {
		return fmt.Errorf("no CRDs in %v", globs)
	}
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, o := range objs {
		if _, err := c.Apply(ctx, o); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, o := range objs {
		u := &unstructured.Unstructured{Object: o}
		group, _, _ := unstructured.NestedString(o, "spec", "group")
		plural, _, _ := unstructured.NestedString(o, "spec", "names", "plural")
		versions, _, _ := unstructured.NestedSlice(o, "spec", "versions")
		for {
			cur, err := c.Dynamic.Resource(crdGVR).Get(ctx, u.GetName(), metav1.GetOptions{})
			if err == nil && established(cur) {
				served := true
				for _, v := range versions {
					name, _, _ := unstructured.NestedString(v.(map[string]any), "name")
					gvr := schema.GroupVersionResource{Group: group, Version: name, Resource: plural}
					if _, err := c.Dynamic.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
						served = false
						break
					}
				}
				if served {
					break
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("CRD %s is not served: %w", u.GetName(), ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	c.mapper.Reset()
	return nil
}

func established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}
