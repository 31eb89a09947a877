package authz_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/lestrrat-go/jwx/v3/jwa"
	jwxjwt "github.com/lestrrat-go/jwx/v3/jwt"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// TestDecisions checks, case by case, what the golden files show: the
// verdict, the status code, the deciding policy and the response.
func TestDecisions(t *testing.T) {
	type want struct {
		allowed bool
		code    int32
		policy  string
		// response is JSON the authorization response must equal (after
		// decoding), or "" to skip.
		response string
		// results are "policy result" pairs, in order.
		results []string
	}
	cases := map[string]map[string]want{
		"envoy-jwt": {
			"no token":       {code: 401, policy: "envoy-jwt-policy", response: `{"status":{"code":7},"deniedResponse":{"status":{"code":401}}}`, results: []string{"envoy-jwt-policy fail"}},
			"guest token":    {code: 403, policy: "envoy-jwt-policy", results: []string{"envoy-jwt-policy fail"}},
			"admin token":    {allowed: true, code: 200, policy: "envoy-jwt-policy", response: `{"status":{"code":0},"okResponse":{}}`, results: []string{"envoy-jwt-policy pass"}},
			"tampered token": {code: 403, policy: "envoy-jwt-policy", results: []string{"envoy-jwt-policy error"}},
		},
		"envoy-responses": {
			"teapot": {code: 418, policy: "envoy-responses", response: `{"status":{"code":7},"deniedResponse":{"status":{"code":418},"body":"I'm a teapot",
				"headers":[{"header":{"key":"x-reason","value":"teapot"}},{"header":{"key":"x-empty","value":""},"keepEmptyValue":true}]}}`},
			"api with headers": {allowed: true, code: 200, policy: "envoy-responses"},
			"no response":      {allowed: true, code: 200, response: `{}`, results: []string{"envoy-responses skip"}},
		},
		"envoy-order": {
			"internal source": {allowed: true, code: 200, policy: "a-allow-internal", results: []string{"a-allow-internal pass", "b-broken-ignored skip", "c-deny-all fail", "d-broken error"}},
			"external source": {code: 403, policy: "c-deny-all", results: []string{"a-allow-internal skip", "b-broken-ignored skip", "c-deny-all fail", "d-broken error"}},
		},
		"http": {
			"allowed with headers":      {allowed: true, code: 200, policy: "http-api-key", response: `{"status":200}`, results: []string{"http-api-key pass", "http-body-size skip"}},
			"header name in lower case": {allowed: true, code: 200, policy: "http-api-key"},
			"wrong tenant":              {code: 403, policy: "http-api-key", response: `{"status":403,"body":"wrong api key or tenant"}`},
			"not an api path":           {allowed: true, code: 200, response: `{"status":200}`, results: []string{"http-api-key skip", "http-body-size skip"}},
			"large upload":              {code: 403, policy: "http-body-size"},
		},
		"shapes": {
			"an envoy request": {code: 403, policy: "envoy-deny", results: []string{"envoy-deny fail"}},
			"an http request":  {allowed: true, code: 200, policy: "http-allow", results: []string{"http-allow pass"}},
			"an http request with a body that is not base64": {code: 500, policy: "http-allow", results: []string{"http-allow error"}},
		},
	}
	for name, wants := range cases {
		ps, reqs := loadCase(t, "testdata/cases/"+name+".yaml")
		seen := 0
		for _, r := range reqs {
			w, ok := wants[r.Name]
			if !ok {
				continue
			}
			seen++
			t.Run(name+"/"+r.Name, func(t *testing.T) {
				d := decide(t, ps, r)
				a := d.Authorization
				if a == nil {
					t.Fatal("no authorization response")
				}
				if d.Allowed != w.allowed || a.Allowed != w.allowed || a.Code != w.code || a.Policy != w.policy {
					t.Errorf("allowed %v (response %v), code %d, policy %q; want %v, %d, %q", d.Allowed, a.Allowed, a.Code, a.Policy, w.allowed, w.code, w.policy)
				}
				if !d.Allowed && d.Code != w.code {
					t.Errorf("decision code %d, want %d", d.Code, w.code)
				}
				if w.response != "" {
					var got, exp any
					if err := json.Unmarshal(a.JSON, &got); err != nil {
						t.Fatal(err)
					}
					if err := json.Unmarshal([]byte(w.response), &exp); err != nil {
						t.Fatal(err)
					}
					if gb, eb := mustMarshal(got), mustMarshal(exp); gb != eb {
						t.Errorf("response %s, want %s", gb, eb)
					}
				}
				if w.results != nil {
					var got []string
					for _, r := range d.Results {
						got = append(got, r.Policy+" "+r.Result)
					}
					if strings.Join(got, ", ") != strings.Join(w.results, ", ") {
						t.Errorf("results %v, want %v", got, w.results)
					}
				}
			})
		}
		if seen != len(wants) {
			t.Errorf("%s: %d of %d requests found", name, seen, len(wants))
		}
	}
	// An admission request is not seen by the authorization policies, and
	// has no authorization response.
	ps, reqs := loadCase(t, "testdata/cases/shapes.yaml")
	d := decide(t, ps, reqs[0])
	if d.Authorization != nil || d.Allowed {
		t.Errorf("admission decision: %+v", d)
	}
	for _, r := range d.Results {
		if r.Policy == "envoy-deny" || r.Policy == "http-allow" {
			t.Errorf("an authorization policy evaluated an admission request: %+v", r)
		}
	}
}

