package kyvernocel

import (
	"context"
	"errors"

	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
)

// ImageVerifier is what the verification functions of
// ImageValidatingPolicies (verifyImageSignatures,
// verifyAttestationSignatures, extractPayload, getImageData) and their
// digest checks read: image metadata from registries, cosign and notary
// signature verification. The engine makes no registry calls itself: the
// imageverify package implements it (go-containerregistry, cosign,
// sigstore-go, notation-go), and tests use fakes.
//
// Errors and verdicts are apart, as in Kyverno: a signature or attestation
// that does not verify (unsigned, wrong key, wrong identity, expired
// certificate, digest mismatch) is a Verdict with Verified false, which the
// CEL functions count as 0; an error is reserved for what prevents an
// answer (the registry cannot be reached, times out, or refuses the
// credentials), which makes the policy's result an error.
//
// Implementations must be safe for concurrent use.
type ImageVerifier interface {
	// Image resolves an image reference (a tag to its digest) and reads its
	// metadata: what every matched image is prefetched with.
	Image(ctx context.Context, image string, opts ImageOptions) (*VerifierImage, error)
	// VerifySignatures says whether the attestor verifies a signature of
	// the image.
	VerifySignatures(ctx context.Context, img *VerifierImage, a ImageAttestor, opts ImageOptions) (Verdict, error)
	// VerifyAttestation says whether the attestor verifies an attestation
	// of the image (an in-toto statement for cosign, an OCI referrer for
	// notary); a verified one carries its payload.
	VerifyAttestation(ctx context.Context, img *VerifierImage, att *kyvernoapi.Attestation, a ImageAttestor, opts ImageOptions) (Verdict, error)
	// ReferrerPayload returns the content (the single layer) of the first
	// OCI referrer of the image whose artifact type is t, verified or not
	// (Kyverno's extractPayload of a referrer attestation not verified in
	// the request); "artifact of type <t> not found" when there is none.
	ReferrerPayload(ctx context.Context, img *VerifierImage, t string, opts ImageOptions) ([]byte, error)
}

// ImageOptions are a policy's ways of reaching registries.
type ImageOptions struct {
	// Credentials are the policy's spec.credentials (nil: the verifier's
	// defaults).
	Credentials *kyvernoapi.ImageCredentials
	// Namespace is the namespace of a namespaced policy (where its
	// pull secrets are), "" for a cluster policy.
	Namespace string
}

// ImageAttestor is an attestor with its CEL inputs evaluated.
type ImageAttestor struct {
	Spec *kyvernoapi.Attestor
	// Key identifies the attestor's content (a hash of it), for caches;
	// "" lets the verifier compute it.
	Key string
}

// VerifierImage is a resolved image: Kyverno's imagedataloader.ImageData.
type VerifierImage struct {
	// Image is the reference as written.
	Image string
	// ResolvedImage is <repository>:<tag>@<digest> or <repository>@<digest>.
	ResolvedImage string
	Registry      string
	Repository    string
	Identifier    string
	Tag           string
	// Digest is the digest the reference resolved to (an index's for an
	// index).
	Digest string
	// Data is what getImageData returns: the image data with Kyverno's Go
	// field names (Image, ResolvedImage, Registry, Repository, Identifier,
	// Tag, Digest, Manifest, ConfigData, ImageIndex), as JSON-like values.
	Data map[string]any
	// Handle is the verifier's own state of the image.
	Handle any
}

// Verdict is the answer of a verification.
type Verdict struct {
	Verified bool
	// Reason says why a verification failed (logs, traces).
	Reason string
	// PredicateType and Payload are, for a verified in-toto attestation,
	// the statement's predicate type and the statement (JSON); for a
	// verified referrer, its content (JSON) and PredicateType is empty.
	PredicateType string
	Payload       []byte
}

// ErrNoImageVerifier is the error of the verification functions when no
// ImageVerifier is configured.
var ErrNoImageVerifier = errors.New("no image verifier in this context: image signature verification needs registry access")
