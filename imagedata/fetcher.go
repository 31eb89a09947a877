// Package imagedata reads image metadata from OCI registries for Kyverno's
// image data CEL library (image.GetMetadata), with go-containerregistry, as
// Kyverno 1.19's imagedataloader does: a Fetcher is a
// kyvernocel.ImageDataContext.
//
// It does network I/O, so it lives outside the engine: the server and the
// CLI build a Fetcher from a Config and pass it to the engine inside the
// kyvernocel.Context of a decision (WithFetcher).
package imagedata

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sync/singleflight"

	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/internal/lru"
)

// Options are a Fetcher's collaborators (what is not configuration).
type Options struct {
	// Keychain is consulted first for credentials, before the docker config
	// file of Config.DockerConfig: typically a PullSecretsKeychain of the
	// image pull secrets the server is given. Nil: none.
	Keychain authn.Keychain
	// Transport is the HTTP transport under the Fetcher's own checks
	// (plain HTTP refused, response size bounded). Nil: a transport with
	// go-containerregistry's defaults as Kyverno sets them.
	Transport http.RoundTripper
	// Logger receives a debug record per registry fetch and a warning per
	// failure. Nil: slog.Default().
	Logger *slog.Logger
}

// Fetcher serves image.GetMetadata from OCI registries, with a cache. It is
// safe for concurrent use.
type Fetcher struct {
	cfg      Config
	platform v1.Platform
	insecure map[string]bool
	remote   []remote.Option
	log      *slog.Logger

	content *lru.Cache[*content] // by repository@digest
	tags    *lru.Cache[string]   // repository:tag → digest
	group   singleflight.Group
	now     func() time.Time

	hits, misses, fetches, failures atomic.Int64
}

var _ kyvernocel.ImageDataContext = (*Fetcher)(nil)

// New returns a Fetcher configured by cfg (zero fields take their defaults).
func New(cfg Config, opts Options) (*Fetcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	platform, _ := ParsePlatform(cfg.Platform) // validated
	insecure := make(map[string]bool, len(cfg.InsecureRegistries))
	for _, r := range cfg.InsecureRegistries {
		n, _ := NormalizeRegistry(r) // validated
		insecure[n] = true
	}
	base := opts.Transport
	if base == nil {
		base = newBaseTransport()
	}
	var keychains []authn.Keychain
	if opts.Keychain != nil {
		keychains = append(keychains, opts.Keychain)
	}
	if cfg.DockerConfig != "" {
		keychains = append(keychains, &dockerConfigKeychain{path: cfg.DockerConfig})
	}
	keychain := authn.NewMultiKeychain(keychains...) // anonymous when none resolves
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Fetcher{
		cfg:      cfg,
		platform: platform,
		insecure: insecure,
		remote: []remote.Option{
			remote.WithTransport(&guardTransport{inner: base, insecure: insecure, maxBytes: cfg.MaxResponseBytes}),
			remote.WithAuthFromKeychain(keychain),
			remote.WithPlatform(platform),
			remote.WithUserAgent("arbiter"),
			// Kyverno 1.19's imagedataloader retries these.
			remote.WithRetryStatusCodes(
				http.StatusRequestTimeout,
				http.StatusInternalServerError,
				http.StatusBadGateway,
				http.StatusServiceUnavailable,
				http.StatusGatewayTimeout,
				499, // nginx: client closed request
				522, // Cloudflare: connection timed out
				http.StatusTooManyRequests,
			),
		},
		log:     log.With("component", "imagedata"),
		content: lru.New[*content](cfg.CacheSize, time.Duration(cfg.CacheTTL)),
		tags:    lru.New[string](cfg.CacheSize, time.Duration(cfg.TagTTL)),
		now:     time.Now,
	}, nil
}

// Config returns the Fetcher's configuration, defaults applied.
func (f *Fetcher) Config() Config { return f.cfg }

// Stats are a Fetcher's counters since New.
type Stats struct {
	// Hits are calls answered from the cache alone (a fresh tag and its
	// content, or a digest's content).
	Hits int64
	// Misses are calls that reached the registry (or waited for a call
	// that did).
	Misses int64
	// Fetches are registry fetches made (concurrent calls for one image
	// share one).
	Fetches int64
	// Failures are calls that failed.
	Failures int64
	// Images and Tags are the entries in the caches now.
	Images, Tags int
}

