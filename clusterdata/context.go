package clusterdata

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/google/cel-go/common/types/ref"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/jsonval"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
)

// Reader is what resource.Get, resource.List and resource.ToGVR read: a
// *View (the context objects of a revision, or of --context files) or a
// live cluster (--cluster).
type Reader interface {
	ListResources(ctx context.Context, apiVersion, resource, namespace string, labels map[string]string) (*unstructured.UnstructuredList, error)
	GetResource(ctx context.Context, apiVersion, resource, namespace, name string) (*unstructured.Unstructured, error)
	ToGVR(ctx context.Context, apiVersion, kind string) (*schema.GroupVersionResource, error)
}

// Poster is what resource.Post calls (SubjectAccessReview, TokenReview and
// the like): a call out, not data.
type Poster interface {
	PostResource(ctx context.Context, apiVersion, resource, namespace string, data map[string]any) (*unstructured.Unstructured, error)
}

// Errors of the parts a Context is not given. Each call's error names the
// function and wraps one of these.
var (
	// ErrNoObjects: no context objects (resource.Get, List, ToGVR).
	ErrNoObjects = errors.New("no context objects are configured: store them beside the policies (arbiter push, serve --load) or give arbiter apply/decide --context FILE or --cluster")
	// ErrNoPost: resource.Post has no client.
	ErrNoPost = errors.New("calls out to the API server (resource.Post) are not configured")
	// ErrNoGlobalContext: globalContext.Get has no entries.
	ErrNoGlobalContext = errors.New("no GlobalContextEntries are configured")
	// ErrNoImageData: image.GetMetadata has no registry client.
	ErrNoImageData = errors.New("image registry access (image.GetMetadata) is not configured")
	// ErrNoHTTP: http.* has no client.
	ErrNoHTTP = errors.New("calls out over HTTP (http.Get, http.Post) are not configured")
)

// Context is a kyvernocel.Context made of parts, each optional: the
// context objects (Resources), the calls out (Poster, HTTPClient), the
// GlobalContextEntries (Global) and image metadata (Images). A call to a
// part that is nil fails with an error naming what is not configured.
//
// The server builds one per snapshot (its view and its entries) and, per
// decision, a copy with Reads set, so the decision says what it read:
//
//	c := *snap.Context
//	c.Reads = &clusterdata.Reads{}
//	opts.Context = &c
//
// A Context is safe for concurrent use when its parts are.
type Context struct {
	Resources  Reader
	Poster     Poster
	Global     kyvernocel.GlobalContext
	Images     kyvernocel.ImageDataContext
	HTTPClient kyvernocel.HTTPContext
	// Reads, when set, records the context objects and entries read.
	Reads *Reads
}

var _ kyvernocel.Context = (*Context)(nil)

// ListResources implements kyvernocel.ResourceContext.
func (c *Context) ListResources(ctx context.Context, apiVersion, resource, namespace string, labels map[string]string) (*unstructured.UnstructuredList, error) {
	if c.Resources == nil {
		return nil, fmt.Errorf("resource.List: %w", ErrNoObjects)
	}
	list, err := c.Resources.ListResources(ctx, apiVersion, resource, namespace, labels)
	if c.Reads != nil {
		r := Read{Op: OpList, APIVersion: apiVersion, Resource: resource, Namespace: namespace, Selector: selectorString(labels)}
		if err != nil {
			r.Error = err.Error()
		} else if list != nil {
			r.Count = len(list.Items)
		}
		c.Reads.add(r)
	}
	return list, err
}

// GetResource implements kyvernocel.ResourceContext.
func (c *Context) GetResource(ctx context.Context, apiVersion, resource, namespace, name string) (*unstructured.Unstructured, error) {
	if c.Resources == nil {
		return nil, fmt.Errorf("resource.Get: %w", ErrNoObjects)
	}
	obj, err := c.Resources.GetResource(ctx, apiVersion, resource, namespace, name)
	c.readGet(apiVersion, resource, namespace, name, err)
	return obj, err
}

// valueReader is a Reader that gives the CEL values of its objects
// (kyvernocel.ResourceValueContext), as a *View does.
type valueReader interface {
	Reader
	kyvernocel.ResourceValueContext
}

