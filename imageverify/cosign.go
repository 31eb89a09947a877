package imageverify

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/sigstore/cosign/v3/pkg/cosign"
	"github.com/sigstore/cosign/v3/pkg/oci"
	ociremote "github.com/sigstore/cosign/v3/pkg/oci/remote"
	"github.com/sigstore/cosign/v3/pkg/policy"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
)

// Bounds of certificate chains (Kyverno's, against CVE-2026-32280) and of
// inline trusted roots.
const (
	maxIntermediateCerts   = 10
	maxTrustedRootJSONSize = 1 << 20
)

var hashAlgorithms = map[string]crypto.Hash{
	"":       crypto.SHA256,
	"sha224": crypto.SHA224,
	"sha256": crypto.SHA256,
	"sha384": crypto.SHA384,
	"sha512": crypto.SHA512,
}

// ErrNoTrustedRoot is the reason a cosign attestor that needs the Sigstore
// infrastructure (keyless, or a transparency-log check) does not verify
// without a configured trusted root.
var ErrNoTrustedRoot = errors.New("no Sigstore trusted root configured (imageverify trustedRoot, or the attestor's trustedRoot): keyless and transparency-log verification need one; Arbiter never fetches the public Sigstore TUF repository")

// checkOptions builds cosign's CheckOpts for an attestor as Kyverno's
// checkOptions does, except that the trust root is the configured one (or
// the attestor's trustedRoot value), never fetched, and that Rekor is
// never called: the transparency-log proofs must be in the signatures
// (cosign's offline verification).
func (v *Verifier) checkOptions(ctx context.Context, ir *imageRef, att *kyvernoapi.Cosign) (*cosign.CheckOpts, error) {
	ignoreTlog := att.CTLog != nil && att.CTLog.InsecureIgnoreTlog
	keyOrCert := att.Keyless == nil && (att.Key != nil || att.Certificate != nil)
	skipSigstoreInfra := keyOrCert && ignoreTlog

	var ropts []ociremote.Option
	if att.Source != nil {
		if att.Source.Repository != "" {
			repo, err := name.NewRepository(att.Source.Repository, ir.nameOpts...)
			if err != nil {
				return nil, fmt.Errorf("failed to parse signature repository %s: %w", att.Source.Repository, err)
			}
			ropts = append(ropts, ociremote.WithTargetRepository(repo))
		}
		if att.Source.TagPrefix != "" {
			ropts = append(ropts, ociremote.WithPrefix(att.Source.TagPrefix))
		}
	}
	ropts = append(ropts, ociremote.WithRemoteOptions(ir.withCtx(ctx)...), ociremote.WithNameOptions(ir.nameOpts...))
	opts := &cosign.CheckOpts{RegistryClientOpts: ropts}

	if !skipSigstoreInfra {
		tm, err := v.trustedMaterial(att)
		if err != nil {
			return nil, err
		}
		opts.TrustedMaterial = tm
		opts.Offline = true
	}
	if att.CTLog != nil {
		opts.IgnoreSCT = att.CTLog.InsecureIgnoreSCT
		opts.IgnoreTlog = att.CTLog.InsecureIgnoreTlog
		if att.CTLog.TSACertChain != "" {
			if n := bytes.Count([]byte(att.CTLog.TSACertChain), []byte("-----BEGIN CERTIFICATE-----")); n > maxIntermediateCerts+2 {
				return nil, fmt.Errorf("TSA certificate chain contains too many certificates (%d), maximum allowed is %d", n, maxIntermediateCerts+2)
			}
			leaves, intermediates, roots, err := splitCertChain([]byte(att.CTLog.TSACertChain))
			if err != nil {
				return nil, fmt.Errorf("error splitting tsa certificates: %w", err)
			}
			if len(leaves) > 1 {
				return nil, fmt.Errorf("certificate chain must contain at most one TSA certificate")
			}
			if len(intermediates) > maxIntermediateCerts {
				return nil, fmt.Errorf("TSA certificate chain contains too many intermediate certificates (%d), maximum allowed is %d", len(intermediates), maxIntermediateCerts)
			}
			if len(leaves) == 1 {
				opts.TSACertificate = leaves[0]
			}
			opts.TSAIntermediateCertificates = intermediates
			opts.TSARootCertificates = roots
			opts.UseSignedTimestamps = true
			if opts.TrustedMaterial != nil && len(roots) > 0 {
				tms := root.TrustedMaterialCollection{opts.TrustedMaterial}
				for _, r := range roots {
					tms = append(tms, tsaMaterial{BaseTrustedMaterial: &root.BaseTrustedMaterial{}, tsa: &root.SigstoreTimestampingAuthority{Root: r, Intermediates: intermediates, Leaf: opts.TSACertificate}})
				}
				opts.TrustedMaterial = tms
			}
		}
	}
	switch {
	case att.Keyless != nil:
		for _, id := range att.Keyless.Identities {
			// subjectExpression is not read, as in Kyverno 1.19.1.
			opts.Identities = append(opts.Identities, cosign.Identity{
				Issuer: id.Issuer, Subject: id.Subject, IssuerRegExp: id.IssuerRegExp, SubjectRegExp: id.SubjectRegExp,
			})
		}
		if att.Keyless.Roots != "" {
			cp := x509.NewCertPool()
			if !cp.AppendCertsFromPEM([]byte(att.Keyless.Roots)) {
				return nil, fmt.Errorf("failed to load Root certificates: error creating root cert pool")
			}
			opts.RootCerts = cp
		}
		return opts, nil
	case att.Key != nil:
		hash, ok := hashAlgorithms[att.Key.HashAlgorithm]
		if !ok {
			return nil, fmt.Errorf("unsupported hashAlgorithm %q (sha224, sha256, sha384, sha512)", att.Key.HashAlgorithm)
		}
		switch {
		case att.Key.Data != "":
			pub, err := cryptoutils.UnmarshalPEMToPublicKey([]byte(att.Key.Data))
			if err != nil {
				return nil, fmt.Errorf("failed to load public key from PEM: pem to public key: %w", err)
			}
			if opts.SigVerifier, err = signature.LoadVerifier(pub, hash); err != nil {
				return nil, fmt.Errorf("failed to load public key from PEM: %w", err)
			}
		case att.Key.KMS != "":
			return nil, fmt.Errorf("failed to load public key from %s: KMS keys are not supported by Arbiter", att.Key.KMS)
		}
		return opts, nil
	case att.Certificate != nil:
		if c := att.Certificate.Certificate; c != nil && c.Value != "" {
			cert, err := certFromBytes([]byte(c.Value))
			if err != nil {
				return nil, fmt.Errorf("failed to load certificate: %w", err)
			}
			if ch := att.Certificate.CertificateChain; ch == nil || ch.Value == "" {
				if opts.SigVerifier, err = signature.LoadVerifier(cert.PublicKey, crypto.SHA256); err != nil {
					return nil, fmt.Errorf("failed to load signature from certificate: %w", err)
				}
			} else {
				if n := bytes.Count([]byte(ch.Value), []byte("-----BEGIN CERTIFICATE-----")); n > maxIntermediateCerts+1 {
					return nil, fmt.Errorf("certificate chain too long (%d), maximum allowed is %d", n, maxIntermediateCerts+1)
				}
				chain, err := cryptoutils.LoadCertificatesFromPEM(bytes.NewReader([]byte(ch.Value)))
				if err != nil {
					return nil, fmt.Errorf("failed to load certificate chain: %w", err)
				}
				if opts.SigVerifier, err = cosign.ValidateAndUnpackCertWithChain(cert, chain, opts); err != nil {
					return nil, fmt.Errorf("failed to load validate certificate chain: %w", err)
				}
			}
		}
		if ch := att.Certificate.CertificateChain; ch != nil && ch.Value != "" {
			cp := x509.NewCertPool()
			if !cp.AppendCertsFromPEM([]byte(ch.Value)) {
				return nil, fmt.Errorf("failed to load certificates: error creating root cert pool")
			}
			opts.RootCerts = cp
		}
		return opts, nil
	}
	return nil, errors.New("cosign verifier needs to have one key, keyless or certificate fields set")
}

