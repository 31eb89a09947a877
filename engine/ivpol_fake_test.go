package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
)

// fakeImage is what the fake verifier of golden cases says of an image.
type fakeImage struct {
	// Digest is what the reference resolves to (sha256:...).
	Digest string `json:"digest"`
	// Error fails every read of the image (a registry that is down).
	Error string `json:"error"`
	// Signers are the names of the attestors whose signature verifies.
	Signers []string `json:"signers"`
	// VerifyError fails the verification of signatures and attestations
	// (not the image read).
	VerifyError string `json:"verifyError"`
	// Attestations are the image's attestations.
	Attestations []fakeAttestation `json:"attestations"`
	// Config is the image's config file (getImageData's ConfigData).
	Config map[string]any `json:"config"`
}

type fakeAttestation struct {
	// Type is the in-toto predicate type or the referrer artifact type.
	Type string `json:"type"`
	// Signers are the attestors that verify it.
	Signers []string `json:"signers"`
	Payload any      `json:"payload"`
}

type fakeVerifier map[string]fakeImage

var _ kyvernocel.ImageVerifier = fakeVerifier(nil)

func (f fakeVerifier) Image(_ context.Context, image string, _ kyvernocel.ImageOptions) (*kyvernocel.VerifierImage, error) {
	fi, ok := f.lookup(image)
	if !ok {
		return nil, fmt.Errorf("GET https://%s: MANIFEST_UNKNOWN: manifest unknown", image)
	}
	if fi.Error != "" {
		return nil, errors.New(fi.Error)
	}
	ref, err := kyvernocel.ParseImageReference(image)
	if err != nil {
		return nil, err
	}
	repo, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
		repo = repo[:i]
	}
	img := &kyvernocel.VerifierImage{
		Image: image, Registry: ref.Registry(), Repository: ref.RepositoryStr(), Identifier: ref.Identifier(),
		Digest: fi.Digest, ResolvedImage: repo + "@" + fi.Digest,
	}
	if !ref.IsDigest() {
		img.Tag = ref.Identifier()
		img.ResolvedImage = repo + ":" + img.Tag + "@" + fi.Digest
	}
	img.Data = map[string]any{
		"Image": image, "ResolvedImage": img.ResolvedImage, "Registry": img.Registry, "Repository": img.Repository,
		"Identifier": img.Identifier, "Tag": img.Tag, "Digest": img.Digest,
		"Manifest":   map[string]any{"SchemaVersion": int64(2)},
		"ConfigData": fi.Config,
	}
	img.Handle = fi
	return img, nil
}

// lookup finds an image as written, or by its digest (a pinned tag:
// repo:tag@digest, or repo@digest of a tag listed).
func (f fakeVerifier) lookup(image string) (fakeImage, bool) {
	if fi, ok := f[image]; ok {
		return fi, true
	}
	name, digest, ok := strings.Cut(image, "@")
	if !ok {
		return fakeImage{}, false
	}
	for k, fi := range f {
		repo := k
		if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
			repo = repo[:i]
		}
		if fi.Digest == digest && (k == name || repo == name) {
			return fi, true
		}
	}
	return fakeImage{}, false
}

func (f fakeVerifier) VerifySignatures(_ context.Context, img *kyvernocel.VerifierImage, a kyvernocel.ImageAttestor, _ kyvernocel.ImageOptions) (kyvernocel.Verdict, error) {
	fi := img.Handle.(fakeImage)
	if fi.VerifyError != "" {
		return kyvernocel.Verdict{}, errors.New(fi.VerifyError)
	}
	if slices.Contains(fi.Signers, a.Spec.Name) {
		return kyvernocel.Verdict{Verified: true}, nil
	}
	return kyvernocel.Verdict{Reason: "signatures not found"}, nil
}

func (f fakeVerifier) VerifyAttestation(_ context.Context, img *kyvernocel.VerifierImage, att *kyvernoapi.Attestation, a kyvernocel.ImageAttestor, _ kyvernocel.ImageOptions) (kyvernocel.Verdict, error) {
	fi := img.Handle.(fakeImage)
	if fi.VerifyError != "" {
		return kyvernocel.Verdict{}, errors.New(fi.VerifyError)
	}
	t, intoto := "", att.InToto != nil
	if intoto {
		t = att.InToto.Type
	} else if att.Referrer != nil {
		t = att.Referrer.Type
	}
	for _, fa := range fi.Attestations {
		if fa.Type == t && slices.Contains(fa.Signers, a.Spec.Name) {
			b, _ := json.Marshal(fa.Payload)
			v := kyvernocel.Verdict{Verified: true, Payload: b}
			if intoto {
				v.PredicateType = t
			}
			return v, nil
		}
	}
	return kyvernocel.Verdict{Reason: "no attestation found"}, nil
}

func (f fakeVerifier) ReferrerPayload(_ context.Context, img *kyvernocel.VerifierImage, t string, _ kyvernocel.ImageOptions) ([]byte, error) {
	fi := img.Handle.(fakeImage)
	for _, fa := range fi.Attestations {
		if fa.Type == t {
			return json.Marshal(fa.Payload)
		}
	}
	return nil, fmt.Errorf("artifact of type %s not found", t)
}
