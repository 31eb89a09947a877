package callout

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
)

// Context returns base with its calls out made by c: http.* by c itself,
// resource.Post by c.PostResource. Everything else — resource.Get and
// List, resource.ToGVR, globalContext, image data — is base's (nil:
// kyvernocel.Offline). Give it to the engine as engine.EvalOptions.Context.
func (c *Client) Context(base kyvernocel.Context) kyvernocel.Context {
	if base == nil {
		base = kyvernocel.Offline
	}
	return withCallout{Context: base, c: c}
}

type withCallout struct {
	kyvernocel.Context
	c *Client
}

func (w withCallout) HTTP() kyvernocel.HTTPContext { return w.c }

func (w withCallout) PostResource(ctx context.Context, apiVersion, resource, namespace string, data map[string]any) (*unstructured.Unstructured, error) {
	return w.c.PostResource(ctx, apiVersion, resource, namespace, data)
}