// trustedMaterial is the attestor's inline trusted root, else the
// configured one.
func (v *Verifier) trustedMaterial(att *kyvernoapi.Cosign) (root.TrustedMaterial, error) {
	if att.TrustedRoot != nil && att.TrustedRoot.Value != "" {
		if n := len(att.TrustedRoot.Value); n > maxTrustedRootJSONSize {
			return nil, fmt.Errorf("inline trustedRoot JSON is too large (%d bytes), maximum allowed is %d bytes", n, maxTrustedRootJSONSize)
		}
		tr, err := root.NewTrustedRootFromJSON([]byte(att.TrustedRoot.Value))
		if err != nil {
			return nil, fmt.Errorf("parsing inline trustedRoot JSON: %w", err)
		}
		return tr, nil
	}
	if v.trust == nil {
		return nil, ErrNoTrustedRoot
	}
	return v.trust, nil
}

type tsaMaterial struct {
	*root.BaseTrustedMaterial
	tsa root.TimestampingAuthority
}

func (t tsaMaterial) TimestampingAuthorities() []root.TimestampingAuthority {
	return []root.TimestampingAuthority{t.tsa}
}

func certFromBytes(pem []byte) (*x509.Certificate, error) {
	out, err := base64.StdEncoding.DecodeString(string(pem))
	if err != nil {
		out = pem
	}
	certs, err := cryptoutils.UnmarshalCertificatesFromPEM(out)
	if err != nil {
		return nil, fmt.Errorf("failed to unmarshal certificate from PEM format: %w", err)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("no certs found in pem file")
	}
	return certs[0], nil
}

