package kyvernocel

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

type chainsawCase struct {
	Case                string                                 `json:"case"`
	Policies            []string                               `json:"policies"`
	Cluster             []string                               `json:"cluster"`
	Globals             map[string]any                         `json:"globals"`
	GlobalsFromFiles    map[string]struct{ File, Kind string } `json:"globalsFromFiles"`
	Images              map[string]map[string]any              `json:"images"`
	HTTP                string                                 `json:"http"`
	SubjectAccessReview bool                                   `json:"subjectAccessReview"`
	RejectedWithoutHTTP bool                                   `json:"rejectedWithoutHTTP"`
	Evaluate            []struct {
		File     string         `json:"file"`
		Name     string         `json:"name"`
		Object   map[string]any `json:"object"`
		Username string         `json:"username"`
		Want     string         `json:"want"`
		Message  string         `json:"message"`
	} `json:"evaluate"`
}

// chainsawServers emulates the HTTP servers the chainsaw cases deploy, with
// the response shape of Kyverno's real HTTP client (the JSON body object with
// "statusCode" added).
type chainsawServers struct{}

func (chainsawServers) Get(_ context.Context, url string, _ map[string]string) (any, error) {
	switch url {
	case "http://test-api-service.default.svc.cluster.local:80":
		return map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "test"}}, "statusCode": 200}, nil
	case "http://json-server.test-cel-http.svc.cluster.local:8080/":
		return map[string]any{"status": "ok", "statusCode": 200}, nil
	}
	return nil, ErrNoNetwork
}

func (chainsawServers) Post(_ context.Context, url string, data any, headers map[string]string) (any, error) {
	if url == "http://test-api-service.default.svc.cluster.local/" && headers["Content-Type"] == "application/json" {
		return map[string]any{"received": data.(map[string]any)["labels"], "statusCode": 200}, nil
	}
	return nil, ErrNoNetwork
}

func (s chainsawServers) Client(context.Context, string) (HTTPContext, error) { return s, nil }

// sarStatic answers SubjectAccessReviews as the chainsaw cluster's RBAC does.
type sarStatic struct{ *Static }

func (s sarStatic) PostResource(_ context.Context, apiVersion, resource, ns string, data map[string]any) (*unstructured.Unstructured, error) {
	if apiVersion != "authorization.k8s.io/v1" || resource != "subjectaccessreviews" || ns != "" {
		return nil, ErrNoCluster
	}
	spec, _ := data["spec"].(map[string]any)
	allowed := spec["user"] == "subreviewuser"
	out := &unstructured.Unstructured{Object: data}
	out.Object["status"] = map[string]any{"allowed": allowed}
	return out, nil
}

func TestChainsawCases(t *testing.T) {
	raw, err := os.ReadFile("testdata/chainsaw.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cases []chainsawCase
	if err := yaml.UnmarshalStrict(raw, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) != 18 {
		t.Fatalf("%d cases", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.Case, func(t *testing.T) {
			dir := filepath.Join("testdata/chainsaw", tc.Case)
			load := func(file string) []*unstructured.Unstructured {
				var out []*unstructured.Unstructured
				for _, doc := range readDocs(t, filepath.Join(dir, file)) {
					u := &unstructured.Unstructured{}
					if err := yaml.Unmarshal(doc, &u.Object); err != nil {
						t.Fatal(err)
					}
					if u.GetNamespace() == "" && u.GetKind() != "Namespace" {
						u.SetNamespace("default")
					}
					out = append(out, u)
				}
				return out
			}
			s := NewStatic()
			s.SetClusterMode(true)
			for _, f := range tc.Cluster {
				for _, o := range load(f) {
					if err := s.AddObject(o); err != nil {
						t.Fatal(err)
					}
				}
			}
			for name, data := range tc.Globals {
				s.SetGlobalContextEntry(name, data)
			}
			for name, src := range tc.GlobalsFromFiles {
				var list []any
				for _, o := range load(src.File) {
					if o.GetKind() == src.Kind {
						list = append(list, o.Object)
					}
				}
				s.SetGlobalContextEntry(name, list)
			}
			for img, data := range tc.Images {
				s.AddImageData(img, data)
			}
			var c Context = s
			if tc.SubjectAccessReview {
				c = sarStatic{s}
			}
			if tc.HTTP == "servers" {
				c = WithHTTP(c, chainsawServers{})
			}
			var policies []suitePolicy
			for _, f := range tc.Policies {
				for _, doc := range readDocs(t, filepath.Join(dir, f)) {
					var p suitePolicy
					if err := yaml.Unmarshal(doc, &p); err != nil {
						t.Fatal(err)
					}
					policies = append(policies, p)
				}
			}
			for _, p := range policies {
				namespaced := p.Kind == "NamespacedValidatingPolicy"
				env := newTestEnv(t, Options{Namespaced: namespaced})
				uses := ExpressionsUseHTTP(policyExpressions(p)...)
				if tc.RejectedWithoutHTTP != (namespaced && uses) {
					t.Errorf("%s: namespaced=%v uses http=%v, want rejected=%v", p.Metadata.Name, namespaced, uses, tc.RejectedWithoutHTTP)
				}
				if tc.RejectedWithoutHTTP {
					// with --allowHTTPInNamespacedPolicies off, the call fails at evaluation too
					denied := WithHTTP(c, NamespacedHTTPNotAllowed(c.HTTP()))
					got, msg := evalSuitePolicy(t, env, denied, p, objFrom(t, tc.Evaluate[0].Object), nil, "")
					if got != "fail" || !strings.Contains(msg, "failed to evaluate message expression: ") || !strings.Contains(msg, HTTPNotAllowedMessage) {
						t.Errorf("%s without HTTP: %s %q", p.Metadata.Name, got, msg)
					}
				}
				for _, ev := range tc.Evaluate {
					var objs []*unstructured.Unstructured
					if ev.Object != nil {
						objs = append(objs, objFrom(t, ev.Object))
					} else {
						for _, o := range load(ev.File) {
							if ev.Name == "" || o.GetName() == ev.Name {
								objs = append(objs, o)
							}
						}
					}
					if len(objs) != 1 {
						t.Fatalf("%s %s: %d objects", ev.File, ev.Name, len(objs))
					}
					got, msg := evalSuitePolicy(t, env, c, p, objs[0], nil, ev.Username)
					if got != ev.Want || (ev.Message != "" && strings.TrimSpace(msg) != ev.Message) {
						t.Errorf("%s on %s: %s %q, want %s %q", p.Metadata.Name, objs[0].GetName(), got, msg, ev.Want, ev.Message)
					}
				}
			}
		})
	}
}

func objFrom(t *testing.T, m map[string]any) *unstructured.Unstructured {
	t.Helper()
	if m == nil {
		t.Fatal("no object")
	}
	return &unstructured.Unstructured{Object: m}
}

func policyExpressions(p suitePolicy) []string {
	var out []string
	for _, v := range p.Spec.Variables {
		out = append(out, v.Expression)
	}
	for _, m := range p.Spec.MatchConditions {
		out = append(out, m.Expression)
	}
	for _, v := range p.Spec.Validations {
		out = append(out, v.Expression, v.MessageExpression)
	}
	for _, a := range p.Spec.AuditAnnotations {
		out = append(out, a.ValueExpression)
	}
	return out
}
