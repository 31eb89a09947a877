package imageverify

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/notaryproject/notation-go"
	notationregistry "github.com/notaryproject/notation-go/registry"
	"github.com/notaryproject/notation-go/verifier"
	"github.com/notaryproject/notation-go/verifier/trustpolicy"
	"github.com/notaryproject/notation-go/verifier/truststore"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore/pkg/cryptoutils"

	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
)

// trustStore is the in-memory trust store "kyverno" of an attestor's
// certificates.
type trustStore struct {
	ca, tsa []*x509.Certificate
}

func (ts *trustStore) GetCertificates(_ context.Context, t truststore.Type, name string) ([]*x509.Certificate, error) {
	if name != "kyverno" {
		return nil, errors.New("truststore not found")
	}
	switch t {
	case truststore.TypeCA:
		return ts.ca, nil
	case truststore.TypeTSA:
		return ts.tsa, nil
	}
	return nil, errors.New("entry not found in trust store")
}

// notaryVerifier builds Kyverno's notation verifier of an attestor: a
// strict trust policy for every registry and identity, trusting its
// certificates (and TSA certificates).
func notaryVerifier(att *kyvernoapi.Notary) (notation.Verifier, error) {
	var certsPEM, tsaPEM string
	if att.Certs != nil {
		certsPEM = att.Certs.Value
	}
	if att.TSACerts != nil {
		tsaPEM = att.TSACerts.Value
	}
	certs, err := cryptoutils.LoadCertificatesFromPEM(bytes.NewReader([]byte(certsPEM)))
	if err != nil {
		return nil, err
	}
	tsa, err := cryptoutils.LoadCertificatesFromPEM(bytes.NewReader([]byte(tsaPEM)))
	if err != nil {
		return nil, err
	}
	stores := []string{"ca:kyverno"}
	if len(tsa) > 0 {
		stores = append(stores, "tsa:kyverno")
	}
	doc := &trustpolicy.Document{
		Version: "1.0",
		TrustPolicies: []trustpolicy.TrustPolicy{{
			Name:                  "kyverno",
			RegistryScopes:        []string{"*"},
			SignatureVerification: trustpolicy.SignatureVerification{VerificationLevel: trustpolicy.LevelStrict.Name},
			TrustStores:           stores,
			TrustedIdentities:     []string{"*"},
		}},
	}
	return verifier.New(doc, &trustStore{ca: certs, tsa: tsa}, nil)
}

// notaryRepo is notation's view of a registry repository, read with
// go-containerregistry: signatures are the referrers of a digest with the
// notary artifact type, the envelope their single layer.
type notaryRepo struct {
	v  *Verifier
	ir *imageRef
}

func (r *notaryRepo) Resolve(ctx context.Context, reference string) (ocispec.Descriptor, error) {
	ref := r.ir.ref.Context().Digest(reference[strings.LastIndexByte(reference, '@')+1:])
	desc, err := remote.Head(ref, r.ir.withCtx(ctx)...)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	return toOCI(*desc), nil
}

func (r *notaryRepo) ListSignatures(ctx context.Context, desc ocispec.Descriptor, fn func([]ocispec.Descriptor) error) error {
	var descs []v1.Descriptor
	if desc.Digest.String() == r.ir.ref.DigestStr() {
		var err error
		if descs, err = r.v.referrersOf(ctx, r.ir, notationregistry.ArtifactTypeNotation); err != nil {
			return err
		}
	} else {
		idx, err := remote.Referrers(r.ir.ref.Context().Digest(desc.Digest.String()), r.ir.withCtx(ctx)...)
		if err != nil {
			return err
		}
		m, err := idx.IndexManifest()
		if err != nil {
			return err
		}
		if len(m.Manifests) > MaxReferrers {
			return fmt.Errorf("failed to fetch referrers: to many referrers found, max limit is %d", MaxReferrers)
		}
		for _, d := range m.Manifests {
			if d.ArtifactType == notationregistry.ArtifactTypeNotation {
				descs = append(descs, d)
			}
		}
	}
	out := make([]ocispec.Descriptor, len(descs))
	for i, d := range descs {
		out[i] = toOCI(d)
	}
	return fn(out)
}