func mustMarshal(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func compile(t *testing.T, docs string) (*engine.PolicySet, error) {
	t.Helper()
	parsed, err := manifest.Parse("policies.yaml", []byte(docs))
	if err != nil {
		t.Fatal(err)
	}
	return engine.Compile(manifest.FromDocuments(parsed), engine.Options{})
}

// A policy gated on an RS256 JWT verified with a PEM public key written in
// the policy: an unsigned, tampered or foreign token is refused.
func TestRS256GatedPolicy(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pub := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	pubJSON, _ := json.Marshal(pub)
	ps, err := compile(t, `apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: rs256-gate
spec:
  evaluation:
    mode: HTTP
  failurePolicy: Fail
  variables:
  - name: token
    expression: >
      object.attributes.Header("authorization").exists(h, h.startsWith("Bearer "))
        ? jwt.Decode(object.attributes.Header("authorization")[0].substring(7), `+string(pubJSON)+`)
        : null
  validations:
  - expression: >
      variables.token != null && variables.token.Valid && variables.token.Claims.?scope.orValue("") == "read"
        ? http.Allowed().Response()
        : http.Denied("forbidden").Response()
`)
	if err != nil {
		t.Fatal(err)
	}
	signed := func(k *rsa.PrivateKey, claims map[string]any) string {
		b := jwxjwt.NewBuilder()
		for n, v := range claims {
			b = b.Claim(n, v)
		}
		tok, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		out, err := jwxjwt.Sign(tok, jwxjwt.WithKey(jwa.RS256(), k))
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	good := signed(key, map[string]any{"scope": "read", "sub": "alice"})
	parts := strings.Split(good, ".")
	tampered := parts[0] + "." + strings.Split(signed(key, map[string]any{"scope": "write", "sub": "alice"}), ".")[1] + "." + parts[2]
	for _, tc := range []struct {
		name, auth string
		allowed    bool
		code       int32
		result     string
	}{
		{"signed", "Bearer " + good, true, 200, "pass"},
		{"wrong scope", "Bearer " + signed(key, map[string]any{"scope": "write"}), false, 403, "fail"},
		{"no token", "", false, 403, "fail"},
		{"tampered", "Bearer " + tampered, false, 500, "error"},
		{"signed by another key", "Bearer " + signed(other, map[string]any{"scope": "read"}), false, 500, "error"},
		{"HS256 with the public key as secret", "Bearer " + hs256WithSecret(t, pub), false, 500, "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			headers := map[string]any{}
			if tc.auth != "" {
				headers["Authorization"] = []any{tc.auth}
			}
			req := &admission.Request{Shape: admission.ShapeHTTP, Object: map[string]any{"attributes": map[string]any{"method": "GET", "path": "/", "header": headers}}}
			d := ps.Evaluate(context.Background(), req, nil)
			if d.Allowed != tc.allowed || d.Authorization.Code != tc.code || len(d.Results) != 1 || d.Results[0].Result != tc.result {
				t.Errorf("allowed %v code %d results %+v", d.Allowed, d.Authorization.Code, d.Results)
			}
		})
	}
}

func hs256WithSecret(t *testing.T, secret string) string {
	tok, err := jwxjwt.NewBuilder().Claim("scope", "read").Build()
	if err != nil {
		t.Fatal(err)
	}
	out, err := jwxjwt.Sign(tok, jwxjwt.WithKey(jwa.HS256(), []byte(secret)))
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// Compile errors name the object and the field.
func TestCompileErrors(t *testing.T) {
	head := "apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata:\n  name: p\nspec:\n  evaluation:\n    mode: %s\n"
	for _, tc := range []struct {
		name, mode, spec, want string
	}{
		{"bad expression", "Envoy", "  validations:\n  - expression: envoy.Allowed(\n", "ValidatingPolicy p: spec.validations[0].expression: "},
		{"not a response", "Envoy", "  validations:\n  - expression: \"'yes'\"\n", "ValidatingPolicy p: spec.validations[0].expression: rule response output is expected to be of type envoy.service.auth.v3.CheckResponse"},
		{"the other mode's response", "HTTP", "  validations:\n  - expression: envoy.Allowed().Response()\n", "ValidatingPolicy p: spec.validations[0].expression: "},
		{"http response in envoy mode", "Envoy", "  validations:\n  - expression: http.Allowed().Response()\n", "spec.validations[0].expression: "},
		{"matchCondition not a bool", "HTTP", "  matchConditions:\n  - name: m\n    expression: object.attributes.path\n  validations:\n  - expression: http.Allowed().Response()\n", "ValidatingPolicy p: spec.matchConditions[0].expression: matchCondition output is expected to be of type bool"},
		{"unknown variable", "HTTP", "  validations:\n  - expression: \"variables.nope == 1 ? http.Allowed().Response() : null\"\n", "spec.validations[0].expression: "},
		{"duplicate variable", "HTTP", "  variables:\n  - name: a\n    expression: \"1\"\n  - name: a\n    expression: \"2\"\n", "ValidatingPolicy p: spec.variables[1].name: duplicate variable \"a\""},
		{"unknown field", "HTTP", "  validationz: []\n", "ValidatingPolicy p: spec.validationz"},
		{"failurePolicy", "Envoy", "  failurePolicy: Sometimes\n", "ValidatingPolicy p: spec.failurePolicy: unsupported value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compile(t, strings.Replace(head, "%s", tc.mode, 1)+tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
	// Envoy and HTTP are ValidatingPolicy modes only.
	_, err := compile(t, "apiVersion: policies.kyverno.io/v1\nkind: NamespacedValidatingPolicy\nmetadata:\n  name: p\n  namespace: ns\nspec:\n  evaluation:\n    mode: Envoy\n  validations:\n  - expression: \"true\"\n")
	if err == nil || !strings.Contains(err.Error(), "spec.evaluation.mode") || !strings.Contains(err.Error(), "Envoy and HTTP modes are for ValidatingPolicy") {
		t.Fatalf("error %v", err)
	}
}

// Classify sends Envoy and HTTP ValidatingPolicies to the authorization kind.
func TestClassify(t *testing.T) {
	for mode, want := range map[string]engine.Class{
		"Envoy": engine.ClassAuthzPolicy, "HTTP": engine.ClassAuthzPolicy,
		"JSON": engine.ClassPolicy, "Kubernetes": engine.ClassPolicy, "": engine.ClassPolicy,
	} {
		o := &manifest.Object{APIVersion: "policies.kyverno.io/v1", Kind: "ValidatingPolicy", Name: "p",
			Content: map[string]any{"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy", "spec": map[string]any{"evaluation": map[string]any{"mode": mode}}}}
		if got := engine.Classify(o); got != want {
			t.Errorf("mode %q: class %v, want %v", mode, got, want)
		}
	}
}
