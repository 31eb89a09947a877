package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/arbiter-pdp/arbiter/internal/certs/certstest"
)

func TestLocalTarget(t *testing.T) {
	for target, want := range map[string]bool{
		"127.0.0.1:50051": true, "localhost:50051": true, "[::1]:50051": true,
		"dns:///127.0.0.1:50051": true, "dns:///localhost:50051": true, "dns://8.8.8.8/localhost:50051": true,
		"passthrough:///127.0.0.1:50051": true, "unix:///run/arbiter.sock": true, "unix:arbiter.sock": true,
		"arbiter:50051": false, "0.0.0.0:50051": false, "10.0.0.1:50051": false,
		"dns:///arbiter-decision.arbiter.svc:50051": false, "passthrough:///10.0.0.1:50051": false,
		"dns:///localhost": false, "garbage": false,
	} {
		if got := localTarget(target); got != want {
			t.Errorf("localTarget(%q) = %v, want %v", target, got, want)
		}
	}
}

// TestWebhookServerConnFlags: which combinations of the shim's connection
// flags are accepted, and what they amount to.
func TestWebhookServerConnFlags(t *testing.T) {
	for _, v := range []string{"ARBITER_TLS", "ARBITER_CA_FILE", "ARBITER_CERT_FILE", "ARBITER_KEY_FILE", "ARBITER_TOKEN_FILE", "ARBITER_SERVER_NAME"} {
		t.Setenv(v, "")
	}
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "ca")
	leaf := ca.Issue(t, "shim", certstest.Spec{CommonName: "arbiter-webhook", Client: true})
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const remote = "dns:///arbiter-decision.arbiter.svc:50051"
	for _, tc := range []struct {
		name    string
		o       webhookOptions
		ctx     *connFlags
		summary string // "" when refused
		err     string
	}{
		{name: "plaintext loopback", o: webhookOptions{server: "127.0.0.1:50051"}, summary: "plaintext"},
		{name: "plaintext remote", o: webhookOptions{server: remote}, err: "--server-insecure"},
		{name: "plaintext remote, insecure", o: webhookOptions{server: remote, serverInsecure: true}, summary: "INSECURE plaintext"},
		{name: "TLS", o: webhookOptions{server: remote, serverCA: ca.File}, summary: "TLS"},
		{name: "system roots by server name", o: webhookOptions{server: remote, serverName: "arbiter-decision.arbiter.svc"}, summary: "TLS"},
		{name: "mutual TLS", o: webhookOptions{server: remote, serverCA: ca.File, serverCert: leaf.CertFile, serverKey: leaf.KeyFile}, summary: "mutual TLS"},
		{name: "mutual TLS and token", o: webhookOptions{server: remote, serverCA: ca.File, serverCert: leaf.CertFile, serverKey: leaf.KeyFile, serverTokenFile: token},
			summary: "mutual TLS + bearer token"},
		{name: "token turns TLS on", o: webhookOptions{server: remote, serverTokenFile: token}, summary: "TLS + bearer token"},
		{name: "certificate without key", o: webhookOptions{server: remote, serverCA: ca.File, serverCert: leaf.CertFile}, err: "key"},
		{name: "missing CA file", o: webhookOptions{server: remote, serverCA: filepath.Join(dir, "nope.pem")}, err: "nope.pem"},
		{name: "insecure and TLS", o: webhookOptions{server: remote, serverCA: ca.File, serverInsecure: true}, err: "contradict"},
		{name: "global flags", o: webhookOptions{server: remote}, ctx: &connFlags{caFile: ca.File, certFile: leaf.CertFile, keyFile: leaf.KeyFile}, summary: "mutual TLS"},
		{name: "global token without TLS", o: webhookOptions{server: "127.0.0.1:50051"}, ctx: &connFlags{tokenFile: token}, err: "plaintext"},
		{name: "--server-* win over global flags", o: webhookOptions{server: remote, serverCA: ca.File}, ctx: &connFlags{caFile: filepath.Join(dir, "nope.pem")}, summary: "TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.ctx != nil {
				ctx = context.WithValue(ctx, connKey{}, tc.ctx)
			}
			var logs bytes.Buffer
			sc, err := webhookServerConn(ctx, &tc.o, slog.New(slog.NewTextHandler(&logs, nil)))
			if tc.err != "" {
				if exitCode(err) != exitLoad || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want exit 2 mentioning %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if sc.summary != tc.summary {
				t.Fatalf("summary %q, want %q", sc.summary, tc.summary)
			}
			if strings.HasPrefix(tc.summary, "INSECURE") != strings.Contains(logs.String(), "INSECURE") {
				t.Fatalf("logs: %s", logs.String())
			}
		})
	}
}