func splitCertChain(pem []byte) (leaves, intermediates, roots []*x509.Certificate, err error) {
	certs, err := cryptoutils.UnmarshalCertificatesFromPEM(pem)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, cert := range certs {
		switch {
		case !cert.IsCA:
			leaves = append(leaves, cert)
		case bytes.Equal(cert.RawSubject, cert.RawIssuer):
			roots = append(roots, cert)
		default:
			if len(cert.ExtKeyUsage) == 0 {
				cert.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageTimeStamping}
			}
			intermediates = append(intermediates, cert)
		}
	}
	return leaves, intermediates, roots, nil
}

// prepare builds the options with bundle detection: Sigstore bundles
// attached as OCI referrers select cosign's new bundle format.
func (v *Verifier) prepare(ctx context.Context, ir *imageRef, att *kyvernoapi.Cosign) (*cosign.CheckOpts, *kyvernocel.Verdict, error) {
	co, err := v.checkOptions(ctx, ir, att)
	if err != nil {
		return nil, &kyvernocel.Verdict{Reason: "failed to build cosign verification opts: " + err.Error()}, nil
	}
	bundles, _, err := cosign.GetBundles(ctx, ir.ref, co.RegistryClientOpts)
	if err != nil && unavailable(err) {
		return nil, nil, err
	}
	co.NewBundleFormat = err == nil && len(bundles) > 0
	if co.NewBundleFormat && co.IgnoreTlog && !co.UseSignedTimestamps && co.TrustedMaterial != nil {
		co.UseSignedTimestamps = true
	}
	return co, nil, nil
}

