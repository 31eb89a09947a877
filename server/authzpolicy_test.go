package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

// Authorization policies (ValidatingPolicy in Envoy or HTTP mode) of the
// Kyverno Authz Server.
const (
	envoyJWTPolicy = `{"apiVersion":"policies.kyverno.io/v1","kind":"ValidatingPolicy","metadata":{"name":"envoy-jwt"},
"spec":{"evaluation":{"mode":"Envoy"},"failurePolicy":"Fail",
 "variables":[
  {"name":"authorization","expression":"object.attributes.request.http.headers[?\"authorization\"].orValue(\"\").split(\" \")"},
  {"name":"token","expression":"size(variables.authorization) == 2 && variables.authorization[0].lowerAscii() == \"bearer\" ? jwt.Decode(variables.authorization[1], \"secret\") : null"}],
 "validations":[
  {"expression":"variables.token == null || !variables.token.Valid ? envoy.Denied(401).WithBody(\"no valid token\").Response() : null"},
  {"expression":"variables.token.Claims.?role.orValue(\"\") != \"admin\" ? envoy.Denied(403).Response() : null"},
  {"expression":"envoy.Allowed().WithHeader(\"x-role\", variables.token.Claims.role).Response()"}]}}`
	httpPolicy = `{"apiVersion":"policies.kyverno.io/v1","kind":"ValidatingPolicy","metadata":{"name":"http-api-key"},
"spec":{"evaluation":{"mode":"HTTP"},
 "matchConditions":[{"name":"api","expression":"object.attributes.path.startsWith(\"/api/\")"}],
 "validations":[{"expression":"object.attributes.Header(\"x-api-key\") == [\"let-me-in\"] ? http.Allowed().Response() : http.Denied(\"missing or wrong api key\").Response()"}]}}`
	// HS256 tokens signed with "secret" (Kyverno's envoy-jwt fixtures).
	adminToken = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjIyNDEwODE1MzksIm5iZiI6MTUxNDg1MTEzOSwicm9sZSI6ImFkbWluIiwic3ViIjoiWVd4cFkyVT0ifQ.veMeVDYlulTdieeX-jxFZ_tCmqQ_K8rwx2OktUHv5Z0"
	guestToken = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjIyNDEwODE1MzksIm5iZiI6MTUxNDg1MTEzOSwicm9sZSI6Imd1ZXN0Iiwic3ViIjoiWVd4cFkyVT0ifQ.ja1bgvIt47393ba_WbSBm35NrUhdxM4mOVQN8iXz8lk"
)

func envoyRequest(auth string) []byte {
	return []byte(`{"attributes":{"request":{"http":{"method":"GET","path":"/","headers":{"authorization":"` + auth + `"}}}}}`)
}

