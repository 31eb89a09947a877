package callout

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
)

// fakeAPI is an httptest server speaking enough of the Kubernetes API for
// resource.Post: it records the requests it gets.
type fakeAPI struct {
	*httptest.Server
	mu       sync.Mutex
	requests []string // "METHOD path body"
}

func (f *fakeAPI) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.requests
	f.requests = nil
	return out
}

func newFakeAPI(t *testing.T) *fakeAPI {
	t.Helper()
	f := &fakeAPI{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.requests = append(f.requests, r.Method+" "+r.URL.Path+" "+string(body))
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		var obj map[string]any
		_ = json.Unmarshal(body, &obj)
		switch r.URL.Path {
		case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
			spec, _ := obj["spec"].(map[string]any)
			obj["status"] = map[string]any{"allowed": spec["user"] == "alice"}
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(obj)
		case "/api/v1/namespaces/team/serviceaccounts/builder/token":
			obj["status"] = map[string]any{"token": "a-token"}
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(obj)
		case "/apis/authentication.k8s.io/v1/tokenreviews":
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"tokenreviews.authentication.k8s.io is forbidden: User \"arbiter\" cannot create resource \"tokenreviews\"","reason":"Forbidden","code":403}`)
		case "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","pad":"`+strings.Repeat("x", 5000)+`"}`)
		case "/apis/authorization.k8s.io/v1/namespaces/team/localsubjectaccessreviews":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

// TestPostResource: resource.Post creates only the allowed resources
// (nothing is sent otherwise), through the API server of Options.Kube,
// bounded in time and size, with Kubernetes errors kept for apierrors.
func TestPostResource(t *testing.T) {
	api := newFakeAPI(t)
	rec := &recorder{}
	cfg := Config{
		Timeout:          Duration(300 * time.Millisecond),
		MaxResponseBytes: 1000,
		AllowedResources: append([]string{"serviceaccounts/token"}, ReviewResources...),
	}
	cl, err := New(cfg, Options{Kube: &rest.Config{Host: api.URL}, Recorder: rec.record})
	if err != nil {
		t.Fatal(err)
	}
	sar := map[string]any{
		"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
		"spec": map[string]any{"user": "alice", "resourceAttributes": map[string]any{"verb": "get", "resource": "pods", "namespace": "team"}},
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name                     string
		apiVersion, resource, ns string
		data                     map[string]any
		want                     string // a JSON fragment of the result
		request                  string // the request the API server gets ("" none)
		err                      string
		refused                  bool
		is                       func(error) bool
		status                   int
	}{
		{name: "subjectaccessreview", apiVersion: "authorization.k8s.io/v1", resource: "subjectaccessreviews", data: sar,
			want:    `"status":{"allowed":true}`,
			request: `POST /apis/authorization.k8s.io/v1/subjectaccessreviews {"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"resourceAttributes":{"namespace":"team","resource":"pods","verb":"get"},"user":"alice"}}`,
			status:  201},
		{name: "subresource", apiVersion: "v1", resource: "serviceaccounts/token", ns: "team",
			data:    map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "metadata": map[string]any{"name": "builder"}, "spec": map[string]any{"audiences": []any{"x"}}},
			want:    `"status":{"token":"a-token"}`,
			request: `POST /api/v1/namespaces/team/serviceaccounts/builder/token`, status: 201},
		{name: "not allowed", apiVersion: "v1", resource: "configmaps", ns: "team", data: map[string]any{"metadata": map[string]any{"name": "x"}}, refused: true,
			err: `resource.Post v1 configmaps in namespace team: resource is not allowed by the server's callout allowlist (allowedResources): configmaps`,
			is:  func(err error) bool { return errors.Is(err, ErrResourceNotAllowed) }},
		{name: "other group", apiVersion: "example.com/v1", resource: "subjectaccessreviews", data: sar, refused: true,
			err: `resource.Post example.com/v1 subjectaccessreviews: resource is not allowed by the server's callout allowlist (allowedResources): subjectaccessreviews.example.com`},
		{name: "unlisted subresource", apiVersion: "v1", resource: "pods/eviction", ns: "team", data: map[string]any{}, refused: true,
			err: `resource.Post v1 pods/eviction in namespace team: resource is not allowed by the server's callout allowlist (allowedResources): pods/eviction`},
		{name: "forbidden", apiVersion: "authentication.k8s.io/v1", resource: "tokenreviews", data: map[string]any{"spec": map[string]any{"token": "t"}},
			request: `POST /apis/authentication.k8s.io/v1/tokenreviews`, status: 403,
			err: `resource.Post authentication.k8s.io/v1 tokenreviews: tokenreviews.authentication.k8s.io is forbidden`,
			is:  apierrors.IsForbidden},
		{name: "oversize", apiVersion: "authorization.k8s.io/v1", resource: "selfsubjectaccessreviews", data: map[string]any{},
			request: `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`, status: 201,
			err: `resource.Post authorization.k8s.io/v1 selfsubjectaccessreviews: response body too large: more than 1000 bytes (maxResponseBytes)`,
			is:  func(err error) bool { return errors.Is(err, ErrResponseTooLarge) }},
		{name: "timeout", apiVersion: "authorization.k8s.io/v1", resource: "localsubjectaccessreviews", ns: "team", data: map[string]any{},
			request: `POST /apis/authorization.k8s.io/v1/namespaces/team/localsubjectaccessreviews`,
			err:     `resource.Post authorization.k8s.io/v1 localsubjectaccessreviews in namespace team: no complete response within the callout timeout of 300ms (timeout)`,
			is:      func(err error) bool { return errors.Is(err, ErrTimeout) }},
		{name: "bad apiVersion", apiVersion: "a/b/c", resource: "x", data: map[string]any{},
			err: `resource.Post a/b/c x: unexpected GroupVersion string: a/b/c`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cl.PostResource(ctx, tc.apiVersion, tc.resource, tc.ns, tc.data)
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				if tc.is != nil && !tc.is(err) {
					t.Errorf("errors.Is/As fails on %v", err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if s := jsonOf(t, got.Object); !strings.Contains(s, tc.want) {
					t.Errorf("got %s, want %s in it", s, tc.want)
				}
			}
			reqs := api.take()
			switch {
			case tc.request == "" && len(reqs) != 0:
				t.Errorf("requests sent: %q", reqs)
			case tc.request != "" && (len(reqs) != 1 || !strings.HasPrefix(reqs[0], tc.request)):
				t.Errorf("requests %q, want %q", reqs, tc.request)
			}
			calls := rec.take()
			if len(calls) != 1 {
				t.Fatalf("%d calls", len(calls))
			}
			c := calls[0]
			if c.Function != "resource.Post" || c.Method != "POST" || c.Refused != tc.refused || c.Status != tc.status || (c.Err == nil) != (tc.err == "") {
				t.Errorf("call: %+v", c)
			}
			if tc.request != "" && (c.URL != api.URL+strings.Fields(tc.request)[1] || c.RequestBytes == 0) {
				t.Errorf("call URL %q, request bytes %d", c.URL, c.RequestBytes)
			}
			if tc.status == 201 && c.ResponseBytes == 0 {
				t.Errorf("no response bytes: %+v", c)
			}
		})
	}

	// without an API server
	off, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := off.PostResource(ctx, "authorization.k8s.io/v1", "subjectaccessreviews", "", sar); !errors.Is(err, kyvernocel.ErrNoCluster) ||
		err.Error() != "resource.Post authorization.k8s.io/v1 subjectaccessreviews: no cluster access in this context" {
		t.Errorf("no API server: %v", err)
	}
}
