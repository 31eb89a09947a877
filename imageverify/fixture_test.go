package imageverify_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/notaryproject/notation-core-go/signature/jws"
	"github.com/notaryproject/notation-go"
	notationregistry "github.com/notaryproject/notation-go/registry"
	"github.com/notaryproject/notation-go/signer"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	cosignmutate "github.com/sigstore/cosign/v3/pkg/oci/mutate"
	ociremote "github.com/sigstore/cosign/v3/pkg/oci/remote"
	cosignstatic "github.com/sigstore/cosign/v3/pkg/oci/static"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protodsse "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	protorekor "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"github.com/sigstore/sigstore/pkg/signature"
	sigdsse "github.com/sigstore/sigstore/pkg/signature/dsse"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/arbiter-pdp/arbiter/internal/ivtest"
)

// testRegistry is an in-process OCI registry with the referrers API
// (internal/ivtest's).
type testRegistry struct {
	*ivtest.Registry
	t    testing.TB
	host string
}

func newRegistry(t testing.TB) *testRegistry {
	t.Helper()
	r := ivtest.NewRegistry(t)
	return &testRegistry{Registry: r, t: t, host: r.Host}
}

// push writes a random image at repo:tag and returns its digest reference.
func (r *testRegistry) push(repoTag string) name.Digest {
	r.t.Helper()
	return r.Push(repoTag)
}

// ref is the reference of repo:tag (or repo@digest) in the registry.
func (r *testRegistry) ref(s string) string { return r.Ref(s) }

// cosignKey is an ECDSA P-256 cosign key pair (internal/ivtest's).
type cosignKey struct {
	sv  signature.SignerVerifier
	pem string
	k   *ivtest.CosignKey
}

func newCosignKey(t testing.TB) *cosignKey {
	t.Helper()
	k := ivtest.NewCosignKey(t)
	return &cosignKey{sv: k.Signer(), pem: k.PEM, k: k}
}

// sign attaches a cosign signature (the legacy sha256-<hex>.sig tag) of
// claimed to the image d: claimed is d itself, or another digest for a
// tampered signature.
func (k *cosignKey) sign(t testing.TB, d, claimed name.Digest, annotations map[string]any) {
	t.Helper()
	k.k.SignAs(t, d, claimed, annotations)
}

// statement is an in-toto statement about the image d.
func statement(d name.Digest, predicateType string, predicate any) []byte {
	hex := strings.TrimPrefix(d.DigestStr(), "sha256:")
	b, _ := json.Marshal(map[string]any{
		"_type":         "https://in-toto.io/Statement/v0.1",
		"subject":       []any{map[string]any{"name": d.Context().String(), "digest": map[string]any{"sha256": hex}}},
		"predicateType": predicateType,
		"predicate":     predicate,
	})
	return b
}

// attest attaches an in-toto attestation (the legacy sha256-<hex>.att tag)
// signed with the key.
func (k *cosignKey) attest(t testing.TB, d name.Digest, predicateType string, predicate any) {
	t.Helper()
	wrapped := sigdsse.WrapSigner(k.sv, "application/vnd.in-toto+json")
	env, err := wrapped.SignMessage(bytes.NewReader(statement(d, predicateType, predicate)))
	if err != nil {
		t.Fatal(err)
	}
	att, err := cosignstatic.NewAttestation(env)
	if err != nil {
		t.Fatal(err)
	}
	se, err := cosignmutate.AttachAttestationToEntity(ociremote.SignedUnknown(d), att)
	if err != nil {
		t.Fatal(err)
	}
	if err := ociremote.WriteAttestations(d.Repository, se); err != nil {
		t.Fatal(err)
	}
}

// pushReferrer writes an OCI 1.1 referrer of d: one layer of content with
// mediaType; its config media type is the artifact type (the in-process
// registry reports that as the referrer's artifactType).
func (r *testRegistry) pushReferrer(d name.Digest, artifactType, mediaType string, content []byte, annotations map[string]string) name.Digest {
	r.t.Helper()
	desc, err := remote.Head(d)
	if err != nil {
		r.t.Fatal(err)
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: static.NewLayer(content, types.MediaType(mediaType))})
	if err != nil {
		r.t.Fatal(err)
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.MediaType(artifactType))
	if annotations != nil {
		img = mutate.Annotations(img, annotations).(v1.Image)
	}
	img = mutate.Subject(img, *desc).(v1.Image)
	md, err := img.Digest()
	if err != nil {
		r.t.Fatal(err)
	}
	ref := d.Context().Digest(md.String())
	if err := remote.Write(ref, img); err != nil {
		r.t.Fatal(err)
	}
	return ref
}