// cosignSignatures verifies the cosign signatures of an image (Kyverno's
// cosign VerifyImageSignature).
func (v *Verifier) cosignSignatures(ctx context.Context, ir *imageRef, att *kyvernoapi.Cosign) (kyvernocel.Verdict, error) {
	co, vd, err := v.prepare(ctx, ir, att)
	if err != nil || vd != nil {
		return deref(vd), err
	}
	var sigs []oci.Signature
	var verified bool
	if co.NewBundleFormat {
		co.ClaimVerifier = cosign.IntotoSubjectClaimVerifier
		sigs, verified, err = cosign.VerifyImageAttestations(ctx, ir.ref, co)
	} else {
		co.ClaimVerifier = cosign.SimpleClaimVerifier
		sigs, verified, err = cosign.VerifyImageSignatures(ctx, ir.ref, co)
	}
	switch {
	case err != nil:
		if unavailable(err) {
			return kyvernocel.Verdict{}, err
		}
		return kyvernocel.Verdict{Reason: "failed to verify cosign signatures: " + err.Error()}, nil
	case !verified && !(att.CTLog != nil && (att.CTLog.InsecureIgnoreTlog || att.CTLog.InsecureIgnoreSCT)):
		return kyvernocel.Verdict{Reason: "transparency log or timestamp verification failed"}, nil
	case len(sigs) == 0:
		return kyvernocel.Verdict{Reason: "signatures not found"}, nil
	}
	if len(att.Annotations) != 0 {
		var errs []error
		for _, sig := range sigs {
			if err := checkAnnotations(sig, att.Annotations); err != nil {
				errs = append(errs, err)
				continue
			}
			return kyvernocel.Verdict{Verified: true}, nil
		}
		return kyvernocel.Verdict{Reason: fmt.Sprintf("no signature matched the required annotations: %v", errs)}, nil
	}
	return kyvernocel.Verdict{Verified: true}, nil
}

// cosignAttestation verifies the in-toto attestations of an image of a
// predicate type (Kyverno's cosign VerifyAttestationSignature); the
// payload of a verified one is its statement.
func (v *Verifier) cosignAttestation(ctx context.Context, ir *imageRef, predicateType string, att *kyvernoapi.Cosign) (kyvernocel.Verdict, error) {
	co, vd, err := v.prepare(ctx, ir, att)
	if err != nil || vd != nil {
		return deref(vd), err
	}
	co.ClaimVerifier = cosign.IntotoSubjectClaimVerifier
	sigs, verified, err := cosign.VerifyImageAttestations(ctx, ir.ref, co)
	switch {
	case err != nil:
		if unavailable(err) {
			return kyvernocel.Verdict{}, err
		}
		return kyvernocel.Verdict{Reason: "failed to verify cosign signatures: " + err.Error()}, nil
	case !verified && !(att.CTLog != nil && (att.CTLog.InsecureIgnoreTlog || att.CTLog.InsecureIgnoreSCT)):
		// Kyverno 1.19.1 requires the transparency-log proof here even
		// when the attestor ignores the log (so such attestors never
		// verify an attestation); Arbiter treats attestations as
		// signatures.
		return kyvernocel.Verdict{Reason: "cosign bundle verification failed"}, nil
	}
	var checked []string
	var annErrs []error
	var out kyvernocel.Verdict
	for _, s := range sigs {
		payload, gotType, err := policy.AttestationToPayloadJSON(ctx, predicateType, s)
		if err != nil {
			return kyvernocel.Verdict{Reason: "converting to consumable policy validation: " + err.Error()}, nil
		}
		checked = append(checked, gotType)
		if len(payload) == 0 {
			continue
		}
		if len(att.Annotations) != 0 {
			if err := checkAnnotations(s, att.Annotations); err != nil {
				annErrs = append(annErrs, err)
				continue
			}
		}
		out = kyvernocel.Verdict{Verified: true, PredicateType: gotType, Payload: payload}
	}
	if !out.Verified {
		if len(annErrs) > 0 {
			return kyvernocel.Verdict{Reason: fmt.Sprintf("no attestation matched the required annotations: %v", annErrs)}, nil
		}
		return kyvernocel.Verdict{Reason: fmt.Sprintf("required predicate type %s not found, found %v", predicateType, checked)}, nil
	}
	return out, nil
}

func deref(v *kyvernocel.Verdict) kyvernocel.Verdict {
	if v == nil {
		return kyvernocel.Verdict{}
	}
	return *v
}

func checkAnnotations(sig oci.Signature, annotations map[string]string) error {
	got, err := sig.Annotations()
	if err != nil {
		return fmt.Errorf("failed to fetch annotation from signature")
	}
	for k, want := range annotations {
		if want != got[k] {
			return fmt.Errorf("annotations mismatch: %s does not match expected value %s for key %s", got[k], want, k)
		}
	}
	return nil
}
