// Package imageverify verifies container image signatures and attestations
// for ImageValidatingPolicies: it implements kyvernocel.ImageVerifier with
// go-containerregistry (registry reads), cosign v3 and sigstore-go (cosign
// signatures and in-toto attestations, legacy ".sig"/".att" tags and
// Sigstore bundles as OCI referrers) and notation-go (notary signatures of
// images and of their OCI referrers), as Kyverno 1.19.1's ivpol verifiers
// do (pkg/image/verifiers/ivpol).
//
// It does network I/O, so it lives outside the engine: the CLI and the
// server build a Verifier from a Config and pass it to the engine
// (engine.EvalOptions.ImageVerifier). Every call is bounded by a timeout,
// the registry requests in flight by a limit, and the results are cached:
// image metadata by digest, tags for a short TTL, successful verifications
// by (image digest, attestor content) — never by tag, so a moved tag is
// verified again.
package imageverify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/sigstore/sigstore-go/pkg/root"
	"golang.org/x/sync/singleflight"

	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/imagedata"
	"github.com/arbiter-pdp/arbiter/internal/lru"
)

// Options are a Verifier's collaborators (what is not configuration).
type Options struct {
	// Keychain is consulted first for registry credentials (e.g. the image
	// pull secrets the server is given). Nil: none.
	Keychain authn.Keychain
	// SecretKeychain, when set, resolves a policy's credentials.secrets
	// (names of pull secrets, "name" in namespace or "ns/name"); nil
	// ignores them.
	SecretKeychain func(namespace string, secrets []string) authn.Keychain
	// Transport is the HTTP transport under the Verifier's own checks.
	// Nil: go-containerregistry's defaults with a 5 s dial timeout.
	Transport http.RoundTripper
	// TrustedMaterial is the Sigstore trust root (Fulcio, Rekor, CT logs,
	// TSAs); it replaces Config.TrustedRoot (tests, embedders).
	TrustedMaterial root.TrustedMaterial
	// Logger receives a debug record per verification and a warning per
	// failure to answer. Nil: slog.Default().
	Logger *slog.Logger
}

// Verifier reads images and verifies their signatures and attestations.
// It is safe for concurrent use.
type Verifier struct {
	cfg      Config
	insecure map[string]bool
	platform v1.Platform
	guard    *guardTransport
	keychain authn.Keychain
	secrets  func(string, []string) authn.Keychain
	trust    root.TrustedMaterial
	log      *slog.Logger

	tags     *lru.Cache[string]                    // repository:tag → digest
	resolved *lru.Cache[*kyvernocel.VerifierImage] // image as written (and how reached) → image, for TagTTL
	images   *lru.Cache[*imageHandle]              // repository@digest → content
	verdicts *lru.Cache[kyvernocel.Verdict]
	group    singleflight.Group
	stats    counters
	now      func() time.Time
}

var _ kyvernocel.ImageVerifier = (*Verifier)(nil)

// New returns a Verifier configured by cfg (zero fields take defaults).
func New(cfg Config, opts Options) (*Verifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	platform, _ := imagedata.ParsePlatform(cfg.Platform)
	v := &Verifier{
		cfg:      cfg,
		insecure: map[string]bool{},
		platform: platform,
		secrets:  opts.SecretKeychain,
		trust:    opts.TrustedMaterial,
		log:      opts.Logger,
		tags:     lru.New[string](cfg.CacheSize, time.Duration(cfg.TagTTL)),
		resolved: lru.New[*kyvernocel.VerifierImage](cfg.CacheSize, time.Duration(cfg.TagTTL)),
		images:   lru.New[*imageHandle](cfg.CacheSize, time.Duration(cfg.CacheTTL)),
		verdicts: lru.New[kyvernocel.Verdict](cfg.CacheSize, time.Duration(cfg.CacheTTL)),
		now:      time.Now,
	}
	if v.log == nil {
		v.log = slog.Default()
	}
	v.log = v.log.With("component", "imageverify")
	for _, r := range cfg.InsecureRegistries {
		n, _ := imagedata.NormalizeRegistry(r)
		v.insecure[n] = true
	}
	base := opts.Transport
	if base == nil {
		base = newBaseTransport()
	}
	v.guard = &guardTransport{inner: base, insecure: v.insecure, maxBytes: cfg.MaxResponseBytes, sem: make(chan struct{}, cfg.MaxConcurrent), stats: &v.stats}
	var keychains []authn.Keychain
	if opts.Keychain != nil {
		keychains = append(keychains, opts.Keychain)
	}
	if cfg.DockerConfig != "" {
		keychains = append(keychains, imagedata.DockerConfigKeychain(cfg.DockerConfig))
	}
	v.keychain = authn.NewMultiKeychain(keychains...)
	if v.trust == nil && cfg.TrustedRoot != "" {
		data, err := os.ReadFile(cfg.TrustedRoot)
		if err != nil {
			return nil, fmt.Errorf("trustedRoot: %w", err)
		}
		tr, err := root.NewTrustedRootFromJSON(data)
		if err != nil {
			return nil, fmt.Errorf("trustedRoot: %s: %w", cfg.TrustedRoot, err)
		}
		v.trust = tr
	}
	return v, nil
}

