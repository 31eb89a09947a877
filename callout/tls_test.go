package callout

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// newCA generates a CA: its PEM, and a function issuing a server
// certificate for 127.0.0.1 and localhost.
func newCA(t *testing.T) (string, func() tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "callout test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	caPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	issue := func() tls.Certificate {
		skey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		st := &x509.Certificate{
			SerialNumber: big.NewInt(2),
			Subject:      pkix.Name{CommonName: "localhost"},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			DNSNames:     []string{"localhost"},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		}
		sder, err := x509.CreateCertificate(rand.Reader, st, caCert, &skey.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{sder, der}, PrivateKey: skey}
	}
	return caPEM, issue
}

// TestClientCABundle: http.Client(caBundle) trusts that CA and only it;
// the default client (the system's roots) does not; the clients are kept
// by bundle, at most maxCABundles of them.
func TestClientCABundle(t *testing.T) {
	caPEM, issue := newCA(t)
	otherPEM, _ := newCA(t)
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"tls": true}`)
	}))
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{issue()}, MinVersion: tls.VersionTLS12}
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	ts.StartTLS()
	defer ts.Close()

	rec := &recorder{}
	cl, err := New(Config{AllowedURLPrefixes: []string{ts.URL}}, Options{Recorder: rec.record})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cl.Get(ctx, ts.URL+"/x", nil); err == nil || !strings.Contains(err.Error(), `http.Get "`+ts.URL+`/x": tls: failed to verify certificate: x509: certificate signed by unknown authority`) {
		t.Errorf("system roots: %v", err)
	}
	withCA, err := cl.Client(ctx, caPEM)
	if err != nil {
		t.Fatal(err)
	}
	got, err := withCA.Get(ctx, ts.URL+"/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := jsonOf(t, got); s != `{"statusCode":200,"tls":true}` {
		t.Errorf("got %s", s)
	}
	if _, err := withCA.Post(ctx, ts.URL+"/x", map[string]any{}, nil); err != nil {
		t.Errorf("post: %v", err)
	}
	withOther, err := cl.Client(ctx, otherPEM)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := withOther.Get(ctx, ts.URL+"/x", nil); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("another CA: %v", err)
	}
	// the allowlist holds for a CA client too
	if _, err := withCA.Get(ctx, "https://example.com/", nil); err == nil || !strings.Contains(err.Error(), "URL is not allowed") {
		t.Errorf("CA client outside the allowlist: %v", err)
	}
	calls := rec.take()
	if len(calls) != 5 || calls[0].CABundle != "" || !strings.HasPrefix(calls[1].CABundle, "sha256:") || len(calls[1].CABundle) != len("sha256:")+16 || calls[1].CABundle == calls[3].CABundle {
		t.Errorf("CA bundles recorded: %+v", calls)
	}

	// the same bundle is the same client
	again, err := cl.Client(ctx, caPEM)
	if err != nil {
		t.Fatal(err)
	}
	if again.(*Client).hc != withCA.(*Client).hc {
		t.Errorf("a bundle's client is not reused")
	}
	if self, _ := cl.Client(ctx, ""); self != cl {
		t.Errorf("Client(\"\") is not the client itself")
	}
	if _, err := cl.Client(ctx, "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"); err == nil || err.Error() != "http.Client: failed to parse PEM CA bundle for APICall" {
		t.Errorf("bad bundle: %v", err)
	}
	// at most maxCABundles clients: the oldest goes first
	for range maxCABundles {
		p, _ := newCA(t)
		if _, err := cl.Client(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	cl.s.mu.Lock()
	n, has := len(cl.s.byCA), cl.s.byCA[withCA.(*Client).ca] != nil
	cl.s.mu.Unlock()
	if n != maxCABundles || has {
		t.Errorf("%d clients kept, the first still there: %v", n, has)
	}
	// an evicted bundle's view still works (it holds its client)
	if _, err := withCA.Get(ctx, ts.URL+"/x", nil); err != nil {
		t.Errorf("evicted bundle's view: %v", err)
	}
}
