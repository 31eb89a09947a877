package imagedata

import (
	"strings"
	"testing"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

const approvedImagesPolicy = `apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: approved-images
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [pods]
  variables:
  - name: labels
    expression: "object.spec.containers.map(c, image.GetMetadata(c.image).config.config.Labels)"
  validations:
  - expression: "variables.labels.all(l, 'approved' in l && l.approved == 'true')"
    messageExpression: "'unapproved image: ' + object.spec.containers[0].image"
`

func pod(image string) map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "p", "namespace": "default"},
		"spec": map[string]any{"containers": []any{
			map[string]any{"name": "c", "image": image},
		}},
	}
}

// TestEnginePolicy: a ValidatingPolicy whose decision depends on a config
// label of the image, read from the registry through image.GetMetadata, the
// Fetcher put into the decision's context by WithFetcher (the rest of the
// context offline).
func TestEnginePolicy(t *testing.T) {
	fx := newFixture(t, "", "")
	h := fx.reg.host
	fx.reg.pushImage(t, "app", "unapproved", labelledImage(t, "linux", "amd64", map[string]string{"approved": "false"}))
	docs, err := manifest.Parse("policy.yaml", []byte(approvedImagesPolicy))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := engine.Compile(manifest.FromDocuments(docs), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := newTestFetcher(t, insecureConfig(fx.reg), Options{})
	tests := []struct {
		name    string
		ctx     kyvernocel.Context
		image   string
		allowed bool
		result  string
		message string
	}{
		{name: "approved", ctx: WithFetcher(kyvernocel.Offline, f), image: h + "/app:v1", allowed: true, result: outcome.Pass},
		{name: "approved, by digest", ctx: WithFetcher(kyvernocel.Offline, f), image: h + "/app@" + fx.app, allowed: true, result: outcome.Pass},
		{name: "not approved", ctx: WithFetcher(kyvernocel.Offline, f), image: h + "/app:unapproved",
			result: outcome.Fail, message: "unapproved image: " + h + "/app:unapproved"},
		{name: "no approved label (an index's amd64 image)", ctx: WithFetcher(kyvernocel.Offline, f), image: h + "/multi:v1",
			result: outcome.Fail, message: "unapproved image: "},
		{name: "missing image", ctx: WithFetcher(kyvernocel.Offline, f), image: h + "/app:missing",
			result: outcome.Error, message: "failed to get image data: GET http://" + h + "/v2/app/manifests/missing: MANIFEST_UNKNOWN"},
		{name: "offline", ctx: nil, image: h + "/app:v1",
			result: outcome.Error, message: "failed to get image data: image.GetMetadata: no image registry access in this context"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := &admission.Request{Object: pod(tc.image)}
			req.Fill()
			d := ps.Evaluate(t.Context(), req, &engine.EvalOptions{Context: tc.ctx})
			if d.Allowed != tc.allowed || len(d.Results) != 1 {
				t.Fatalf("allowed %v, %d results (%+v), want allowed %v", d.Allowed, len(d.Results), d.Results, tc.allowed)
			}
			r := d.Results[0]
			if r.Result != tc.result || !strings.Contains(r.Message, tc.message) {
				t.Fatalf("result %s %q, want %s containing %q", r.Result, r.Message, tc.result, tc.message)
			}
		})
	}
}