// Config returns the Verifier's configuration, defaults applied.
func (v *Verifier) Config() Config { return v.cfg }

// Stats are a Verifier's counters since New: what the server exports as
// metrics (cache hits and misses, registry requests and their latency).
type Stats struct {
	// CacheHits and CacheMisses count verifications (and image reads)
	// answered from memory or not.
	CacheHits, CacheMisses int64
	// Verifications, Failures and Errors count the verifications made:
	// all, those that did not verify, those that could not answer.
	Verifications, Failures, Errors int64
	// RegistryRequests, RegistryErrors count the HTTP requests to
	// registries (errors: transport failures and 5xx answers);
	// RegistryLatency is their total duration.
	RegistryRequests, RegistryErrors int64
	RegistryLatency                  time.Duration
	// MaxInFlight is the most registry requests ever in flight at once
	// (at most Config.MaxConcurrent).
	MaxInFlight int64
}

// Stats returns the Verifier's counters.
func (v *Verifier) Stats() Stats {
	s := &v.stats
	return Stats{
		CacheHits: s.cacheHits.Load(), CacheMisses: s.cacheMisses.Load(),
		Verifications: s.verifications.Load(), Failures: s.failures.Load(), Errors: s.errors.Load(),
		RegistryRequests: s.requests.Load(), RegistryErrors: s.requestErrors.Load(),
		RegistryLatency: time.Duration(s.latency.Load()), MaxInFlight: s.maxInFlight.Load(),
	}
}

// imageHandle is what a registry says of one repository@digest.
type imageHandle struct {
	digest v1.Hash
	desc   v1.Descriptor
	data   map[string]any // manifest and config, Kyverno's Go field names

	mu        sync.Mutex
	referrers *v1.IndexManifest
}

// imageRef is the verifier's state of one image read: the resolved
// reference and how to reach its registry (the Handle of VerifierImage).
type imageRef struct {
	ref      name.Digest
	original name.Reference
	h        *imageHandle
	remote   []remote.Option
	nameOpts []name.Option
	insecure string
}

// request prepares the options of a policy's registry calls.
func (v *Verifier) request(ctx context.Context, image string, opts kyvernocel.ImageOptions) (context.Context, name.Reference, []name.Option, string, []remote.Option, error) {
	var nameOpts []name.Option
	insecure := ""
	if opts.Credentials != nil && opts.Credentials.AllowInsecureRegistry {
		nameOpts = append(nameOpts, name.Insecure)
	}
	ref, err := name.ParseReference(image, nameOpts...)
	if err != nil {
		return nil, nil, nil, "", nil, err
	}
	reg := ref.Context().RegistryStr()
	if v.insecure[reg] && len(nameOpts) == 0 {
		nameOpts = append(nameOpts, name.Insecure)
		if ref, err = name.ParseReference(image, nameOpts...); err != nil {
			return nil, nil, nil, "", nil, err
		}
	}
	if opts.Credentials != nil && opts.Credentials.AllowInsecureRegistry {
		insecure = reg
		ctx = withInsecure(ctx, reg)
	}
	keychain := v.keychain
	if opts.Credentials != nil && len(opts.Credentials.Secrets) > 0 && v.secrets != nil {
		keychain = authn.NewMultiKeychain(v.secrets(opts.Namespace, opts.Credentials.Secrets), keychain)
	}
	ropts := []remote.Option{
		remote.WithTransport(v.guard),
		remote.WithAuthFromKeychain(keychain),
		remote.WithPlatform(v.platform),
		remote.WithUserAgent("arbiter"),
		remote.WithRetryStatusCodes(http.StatusRequestTimeout, http.StatusInternalServerError, http.StatusBadGateway,
			http.StatusServiceUnavailable, http.StatusGatewayTimeout, 499, 522, http.StatusTooManyRequests),
	}
	return ctx, ref, nameOpts, insecure, ropts, nil
}