// bundleOf renders a VirtualSigstore entity as a Sigstore bundle v0.3.
func bundleOf(t testing.TB, vs *ca.VirtualSigstore, e *ca.TestEntity) []byte {
	t.Helper()
	vc, err := e.VerificationContent()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := e.SignatureContent()
	if err != nil {
		t.Fatal(err)
	}
	env := sc.EnvelopeContent().RawEnvelope()
	entries, err := e.TlogEntries()
	if err != nil {
		t.Fatal(err)
	}
	ts, _ := e.Timestamps()
	var tles []*protorekor.TransparencyLogEntry
	for _, en := range entries {
		tle := en.TransparencyLogEntry()
		var body struct {
			Kind       string `json:"kind"`
			APIVersion string `json:"apiVersion"`
		}
		_ = json.Unmarshal(tle.CanonicalizedBody, &body)
		tle.KindVersion = &protorekor.KindVersion{Kind: body.Kind, Version: body.APIVersion}
		// the signed entry timestamp, which the entry keeps to itself
		set, err := vs.RekorSignPayload(tlog.RekorPayload{
			LogID: hex.EncodeToString(tle.LogId.KeyId), IntegratedTime: tle.IntegratedTime, LogIndex: tle.LogIndex,
			Body: base64.StdEncoding.EncodeToString(tle.CanonicalizedBody),
		})
		if err != nil {
			t.Fatal(err)
		}
		tle.InclusionPromise = &protorekor.InclusionPromise{SignedEntryTimestamp: set}
		tles = append(tles, tle)
	}
	var sigs []*protodsse.Signature
	for _, s := range env.Signatures {
		raw, _ := base64.StdEncoding.DecodeString(s.Sig)
		sigs = append(sigs, &protodsse.Signature{Sig: raw, Keyid: s.KeyID})
	}
	payload, _ := base64.StdEncoding.DecodeString(env.Payload)
	tvd := &protobundle.TimestampVerificationData{}
	for _, x := range ts {
		tvd.Rfc3161Timestamps = append(tvd.Rfc3161Timestamps, &protocommon.RFC3161SignedTimestamp{SignedTimestamp: x})
	}
	pb := &protobundle.Bundle{
		MediaType: "application/vnd.dev.sigstore.bundle.v0.3+json",
		VerificationMaterial: &protobundle.VerificationMaterial{
			Content:                   &protobundle.VerificationMaterial_Certificate{Certificate: &protocommon.X509Certificate{RawBytes: vc.Certificate().Raw}},
			TlogEntries:               tles,
			TimestampVerificationData: tvd,
		},
		Content: &protobundle.Bundle_DsseEnvelope{DsseEnvelope: &protodsse.Envelope{Payload: payload, PayloadType: env.PayloadType, Signatures: sigs}},
	}
	b, err := protojson.Marshal(pb)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// attachBundle signs an in-toto statement about d keylessly with the
// virtual Sigstore (identity, issuer) at time at, and attaches the bundle
// as a referrer, as cosign v3 does.
func (r *testRegistry) attachBundle(vs *ca.VirtualSigstore, d name.Digest, identity, issuer, predicateType string, at time.Time) {
	r.t.Helper()
	e, err := vs.AttestAtTime(identity, issuer, statement(d, predicateType, map[string]any{}), at, true)
	if err != nil {
		r.t.Fatal(err)
	}
	const bundleType = "application/vnd.dev.sigstore.bundle.v0.3+json"
	r.pushReferrer(d, bundleType, bundleType, bundleOf(r.t, vs, e), map[string]string{"dev.sigstore.bundle.predicateType": predicateType})
}

// notaryCert is a self-signed RSA code-signing certificate.
type notaryCert struct {
	key  *rsa.PrivateKey
	cert *x509.Certificate
	pem  string
}

func newNotaryCert(t testing.TB, notBefore, notAfter time.Time) *notaryCert {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "test", Organization: []string{"Notary"}, Locality: []string{"Seattle"}, Province: []string{"WA"}, Country: []string{"US"}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &notaryCert{key: key, cert: cert, pem: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}
}

// notarySign signs the manifest d with notation (a JWS envelope pushed as
// a referrer).
func (r *testRegistry) notarySign(c *notaryCert, d name.Digest) {
	r.t.Helper()
	s, err := signer.NewGenericSigner(c.key, []*x509.Certificate{c.cert})
	if err != nil {
		r.t.Fatal(err)
	}
	_, err = notation.Sign(context.Background(), s, &pushRepo{r: r, repo: d.Context()}, notation.SignOptions{
		SignerSignOptions: notation.SignerSignOptions{SignatureMediaType: jws.MediaTypeEnvelope},
		ArtifactReference: d.String(),
	})
	if err != nil {
		r.t.Fatal(err)
	}
}

// pushRepo is notation's repository for signing in tests.
type pushRepo struct {
	r    *testRegistry
	repo name.Repository
}

func (p *pushRepo) Resolve(_ context.Context, reference string) (ocispec.Descriptor, error) {
	var ref name.Reference
	var err error
	if strings.HasPrefix(reference, "sha256:") {
		ref, err = name.ParseReference(p.repo.String()+"@"+reference, name.Insecure)
	} else {
		ref, err = name.ParseReference(reference, name.Insecure)
	}
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	d, err := remote.Head(ref)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	return ocispec.Descriptor{MediaType: string(d.MediaType), Digest: digest.Digest(d.Digest.String()), Size: d.Size}, nil
}

func (p *pushRepo) ListSignatures(context.Context, ocispec.Descriptor, func([]ocispec.Descriptor) error) error {
	return errors.New("not implemented")
}

func (p *pushRepo) FetchSignatureBlob(context.Context, ocispec.Descriptor) ([]byte, ocispec.Descriptor, error) {
	return nil, ocispec.Descriptor{}, errors.New("not implemented")
}

func (p *pushRepo) PushSignature(_ context.Context, mediaType string, blob []byte, subject ocispec.Descriptor, annotations map[string]string) (ocispec.Descriptor, ocispec.Descriptor, error) {
	d := p.repo.Digest(subject.Digest.String())
	ref := p.r.pushReferrer(d, notationregistry.ArtifactTypeNotation, mediaType, blob, annotations)
	return ocispec.Descriptor{MediaType: mediaType, Size: int64(len(blob))}, ocispec.Descriptor{Digest: digest.Digest(ref.DigestStr())}, nil
}