// An Envoy policy loaded at start (as serve --load does) and an HTTP policy
// written through Sync are decided over gRPC on CheckRequests: the
// decision follows the authorization response, which it carries; the
// admission policies do not see them, nor they admission requests.
func TestAuthorizationPoliciesOverGRPC(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	envoyObj, err := manifest.Parse("envoy.json", []byte(envoyJWTPolicy))
	if err != nil {
		t.Fatal(err)
	}
	objs := append(manifest.FromDocuments(envoyObj), readObjects(t, pssDir)...)
	if _, err := ts.LoadObjects(ctx, objs); err != nil {
		t.Fatal(err)
	}
	ack, err := ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: []byte(httpPolicy)}}})
	if err != nil {
		t.Fatal(err)
	}

	envoy := func(auth string) *arbiterv1.DecideResponse {
		t.Helper()
		resp, err := ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: envoyRequest(auth), Payload: arbiterv1.Payload_PAYLOAD_ENVOY_CHECK_REQUEST, MinRevision: ack.GetRevision()})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetResults()) != 1 || resp.GetResults()[0].GetPolicy() != "envoy-jwt" || resp.GetAuthorizationPolicy() != "envoy-jwt" {
			t.Fatalf("results %v, deciding policy %q: only the Envoy policy evaluates an Envoy request", resp.GetResults(), resp.GetAuthorizationPolicy())
		}
		return resp
	}
	// An Envoy denial.
	resp := envoy("bearer " + guestToken)
	if resp.GetAllowed() || resp.GetStatus().GetCode() != 403 || resp.GetResults()[0].GetResult() != "fail" ||
		resp.GetResults()[0].GetMessage() != "request denied with status code 403" ||
		string(resp.GetAuthorizationResponseJson()) != `{"status":{"code":7},"deniedResponse":{"status":{"code":403}}}` {
		t.Fatalf("guest: allowed=%v status=%v results=%v response=%s", resp.GetAllowed(), resp.GetStatus(), resp.GetResults(), resp.GetAuthorizationResponseJson())
	}
	resp = envoy("empty")
	if resp.GetAllowed() || resp.GetStatus().GetCode() != 401 || !strings.Contains(string(resp.GetAuthorizationResponseJson()), `"body":"no valid token"`) {
		t.Fatalf("no token: allowed=%v status=%v response=%s", resp.GetAllowed(), resp.GetStatus(), resp.GetAuthorizationResponseJson())
	}
	resp = envoy("bearer " + adminToken)
	var check struct {
		Status     struct{ Code int } `json:"status"`
		OkResponse struct {
			Headers []struct{ Header struct{ Key, Value string } } `json:"headers"`
		} `json:"okResponse"`
	}
	if err := json.Unmarshal(resp.GetAuthorizationResponseJson(), &check); err != nil {
		t.Fatal(err)
	}
	if !resp.GetAllowed() || resp.GetStatus() != nil || resp.GetResults()[0].GetResult() != "pass" ||
		len(check.OkResponse.Headers) != 1 || check.OkResponse.Headers[0].Header.Value != "admin" {
		t.Fatalf("admin: allowed=%v status=%v response=%s", resp.GetAllowed(), resp.GetStatus(), resp.GetAuthorizationResponseJson())
	}

	// An HTTP allow with headers, as a Struct; and a denial.
	http := func(headers map[string]any) *arbiterv1.DecideResponse {
		t.Helper()
		st, err := structpbFrom(map[string]any{"attributes": map[string]any{"method": "GET", "path": "/api/things", "header": headers}})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := ts.c.Decide(ctx, &arbiterv1.DecideRequest{Object: st, Payload: arbiterv1.Payload_PAYLOAD_HTTP_CHECK_REQUEST})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetResults()) != 1 || resp.GetResults()[0].GetPolicy() != "http-api-key" {
			t.Fatalf("results %v: only the HTTP policy evaluates an HTTP request", resp.GetResults())
		}
		return resp
	}
	resp = http(map[string]any{"X-Api-Key": []any{"let-me-in"}, "Accept": []any{"application/json"}})
	if !resp.GetAllowed() || string(resp.GetAuthorizationResponseJson()) != `{"status":200}` || resp.GetResults()[0].GetMessage() != "request allowed" {
		t.Fatalf("http allowed: %v %s", resp, resp.GetAuthorizationResponseJson())
	}
	resp = http(map[string]any{"X-Api-Key": []any{"guess"}})
	if resp.GetAllowed() || resp.GetStatus().GetCode() != 403 || string(resp.GetAuthorizationResponseJson()) != `{"status":403,"body":"missing or wrong api key"}` ||
		resp.GetStatus().GetMessage() != "Policy http-api-key failed: request denied, reason: missing or wrong api key" {
		t.Fatalf("http denied: %v %s", resp, resp.GetAuthorizationResponseJson())
	}

	// An admission request: the authorization policies do not see it, and
	// the decision has no authorization response.
	resp, err = ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: objectJSON(t, compliantPod)})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.GetResults() {
		if r.GetPolicy() == "envoy-jwt" || r.GetPolicy() == "http-api-key" {
			t.Fatalf("an authorization policy evaluated an admission request: %v", r)
		}
	}
	if !resp.GetAllowed() || resp.GetAuthorizationResponseJson() != nil {
		t.Fatalf("admission: %v", resp)
	}

	// The inventory lists them.
	list, err := ts.c.Query.ListPolicies(ctx, &arbiterv1.ListPoliciesRequest{Kind: "ValidatingPolicy"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.GetPolicies() {
		names = append(names, p.GetName())
	}
	if n := len(names); n < 2 || names[n-2] != "envoy-jwt" || names[n-1] != "http-api-key" {
		t.Fatalf("ListPolicies: %v", names)
	}
	all, err := ts.c.Query.ListPolicies(ctx, &arbiterv1.ListPoliciesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ts.c.Query.GetPolicy(ctx, &arbiterv1.GetPolicyRequest{Name: "envoy-jwt"})
	if err != nil || got.GetPolicy().GetKind() != "ValidatingPolicy" || !strings.Contains(string(got.GetPolicy().GetManifestJson()), `"mode":"Envoy"`) {
		t.Fatalf("GetPolicy: %v %v", got, err)
	}
	st, err := ts.c.Status(ctx)
	if err != nil || st.GetPolicies() != uint32(len(all.GetPolicies())) {
		t.Fatalf("Status: %d policies (%v), want %d", st.GetPolicies(), err, len(all.GetPolicies()))
	}

	// DecideBatch items carry the authorization response too.
	batch, err := ts.c.Decision.DecideBatch(ctx, &arbiterv1.DecideBatchRequest{Items: []*arbiterv1.BatchItem{
		{Name: "guest", Request: &arbiterv1.DecideRequest{ObjectJson: envoyRequest("bearer " + guestToken), Payload: arbiterv1.Payload_PAYLOAD_ENVOY_CHECK_REQUEST}},
		{Name: "bad", Request: &arbiterv1.DecideRequest{ObjectJson: []byte(`{"attributes":{"request":{"http":{"size":"lots"}}}}`), Payload: arbiterv1.Payload_PAYLOAD_ENVOY_CHECK_REQUEST}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	items := batch.GetItems()
	if len(items) != 2 || items[0].GetDecision().GetAllowed() || !strings.Contains(string(items[0].GetDecision().GetAuthorizationResponseJson()), `"deniedResponse"`) ||
		items[1].GetError().GetField() != "request.object_json" {
		t.Fatalf("batch: %v", items)
	}
}

// An authorization policy that does not compile is refused whole, naming
// the object and the field; a request that is not a CheckRequest is
// refused naming its field.
func TestAuthorizationPolicyRefused(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	bad := strings.Replace(httpPolicy, `http.Allowed().Response()`, `envoy.Allowed().Response()`, 1)
	_, err := ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: []byte(bad)}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("code %v (%v), want InvalidArgument", status.Code(err), err)
	}
	if fv := fieldViolations(err); len(fv) != 1 || fv[0] != "ValidatingPolicy http-api-key: spec.validations[0].expression" {
		t.Fatalf("field violations %q", fv)
	}
	if rev, _ := ts.Store().Revision(); rev != 0 {
		t.Fatalf("revision %d after a refused write", rev)
	}
	for _, c := range []struct {
		name  string
		req   *arbiterv1.DecideRequest
		field string
	}{
		{"no object", &arbiterv1.DecideRequest{Payload: arbiterv1.Payload_PAYLOAD_HTTP_CHECK_REQUEST}, "object"},
		{"body not base64", &arbiterv1.DecideRequest{ObjectJson: []byte(`{"attributes":{"body":"%%%"}}`), Payload: arbiterv1.Payload_PAYLOAD_HTTP_CHECK_REQUEST}, "object_json"},
		{"unknown payload", &arbiterv1.DecideRequest{ObjectJson: []byte(`{}`), Payload: 9}, "payload"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ts.c.Decide(ctx, c.req)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("code %v (%v), want InvalidArgument", status.Code(err), err)
			}
			if got := fieldViolations(err); len(got) == 0 || got[0] != c.field {
				t.Fatalf("field violations %v, want %s", got, c.field)
			}
		})
	}
}
