// Package certs builds TLS configurations from certificate, key and CA files
// that are re-read when they change, so a certificate rotated on disk (a
// Kubernetes Secret update, cert-manager, a cron job) takes effect at the next
// handshake without a restart. Connections already established keep the
// certificate they were made with.
//
// Files are re-read lazily: at a handshake, when the last check is older
// than the reload interval. A set of files that does not load (a key that
// does not match its certificate while a rotation is half written, a
// truncated PEM) is reported and the last good material stays in use.
package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultReloadInterval is how often files are checked for changes.
const DefaultReloadInterval = 5 * time.Second

// Files names the PEM files of one side of a TLS connection. Every field is
// optional: a server needs Cert and Key; a server verifying client
// certificates, CA; a client, CA (else the system roots) and, for mutual
// TLS, Cert and Key.
type Files struct {
	// Cert is the certificate chain, leaf first.
	Cert string
	// Key is the private key of Cert.
	Key string
	// CA is a bundle of CA certificates trusted to sign the peer's
	// certificate.
	CA string
}

// Options tune a Reloader.
type Options struct {
	// Interval is how often files are checked for changes (default
	// DefaultReloadInterval; negative: never after the first load).
	Interval time.Duration
	// Logger receives reloads and reload failures (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock (tests).
	Now func() time.Time
}

// Reloader holds the current material read from Files.
type Reloader struct {
	files    Files
	interval time.Duration
	log      *slog.Logger
	now      func() time.Time

	mu        sync.Mutex // one reload at a time
	lastCheck atomic.Int64
	cur       atomic.Pointer[material]
	reloads   atomic.Int64
}

// material is one consistent load of the files.
type material struct {
	raw  [3][]byte
	cert *tls.Certificate
	pool *x509.CertPool
	// leaf is cert's parsed leaf (for logs).
	leaf *x509.Certificate
}

// New loads files and returns a Reloader over them. It fails when the files
// do not load now.
func New(files Files, opts Options) (*Reloader, error) {
	if (files.Cert == "") != (files.Key == "") {
		return nil, errors.New("a certificate needs its key and a key its certificate: give both files")
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultReloadInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	r := &Reloader{files: files, interval: opts.Interval, log: opts.Logger, now: opts.Now}
	m, err := load(files)
	if err != nil {
		return nil, err
	}
	r.cur.Store(m)
	r.lastCheck.Store(r.now().UnixNano())
	return r, nil
}

// Files returns the files the Reloader reads.
func (r *Reloader) Files() Files { return r.files }

// Reloads returns how many times new material was loaded after the first.
func (r *Reloader) Reloads() int64 { return r.reloads.Load() }

// current returns the current material, re-reading the files first when
// the last check is older than the interval.
func (r *Reloader) current() *material {
	if r.interval < 0 {
		return r.cur.Load()
	}
	now := r.now().UnixNano()
	if now-r.lastCheck.Load() < int64(r.interval) {
		return r.cur.Load()
	}
	// One goroutine checks; handshakes meanwhile use what is loaded.
	if !r.mu.TryLock() {
		return r.cur.Load()
	}
	defer r.mu.Unlock()
	if now-r.lastCheck.Load() >= int64(r.interval) {
		r.Reload()
		r.lastCheck.Store(now)
	}
	return r.cur.Load()
}

// Reload re-reads the files now and reports whether new material was
// loaded. A set that does not load is logged and the old one kept.
func (r *Reloader) Reload() bool {
	old := r.cur.Load()
	raw, err := readAll(r.files)
	if err != nil {
		r.log.Warn("TLS files unreadable; keeping the loaded certificates", "cert", r.files.Cert, "ca", r.files.CA, "err", err)
		return false
	}
	if old != nil && bytes.Equal(raw[0], old.raw[0]) && bytes.Equal(raw[1], old.raw[1]) && bytes.Equal(raw[2], old.raw[2]) {
		return false
	}
	m, err := parse(r.files, raw)
	if err != nil {
		r.log.Warn("TLS files changed but do not load; keeping the loaded certificates", "cert", r.files.Cert, "ca", r.files.CA, "err", err)
		return false
	}
	r.cur.Store(m)
	r.reloads.Add(1)
	attrs := []any{"cert", r.files.Cert, "ca", r.files.CA}
	if m.leaf != nil {
		attrs = append(attrs, "subject", m.leaf.Subject.String(), "not_after", m.leaf.NotAfter)
	}
	r.log.Info("TLS certificates reloaded", attrs...)
	return true
}

func readAll(f Files) ([3][]byte, error) {
	var raw [3][]byte
	for i, name := range []string{f.Cert, f.Key, f.CA} {
		if name == "" {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return raw, err
		}
		raw[i] = b
	}
	return raw, nil
}

func load(f Files) (*material, error) {
	raw, err := readAll(f)
	if err != nil {
		return nil, err
	}
	return parse(f, raw)
}

func parse(f Files, raw [3][]byte) (*material, error) {
	m := &material{raw: raw}
	if f.Cert != "" {
		c, err := tls.X509KeyPair(raw[0], raw[1])
		if err != nil {
			return nil, fmt.Errorf("certificate %s and key %s: %w", f.Cert, f.Key, err)
		}
		m.cert = &c
		m.leaf = c.Leaf
		if m.leaf == nil && len(c.Certificate) > 0 {
			m.leaf, _ = x509.ParseCertificate(c.Certificate[0])
		}
	}
	if f.CA != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(raw[2]) {
			return nil, fmt.Errorf("CA bundle %s: no PEM certificate found", f.CA)
		}
		m.pool = pool
	}
	return m, nil
}

// ServerConfig returns a server TLS configuration that presents the current
// certificate and, when a CA file is set, verifies client certificates
// against the current CA bundle with clientAuth
// (tls.RequireAndVerifyClientCert for mutual TLS, or
// tls.VerifyClientCertIfGiven when callers may instead present a token).
func (r *Reloader) ServerConfig(clientAuth tls.ClientAuthType) (*tls.Config, error) {
	if r.files.Cert == "" {
		return nil, errors.New("a TLS server needs a certificate and key")
	}
	if r.files.CA == "" {
		clientAuth = tls.NoClientCert
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := r.current()
			return &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{*m.cert},
				ClientCAs:    m.pool,
				ClientAuth:   clientAuth,
				NextProtos:   []string{"h2"},
			}, nil
		},
	}, nil
}

// ClientConfig returns a client TLS configuration that presents the current
// certificate (if any) and verifies the server against the current CA
// bundle (or the system roots when no CA file is set). serverName overrides
// the name checked in the server's certificate (default: the host dialled).
func (r *Reloader) ClientConfig(serverName string) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if r.files.Cert != "" {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return r.current().cert, nil
		}
	}
	if r.files.CA != "" {
		// The CA bundle can change, so verification is done here against
		// the current one instead of by crypto/tls against a fixed pool.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			return verifyServer(cs, r.current().pool)
		}
	}
	return cfg
}

func verifyServer(cs tls.ConnectionState, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: the server presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		DNSName:       cs.ServerName,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("tls: verifying the server's certificate: %w", err)
	}
	return nil
}
