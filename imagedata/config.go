package imagedata

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Defaults of Config's fields.
const (
	DefaultTimeout          = 10 * time.Second
	DefaultCacheTTL         = 30 * time.Minute
	DefaultTagTTL           = 30 * time.Second
	DefaultCacheSize        = 1000
	DefaultMaxResponseBytes = 4 << 20 // 4 MiB
	DefaultPlatform         = "linux/amd64"
)

// Config configures a Fetcher. Its zero value is valid: every field left
// zero takes its default (WithDefaults). It decodes from JSON and YAML
// (durations as Go duration strings: "10s", "1m30s").
type Config struct {
	// Timeout bounds one image.GetMetadata call that reaches the registry:
	// the token exchange, the manifest(s) and the config blob, retries
	// included (default 10s).
	Timeout Duration `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	// CacheTTL is how long the metadata of an image, keyed by repository
	// and digest, is served from memory (default 30m). Content by digest
	// never changes; the TTL bounds how long a revoked credential still
	// reads cached data.
	CacheTTL Duration `json:"cacheTTL,omitempty" yaml:"cacheTTL,omitempty"`
	// TagTTL is how long a tag's resolution to a digest is trusted (default
	// 30s). After it, the tag is checked again with a HEAD request; the
	// metadata is fetched again only when the digest changed.
	TagTTL Duration `json:"tagTTL,omitempty" yaml:"tagTTL,omitempty"`
	// CacheSize bounds the number of images (and, apart, of tags) held in
	// memory, least recently used first out (default 1000).
	CacheSize int `json:"cacheSize,omitempty" yaml:"cacheSize,omitempty"`
	// MaxResponseBytes bounds the body of every registry response (a
	// manifest, an index, a config blob, a token); a larger one fails the
	// call (default 4 MiB).
	MaxResponseBytes int64 `json:"maxResponseBytes,omitempty" yaml:"maxResponseBytes,omitempty"`
	// InsecureRegistries are the registries (host or host:port, as in an
	// image reference) that may be reached over plain HTTP. Every other
	// registry is reached over HTTPS only, loopback and private addresses
	// included (go-containerregistry would fall back to HTTP for those).
	InsecureRegistries []string `json:"insecureRegistries,omitempty" yaml:"insecureRegistries,omitempty"`
	// DockerConfig is the path of a docker config file (config.json: auths,
	// credHelpers, credsStore) whose credentials are used as
	// authn.DefaultKeychain uses $HOME/.docker/config.json. Read at each
	// credential lookup, so a rotated file is picked up. "" means none.
	DockerConfig string `json:"dockerConfig,omitempty" yaml:"dockerConfig,omitempty"`
	// Platform is the platform whose manifest is read from an image index,
	// os/arch[/variant] (default linux/amd64, go-containerregistry's and so
	// Kyverno's).
	Platform string `json:"platform,omitempty" yaml:"platform,omitempty"`
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
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if c.Platform == "" {
		c.Platform = DefaultPlatform
	}
	return c
}

// Validate checks c (zero fields are valid: they take their defaults). The
// errors name the field, as in a config file.
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
	if c.MaxResponseBytes < 0 {
		errs = append(errs, fmt.Errorf("maxResponseBytes: %d is negative", c.MaxResponseBytes))
	}
	for i, r := range c.InsecureRegistries {
		if _, err := NormalizeRegistry(r); err != nil {
			errs = append(errs, fmt.Errorf("insecureRegistries[%d]: %w", i, err))
		}
	}
	if c.Platform != "" {
		if _, err := ParsePlatform(c.Platform); err != nil {
			errs = append(errs, fmt.Errorf("platform: %w", err))
		}
	}
	if c.DockerConfig != "" {
		if fi, err := os.Stat(c.DockerConfig); err != nil {
			errs = append(errs, fmt.Errorf("dockerConfig: %w", err))
		} else if fi.IsDir() {
			errs = append(errs, fmt.Errorf("dockerConfig: %s is a directory, not a config.json file", c.DockerConfig))
		}
	}
	return errors.Join(errs...)
}

// NormalizeRegistry returns the registry name of an insecureRegistries
// entry as image references spell it (docker.io is index.docker.io).
func NormalizeRegistry(s string) (string, error) {
	if s == "" {
		return "", errors.New("empty registry name")
	}
	if strings.Contains(s, "://") || strings.ContainsAny(s, "/@") {
		return "", fmt.Errorf("%q is not a registry host[:port] (no scheme, path or credentials)", s)
	}
	r, err := name.NewRegistry(s, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("%q: %w", s, err)
	}
	return r.RegistryStr(), nil
}

// ParsePlatform parses os/arch[/variant] (the platform of an image index).
func ParsePlatform(s string) (v1.Platform, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" || (len(parts) == 3 && parts[2] == "") {
		return v1.Platform{}, fmt.Errorf("%q is not os/arch[/variant] (e.g. linux/amd64, linux/arm64/v8)", s)
	}
	p := v1.Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	return p, nil
}

// Duration is a time.Duration that reads and writes as a Go duration string
// ("10s") in JSON and YAML.
type Duration time.Duration

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(time.Duration(d).String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("want a duration such as \"10s\" or \"1m30s\": %w", err)
	}
	*d = Duration(v)
	return nil
}
