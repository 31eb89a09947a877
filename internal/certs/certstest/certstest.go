// Package certstest makes certificate authorities and certificates for
// tests: real ECDSA keys and x509 certificates, written as PEM files.
package certstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a test certificate authority.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	// File is the CA certificate as a PEM file.
	File string
	dir  string
}

// NewCA makes a CA whose certificate is written under dir.
func NewCA(t testing.TB, dir, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, Key: key, CertPEM: pemBlock("CERTIFICATE", der), dir: dir}
	ca.File = filepath.Join(dir, name+"-ca.pem")
	write(t, ca.File, ca.CertPEM)
	return ca
}

// Leaf is an issued certificate and its files.
type Leaf struct {
	Cert     *x509.Certificate
	CertFile string
	KeyFile  string
	CertPEM  []byte
	KeyPEM   []byte
}

// Spec describes a certificate to issue.
type Spec struct {
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	URIs       []string
	// Server and Client select the extended key usages (both when neither).
	Server, Client bool
	// NotAfter defaults to a day from now.
	NotAfter time.Time
}

// Issue issues a certificate and writes it, with its key, as
// DIR/NAME.pem and DIR/NAME-key.pem.
func (ca *CA) Issue(t testing.TB, name string, s Spec) *Leaf {
	t.Helper()
	l := ca.Make(t, s)
	l.CertFile = filepath.Join(ca.dir, name+".pem")
	l.KeyFile = filepath.Join(ca.dir, name+"-key.pem")
	write(t, l.CertFile, l.CertPEM)
	write(t, l.KeyFile, l.KeyPEM)
	return l
}

// Make issues a certificate without writing it.
func (ca *CA) Make(t testing.TB, s Spec) *Leaf {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if s.NotAfter.IsZero() {
		s.NotAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: s.CommonName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     s.NotAfter,
		DNSNames:     s.DNSNames,
		IPAddresses:  s.IPs,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	for _, u := range s.URIs {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	if s.Server || !s.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if s.Client || !s.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &Leaf{Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("EC PRIVATE KEY", kder)}
}

// Replace writes a new certificate and key over l's files, as a rotation
// does (write to a temporary file, then rename, so a reader never sees half
// a file).
func (l *Leaf) Replace(t testing.TB, n *Leaf) {
	t.Helper()
	writeAtomic(t, l.KeyFile, n.KeyPEM)
	writeAtomic(t, l.CertFile, n.CertPEM)
	l.Cert, l.CertPEM, l.KeyPEM = n.Cert, n.CertPEM, n.KeyPEM
}

// WriteBundle writes the PEM certificates of cas into one file.
func WriteBundle(t testing.TB, path string, cas ...*CA) {
	t.Helper()
	var b []byte
	for _, ca := range cas {
		b = append(b, ca.CertPEM...)
	}
	writeAtomic(t, path, b)
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func write(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeAtomic(t testing.TB, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	write(t, tmp, b)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