// startCLIBackground runs an arbiter command line in-process until the test
// ends.
func startCLIBackground(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := runCLI(t, ctx, args...)
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v", strings.Join(args[:1], " "), err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("%s did not stop", args[0])
		}
	})
}

// webhookClient calls a shim's HTTPS endpoints as the API server does,
// trusting the test CA.
type webhookClient struct {
	t    *testing.T
	url  string
	http *http.Client
}

func newWebhookClient(t *testing.T, ca *certstest.CA, addr string) *webhookClient {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &webhookClient{t: t, url: "https://" + addr, http: &http.Client{
		Timeout:   15 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}}
}

func (w *webhookClient) get(path string) (int, error) {
	resp, err := w.http.Get(w.url + path)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// waitUp waits for the shim's /healthz.
func (w *webhookClient) waitUp() {
	w.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, err := w.get("/healthz")
		if err == nil && code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("the shim at %s is not up: %d %v", w.url, code, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// review posts an AdmissionReview file and returns the HTTP status and,
// on 200, the review answered.
func (w *webhookClient) review(file string) (int, *admissionv1.AdmissionReview, string) {
	w.t.Helper()
	body, err := os.ReadFile(filepath.Join("../../client/webhook/testdata/reviews", file))
	if err != nil {
		w.t.Fatal(err)
	}
	resp, err := w.http.Post(w.url+"/validate?timeout=10s", "application/json", bytes.NewReader(body))
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		w.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil, string(b)
	}
	var r admissionv1.AdmissionReview
	if err := json.Unmarshal(b, &r); err != nil || r.Response == nil {
		w.t.Fatalf("answer %s: %v", b, err)
	}
	return resp.StatusCode, &r, string(b)
}

// TestWebhookToMutualTLSServer runs `arbiter serve` with TLS and a client CA
// (mutual TLS required) and `arbiter webhook` shims in front of it: the shim
// with a client certificate from the CA gets decisions (denied and allowed,
// with the revision); a shim without a client certificate, and one whose
// certificate the server does not trust, answer 500 — never an allow — and
// are not ready; when the untrusted certificate is replaced on disk by a
// trusted one, that shim starts deciding without a restart.
func TestWebhookToMutualTLSServer(t *testing.T) {
	for _, v := range []string{"ARBITER_TLS", "ARBITER_CA_FILE", "ARBITER_CERT_FILE", "ARBITER_KEY_FILE", "ARBITER_TOKEN_FILE", "ARBITER_SERVER_NAME"} {
		t.Setenv(v, "")
	}
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "ca")
	other := certstest.NewCA(t, t.TempDir(), "other")
	srvCert := ca.Issue(t, "server", certstest.Spec{CommonName: "arbiter-server", DNSNames: []string{"arbiter-decision.arbiter.svc"}, Server: true})
	serving := ca.Issue(t, "serving", certstest.Spec{CommonName: "arbiter-webhook", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
	shimCert := ca.Issue(t, "shim", certstest.Spec{CommonName: "arbiter-webhook", Client: true})
	rotating := other.Issue(t, "rotating", certstest.Spec{CommonName: "arbiter-webhook", Client: true})

	addr := freePort(t)
	startCLIBackground(t, "serve", "--listen", addr, "--data", filepath.Join(dir, "data"), "--log-level", "error",
		"--tls-cert", srvCert.CertFile, "--tls-key", srvCert.KeyFile, "--tls-client-ca", ca.File,
		"--load", "../../deploy/examples/pod-security")

	shim := func(extra ...string) *webhookClient {
		listen := freePort(t)
		startCLIBackground(t, append([]string{"webhook", "--listen", listen, "--server", addr, "--log-level", "error",
			"--cert", serving.CertFile, "--key", serving.KeyFile, "--server-ca-file", ca.File,
			// The server's certificate names its Service, not 127.0.0.1.
			"--server-name", "arbiter-decision.arbiter.svc"}, extra...)...)
		w := newWebhookClient(t, ca, listen)
		w.waitUp()
		return w
	}
	good := shim("--server-cert-file", shimCert.CertFile, "--server-key-file", shimCert.KeyFile)
	none := shim()
	rotated := shim("--server-cert-file", rotating.CertFile, "--server-key-file", rotating.KeyFile)

	// The shim with its client certificate decides, once the server is up.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, r, body := good.review("create-violating-pod.json")
		if code == http.StatusOK {
			if r.Response.Allowed || r.Response.Result == nil || !strings.Contains(r.Response.Result.Message, "Policy disallow-capabilities failed") ||
				r.Response.AuditAnnotations["revision"] != "1" {
				t.Fatalf("violating pod: %s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision through the mutual TLS shim: HTTP %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, r, body := good.review("create-compliant-pod.json"); code != http.StatusOK || !r.Response.Allowed || r.Response.AuditAnnotations["revision"] != "1" {
		t.Fatalf("compliant pod: HTTP %d %s", code, body)
	}
	if code, err := good.get("/readyz"); err != nil || code != http.StatusOK {
		t.Fatalf("/readyz of the mutual TLS shim: %d %v", code, err)
	}

	// Without a client certificate the server refuses the connection: 500
	// for every review, allowed or not, and not ready.
	for _, w := range []*webhookClient{none, rotated} {
		for _, file := range []string{"create-violating-pod.json", "create-compliant-pod.json"} {
			if code, _, body := w.review(file); code != http.StatusInternalServerError {
				t.Fatalf("%s through a shim without a trusted client certificate: HTTP %d %s, want 500", file, code, body)
			}
		}
		if code, err := w.get("/readyz"); err != nil || code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz of a shim without a trusted client certificate: %d %v, want 503", code, err)
		}
	}

	// Rotation: the files now hold a certificate the server trusts; the
	// shim re-reads them (certs reload interval, then gRPC's reconnect
	// backoff) and decides, without a restart.
	rotating.Replace(t, ca.Make(t, certstest.Spec{CommonName: "arbiter-webhook", Client: true}))
	deadline = time.Now().Add(60 * time.Second)
	for {
		code, r, body := rotated.review("create-compliant-pod.json")
		if code == http.StatusOK {
			if !r.Response.Allowed {
				t.Fatalf("compliant pod after rotation: %s", body)
			}
			break
		}
		if code != http.StatusInternalServerError {
			t.Fatalf("during rotation: HTTP %d %s", code, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rotated client certificate was not picked up: HTTP %d %s", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestWebhookRefusesPlaintextRemote: `arbiter webhook` exits 2 before
// listening when it would call a remote decision service in plaintext.
func TestWebhookRefusesPlaintextRemote(t *testing.T) {
	for _, v := range []string{"ARBITER_TLS", "ARBITER_CA_FILE", "ARBITER_CERT_FILE", "ARBITER_KEY_FILE", "ARBITER_TOKEN_FILE", "ARBITER_SERVER_NAME"} {
		t.Setenv(v, "")
	}
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "ca")
	serving := ca.Issue(t, "serving", certstest.Spec{CommonName: "x", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := runCLI(t, ctx, "webhook", "--listen", freePort(t), "--server", "dns:///arbiter-decision.arbiter.svc:50051",
		"--cert", serving.CertFile, "--key", serving.KeyFile)
	if exitCode(err) != exitLoad || !strings.Contains(err.Error(), "--server-ca-file") {
		t.Fatalf("plaintext to a remote decision service: %v", err)
	}
}
