package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-pdp/arbiter/internal/certs/certstest"
)

// serveInBackground runs arbiter serve with args until the test ends.
func serveInBackground(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		_, err := runCLI(t, ctx, append([]string{"serve", "--log-level", "error"}, args...)...)
		served <- err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("serve did not stop")
		}
	})
}

// httpDo sends one request and returns the status code and body.
func httpDo(t *testing.T, c *http.Client, method, url, body string, header map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// waitHTTP polls url until it answers.
func waitHTTP(t *testing.T, c *http.Client, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, _, body := httpDo(t, c, "GET", url, "", nil)
		if code != 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not up: %s", url, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

const gatewayPod = `{"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"apps"},"spec":{"hostNetwork":true,"containers":[{"name":"c","image":"nginx"}]}}}`

// TestServeGatewayPlaintext: serve --gateway-listen answers Decide and
// Query as JSON, serves the OpenAPI document, and answers CORS preflights
// for the configured origin only.
func TestServeGatewayPlaintext(t *testing.T) {
	dir := t.TempDir()
	gw := freePort(t)
	serveInBackground(t, "--listen", freePort(t), "--data", filepath.Join(dir, "data"),
		"--load", "../../deploy/examples/pod-security", "--gateway-listen", gw, "--cors-origin", "https://portal.example.com")
	c := &http.Client{Timeout: 10 * time.Second}
	base := "http://" + gw
	waitHTTP(t, c, base+"/openapi.json")

	code, _, body := httpDo(t, c, "POST", base+"/v1/decide", gatewayPod, nil)
	if code != http.StatusOK {
		t.Fatalf("decide: %d %s", code, body)
	}
	var d struct {
		Allowed  bool
		Revision string
		Results  []struct{ Policy, Result string }
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatalf("decide: %v\n%s", err, body)
	}
	if d.Allowed || d.Revision != "1" {
		t.Fatalf("a hostNetwork pod must be denied at revision 1: %s", body)
	}
	failed := false
	for _, r := range d.Results {
		if r.Policy == "disallow-host-namespaces" && r.Result == "fail" {
			failed = true
		}
	}
	if !failed {
		t.Fatalf("disallow-host-namespaces did not fail: %s", body)
	}

	code, _, body = httpDo(t, c, "GET", base+"/v1/status", "", nil)
	if code != http.StatusOK || !strings.Contains(body, `"policies":16`) {
		t.Fatalf("status: %d %s", code, body)
	}
	code, _, body = httpDo(t, c, "GET", base+"/openapi.json", "", nil)
	if code != http.StatusOK || !strings.Contains(body, `"/v1/decide"`) {
		t.Fatalf("openapi: %d %.200s", code, body)
	}
	// Bad input: a clear 400 naming the field.
	code, _, body = httpDo(t, c, "POST", base+"/v1/decide", `{"object":{"kind":"Pod"}}`, nil)
	if code != http.StatusBadRequest || !strings.Contains(body, "apiVersion") {
		t.Fatalf("bad object: %d %s", code, body)
	}

	pre := map[string]string{"Origin": "https://portal.example.com", "Access-Control-Request-Method": "POST"}
	code, h, _ := httpDo(t, c, "OPTIONS", base+"/v1/decide", "", pre)
	if code != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != "https://portal.example.com" {
		t.Fatalf("preflight from the allowed origin: %d %v", code, h)
	}
	pre["Origin"] = "https://evil.example.com"
	_, h, _ = httpDo(t, c, "OPTIONS", base+"/v1/decide", "", pre)
	if h.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight from another origin was allowed: %v", h)
	}
}

// TestServeGatewayTLSToken: with TLS the gateway speaks HTTPS with the
// server's certificate; callers are identified by their bearer token and the
// authorization rules apply exactly as over gRPC.
func TestServeGatewayTLSToken(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "ca")
	srv := ca.Issue(t, "server", certstest.Spec{CommonName: "arbiter", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("s3cret-portal,portal\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "arbiter.yaml")
	if err := os.WriteFile(cfg, []byte(`
authorization:
  authenticated: [read]
  rules:
    - {identity: "token:portal", roles: [decide]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := freePort(t)
	serveInBackground(t, "--config", cfg, "--listen", freePort(t), "--data", filepath.Join(dir, "data"),
		"--tls-cert", srv.CertFile, "--tls-key", srv.KeyFile, "--auth-token-file", tokens,
		"--load", "../../deploy/examples/pod-security", "--gateway-listen", gw)

	pem, err := os.ReadFile(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	base := "https://" + gw
	waitHTTP(t, c, base+"/openapi.json")

	if code, _, body := httpDo(t, &http.Client{Timeout: 5 * time.Second}, "GET", "http://"+gw+"/v1/status", "", nil); code == http.StatusOK {
		t.Fatalf("plaintext HTTP to a TLS gateway answered: %s", body)
	}
	auth := map[string]string{"Authorization": "Bearer s3cret-portal"}
	if code, _, body := httpDo(t, c, "POST", base+"/v1/decide", gatewayPod, auth); code != http.StatusOK || !strings.Contains(body, `"revision":"1"`) {
		t.Fatalf("decide with the portal token: %d %s", code, body)
	}
	if code, _, body := httpDo(t, c, "GET", base+"/v1/status", "", auth); code != http.StatusOK {
		t.Fatalf("status with the portal token: %d %s", code, body)
	}
	if code, _, body := httpDo(t, c, "POST", base+"/v1/decide", gatewayPod, nil); code != http.StatusForbidden {
		t.Fatalf("decide without a token: want 403, got %d %s", code, body)
	}
	if code, _, body := httpDo(t, c, "POST", base+"/v1/decide", gatewayPod, map[string]string{"Authorization": "Bearer wrong"}); code != http.StatusUnauthorized {
		t.Fatalf("decide with an unknown token: want 401, got %d %s", code, body)
	}
	// HTTP/2 works too.
	c2 := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	if code, _, body := httpDo(t, c2, "GET", base+"/v1/status", "", auth); code != http.StatusOK {
		t.Fatalf("status over HTTP/2: %d %s", code, body)
	}
}

// TestGatewayFlagsChecked: the gateway obeys the same plaintext rule as
// gRPC, and --cors-origin without a gateway is an error.
func TestGatewayFlagsChecked(t *testing.T) {
	ctx := context.Background()
	_, err := runCLI(t, ctx, "serve", "--data", t.TempDir(), "--listen", freePort(t), "--gateway-listen", "0.0.0.0:0")
	if exitCode(err) != exitLoad || !strings.Contains(err.Error(), "plaintext JSON gateway") {
		t.Fatalf("non-loopback plaintext gateway: %v", err)
	}
	_, err = runCLI(t, ctx, "serve", "--data", t.TempDir(), "--listen", freePort(t), "--cors-origin", "*")
	if exitCode(err) != exitLoad || !strings.Contains(err.Error(), "--gateway-listen") {
		t.Fatalf("--cors-origin alone: %v", err)
	}
}
