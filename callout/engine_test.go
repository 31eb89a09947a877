package callout_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/arbiter-pdp/arbiter/callout"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

const calloutPolicies = `apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: verdict-from-http}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  matchConditions:
  - name: asks-http
    expression: "has(object.data) && has(object.data.url)"
  variables:
  - name: verdict
    expression: "http.Get(object.data.url)"
  validations:
  - expression: "variables.verdict.statusCode == 200 && variables.verdict.allowed == true"
    messageExpression: "'the service said no: ' + string(variables.verdict.reason)"
---
apiVersion: policies.kyverno.io/v1
kind: NamespacedValidatingPolicy
metadata: {name: team-verdict, namespace: team}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  matchConditions:
  - name: asks-http
    expression: "has(object.data) && has(object.data.teamUrl)"
  validations:
  - expression: "http.Get(object.data.teamUrl).allowed == true"
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: creator-may-read-secrets}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  matchConditions:
  - name: asks-sar
    expression: "has(object.data) && has(object.data.sar)"
  validations:
  - expression: >-
      resource.Post("authorization.k8s.io/v1", "subjectaccessreviews", {
        "apiVersion": dyn("authorization.k8s.io/v1"), "kind": dyn("SubjectAccessReview"),
        "spec": dyn({"user": dyn(request.userInfo.username),
                 "resourceAttributes": dyn({"verb": "get", "resource": "secrets", "namespace": string(object.metadata.namespace)})})
      }).status.allowed == true
    message: the creator may not read secrets
`

// TestEngine: the engine evaluates policies that call out through a
// Client given as EvalOptions.Context (Client.Context): an allowed URL is
// called and its answer decides; a URL outside the allowlist, or a call
// of a namespaced policy, is an error result naming the call; resource.Post
// reaches the API server for an allowed resource. The calls of a decision
// are collected from its context.
func TestEngine(t *testing.T) {
	service := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/yes") {
			_, _ = io.WriteString(w, `{"allowed": true}`)
			return
		}
		_, _ = io.WriteString(w, `{"allowed": false, "reason": "not on the list"}`)
	}))
	defer service.Close()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var sar map[string]any
		_ = json.NewDecoder(r.Body).Decode(&sar)
		spec, _ := sar["spec"].(map[string]any)
		sar["status"] = map[string]any{"allowed": spec["user"] == "alice"}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(sar)
	}))
	defer api.Close()

	docs, err := manifest.Parse("policies.yaml", []byte(calloutPolicies))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := engine.Compile(manifest.FromDocuments(docs), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := callout.Config{
		AllowedURLPrefixes: []string{service.URL + "/verdict/"},
		AllowedResources:   []string{"subjectaccessreviews.authorization.k8s.io"},
	}
	client, err := callout.New(cfg, callout.Options{Kube: &rest.Config{Host: api.URL}})
	if err != nil {
		t.Fatal(err)
	}
	allowNS := cfg
	allowNS.AllowHTTPInNamespacedPolicies = true
	nsClient, err := callout.New(allowNS, callout.Options{})
	if err != nil {
		t.Fatal(err)
	}

	type want struct {
		policy, result, message string
	}
	for _, tc := range []struct {
		name   string
		client *callout.Client
		ns     string
		data   map[string]any
		user   string
		want   want
		calls  int
	}{
		{"allowed URL, yes", client, "default", map[string]any{"url": service.URL + "/verdict/yes"}, "",
			want{"verdict-from-http", outcome.Pass, ""}, 1},
		{"allowed URL, no", client, "default", map[string]any{"url": service.URL + "/verdict/no"}, "",
			want{"verdict-from-http", outcome.Fail, "the service said no: not on the list"}, 1},
		{"URL outside the allowlist", client, "default", map[string]any{"url": service.URL + "/admin/yes"}, "",
			want{"verdict-from-http", outcome.Error, `error: request failed: http.Get "` + service.URL + `/admin/yes": URL is not allowed by the server's callout allowlist (allowedURLPrefixes)`}, 1},
		{"namespaced policy", client, "team", map[string]any{"teamUrl": service.URL + "/verdict/yes"}, "",
			want{"team/team-verdict", outcome.Error, `error: request failed: http.Get "` + service.URL + `/verdict/yes": ` + kyvernocel.HTTPNotAllowedMessage}, 1},
		{"namespaced policy allowed", nsClient, "team", map[string]any{"teamUrl": service.URL + "/verdict/yes"}, "",
			want{"team/team-verdict", outcome.Pass, ""}, 1},
		{"resource.Post allowed", client, "default", map[string]any{"sar": "1"}, "alice",
			want{"creator-may-read-secrets", outcome.Pass, ""}, 1},
		{"resource.Post denied by the review", client, "default", map[string]any{"sar": "1"}, "bob",
			want{"creator-may-read-secrets", outcome.Fail, "the creator may not read secrets"}, 1},
		{"resource.Post without the resource allowed", nsClient, "default", map[string]any{"sar": "1"}, "alice",
			want{"creator-may-read-secrets", outcome.Error, "error: failed to create resource: resource.Post authorization.k8s.io/v1 subjectaccessreviews: no cluster access in this context"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &admission.Request{Object: map[string]any{
				"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": "cm", "namespace": tc.ns},
				"data":     tc.data,
			}}
			req.UserInfo.Username = tc.user
			req.Fill()
			ctx, calls := callout.Collect(context.Background())
			d := ps.Evaluate(ctx, req, &engine.EvalOptions{Context: tc.client.Context(nil)})
			var got []want
			for _, r := range d.Results {
				if r.Result == outcome.Skip { // the matchConditions of the others
					continue
				}
				got = append(got, want{r.Policy, r.Result, r.Message})
			}
			if len(got) != 1 || got[0].policy != tc.want.policy || got[0].result != tc.want.result || !strings.HasPrefix(got[0].message, tc.want.message) {
				t.Errorf("results %+v, want %+v", got, tc.want)
			}
			if tc.want.result != outcome.Pass && d.Allowed {
				t.Errorf("allowed")
			}
			if n := len(calls.List()); n != tc.calls {
				t.Errorf("%d calls recorded, want %d: %+v", n, tc.calls, calls.List())
			}
		})
	}
}