// Stats returns the Fetcher's counters.
func (f *Fetcher) Stats() Stats {
	return Stats{
		Hits: f.hits.Load(), Misses: f.misses.Load(), Fetches: f.fetches.Load(), Failures: f.failures.Load(),
		Images: f.content.Len(), Tags: f.tags.Len(),
	}
}

// content is what a registry says of one repository@digest: everything in
// image data that does not depend on how the image was named. Its values
// are shared by every caller and never modified.
type content struct {
	digest   string         // the digest the reference resolved to (an index's, for an index)
	index    any            // the index manifest as JSON values, nil when not an index
	manifest map[string]any // the platform's image manifest, as Kyverno marshals v1.Manifest
	config   map[string]any // its config file, as Kyverno marshals v1.ConfigFile
}

// GetImageData implements kyvernocel.ImageDataContext: the image data of
// image, shaped as the JSON of Kyverno's imagedataloader.ImageDescriptor
// (image, resolvedImage, registry, repository, identifier, tag or digest,
// imageIndex, manifest, config). The error is go-containerregistry's, as
// Kyverno returns it (the library wraps it as "failed to get image data: …").
//
// The returned map is the caller's; the values under it are shared and must
// not be modified.
func (f *Fetcher) GetImageData(ctx context.Context, image string) (map[string]any, error) {
	ref, err := f.parse(image)
	if err != nil {
		f.failures.Add(1)
		return nil, err
	}
	c, err := f.lookup(ctx, ref)
	if err != nil {
		f.failures.Add(1)
		f.log.Warn("image data fetch failed", "image", image, "error", err)
		return nil, err
	}
	return imageData(image, ref, c), nil
}

// parse parses an image reference as Kyverno does (name.ParseReference's
// defaults: index.docker.io, tag latest), insecure for the insecure
// registries.
func (f *Fetcher) parse(image string) (name.Reference, error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return nil, err
	}
	if f.insecure[ref.Context().RegistryStr()] {
		return name.ParseReference(image, name.Insecure)
	}
	return ref, nil
}

// imageData is the JSON form of Kyverno's ImageDescriptor for image, named
// by ref, with content c (utils.GetValue: marshalled, then decoded into
// map[string]any; omitempty fields left out when empty).
func imageData(image string, ref name.Reference, c *content) map[string]any {
	m := make(map[string]any, 9)
	put := func(k, v string) {
		if v != "" {
			m[k] = v
		}
	}
	repo := ref.Context()
	put("image", image)
	put("registry", repo.RegistryStr())
	put("repository", repo.RepositoryStr())
	put("identifier", ref.Identifier())
	// Kyverno's ParseImageReference: a tag reference has a tag, a digest
	// reference (repo@sha256:…, repo:tag@sha256:… too) a digest. The digest
	// of a tag is the one it resolved to.
	tag, digest := "", c.digest
	if _, ok := ref.(name.Tag); ok {
		tag = ref.Identifier()
	} else {
		digest = ref.Identifier()
	}
	put("tag", tag)
	put("digest", digest)
	if tag != "" {
		put("resolvedImage", fmt.Sprintf("%s:%s@%s", repo.Name(), tag, digest))
	} else {
		put("resolvedImage", fmt.Sprintf("%s@%s", repo.Name(), digest))
	}
	if c.index != nil {
		m["imageIndex"] = c.index
	}
	m["manifest"] = c.manifest
	m["config"] = c.config
	return m
}

