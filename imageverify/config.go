package imageverify

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/arbiter-pdp/arbiter/imagedata"
)

// Defaults of Config's fields.
const (
	DefaultTimeout          = 30 * time.Second
	DefaultCacheTTL         = 30 * time.Minute
	DefaultTagTTL           = 30 * time.Second
	DefaultCacheSize        = 1000
	DefaultMaxConcurrent    = 16
	DefaultMaxResponseBytes = 10 << 20 // 10 MiB, Kyverno's bound on referrer payloads
	DefaultPlatform         = "linux/amd64"
	// MaxReferrers bounds the referrers of one digest (Kyverno's).
	MaxReferrers = 50
)

// Config configures a Verifier. Its zero value is valid: every field left
// zero takes its default. It decodes from YAML and JSON (durations as Go
// duration strings: "10s").
//
// Trust roots are never fetched: keyless cosign attestors, and key
// attestors that check the transparency log, verify against the Sigstore
// trusted root of TrustedRoot (or the attestor's own trustedRoot value);
// without one they do not verify. This is a deliberate difference from
// Kyverno, which initialises the public Sigstore TUF repository over the
// network for them.
type Config struct {
	// Timeout bounds one call of the verifier — an image read, or the
	// verification of one attestor on one image — registry requests and
	// retries included (default 30s).
	Timeout Duration `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	// CacheTTL is how long an image's metadata (by digest) and a
	// successful verification (by image digest and the attestor's content)
	// are served from memory (default 30m).
	CacheTTL Duration `json:"cacheTTL,omitempty" yaml:"cacheTTL,omitempty"`
	// TagTTL is how long a tag's resolution to a digest is trusted (default
	// 30s).
	TagTTL Duration `json:"tagTTL,omitempty" yaml:"tagTTL,omitempty"`
	// CacheSize bounds the images, tags and verifications held in memory,
	// each, least recently used out first (default 1000).
	CacheSize int `json:"cacheSize,omitempty" yaml:"cacheSize,omitempty"`
	// MaxConcurrent bounds the registry requests in flight, over every
	// caller (default 16).
	MaxConcurrent int `json:"maxConcurrent,omitempty" yaml:"maxConcurrent,omitempty"`
	// MaxResponseBytes bounds every registry response body (default 10 MiB).
	MaxResponseBytes int64 `json:"maxResponseBytes,omitempty" yaml:"maxResponseBytes,omitempty"`
	// InsecureRegistries are the registries (host[:port]) that may be
	// reached over plain HTTP; every other one over HTTPS only, unless a
	// policy's credentials.allowInsecureRegistry says otherwise for its own
	// images.
	InsecureRegistries []string `json:"insecureRegistries,omitempty" yaml:"insecureRegistries,omitempty"`
	// DockerConfig is the path of a docker config.json whose credentials
	// are used (read at each lookup). "" means none (anonymous access).
	DockerConfig string `json:"dockerConfig,omitempty" yaml:"dockerConfig,omitempty"`
	// Platform is the platform of an image index whose manifest and config
	// are read (default linux/amd64).
	Platform string `json:"platform,omitempty" yaml:"platform,omitempty"`
	// TrustedRoot is the path of a Sigstore trusted root (the
	// trusted_root.json of sigstore-go: Fulcio CAs, Rekor and CT log keys,
	// TSAs) for keyless cosign attestors and transparency-log checks.
	TrustedRoot string `json:"trustedRoot,omitempty" yaml:"trustedRoot,omitempty"`
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = Duration(DefaultTimeout)
	}
	if c.CacheTTL == 0 {
		c.CacheTTL = Duration(DefaultCacheTTL)
	}
	if c.TagTTL == 0 {
		c.TagTTL = Duration(DefaultTagTTL)
	}
	if c.CacheSize == 0 {
		c.CacheSize = DefaultCacheSize
	}
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = DefaultMaxConcurrent
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if c.Platform == "" {
		c.Platform = DefaultPlatform
	}
	return c
}

// Validate checks c; the errors name the field, as in a config file.
func (c Config) Validate() error {
	var errs []error
	for _, d := range []struct {
		field string
		v     Duration
	}{{"timeout", c.Timeout}, {"cacheTTL", c.CacheTTL}, {"tagTTL", c.TagTTL}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s: %s is negative", d.field, time.Duration(d.v)))
		}
	}
	if c.CacheSize < 0 {
		errs = append(errs, fmt.Errorf("cacheSize: %d is negative", c.CacheSize))
	}
	if c.MaxConcurrent < 0 {
		errs = append(errs, fmt.Errorf("maxConcurrent: %d is negative", c.MaxConcurrent))
	}
	if c.MaxResponseBytes < 0 {
		errs = append(errs, fmt.Errorf("maxResponseBytes: %d is negative", c.MaxResponseBytes))
	}
	for i, r := range c.InsecureRegistries {
		if _, err := imagedata.NormalizeRegistry(r); err != nil {
			errs = append(errs, fmt.Errorf("insecureRegistries[%d]: %w", i, err))
		}
	}
	if c.Platform != "" {
		if _, err := imagedata.ParsePlatform(c.Platform); err != nil {
			errs = append(errs, fmt.Errorf("platform: %w", err))
		}
	}
	for _, f := range []struct{ field, path string }{{"dockerConfig", c.DockerConfig}, {"trustedRoot", c.TrustedRoot}} {
		if f.path == "" {
			continue
		}
		if fi, err := os.Stat(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.field, err))
		} else if fi.IsDir() {
			errs = append(errs, fmt.Errorf("%s: %s is a directory", f.field, f.path))
		}
	}
	return errors.Join(errs...)
}

// Duration is a time.Duration that reads and writes as a Go duration
// string ("10s") in JSON and YAML (imagedata's).
type Duration = imagedata.Duration