var (
	_ kyvernocel.ResourceValueContext = (*Context)(nil)
	_ valueReader                     = (*View)(nil)
)

// GetResourceValue implements kyvernocel.ResourceValueContext: the value of
// the Resources' object when they give values (a *View), else the
// conversion of the object GetResource returns. The read is recorded as
// GetResource records it.
func (c *Context) GetResourceValue(ctx context.Context, apiVersion, resource, namespace, name string) (ref.Val, error) {
	vr, ok := c.Resources.(valueReader)
	if !ok {
		obj, err := c.GetResource(ctx, apiVersion, resource, namespace, name)
		if err != nil || obj == nil {
			return nil, err
		}
		return jsonval.Of(obj.UnstructuredContent()), nil
	}
	val, err := vr.GetResourceValue(ctx, apiVersion, resource, namespace, name)
	c.readGet(apiVersion, resource, namespace, name, err)
	return val, err
}

// readGet records a resource.Get.
func (c *Context) readGet(apiVersion, resource, namespace, name string, err error) {
	if c.Reads == nil {
		return
	}
	r := Read{Op: OpGet, APIVersion: apiVersion, Resource: resource, Namespace: namespace, Name: name}
	switch {
	case err == nil:
		r.Count = 1
	case !apierrors.IsNotFound(err):
		r.Error = err.Error()
	}
	c.Reads.add(r)
}

// PostResource implements kyvernocel.ResourceContext.
func (c *Context) PostResource(ctx context.Context, apiVersion, resource, namespace string, data map[string]any) (*unstructured.Unstructured, error) {
	if c.Poster == nil {
		return nil, fmt.Errorf("resource.Post %s %s: %w", apiVersion, resource, ErrNoPost)
	}
	return c.Poster.PostResource(ctx, apiVersion, resource, namespace, data)
}

// ToGVR implements kyvernocel.ResourceContext.
func (c *Context) ToGVR(ctx context.Context, apiVersion, kind string) (*schema.GroupVersionResource, error) {
	if c.Resources == nil {
		// The built-in kinds are known without any object.
		return Empty().ToGVR(ctx, apiVersion, kind)
	}
	return c.Resources.ToGVR(ctx, apiVersion, kind)
}

// GetGlobalReference implements kyvernocel.GlobalContext.
func (c *Context) GetGlobalReference(ctx context.Context, name, projection string) (any, error) {
	if c.Global == nil {
		return nil, fmt.Errorf("globalContext.Get(%q): %w", name, ErrNoGlobalContext)
	}
	v, err := c.Global.GetGlobalReference(ctx, name, projection)
	if c.Reads != nil {
		r := Read{Op: OpGlobalContext, Name: name, Projection: projection}
		switch {
		case err != nil:
			r.Error = err.Error()
		case v != nil:
			r.Count = 1
		}
		c.Reads.add(r)
	}
	return v, err
}

// GetImageData implements kyvernocel.ImageDataContext.
func (c *Context) GetImageData(ctx context.Context, image string) (map[string]any, error) {
	if c.Images == nil {
		return nil, fmt.Errorf("image.GetMetadata(%q): %w", image, ErrNoImageData)
	}
	v, err := c.Images.GetImageData(ctx, image)
	if c.Reads != nil {
		r := Read{Op: OpImage, Name: image}
		if err != nil {
			r.Error = err.Error()
		} else {
			r.Count = 1
		}
		c.Reads.add(r)
	}
	return v, err
}

// HTTP implements kyvernocel.Context.
func (c *Context) HTTP() kyvernocel.HTTPContext {
	if c.HTTPClient == nil {
		return noHTTP{}
	}
	return c.HTTPClient
}

type noHTTP struct{}

func (noHTTP) Get(_ context.Context, url string, _ map[string]string) (any, error) {
	return nil, fmt.Errorf("http.Get %s: %w", url, ErrNoHTTP)
}

func (noHTTP) Post(_ context.Context, url string, _ any, _ map[string]string) (any, error) {
	return nil, fmt.Errorf("http.Post %s: %w", url, ErrNoHTTP)
}

func (n noHTTP) Client(_ context.Context, caBundle string) (kyvernocel.HTTPContext, error) {
	if err := kyvernocel.CheckCABundle(caBundle); err != nil {
		return nil, err
	}
	return n, nil
}

