package webhook

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	// Registers the client-side health checking that healthCheckConfig in
	// DialOptions turns on.
	_ "google.golang.org/grpc/health"
)

// CertReloader serves a certificate and key from files and reloads them when
// either file changes (a new inode, size or modification time: a rewrite, or
// the symlink swap of a Kubernetes Secret volume), checked on each TLS
// handshake. A pair that does not load (say, the certificate written and the
// key not yet) leaves the previous pair in use until both load.
type CertReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu       sync.Mutex
	cert     *tls.Certificate
	certStat os.FileInfo
	keyStat  os.FileInfo
	// failed is the stat pair that last failed to load, so it is reported once.
	failedCert, failedKey os.FileInfo
}

// NewCertReloader loads the pair once; it fails when the files do not hold
// a valid pair.
func NewCertReloader(certFile, keyFile string, log *slog.Logger) (*CertReloader, error) {
	if log == nil {
		log = slog.Default()
	}
	c := &CertReloader{certFile: certFile, keyFile: keyFile, log: log}
	cs, ks, err := c.stat()
	if err != nil {
		return nil, err
	}
	if err := c.load(cs, ks); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *CertReloader) stat() (cert, key os.FileInfo, err error) {
	if cert, err = os.Stat(c.certFile); err != nil {
		return nil, nil, fmt.Errorf("certificate: %w", err)
	}
	if key, err = os.Stat(c.keyFile); err != nil {
		return nil, nil, fmt.Errorf("key: %w", err)
	}
	return cert, key, nil
}

func (c *CertReloader) load(cs, ks os.FileInfo) error {
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("loading %s and %s: %w", c.certFile, c.keyFile, err)
	}
	c.cert, c.certStat, c.keyStat = &pair, cs, ks
	c.failedCert, c.failedKey = nil, nil
	attrs := []any{"cert", c.certFile, "key", c.keyFile}
	if leaf := pair.Leaf; leaf != nil {
		attrs = append(attrs, "subject", leaf.Subject.String(), "dns_names", leaf.DNSNames,
			"serial", leaf.SerialNumber.String(), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	c.log.Info("serving certificate loaded", attrs...)
	return nil
}

// GetCertificate is the tls.Config hook: the current pair, reloaded first
// when the files changed.
func (c *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cs, ks, err := c.stat()
	if err != nil {
		c.log.Warn("certificate files unreadable; serving the loaded pair", "error", err)
		return c.cert, nil
	}
	if changed(c.certStat, cs) || changed(c.keyStat, ks) {
		if c.failedCert != nil && !changed(c.failedCert, cs) && !changed(c.failedKey, ks) {
			return c.cert, nil // this pair already failed; wait for the next change
		}
		if err := c.load(cs, ks); err != nil {
			c.failedCert, c.failedKey = cs, ks
			c.log.Warn("certificate files changed but do not load; serving the previous pair", "error", err)
		}
	}
	return c.cert, nil
}

func changed(a, b os.FileInfo) bool {
	return !os.SameFile(a, b) || a.Size() != b.Size() || !a.ModTime().Equal(b.ModTime())
}

// TLSConfig returns the server TLS configuration: TLS 1.2 or later, with
// certificates from certs.
func TLSConfig(certs *CertReloader) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: certs.GetCertificate,
	}
}

// NewServer returns the HTTPS server of h with certificates from certs;
// serve it with ServeTLS(listener, "", "").
func NewServer(addr string, h http.Handler, certs *CertReloader, log *slog.Logger) *http.Server {
	if log == nil {
		log = slog.Default()
	}
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		TLSConfig:         TLSConfig(certs),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      40 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// ServiceConfig is the gRPC service config of the shim's connection to the
// decision service: round robin over every address the target resolves to
// (give a headless Service as dns:///NAME:PORT to spread calls over every
// replica), skipping replicas whose gRPC health is not SERVING (a follower
// still syncing or lagging).
const ServiceConfig = `{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":""}}`

// DialOptions are the gRPC dial options of the shim's connection to the
// decision service (see ServiceConfig).
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithDefaultServiceConfig(ServiceConfig)}
}