// lookup returns the content ref names, from the cache or the registry.
func (f *Fetcher) lookup(ctx context.Context, ref name.Reference) (*content, error) {
	repo := ref.Context().Name()
	now := f.now()
	if d, ok := ref.(name.Digest); ok {
		key := repo + "@" + d.DigestStr()
		if c, found, fresh := f.content.Get(key, now); found && fresh {
			f.hits.Add(1)
			return c, nil
		}
		f.misses.Add(1)
		return f.shared(ctx, "digest "+key, ref, func(ctx context.Context) (*content, error) {
			return f.fetch(ctx, ref)
		})
	}
	tagKey := repo + ":" + ref.Identifier()
	lastDigest, found, fresh := f.tags.Get(tagKey, now)
	if found && fresh {
		if c, found, fresh := f.content.Get(repo+"@"+lastDigest, now); found && fresh {
			f.hits.Add(1)
			return c, nil
		}
	}
	f.misses.Add(1)
	return f.shared(ctx, "tag "+tagKey, ref, func(ctx context.Context) (*content, error) {
		if found {
			// The tag was seen: a HEAD request tells whether it still
			// names a digest whose content is cached.
			if d, err := remote.Head(ref, f.options(ctx)...); err == nil {
				if c, ok, fresh := f.content.Get(repo+"@"+d.Digest.String(), f.now()); ok && fresh {
					f.tags.Put(tagKey, d.Digest.String(), f.now())
					f.log.Debug("image tag revalidated", "image", ref.String(), "digest", d.Digest.String())
					return c, nil
				}
			}
		}
		c, err := f.fetch(ctx, ref)
		if err != nil {
			return nil, err
		}
		f.tags.Put(tagKey, c.digest, f.now())
		return c, nil
	})
}

// shared runs fetch once for concurrent callers of one key, under the
// Fetcher's timeout and a context that no single caller's cancellation
// ends; each caller waits as long as its own context allows.
func (f *Fetcher) shared(ctx context.Context, key string, ref name.Reference, fetch func(context.Context) (*content, error)) (*content, error) {
	ch := f.group.DoChan(key, func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(f.cfg.Timeout))
		defer cancel()
		c, err := fetch(fctx)
		if err != nil && fctx.Err() != nil && !errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (timeout %s): %w", context.DeadlineExceeded, time.Duration(f.cfg.Timeout), err)
		}
		return c, err
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*content), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("image data of %s: %w", ref, context.Cause(ctx))
	}
}

func (f *Fetcher) options(ctx context.Context) []remote.Option {
	return append(f.remote[:len(f.remote):len(f.remote)], remote.WithContext(ctx))
}

// fetch reads the content of ref from its registry as Kyverno's
// FetchImageData does: the manifest (or index) ref names, the image of the
// configured platform in an index, its manifest and config file, and the
// index itself. (Kyverno gets the descriptor twice, through remote.Image
// and remote.Get; remote.Image is remote.Get then Descriptor.Image, so once
// is the same.) The content is cached under the digest it resolved to.
func (f *Fetcher) fetch(ctx context.Context, ref name.Reference) (*content, error) {
	start := f.now()
	f.fetches.Add(1)
	desc, err := remote.Get(ref, f.options(ctx)...)
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
	c := &content{digest: desc.Digest.String()}
	if c.manifest, err = jsonObject(manifest); err != nil {
		return nil, err
	}
	if c.config, err = jsonObject(config); err != nil {
		return nil, err
	}
	// An error means no image index.
	if idx, _ := desc.ImageIndex(); idx != nil {
		raw, err := idx.RawManifest()
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, &c.index); err != nil {
			return nil, err
		}
	}
	f.content.Put(ref.Context().Name()+"@"+c.digest, c, f.now())
	f.log.Debug("image data fetched", "image", ref.String(), "digest", c.digest,
		"index", c.index != nil, "duration", f.now().Sub(start))
	return c, nil
}

// jsonObject is v as JSON values.
func jsonObject(v any) (map[string]any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// WithFetcher returns c with its image data served by f (c's other
// libraries unchanged). A nil c is kyvernocel.Offline.
func WithFetcher(c kyvernocel.Context, f kyvernocel.ImageDataContext) kyvernocel.Context {
	if c == nil {
		c = kyvernocel.Offline
	}
	return withImageData{Context: c, f: f}
}

type withImageData struct {
	kyvernocel.Context
	f kyvernocel.ImageDataContext
}

func (w withImageData) GetImageData(ctx context.Context, image string) (map[string]any, error) {
	return w.f.GetImageData(ctx, image)
}