// ---- reads ----

// Read operations.
const (
	OpGet           = "get"
	OpList          = "list"
	OpGlobalContext = "globalContext"
	OpImage         = "image"
)

// Read is one read of a decision: a resource.Get (APIVersion, Resource,
// Namespace, Name; Count 1 when found, 0 when not), a resource.List
// (APIVersion, Resource, Namespace, Selector; Count the objects listed), a
// globalContext.Get (Name of the entry, Projection; Count 1 when it had
// data) or an image.GetMetadata (Name is the image). Error is the error of
// the read. Reads carry keys and counts, never the objects' content.
type Read struct {
	Op         string `json:"op"`
	APIVersion string `json:"apiVersion,omitempty"`
	Resource   string `json:"resource,omitempty"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name,omitempty"`
	Selector   string `json:"selector,omitempty"`
	Projection string `json:"projection,omitempty"`
	Count      int    `json:"count"`
	Error      string `json:"error,omitempty"`
}

// String renders a read as a line of text.
func (r Read) String() string {
	var b strings.Builder
	b.WriteString(r.Op)
	switch r.Op {
	case OpGet, OpList:
		b.WriteString(" " + r.APIVersion + " " + r.Resource)
		if r.Namespace != "" {
			b.WriteString(" " + r.Namespace)
			if r.Name != "" {
				b.WriteString("/" + r.Name)
			}
		} else if r.Name != "" {
			b.WriteString(" " + r.Name)
		}
		if r.Selector != "" {
			b.WriteString(" labels " + r.Selector)
		}
	default:
		b.WriteString(" " + r.Name)
		if r.Projection != "" {
			b.WriteString(" " + r.Projection)
		}
	}
	switch {
	case r.Error != "":
		b.WriteString(": error: " + r.Error)
	case r.Op == OpList:
		fmt.Fprintf(&b, ": %d objects", r.Count)
	case r.Count == 0:
		b.WriteString(": not found")
	}
	return b.String()
}

// Reads records the reads of one decision. The zero value is ready; it is
// safe for concurrent use.
type Reads struct {
	mu sync.Mutex
	// reads is the chunk being filled; full are the chunks filled before
	// it, each half the size of the next (reads are never copied as more
	// arrive).
	reads []Read
	full  [][]Read
	n     int
}

func (rs *Reads) add(r Read) {
	rs.mu.Lock()
	if len(rs.reads) == cap(rs.reads) {
		if rs.reads != nil {
			if rs.full == nil {
				rs.full = make([][]Read, 0, 4)
			}
			rs.full = append(rs.full, rs.reads)
		}
		rs.reads = make([]Read, 0, max(2, 2*cap(rs.reads)))
	}
	rs.reads = append(rs.reads, r)
	rs.n++
	rs.mu.Unlock()
}

// List returns the distinct reads, in a fixed order (by operation, then
// the fields of the read), or nil when there were none.
func (rs *Reads) List() []Read {
	if rs == nil {
		return nil
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.n == 0 {
		return nil
	}
	out := make([]Read, 0, rs.n)
	for _, c := range rs.full {
		out = append(out, c...)
	}
	out = append(out, rs.reads...)
	sort.Slice(out, func(i, j int) bool { return readLess(out[i], out[j]) })
	n := 0
	for i := range out {
		if n > 0 && out[n-1] == out[i] {
			continue
		}
		out[n] = out[i]
		n++
	}
	return out[:n]
}

func readLess(a, b Read) bool {
	for _, p := range [][2]string{{a.Op, b.Op}, {a.APIVersion, b.APIVersion}, {a.Resource, b.Resource}, {a.Namespace, b.Namespace},
		{a.Name, b.Name}, {a.Selector, b.Selector}, {a.Projection, b.Projection}, {a.Error, b.Error}} {
		if p[0] != p[1] {
			return p[0] < p[1]
		}
	}
	return a.Count < b.Count
}

// selectorString renders a label set as a selector (keys sorted).
func selectorString(labels map[string]string) string {
	if len(labels) == 0 {
		return ""
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + labels[k])
	}
	return b.String()
}