// Image implements kyvernocel.ImageVerifier: it resolves the reference and
// reads the image's manifest and config (those of the configured platform
// in an index), from the cache when it can.
//
// The image returned is shared with other callers (for TagTTL): it must not
// be modified.
func (v *Verifier) Image(ctx context.Context, image string, opts kyvernocel.ImageOptions) (*kyvernocel.VerifierImage, error) {
	key := image
	if c := opts.Credentials; c != nil {
		b, _ := json.Marshal(c)
		key += "\x00" + opts.Namespace + "\x00" + string(b)
	}
	if img, found, fresh := v.resolved.Get(key, v.now()); found && fresh {
		v.stats.cacheHits.Add(1)
		return img, nil
	}
	img, err := v.image(ctx, image, opts)
	if err != nil {
		return nil, err
	}
	v.resolved.Put(key, img, v.now())
	return img, nil
}

func (v *Verifier) image(ctx context.Context, image string, opts kyvernocel.ImageOptions) (*kyvernocel.VerifierImage, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(v.cfg.Timeout))
	defer cancel()
	ctx, ref, nameOpts, insecure, ropts, err := v.request(ctx, image, opts)
	if err != nil {
		return nil, err
	}
	digest, h, err := v.lookup(ctx, ref, append(ropts[:len(ropts):len(ropts)], remote.WithContext(ctx)))
	if err != nil {
		v.log.Warn("image read failed", "image", image, "error", err)
		return nil, err
	}
	// The calls made later on this image run under their own contexts.
	ir := &imageRef{ref: digest, original: ref, h: h, remote: ropts, nameOpts: nameOpts, insecure: insecure}
	out := &kyvernocel.VerifierImage{
		Image:      image,
		Registry:   ref.Context().RegistryStr(),
		Repository: ref.Context().RepositoryStr(),
		Identifier: ref.Identifier(),
		Digest:     h.digest.String(),
		Handle:     ir,
	}
	if _, ok := ref.(name.Tag); ok {
		out.Tag = ref.Identifier()
		out.ResolvedImage = fmt.Sprintf("%s:%s@%s", ref.Context().Name(), out.Tag, out.Digest)
	} else {
		out.ResolvedImage = fmt.Sprintf("%s@%s", ref.Context().Name(), out.Digest)
	}
	data := make(map[string]any, len(h.data)+7)
	for k, val := range h.data {
		data[k] = val
	}
	for k, val := range map[string]string{"Image": out.Image, "ResolvedImage": out.ResolvedImage, "Registry": out.Registry,
		"Repository": out.Repository, "Identifier": out.Identifier, "Tag": out.Tag, "Digest": out.Digest} {
		data[k] = val
	}
	out.Data = data
	return out, nil
}

// withCtx returns the remote options of an image with ctx.
func (ir *imageRef) withCtx(ctx context.Context) []remote.Option {
	if ir.insecure != "" {
		ctx = withInsecure(ctx, ir.insecure)
	}
	return append(ir.remote[:len(ir.remote):len(ir.remote)], remote.WithContext(ctx))
}

func (v *Verifier) lookup(ctx context.Context, ref name.Reference, ropts []remote.Option) (name.Digest, *imageHandle, error) {
	repo := ref.Context()
	now := v.now()
	if d, ok := ref.(name.Digest); ok {
		if h, found, fresh := v.images.Get(repo.Name()+"@"+d.DigestStr(), now); found && fresh {
			v.stats.cacheHits.Add(1)
			// repo@digest, without the tag of a tag@digest reference
			return repo.Digest(d.DigestStr()), h, nil
		}
	} else if digest, found, fresh := v.tags.Get(repo.Name()+":"+ref.Identifier(), now); found && fresh {
		if h, found, fresh := v.images.Get(repo.Name()+"@"+digest, now); found && fresh {
			v.stats.cacheHits.Add(1)
			return repo.Digest(digest), h, nil
		}
	}
	v.stats.cacheMisses.Add(1)
	res, err, _ := v.group.Do("image "+ref.String(), func() (any, error) {
		return v.fetch(ref, ropts)
	})
	if err != nil {
		return name.Digest{}, nil, err
	}
	h := res.(*imageHandle)
	return repo.Digest(h.digest.String()), h, nil
}

