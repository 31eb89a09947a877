package callout

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"
)

func TestConfigDefaults(t *testing.T) {
	c := Config{}.WithDefaults()
	if time.Duration(c.Timeout) != DefaultTimeout || c.MaxResponseBytes != DefaultMaxResponseBytes {
		t.Errorf("defaults: %+v", c)
	}
	c = Config{Timeout: Duration(time.Second), MaxResponseBytes: 10}.WithDefaults()
	if time.Duration(c.Timeout) != time.Second || c.MaxResponseBytes != 10 {
		t.Errorf("set values replaced: %+v", c)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("the zero Config: %v", err)
	}
}

// TestConfigValidate: every error names the field (and the index) it is
// about.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string // "" valid
	}{
		{"valid", Config{
			Timeout: Duration(2 * time.Second), MaxResponseBytes: 4096,
			AllowedURLPrefixes: []string{"https://api.example.com", "http://10.0.0.1:8080/v1/", "https://[::1]:8443/x"},
			AllowedResources:   append([]string{"serviceaccounts/token", "deployments.apps/scale"}, ReviewResources...),
			BlockedCIDRs:       []string{"169.254.169.254", "10.0.0.0/8", "fd00:ec2::254/128"},
		}, ""},
		{"negative timeout", Config{Timeout: Duration(-time.Second)}, "timeout: -1s is negative"},
		{"negative size", Config{MaxResponseBytes: -1}, "maxResponseBytes: -1 is negative"},
		{"scheme", Config{AllowedURLPrefixes: []string{"https://a", "ftp://files.example.com"}}, `allowedURLPrefixes[1]: "ftp://files.example.com" must start with http:// or https://`},
		{"no scheme", Config{AllowedURLPrefixes: []string{"api.example.com/v1"}}, `allowedURLPrefixes[0]: "api.example.com/v1" must start with http:// or https://`},
		{"no host", Config{AllowedURLPrefixes: []string{"https:///v1"}}, `allowedURLPrefixes[0]: "https:///v1" has no host`},
		{"opaque", Config{AllowedURLPrefixes: []string{"https:api.example.com"}}, `allowedURLPrefixes[0]: "https:api.example.com" has no host`},
		{"user", Config{AllowedURLPrefixes: []string{"https://u:p@api.example.com"}}, `allowedURLPrefixes[0]: "https://u:p@api.example.com" has user information`},
		{"query", Config{AllowedURLPrefixes: []string{"https://api.example.com/v1?x=1"}}, `allowedURLPrefixes[0]: "https://api.example.com/v1?x=1" has a query or a fragment`},
		{"empty query", Config{AllowedURLPrefixes: []string{"https://api.example.com/v1?"}}, `has a query or a fragment`},
		{"fragment", Config{AllowedURLPrefixes: []string{"https://api.example.com/#x"}}, `has a query or a fragment`},
		{"port", Config{AllowedURLPrefixes: []string{"https://api.example.com:0"}}, `has an invalid port "0"`},
		{"bad url", Config{AllowedURLPrefixes: []string{"https://a b"}}, `allowedURLPrefixes[0]: "https://a b" is not a URL`},
		{"resource case", Config{AllowedResources: []string{"SubjectAccessReviews.authorization.k8s.io"}}, `allowedResources[0]: "SubjectAccessReviews.authorization.k8s.io": resource "SubjectAccessReviews" is not a lowercase plural name`},
		{"resource empty", Config{AllowedResources: []string{""}}, `allowedResources[0]: "": resource "" is not`},
		{"group", Config{AllowedResources: []string{"tokenreviews.authentication..k8s.io"}}, `allowedResources[0]: "tokenreviews.authentication..k8s.io": group "authentication..k8s.io" is not a DNS name`},
		{"subresource", Config{AllowedResources: []string{"pods/"}}, `allowedResources[0]: "pods/": subresource "" is not a lowercase name`},
		{"cidr", Config{BlockedCIDRs: []string{"10.0.0.0/33"}}, `blockedCIDRs[0]: "10.0.0.0/33" is not a CIDR range`},
		{"host in cidrs", Config{BlockedCIDRs: []string{"metadata.google.internal"}}, `blockedCIDRs[0]: "metadata.google.internal" is neither a CIDR range nor an IP address`},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.err) && !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
		if _, nerr := New(tc.cfg, Options{}); (nerr == nil) != (err == nil) {
			t.Errorf("%s: New %v, Validate %v", tc.name, nerr, err)
		}
	}
}

const configYAML = `timeout: 750ms
maxResponseBytes: 65536
allowedURLPrefixes:
- https://api.example.com/v1/
allowedResources:
- subjectaccessreviews.authorization.k8s.io
allowHTTPInNamespacedPolicies: true
blockedCIDRs: [169.254.169.254/32]
`

