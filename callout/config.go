package callout

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
)

// Defaults of Config.
const (
	// DefaultTimeout bounds a call that Config.Timeout leaves unset.
	DefaultTimeout = 5 * time.Second
	// DefaultMaxResponseBytes bounds a response body that
	// Config.MaxResponseBytes leaves unset (1 MiB).
	DefaultMaxResponseBytes = 1 << 20
	// MaxRedirects is the number of redirects a call follows (net/http's
	// and Kyverno's limit); every one is checked against the allowlist.
	MaxRedirects = 10
)

// Config is how the server calls out for policies: the limits of every call
// and what may be called. Nothing is allowed by default. It is meant to be
// a section of the server's configuration file (JSON, or YAML through
// sigs.k8s.io/yaml or go.yaml.in/yaml/v3); Validate names the offending
// field, relative to the section.
type Config struct {
	// Timeout bounds each call from its start to the end of its response
	// body, redirects included (default DefaultTimeout). The decision's own
	// deadline, when earlier, ends it first. A duration string ("750ms",
	// "5s").
	Timeout Duration `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	// MaxResponseBytes bounds the body of each response: a longer one is an
	// error naming the URL and the limit (default DefaultMaxResponseBytes).
	MaxResponseBytes int64 `json:"maxResponseBytes,omitempty" yaml:"maxResponseBytes,omitempty"`
	// AllowedURLPrefixes are what http.Get and http.Post may call, and
	// where their redirects may lead: "scheme://host[:port][/path]", with
	// Kyverno's --httpAllowlist matching (same scheme, same host — case and
	// a trailing dot aside — same port, the scheme's default when omitted,
	// and a path equal to the prefix's or below it at a "/" boundary, after
	// "." and ".." are resolved). Empty: http.* calls nothing.
	AllowedURLPrefixes []string `json:"allowedURLPrefixes,omitempty" yaml:"allowedURLPrefixes,omitempty"`
	// AllowedResources are what resource.Post may create:
	// "resource[.group][/subresource]", e.g.
	// "subjectaccessreviews.authorization.k8s.io",
	// "tokenreviews.authentication.k8s.io", "serviceaccounts/token" (see
	// ReviewResources). Empty: resource.Post creates nothing.
	AllowedResources []string `json:"allowedResources,omitempty" yaml:"allowedResources,omitempty"`
	// AllowHTTPInNamespacedPolicies lets NamespacedValidatingPolicies and
	// NamespacedMutatingPolicies call http.Get and http.Post, as Kyverno's
	// --allowHTTPInNamespacedPolicies (off by default, CVE-2026-4789). Off,
	// their calls fail with Kyverno's "http calls are not allowed in
	// namespaced policies" — and a server should refuse such policies at
	// load too (engine.Options.RefuseNamespacedHTTP).
	AllowHTTPInNamespacedPolicies bool `json:"allowHTTPInNamespacedPolicies,omitempty" yaml:"allowHTTPInNamespacedPolicies,omitempty"`
	// BlockedCIDRs are addresses no call may connect to, even to a host
	// the allowlist names (defence in depth against a name that resolves
	// somewhere it should not: a cloud metadata service, the loopback
	// interface): CIDR ranges or single IP addresses, checked on the
	// address actually dialled. Empty by default: the allowlist decides.
	BlockedCIDRs []string `json:"blockedCIDRs,omitempty" yaml:"blockedCIDRs,omitempty"`
}

// ReviewResources are the resources Kubernetes serves as reviews — a
// create that stores nothing and answers a question — which are what
// policies use resource.Post for. They are not allowed by default: list the
// ones the server's policies need in Config.AllowedResources.
var ReviewResources = []string{
	"subjectaccessreviews.authorization.k8s.io",
	"localsubjectaccessreviews.authorization.k8s.io",
	"selfsubjectaccessreviews.authorization.k8s.io",
	"selfsubjectrulesreviews.authorization.k8s.io",
	"tokenreviews.authentication.k8s.io",
	"selfsubjectreviews.authentication.k8s.io",
}

// WithDefaults returns c with its unset limits set to the defaults.
func (c Config) WithDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = Duration(DefaultTimeout)
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = DefaultMaxResponseBytes
	}
	return c
}

// Validate checks c (its unset limits are the defaults). The error names
// the field: "allowedURLPrefixes[1]: ...".
func (c Config) Validate() error {
	_, err := c.compile()
	return err
}

// rules are a validated Config in the form calls are checked against.
type rules struct {
	timeout            time.Duration
	maxResponseBytes   int64
	prefixes           []URLPrefix
	resources          map[string]bool
	allowNamespaceHTTP bool
	blocked            []netip.Prefix
}

func (c Config) compile() (*rules, error) {
	c = c.WithDefaults()
	r := &rules{
		timeout:            time.Duration(c.Timeout),
		maxResponseBytes:   c.MaxResponseBytes,
		resources:          map[string]bool{},
		allowNamespaceHTTP: c.AllowHTTPInNamespacedPolicies,
	}
	if r.timeout < 0 {
		return nil, fmt.Errorf("timeout: %s is negative", r.timeout)
	}
	if r.maxResponseBytes < 0 {
		return nil, fmt.Errorf("maxResponseBytes: %d is negative", r.maxResponseBytes)
	}
	for i, s := range c.AllowedURLPrefixes {
		p, err := ParseURLPrefix(s)
		if err != nil {
			return nil, fmt.Errorf("allowedURLPrefixes[%d]: %w", i, err)
		}
		r.prefixes = append(r.prefixes, p)
	}
	for i, s := range c.AllowedResources {
		k, err := ParseResource(s)
		if err != nil {
			return nil, fmt.Errorf("allowedResources[%d]: %w", i, err)
		}
		r.resources[k.String()] = true
	}
	for i, s := range c.BlockedCIDRs {
		p, err := parseCIDR(s)
		if err != nil {
			return nil, fmt.Errorf("blockedCIDRs[%d]: %w", i, err)
		}
		r.blocked = append(r.blocked, p)
	}
	return r, nil
}

// Duration is a time.Duration written as a duration string ("5s") in
// JSON and YAML.
type Duration time.Duration

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(time.Duration(d).String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration (e.g. \"500ms\", \"5s\")", b)
	}
	*d = Duration(v)
	return nil
}

// String implements fmt.Stringer.
func (d Duration) String() string { return time.Duration(d).String() }

// ---- URL prefixes ----

// URLPrefix is an allowlist entry: a scheme, a host and port, and a path
// ("" for any path).
type URLPrefix struct {
	scheme, host, port, path string
}

// String returns the prefix as it matches.
func (p URLPrefix) String() string {
	return p.scheme + "://" + net.JoinHostPort(p.host, p.port) + p.path
}

// ParseURLPrefix parses an allowlist entry: an absolute http or https URL
// with a host and, optionally, a port and a path; no user information,
// query or fragment.
func ParseURLPrefix(s string) (URLPrefix, error) {
	u, err := url.Parse(s)
	if err != nil {
		return URLPrefix{}, fmt.Errorf("%q is not a URL: %v", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return URLPrefix{}, fmt.Errorf("%q must start with http:// or https://", s)
	}
	if u.Opaque != "" || u.Host == "" || u.Hostname() == "" {
		return URLPrefix{}, fmt.Errorf("%q has no host (write scheme://host[:port][/path])", s)
	}
	if u.User != nil {
		return URLPrefix{}, fmt.Errorf("%q has user information: credentials go in headers", s)
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.ContainsAny(s, "?#") {
		return URLPrefix{}, fmt.Errorf("%q has a query or a fragment: a prefix is scheme://host[:port][/path]", s)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return URLPrefix{}, fmt.Errorf("%q has an invalid port %q", s, p)
		}
	}
	pre := URLPrefix{scheme: u.Scheme, host: normalizeHost(u.Hostname()), port: effectivePort(u)}
	if pre.host == "" {
		return URLPrefix{}, fmt.Errorf("%q has no host (write scheme://host[:port][/path])", s)
	}
	if u.Path != "" && u.Path != "/" {
		pre.path = cleanPath(u.Path)
		if pre.path == "/" {
			pre.path = ""
		}
	}
	return pre, nil
}

// Match reports whether u is under the prefix, as Kyverno's
// matchesAllowlist (kyverno/sdk extensions/cel/libs/http/http.go).
func (p URLPrefix) Match(u *url.URL) bool {
	if u.Scheme != p.scheme || normalizeHost(u.Hostname()) != p.host || effectivePort(u) != p.port {
		return false
	}
	if p.path == "" {
		return true
	}
	rp := cleanPath(u.Path)
	return rp == p.path || strings.HasPrefix(rp, p.path) && rp[len(p.path)] == '/'
}

// normalizeHost lowercases a host name and strips its trailing dots (DNS
// names are case-insensitive; "example.com." is "example.com").
func normalizeHost(h string) string {
	return strings.ToLower(strings.TrimRight(h, "."))
}

// effectivePort is the URL's port, or its scheme's default.
func effectivePort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch u.Scheme {
	case "https":
		return "443"
	case "http":
		return "80"
	}
	return ""
}

// cleanPath canonicalizes a path for comparison: rooted, "." and ".."
// resolved, duplicate and trailing slashes removed.
func cleanPath(p string) string {
	return path.Clean("/" + strings.TrimPrefix(p, "/"))
}

// ---- resources ----

// Resource names a resource (and subresource) of a group, as
// AllowedResources lists them: "resource[.group][/subresource]".
type Resource struct {
	Group, Resource, Subresource string
}

// String returns "resource[.group][/subresource]".
func (r Resource) String() string {
	s := r.Resource
	if r.Group != "" {
		s += "." + r.Group
	}
	if r.Subresource != "" {
		s += "/" + r.Subresource
	}
	return s
}

// ParseResource parses an AllowedResources entry:
// "resource[.group][/subresource]", lowercase, with a DNS-label resource
// and subresource and a DNS-subdomain group ("" for the core group).
func ParseResource(s string) (Resource, error) {
	var r Resource
	rg, sub, hasSub := strings.Cut(s, "/")
	if hasSub {
		if !isLabel(sub) {
			return Resource{}, fmt.Errorf("%q: subresource %q is not a lowercase name", s, sub)
		}
		r.Subresource = sub
	}
	var dot bool
	r.Resource, r.Group, dot = strings.Cut(rg, ".")
	if !isLabel(r.Resource) {
		return Resource{}, fmt.Errorf("%q: resource %q is not a lowercase plural name (write resource[.group][/subresource], e.g. subjectaccessreviews.authorization.k8s.io)", s, r.Resource)
	}
	if dot {
		for l := range strings.SplitSeq(r.Group, ".") {
			if !isLabel(l) {
				return Resource{}, fmt.Errorf("%q: group %q is not a DNS name", s, r.Group)
			}
		}
	}
	return r, nil
}

// isLabel reports whether s is a lowercase DNS label (RFC 1123).
func isLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// ---- blocked addresses ----

func parseCIDR(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR range: %v", s, err)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is neither a CIDR range nor an IP address", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// blockedBy returns the blocked range holding addr ("host:port"), if any.
func (r *rules) blockedBy(addr string) (netip.Prefix, netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		// not an IP address: a dial is always to one
		return netip.Prefix{}, netip.Addr{}, false
	}
	a := ap.Addr()
	for _, c := range [2]netip.Addr{a, a.Unmap()} {
		for _, p := range r.blocked {
			if p.Contains(c) {
				return p, a, true
			}
		}
	}
	return netip.Prefix{}, netip.Addr{}, false
}

var errNoAllowlist = errors.New("no allowed URL prefixes are configured")
