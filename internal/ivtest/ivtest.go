// Package ivtest holds the fixtures of tests that verify images outside
// the imageverify package (the server's, the end-to-end ones): an
// in-process OCI registry (go-containerregistry's, with the referrers API)
// that can be stopped, random images pushed to it, and cosign keys that
// sign them as cosign does (the legacy sha256-<hex>.sig tag). Tests only.
package ivtest

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	cosignmutate "github.com/sigstore/cosign/v3/pkg/oci/mutate"
	ociremote "github.com/sigstore/cosign/v3/pkg/oci/remote"
	cosignstatic "github.com/sigstore/cosign/v3/pkg/oci/static"
	"github.com/sigstore/sigstore/pkg/signature"
	sigpayload "github.com/sigstore/sigstore/pkg/signature/payload"
)

// Registry is an in-process OCI registry over plain HTTP on loopback.
type Registry struct {
	t    testing.TB
	srv  *httptest.Server
	auth *authn.Basic
	// Host is the registry's host:port (for insecureRegistries and image
	// references).
	Host string
}

// NewRegistry starts a registry, stopped when the test ends.
func NewRegistry(t testing.TB) *Registry {
	return newRegistry(t, nil)
}

// NewAuthRegistry starts a registry that answers 401 to requests without
// the basic credentials user:password (Push and Sign give them).
func NewAuthRegistry(t testing.TB, user, password string) *Registry {
	return newRegistry(t, &authn.Basic{Username: user, Password: password})
}

func newRegistry(t testing.TB, auth *authn.Basic) *Registry {
	t.Helper()
	h := registry.New(registry.WithReferrersSupport(true), registry.Logger(log.New(io.Discard, "", 0)))
	if auth != nil {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if u, p, ok := req.BasicAuth(); !ok || u != auth.Username || p != auth.Password {
				w.Header().Set("WWW-Authenticate", `Basic realm="ivtest"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
			inner.ServeHTTP(w, req)
		})
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &Registry{t: t, srv: srv, auth: auth, Host: strings.TrimPrefix(srv.URL, "http://")}
}

// remote are the options of the registry's writes.
func (r *Registry) remote() []remote.Option {
	if r.auth == nil {
		return nil
	}
	return []remote.Option{remote.WithAuth(r.auth)}
}

// Stop stops the registry: its address then refuses connections.
func (r *Registry) Stop() {
	r.srv.CloseClientConnections()
	r.srv.Close()
}

// Ref is the reference of repo:tag (or repo@digest) in the registry.
func (r *Registry) Ref(s string) string { return r.Host + "/" + s }

// Push writes a random image at repo:tag and returns its digest reference.
func (r *Registry) Push(repoTag string) name.Digest {
	r.t.Helper()
	img, err := random.Image(512, 1)
	if err != nil {
		r.t.Fatal(err)
	}
	ref, err := name.ParseReference(r.Ref(repoTag), name.Insecure)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := remote.Write(ref, img, r.remote()...); err != nil {
		r.t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		r.t.Fatal(err)
	}
	return ref.Context().Digest(d.String())
}

// CosignKey is an ECDSA P-256 cosign key pair.
type CosignKey struct {
	sv signature.SignerVerifier
	// PEM is the public key, as a policy's cosign.key.data.
	PEM string
}

// NewCosignKey makes a key pair.
func NewCosignKey(t testing.TB) *CosignKey {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sv, err := signature.LoadECDSASignerVerifier(priv, crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return &CosignKey{sv: sv, PEM: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))}
}

// Sign attaches a cosign signature of the image d of r (a simple signing
// payload naming d, signed with key, pushed as d's .sig tag).
func (r *Registry) Sign(key *CosignKey, d name.Digest) {
	r.t.Helper()
	key.sign(r.t, d, d, nil, r.remote()...)
}

// Sign attaches a cosign signature of the image d (a simple signing
// payload naming d, signed with the key, pushed as d's .sig tag) to a
// registry without authentication.
func (k *CosignKey) Sign(t testing.TB, d name.Digest) {
	t.Helper()
	k.sign(t, d, d, nil)
}

// SignAs attaches to the image d a cosign signature whose payload names
// claimed (d itself, or another digest for a tampered signature) with
// annotations (also set on the signature layer).
func (k *CosignKey) SignAs(t testing.TB, d, claimed name.Digest, annotations map[string]any) {
	t.Helper()
	k.sign(t, d, claimed, annotations)
}

// Signer is the key's signer (to sign attestations).
func (k *CosignKey) Signer() signature.SignerVerifier { return k.sv }

func (k *CosignKey) sign(t testing.TB, d, claimed name.Digest, annotations map[string]any, opts ...remote.Option) {
	payload, err := (&sigpayload.Cosign{Image: claimed, Annotations: annotations}).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	sig, err := k.sv.SignMessage(bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	var sopts []cosignstatic.Option
	if len(annotations) > 0 {
		layer := map[string]string{}
		for k, v := range annotations {
			layer[k], _ = v.(string)
		}
		sopts = append(sopts, cosignstatic.WithAnnotations(layer))
	}
	ociSig, err := cosignstatic.NewSignature(payload, base64.StdEncoding.EncodeToString(sig), sopts...)
	if err != nil {
		t.Fatal(err)
	}
	var ro []ociremote.Option
	if len(opts) > 0 {
		ro = append(ro, ociremote.WithRemoteOptions(opts...))
	}
	se, err := cosignmutate.AttachSignatureToEntity(ociremote.SignedUnknown(d, ro...), ociSig)
	if err != nil {
		t.Fatal(err)
	}
	if err := ociremote.WriteSignatures(d.Repository, se, ro...); err != nil {
		t.Fatal(err)
	}
}

// Policy is an ImageValidatingPolicy named name that requires the Pods'
// images of the registry to be signed with key (cosign, no transparency
// log), with Kyverno's defaults (mutateDigest, verifyDigest, required)
// and validationActions [Deny].
func (r *Registry) Policy(name string, key *CosignKey) map[string]any {
	return map[string]any{
		"apiVersion": "policies.kyverno.io/v1", "kind": "ImageValidatingPolicy",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"validationActions": []any{"Deny"},
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE", "UPDATE"}, "resources": []any{"pods"},
			}}},
			"matchImageReferences": []any{map[string]any{"glob": r.Host + "/*"}},
			"attestors": []any{map[string]any{"name": "key", "cosign": map[string]any{
				"key": map[string]any{"data": key.PEM}, "ctlog": map[string]any{"insecureIgnoreTlog": true},
			}}},
			"validations": []any{map[string]any{
				"expression": "images.containers.map(i, verifyImageSignatures(i, [attestors.key])).all(e, e > 0)",
				"message":    "images must be signed",
			}},
		},
	}
}