// TestConfigDecode: the section reads from YAML (both YAML libraries of
// the module) and JSON, and writes back the same.
func TestConfigDecode(t *testing.T) {
	want := Config{
		Timeout:                       Duration(750 * time.Millisecond),
		MaxResponseBytes:              65536,
		AllowedURLPrefixes:            []string{"https://api.example.com/v1/"},
		AllowedResources:              []string{"subjectaccessreviews.authorization.k8s.io"},
		AllowHTTPInNamespacedPolicies: true,
		BlockedCIDRs:                  []string{"169.254.169.254/32"},
	}
	eq := func(name string, got Config) {
		t.Helper()
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(want)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: %s, want %s", name, a, b)
		}
	}
	var c1 Config
	if err := sigsyaml.UnmarshalStrict([]byte(configYAML), &c1); err != nil {
		t.Fatal(err)
	}
	eq("sigs.k8s.io/yaml", c1)
	var c2 Config
	if err := yaml.Unmarshal([]byte(configYAML), &c2); err != nil {
		t.Fatal(err)
	}
	eq("yaml.v3", c2)
	js, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"timeout":"750ms"`) {
		t.Errorf("JSON: %s", js)
	}
	var c3 Config
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c3); err != nil {
		t.Fatal(err)
	}
	eq("JSON", c3)
	out, err := yaml.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var c4 Config
	if err := yaml.Unmarshal(out, &c4); err != nil {
		t.Fatal(err)
	}
	eq("yaml.v3 round trip", c4)

	var bad Config
	err = json.Unmarshal([]byte(`{"timeout": "5 seconds"}`), &bad)
	if err == nil || !strings.Contains(err.Error(), `"5 seconds" is not a duration`) {
		t.Errorf("bad duration: %v", err)
	}
	if err := json.Unmarshal([]byte(`{"timeout": 5}`), &bad); err == nil {
		t.Errorf("a number of nanoseconds is accepted as a timeout")
	}
}

// TestURLPrefixMatch: Kyverno's matching of --httpAllowlist entries
// (kyverno/sdk extensions/cel/libs/http/http.go matchesAllowlist, and the
// cases of its tests).
func TestURLPrefixMatch(t *testing.T) {
	for _, tc := range []struct {
		prefix, url string
		want        bool
	}{
		{"https://api.example.com", "https://api.example.com/anything?q=1", true},
		{"https://api.example.com", "https://api.example.com", true},
		{"https://api.example.com/", "https://api.example.com/x", true},
		{"https://api.example.com", "http://api.example.com/", false},
		{"https://api.example.com", "https://api.example.com.evil.com/", false},
		{"https://api.example.com", "https://evil.com/api.example.com", false},
		{"https://api.example.com", "https://api.example.com@evil.com/", false},
		{"https://api.example.com", "https://API.Example.COM./x", true},
		{"https://api.example.com.", "https://api.example.com/x", true},
		{"https://api.example.com", "https://api.example.com:443/x", true},
		{"https://api.example.com:443", "https://api.example.com/x", true},
		{"https://api.example.com", "https://api.example.com:8443/x", false},
		{"http://api.example.com:80/", "http://api.example.com/x", true},
		{"https://api.example.com/v1", "https://api.example.com/v1", true},
		{"https://api.example.com/v1", "https://api.example.com/v1/", true},
		{"https://api.example.com/v1", "https://api.example.com/v1/users", true},
		{"https://api.example.com/v1/", "https://api.example.com/v1", true},
		{"https://api.example.com/v1", "https://api.example.com/v10/users", false},
		{"https://api.example.com/v1", "https://api.example.com/v1/../admin", false},
		{"https://api.example.com/v1", "https://api.example.com/v1/%2e%2e/admin", false},
		{"https://api.example.com/v1", "https://api.example.com/v1/..%2fadmin", false},
		{"https://api.example.com/v1", "https://api.example.com//v1/x", true},
		{"https://api.example.com/v1", "https://api.example.com/V1/x", false},
		{"https://api.example.com/v1/../v2", "https://api.example.com/v2/x", true},
		{"http://[::1]:8080/", "http://[::1]:8080/x", true},
		{"http://[::1]:8080/", "http://[::2]:8080/x", false},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8081/", false},
	} {
		p, err := ParseURLPrefix(tc.prefix)
		if err != nil {
			t.Fatalf("%s: %v", tc.prefix, err)
		}
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if got := p.Match(u); got != tc.want {
			t.Errorf("%s matches %s: %v, want %v", tc.prefix, tc.url, got, tc.want)
		}
	}
}

func TestParseResource(t *testing.T) {
	for in, want := range map[string]Resource{
		"configmaps":            {Resource: "configmaps"},
		"serviceaccounts/token": {Resource: "serviceaccounts", Subresource: "token"},
		"subjectaccessreviews.authorization.k8s.io": {Group: "authorization.k8s.io", Resource: "subjectaccessreviews"},
		"deployments.apps/scale":                    {Group: "apps", Resource: "deployments", Subresource: "scale"},
	} {
		got, err := ParseResource(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("%s: %+v %v (%s)", in, got, err, got.String())
		}
	}
	for _, in := range []string{"", "/token", "pods//x", "pods/a/b", "Pods", "pods.", "pods.-apps", "pods.apps/"} {
		if r, err := ParseResource(in); err == nil {
			t.Errorf("%q: accepted as %+v", in, r)
		}
	}
}
