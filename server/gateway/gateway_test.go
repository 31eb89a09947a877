package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/server/gateway"
)

func setup(t *testing.T) (*client.Client, *httptest.Server) {
	t.Helper()
	ctx := context.Background()
	srv, err := server.New(ctx, server.Config{DataDir: t.TempDir(), NoSync: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := manifest.ReadPaths(nil, "../testdata/inventory.yaml", "../../deploy/examples/pod-security")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.LoadObjects(ctx, manifest.FromDocuments(docs)); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	c, err := client.Dial(ctx, lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	h, err := gateway.New(ctx, c.Conn(), gateway.Options{CORSOrigins: []string{"https://portal.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		hs.Close()
		c.Close()
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	})
	return c, hs
}

// call does one JSON request and decodes the answer into out.
func call(t *testing.T, hs *httptest.Server, method, path, body string, out proto.Message) {
	t.Helper()
	req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if err := protojson.Unmarshal(b, out); err != nil {
		t.Fatalf("%s %s: %v\n%s", method, path, err, b)
	}
}

const podJSON = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"reviewed-web","namespace":"apps"},"spec":{"containers":[{"name":"c","image":"x"}]}}`

// The JSON gateway answers the same as gRPC for every Query RPC.
func TestGatewayMatchesGRPC(t *testing.T) {
	c, hs := setup(t)
	ctx := context.Background()
	obj := []byte(podJSON)
	bodyObj, _ := json.Marshal(map[string]any{"objectJson": obj})

	var st arbiterv1.StatusResponse
	call(t, hs, "GET", "/v1/status", "", &st)
	gst, _ := c.Query.Status(ctx, &arbiterv1.StatusRequest{})
	if st.GetRevision() != gst.GetRevision() || st.GetDigest() != gst.GetDigest() || st.GetPolicies() != gst.GetPolicies() {
		t.Fatalf("status: %v vs %v", &st, gst)
	}

	checks := []struct {
		name   string
		method string
		path   string
		body   string
		got    proto.Message
		want   func() (proto.Message, error)
	}{
		{"list policies", "GET", "/v1/policies?action=Deny&labelSelector=owner%3Dplatform", "", &arbiterv1.ListPoliciesResponse{}, func() (proto.Message, error) {
			return c.Query.ListPolicies(ctx, &arbiterv1.ListPoliciesRequest{Action: "Deny", LabelSelector: "owner=platform"})
		}},
		{"get policy", "GET", "/v1/policies/ValidatingPolicy/require-team", "", &arbiterv1.GetPolicyResponse{}, func() (proto.Message, error) {
			return c.Query.GetPolicy(ctx, &arbiterv1.GetPolicyRequest{Kind: "ValidatingPolicy", Name: "require-team"})
		}},
		{"list exceptions", "GET", "/v1/exceptions?policy=require-team&hasControls=true", "", &arbiterv1.ListExceptionsResponse{}, func() (proto.Message, error) {
			yes := true
			return c.Query.ListExceptions(ctx, &arbiterv1.ListExceptionsRequest{Policy: "require-team", HasControls: &yes})
		}},
		{"applicable", "POST", "/v1/applicable", string(bodyObj), &arbiterv1.ApplicableResponse{}, func() (proto.Message, error) {
			return c.Query.Applicable(ctx, &arbiterv1.ApplicableRequest{ObjectJson: obj})
		}},
		{"explain", "POST", "/v1/explain", `{"request":` + string(bodyObj) + `}`, &arbiterv1.ExplainResponse{}, func() (proto.Message, error) {
			return c.Query.Explain(ctx, &arbiterv1.ExplainRequest{Request: &arbiterv1.DecideRequest{ObjectJson: obj}})
		}},
	}
	for _, ch := range checks {
		t.Run(ch.name, func(t *testing.T) {
			call(t, hs, ch.method, ch.path, ch.body, ch.got)
			want, err := ch.want()
			if err != nil {
				t.Fatal(err)
			}
			clearIDs(ch.got)
			clearIDs(want)
			if !proto.Equal(ch.got, want) {
				t.Fatalf("gateway and gRPC differ:\n%v\n%v", ch.got, want)
			}
		})
	}

	// Decide over JSON, with the object as a JSON object.
	var d arbiterv1.DecideResponse
	call(t, hs, "POST", "/v1/decide", `{"object":`+podJSON+`}`, &d)
	if d.GetAllowed() || d.GetRevision() != gst.GetRevision() || !strings.Contains(d.GetStatus().GetMessage(), "a ticket annotation is required") {
		t.Fatalf("decide: %v", &d)
	}
}

func clearIDs(m proto.Message) {
	if e, ok := m.(*arbiterv1.ExplainResponse); ok && e.GetDecision() != nil {
		e.Decision.DecisionId = ""
	}
}

func TestOpenAPIAndCORS(t *testing.T) {
	_, hs := setup(t)
	resp, err := http.Get(hs.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Swagger string
		Paths   map[string]any
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || doc.Swagger != "2.0" {
		t.Fatalf("openapi: %v %v", err, doc.Swagger)
	}
	resp.Body.Close()
	for _, p := range []string{"/v1/decide", "/v1/status", "/v1/policies", "/v1/exceptions", "/v1/explain", "/v1/applicable"} {
		if _, ok := doc.Paths[p]; !ok {
			t.Errorf("openapi has no %s", p)
		}
	}
	req, _ := http.NewRequest(http.MethodOptions, hs.URL+"/v1/status", nil)
	req.Header.Set("Origin", "https://portal.example.com")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://portal.example.com" {
		t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	req.Header.Set("Origin", "https://evil.example.com")
	resp, _ = http.DefaultClient.Do(req)
	resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("CORS allowed an unlisted origin")
	}
}