// fetch reads an image as Kyverno's FetchImageData does: the descriptor,
// the image of the platform, its manifest and config file.
func (v *Verifier) fetch(ref name.Reference, ropts []remote.Option) (*imageHandle, error) {
	desc, err := remote.Get(ref, ropts...)
	if err != nil {
		return nil, err
	}
	img, err := desc.Image()
	if err != nil {
		return nil, err
	}
	manifest, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	config, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	h := &imageHandle{digest: desc.Digest, desc: desc.Descriptor, data: map[string]any{
		"Manifest":   goValue(manifest),
		"ConfigData": goValue(config),
	}}
	if idx, _ := desc.ImageIndex(); idx != nil {
		if raw, err := idx.RawManifest(); err == nil {
			var m any
			if json.Unmarshal(raw, &m) == nil {
				h.data["ImageIndex"] = m
			}
		}
	}
	now := v.now()
	v.images.Put(ref.Context().Name()+"@"+desc.Digest.String(), h, now)
	if _, ok := ref.(name.Tag); ok {
		v.tags.Put(ref.Context().Name()+":"+ref.Identifier(), desc.Digest.String(), now)
	}
	return h, nil
}

// referrers returns the image's referrers index (read once per digest).
func (v *Verifier) referrers(ctx context.Context, ir *imageRef) (*v1.IndexManifest, error) {
	ir.h.mu.Lock()
	defer ir.h.mu.Unlock()
	if ir.h.referrers != nil {
		return ir.h.referrers, nil
	}
	idx, err := remote.Referrers(ir.ref, ir.withCtx(ctx)...)
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) > MaxReferrers {
		return nil, fmt.Errorf("failed to fetch referrers: to many referrers found, max limit is %d", MaxReferrers)
	}
	ir.h.referrers = m
	return m, nil
}

// referrersOf returns the referrers of an image with an artifact type.
func (v *Verifier) referrersOf(ctx context.Context, ir *imageRef, artifactType string) ([]v1.Descriptor, error) {
	m, err := v.referrers(ctx, ir)
	if err != nil {
		return nil, err
	}
	var out []v1.Descriptor
	for _, d := range m.Manifests {
		if d.ArtifactType == artifactType {
			out = append(out, d)
		}
	}
	return out, nil
}

// referrerData reads a referrer's single layer.
func (v *Verifier) referrerData(ctx context.Context, ir *imageRef, d v1.Descriptor) ([]byte, *v1.Descriptor, error) {
	img, err := remote.Image(ir.ref.Context().Digest(d.Digest.String()), ir.withCtx(ctx)...)
	if err != nil {
		return nil, nil, err
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, nil, err
	}
	if len(m.Layers) != 1 {
		return nil, nil, errors.New("invalid referrer descriptor, must have only one layer")
	}
	layer, err := img.LayerByDigest(m.Layers[0].Digest)
	if err != nil {
		return nil, nil, err
	}
	rc, err := layer.Compressed()
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = rc.Close() }()
	b, err := io.ReadAll(io.LimitReader(rc, v.cfg.MaxResponseBytes))
	if err != nil {
		return nil, nil, err
	}
	return b, &m.Layers[0], nil
}

// ReferrerPayload implements kyvernocel.ImageVerifier.
func (v *Verifier) ReferrerPayload(ctx context.Context, img *kyvernocel.VerifierImage, t string, _ kyvernocel.ImageOptions) ([]byte, error) {
	ir, ok := img.Handle.(*imageRef)
	if !ok {
		return nil, errors.New("not an image of this verifier")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(v.cfg.Timeout))
	defer cancel()
	descs, err := v.referrersOf(ctx, ir, t)
	if err != nil {
		return nil, err
	}
	if len(descs) == 0 {
		return nil, fmt.Errorf("artifact of type %s not found", t)
	}
	b, _, err := v.referrerData(ctx, ir, descs[0])
	return b, err
}

