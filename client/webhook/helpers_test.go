package webhook_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/client/webhook"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/store"
)

const (
	pssDir      = "../../deploy/examples/pod-security"
	policiesDir = "testdata/policies"
	reviewsDir  = "testdata/reviews"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// decisionServer is a real Arbiter server on a loopback port with a bbolt
// file in a temporary directory.
type decisionServer struct {
	*server.Server
	addr   string
	commit store.Commit
}

func readObjects(tb testing.TB, paths ...string) []*manifest.Object {
	tb.Helper()
	docs, err := manifest.ReadPaths(nil, paths...)
	if err != nil {
		tb.Fatal(err)
	}
	return manifest.FromDocuments(docs)
}

// startDecisionServer starts a server (a primary, or a follower of
// cfg.Follow) and loads the objects under paths.
func startDecisionServer(tb testing.TB, cfg server.Config, paths ...string) *decisionServer {
	tb.Helper()
	cfg.DataDir = tb.TempDir()
	cfg.NoSync = true
	cfg.Logger = quietLogger()
	srv, err := server.New(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go srv.Serve(lis)
	ds := &decisionServer{Server: srv, addr: lis.Addr().String()}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	if len(paths) > 0 {
		if ds.commit, err = srv.LoadObjects(context.Background(), readObjects(tb, paths...)); err != nil {
			tb.Fatal(err)
		}
	}
	return ds
}

// shim is the webhook shim serving HTTPS on a loopback port.
type shim struct {
	*webhook.Handler
	url    string
	client *http.Client
	certs  *certFiles
}

// startShim starts the shim in front of the decision service at addr, as
// `arbiter webhook` does: client.Dial with webhook.DialOptions, a
// CertReloader, webhook.NewServer and ServeTLS.
func startShim(tb testing.TB, addr string, cfg webhook.Config) *shim {
	tb.Helper()
	c, err := client.Dial(context.Background(), addr, client.WithDialOptions(webhook.DialOptions()...))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	cfg.Client = c
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	h, err := webhook.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	certs := newCertFiles(tb, tb.TempDir())
	reloader, err := webhook.NewCertReloader(certs.certPath(), certs.keyPath(), cfg.Logger)
	if err != nil {
		tb.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := webhook.NewServer(lis.Addr().String(), h, reloader, cfg.Logger)
	go srv.ServeTLS(lis, "", "")
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return &shim{Handler: h, url: "https://" + lis.Addr().String(), client: certs.httpClient(), certs: certs}
}

// post sends body to /validate as the API server does (with its ?timeout=).
func (s *shim) post(tb testing.TB, body []byte) (*http.Response, []byte) {
	tb.Helper()
	return s.postTo(tb, "/validate?timeout=10s", body)
}

func (s *shim) postTo(tb testing.TB, path string, body []byte) (*http.Response, []byte) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url+path, bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, */*")
	return s.do(tb, req)
}

func (s *shim) get(tb testing.TB, path string) (*http.Response, []byte) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, s.url+path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return s.do(tb, req)
}

func (s *shim) do(tb testing.TB, req *http.Request) (*http.Response, []byte) {
	tb.Helper()
	resp, err := s.client.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp, b
}

func review(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(reviewsDir, name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// decodeReview decodes a response strictly: no field the AdmissionReview
// types do not know.
func decodeReview(tb testing.TB, b []byte) *admissionv1.AdmissionReview {
	tb.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var r admissionv1.AdmissionReview
	if err := dec.Decode(&r); err != nil {
		tb.Fatalf("decoding %s: %v", b, err)
	}
	return &r
}

// certFiles is a self-signed serving certificate for 127.0.0.1, kept as a
// Kubernetes Secret volume keeps it: tls.crt and tls.key are symlinks into
// ..data, itself a symlink to a versioned directory, swapped atomically.
type certFiles struct {
	tb      testing.TB
	dir     string
	pool    *x509.CertPool
	serial  int64
	current *x509.Certificate
}

func newCertFiles(tb testing.TB, dir string) *certFiles {
	c := &certFiles{tb: tb, dir: dir, pool: x509.NewCertPool()}
	c.rotate()
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)); err != nil {
			tb.Fatal(err)
		}
	}
	return c
}

func (c *certFiles) certPath() string { return filepath.Join(c.dir, "tls.crt") }
func (c *certFiles) keyPath() string  { return filepath.Join(c.dir, "tls.key") }

// issue returns a new self-signed certificate and key (PEM).
func (c *certFiles) issue() (certPEM, keyPEM []byte, cert *x509.Certificate) {
	c.serial++
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		c.tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(c.serial),
		Subject:               pkix.Name{CommonName: "arbiter-webhook.arbiter.svc"},
		DNSNames:              []string{"arbiter-webhook.arbiter.svc", "localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		c.tb.Fatal(err)
	}
	cert, err = x509.ParseCertificate(der)
	if err != nil {
		c.tb.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		c.tb.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), cert
}

// rotate issues a new certificate and swaps it in as the kubelet updates a
// Secret volume: a new versioned directory, then an atomic rename of ..data.
func (c *certFiles) rotate() *x509.Certificate {
	certPEM, keyPEM, cert := c.issue()
	version := filepath.Join(c.dir, "..v"+big.NewInt(c.serial).String())
	if err := os.Mkdir(version, 0o755); err != nil {
		c.tb.Fatal(err)
	}
	write(c.tb, filepath.Join(version, "tls.crt"), certPEM)
	write(c.tb, filepath.Join(version, "tls.key"), keyPEM)
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(version), tmp); err != nil {
		c.tb.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		c.tb.Fatal(err)
	}
	c.pool.AddCert(cert)
	c.current = cert
	return cert
}

// rewrite issues a new certificate and overwrites the current files in
// place, the certificate first (a moment when they do not match).
func (c *certFiles) rewrite(between func()) *x509.Certificate {
	certPEM, keyPEM, cert := c.issue()
	c.pool.AddCert(cert)
	write(c.tb, c.certPath(), certPEM)
	between()
	write(c.tb, c.keyPath(), keyPEM)
	c.current = cert
	return cert
}

func write(tb testing.TB, path string, b []byte) {
	tb.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		tb.Fatal(err)
	}
}

// httpClient trusts every certificate issued so far and speaks HTTP/2, as
// the API server's webhook client does.
func (c *certFiles) httpClient() *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: c.pool, MinVersion: tls.VersionTLS12},
			ForceAttemptHTTP2: true,
		},
	}
}

// presented makes a new TLS handshake with the shim and returns the
// certificate it presents.
func (s *shim) presented(tb testing.TB) *x509.Certificate {
	tb.Helper()
	conn, err := tls.Dial("tcp", s.url[len("https://"):], &tls.Config{RootCAs: s.certs.pool, MinVersion: tls.VersionTLS12})
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}