func (r *notaryRepo) FetchSignatureBlob(ctx context.Context, desc ocispec.Descriptor) ([]byte, ocispec.Descriptor, error) {
	h, err := v1.NewHash(desc.Digest.String())
	if err != nil {
		return nil, ocispec.Descriptor{}, err
	}
	b, layer, err := r.v.referrerData(ctx, r.ir, v1.Descriptor{Digest: h, MediaType: types.MediaType(desc.MediaType), Size: desc.Size})
	if err != nil {
		return nil, ocispec.Descriptor{}, err
	}
	return b, toOCI(*layer), nil
}

func (r *notaryRepo) PushSignature(context.Context, string, []byte, ocispec.Descriptor, map[string]string) (ocispec.Descriptor, ocispec.Descriptor, error) {
	return ocispec.Descriptor{}, ocispec.Descriptor{}, errors.New("push signature is not implemented")
}

func toOCI(d v1.Descriptor) ocispec.Descriptor {
	return ocispec.Descriptor{
		MediaType:    string(d.MediaType),
		Digest:       digest.Digest(d.Digest.String()),
		Size:         d.Size,
		Annotations:  d.Annotations,
		ArtifactType: d.ArtifactType,
	}
}

// outcomesErr joins the errors of notation's verification outcomes.
func outcomesErr(outcomes []*notation.VerificationOutcome) error {
	var errs []error
	for _, o := range outcomes {
		if o.Error != nil {
			errs = append(errs, o.Error)
		}
	}
	return errors.Join(errs...)
}

// notarySignatures verifies the notary signatures of an image (Kyverno's
// notary VerifyImageSignature).
func (v *Verifier) notarySignatures(ctx context.Context, ir *imageRef, att *kyvernoapi.Notary) (kyvernocel.Verdict, error) {
	nv, err := notaryVerifier(att)
	if err != nil {
		return kyvernocel.Verdict{Reason: "failed to setup notation verification data: " + err.Error()}, nil
	}
	repo := &notaryRepo{v: v, ir: ir}
	_, outcomes, err := notation.Verify(ctx, nv, repo, notation.VerifyOptions{ArtifactReference: ir.ref.String(), MaxSignatureAttempts: 10})
	if err != nil {
		if unavailable(err) {
			return kyvernocel.Verdict{}, err
		}
		return kyvernocel.Verdict{Reason: fmt.Sprintf("failed to verify image %s: %v", ir.original, err)}, nil
	}
	if err := outcomesErr(outcomes); err != nil {
		return kyvernocel.Verdict{Reason: "notation failed to verify signatures: " + err.Error()}, nil
	}
	return kyvernocel.Verdict{Verified: true}, nil
}

// notaryAttestation verifies the notary signatures of the image's
// referrers of an artifact type: the first that verifies is the
// attestation, and its content the payload (Kyverno's notary
// VerifyAttestationSignature).
func (v *Verifier) notaryAttestation(ctx context.Context, ir *imageRef, artifactType string, att *kyvernoapi.Notary) (kyvernocel.Verdict, error) {
	nv, err := notaryVerifier(att)
	if err != nil {
		return kyvernocel.Verdict{Reason: "failed to setup notation verification data: " + err.Error()}, nil
	}
	refs, err := v.referrersOf(ctx, ir, artifactType)
	if err != nil {
		if unavailable(err) {
			return kyvernocel.Verdict{}, err
		}
		return kyvernocel.Verdict{Reason: "failed to fetch referrers: " + err.Error()}, nil
	}
	repo := &notaryRepo{v: v, ir: ir}
	var errs []error
	for _, r := range refs {
		reference := ir.ref.Context().Digest(r.Digest.String()).String()
		_, outcomes, err := notation.Verify(ctx, nv, repo, notation.VerifyOptions{ArtifactReference: reference, MaxSignatureAttempts: 10})
		if err == nil {
			err = outcomesErr(outcomes)
		}
		if err != nil {
			if unavailable(err) {
				return kyvernocel.Verdict{}, err
			}
			errs = append(errs, fmt.Errorf("failed to verify attestation %s, digest %s: %w", r.ArtifactType, r.Digest, err))
			continue
		}
		payload, _, err := v.referrerData(ctx, ir, r)
		if err != nil {
			if unavailable(err) {
				return kyvernocel.Verdict{}, err
			}
			return kyvernocel.Verdict{Reason: err.Error()}, nil
		}
		return kyvernocel.Verdict{Verified: true, Payload: payload}, nil
	}
	if len(errs) == 0 {
		return kyvernocel.Verdict{Reason: "attestation verification failed, no attestations found for type: " + artifactType}, nil
	}
	return kyvernocel.Verdict{Reason: errors.Join(errs...).Error()}, nil
}
