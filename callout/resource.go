package callout

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
)

// PostResource implements resource.Post (the PostResource of
// kyvernocel.ResourceContext): it creates data as a resource of apiVersion
// in namespace ("" for a cluster-scoped resource) through the API server of
// Options.Kube, as Kyverno's does (a dynamic client's Create; "resource/sub"
// creates a subresource of the object data names) — when the resource is
// one of Config.AllowedResources. The result is the object the API server
// returns (for a review, with its status). Kubernetes errors are wrapped,
// so that apierrors.IsForbidden and the like still hold.
func (c *Client) PostResource(ctx context.Context, apiVersion, resource, namespace string, data map[string]any) (*unstructured.Unstructured, error) {
	target := apiVersion + " " + resource
	if namespace != "" {
		target += " in namespace " + namespace
	}
	call := &Call{Function: "resource.Post", Method: http.MethodPost, URL: target, Start: time.Now()}
	defer c.s.record(ctx, call)
	fail := func(refused bool, err error) (*unstructured.Unstructured, error) {
		call.Refused = refused
		call.Err = &Error{Function: "resource.Post", Target: target, Err: err}
		return nil, call.Err
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return fail(false, err)
	}
	res, sub, _ := strings.Cut(resource, "/")
	key := Resource{Group: gv.Group, Resource: res, Subresource: sub}.String()
	call.Resource = key
	if !c.s.rules.resources[key] {
		return fail(true, fmt.Errorf("%w: %s", ErrResourceNotAllowed, key))
	}
	if c.s.dyn == nil {
		return fail(false, kyvernocel.ErrNoCluster)
	}
	kc := &kubeCall{call: call}
	cctx, cancel := context.WithTimeoutCause(context.WithValue(ctx, kubeCallKey{}, kc), c.s.rules.timeout, ErrTimeout)
	defer cancel()
	nri := c.s.dyn.Resource(gv.WithResource(res))
	var ri dynamic.ResourceInterface = nri
	if namespace != "" {
		ri = nri.Namespace(namespace)
	}
	var subs []string
	if sub != "" {
		subs = strings.Split(sub, "/")
	}
	out, err := ri.Create(cctx, &unstructured.Unstructured{Object: data}, metav1.CreateOptions{}, subs...)
	if err != nil {
		switch {
		case kc.tooLarge:
			err = c.tooLarge()
		case ctx.Err() != nil:
			err = fmt.Errorf("the caller's context ended: %w", context.Cause(ctx))
		case cctx.Err() != nil && context.Cause(cctx) == ErrTimeout:
			err = fmt.Errorf("%w of %s (timeout)", ErrTimeout, c.s.rules.timeout)
		}
		return fail(false, err)
	}
	return out, nil
}

// kubeCall is the record of a resource.Post the transport completes.
type kubeCall struct {
	call     *Call
	tooLarge bool
}

type kubeCallKey struct{}

// dynamicFor returns a dynamic client of the API server of cfg whose
// responses are bounded by the size limit and recorded.
func (s *state) dynamicFor(cfg *rest.Config) (dynamic.Interface, error) {
	cp := rest.CopyConfig(cfg)
	limit := s.rules.maxResponseBytes
	cp.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &kubeTransport{rt: rt, limit: limit}
	})
	return dynamic.NewForConfig(cp)
}

// kubeTransport bounds the body of API server responses and records the
// URL, status and sizes of resource.Post calls.
type kubeTransport struct {
	rt    http.RoundTripper
	limit int64
}

func (t *kubeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	kc, _ := req.Context().Value(kubeCallKey{}).(*kubeCall)
	if kc != nil {
		kc.call.URL = redact(req.URL.String())
		kc.call.Method = req.Method
		kc.call.RequestBytes = req.ContentLength
	}
	resp, err := t.rt.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if kc != nil {
		kc.call.Status = resp.StatusCode
	}
	if resp.ContentLength > t.limit {
		_ = resp.Body.Close()
		if kc != nil {
			kc.tooLarge = true
		}
		return nil, ErrResponseTooLarge
	}
	resp.Body = &limitedBody{rc: resp.Body, left: t.limit, kc: kc}
	return resp, nil
}

// limitedBody fails once more than its limit is read.
type limitedBody struct {
	rc   io.ReadCloser
	left int64
	kc   *kubeCall
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, ErrResponseTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.kc != nil {
		b.kc.call.ResponseBytes += int64(n)
	}
	if b.left < 0 {
		if b.kc != nil {
			b.kc.tooLarge = true
		}
		return n, ErrResponseTooLarge
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