// VerifySignatures implements kyvernocel.ImageVerifier.
func (v *Verifier) VerifySignatures(ctx context.Context, img *kyvernocel.VerifierImage, a kyvernocel.ImageAttestor, _ kyvernocel.ImageOptions) (kyvernocel.Verdict, error) {
	return v.verify(ctx, img, "signature", "", a, func(ctx context.Context, ir *imageRef) (kyvernocel.Verdict, error) {
		switch {
		case a.Spec.Cosign != nil:
			return v.cosignSignatures(ctx, ir, a.Spec.Cosign)
		case a.Spec.Notary != nil:
			return v.notarySignatures(ctx, ir, a.Spec.Notary)
		}
		return kyvernocel.Verdict{Reason: "the attestor is neither cosign nor notary"}, nil
	})
}

// VerifyAttestation implements kyvernocel.ImageVerifier.
func (v *Verifier) VerifyAttestation(ctx context.Context, img *kyvernocel.VerifierImage, att *kyvernoapi.Attestation, a kyvernocel.ImageAttestor, _ kyvernocel.ImageOptions) (kyvernocel.Verdict, error) {
	kind := ""
	switch {
	case att.InToto != nil:
		kind = "intoto:" + att.InToto.Type
	case att.Referrer != nil:
		kind = "referrer:" + att.Referrer.Type
	}
	return v.verify(ctx, img, "attestation", kind, a, func(ctx context.Context, ir *imageRef) (kyvernocel.Verdict, error) {
		switch {
		case a.Spec.Cosign != nil && att.InToto != nil:
			return v.cosignAttestation(ctx, ir, att.InToto.Type, a.Spec.Cosign)
		case a.Spec.Notary != nil && att.Referrer != nil:
			return v.notaryAttestation(ctx, ir, att.Referrer.Type, a.Spec.Notary)
		case a.Spec.Cosign != nil:
			return kyvernocel.Verdict{Reason: "cosgin verifier only supports intoto referrers as attestations"}, nil
		}
		return kyvernocel.Verdict{Reason: "notary verifier only supports oci 1.1 referrers as attestations"}, nil
	})
}

// verify runs a verification once for concurrent callers, under the
// timeout, cached by (image digest, what, attestor content) when it
// verified.
func (v *Verifier) verify(ctx context.Context, img *kyvernocel.VerifierImage, what, qualifier string, a kyvernocel.ImageAttestor, run func(context.Context, *imageRef) (kyvernocel.Verdict, error)) (kyvernocel.Verdict, error) {
	ir, ok := img.Handle.(*imageRef)
	if !ok {
		return kyvernocel.Verdict{}, errors.New("not an image of this verifier")
	}
	key := a.Key
	if key == "" {
		b, _ := json.Marshal(a.Spec)
		key = string(b)
	}
	cacheKey := ir.ref.String() + "\x00" + what + "\x00" + qualifier + "\x00" + key
	if vd, found, fresh := v.verdicts.Get(cacheKey, v.now()); found && fresh {
		v.stats.cacheHits.Add(1)
		return vd, nil
	}
	v.stats.cacheMisses.Add(1)
	res, err, _ := v.group.Do(cacheKey, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(v.cfg.Timeout))
		defer cancel()
		start := v.now()
		v.stats.verifications.Add(1)
		vd, err := run(ctx, ir)
		if err != nil {
			v.stats.errors.Add(1)
			v.log.Warn("verification failed to answer", "image", img.Image, "digest", ir.ref.DigestStr(), "attestor", a.Spec.Name, "what", what, "error", err)
			return nil, err
		}
		if vd.Verified {
			v.verdicts.Put(cacheKey, vd, v.now())
		} else {
			v.stats.failures.Add(1)
		}
		v.log.Debug("verification", "image", img.Image, "digest", ir.ref.DigestStr(), "attestor", a.Spec.Name, "what", what,
			"verified", vd.Verified, "reason", vd.Reason, "duration", v.now().Sub(start))
		return vd, nil
	})
	if err != nil {
		return kyvernocel.Verdict{}, err
	}
	return res.(kyvernocel.Verdict), nil
}

// unavailable says whether an error is the registry's (or the network's)
// failure to answer — a timeout, a refused connection, a 5xx, 429 or
// 401/403 — rather than the absence of what was looked for (a 404: no
// signature) or a verification failure.
func unavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var te *transport.Error
	if errors.As(err, &te) {
		return te.StatusCode != http.StatusNotFound
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) || strings.Contains(err.Error(), "connection refused")
}
