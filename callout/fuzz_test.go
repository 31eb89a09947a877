package callout

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzURLPrefix: a parsed prefix prints as a prefix that parses to
// itself and matches the URLs below it; whether a URL matches does not
// depend on its query or fragment, nor on printing and parsing it again
// (what is checked is what is sent); a match is always on the prefix's
// scheme, host and port, and under its path after dot segments are
// resolved.
func FuzzURLPrefix(f *testing.F) {
	for _, s := range [][2]string{
		{"https://api.example.com", "https://api.example.com/x?y=1#z"},
		{"https://api.example.com/v1", "https://api.example.com/v1/../admin"},
		{"http://[::1]:8080/a/", "http://[::1]:8080/a/%2e%2e/b"},
		{"https://API.example.com./v1/", "https://api.example.com:443//v1//x"},
		{"http://127.0.0.1:80", "http://127.0.0.1/"},
		{"https://a/v1", "https://a/v10"},
		{"https://a", "https://a@b/"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, prefix, raw string) {
		p, err := ParseURLPrefix(prefix)
		if err != nil {
			return
		}
		again, err := ParseURLPrefix(p.String())
		if err != nil || again != p {
			t.Fatalf("%q → %q → %+v, %v", prefix, p.String(), again, err)
		}
		below, err := url.Parse(p.String() + "/below")
		if err != nil || !p.Match(below) {
			t.Fatalf("%q does not match %s/below: %v", prefix, p.String(), err)
		}
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		m := p.Match(u)
		bare := *u
		bare.RawQuery, bare.ForceQuery, bare.Fragment, bare.RawFragment = "", false, "", ""
		if p.Match(&bare) != m {
			t.Fatalf("%q on %q: the query or fragment changes the match", prefix, raw)
		}
		if u2, err := url.Parse(u.String()); err == nil && p.Match(u2) != m {
			t.Fatalf("%q on %q: %v, on %q (printed and parsed again): %v", prefix, raw, m, u.String(), !m)
		}
		if !m {
			return
		}
		if u.Scheme != p.scheme || normalizeHost(u.Hostname()) != p.host || effectivePort(u) != p.port {
			t.Fatalf("%q matches %q on another origin", prefix, raw)
		}
		cp := cleanPath(u.Path)
		if strings.Contains("/"+cp+"/", "/../") || !strings.HasPrefix(cp+"/", p.path+"/") {
			t.Fatalf("%q matches %q whose path %q is not below %q", prefix, raw, cp, p.path)
		}
	})
}

// FuzzParseResource: an accepted entry prints as itself.
func FuzzParseResource(f *testing.F) {
	for _, s := range []string{"configmaps", "serviceaccounts/token", "subjectaccessreviews.authorization.k8s.io", "deployments.apps/scale", "a.b/c/d", "x..y", "X"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseResource(s)
		if err != nil {
			return
		}
		if r.String() != s {
			t.Fatalf("%q prints as %q", s, r.String())
		}
		if again, err := ParseResource(r.String()); err != nil || again != r {
			t.Fatalf("%q: %+v, again %+v %v", s, r, again, err)
		}
	})
}

// FuzzDuration: a duration that parses prints as one that parses to the
// same value.
func FuzzDuration(f *testing.F) {
	for _, s := range []string{"5s", "750ms", "1h2m3.5s", "-1s", "0", "1e3s", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var d Duration
		if err := d.UnmarshalText([]byte(s)); err != nil {
			return
		}
		b, err := d.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var d2 Duration
		if err := d2.UnmarshalText(b); err != nil || d2 != d {
			t.Fatalf("%q → %d → %q → %d, %v", s, d, b, d2, err)
		}
	})
}

// FuzzDecodeResponse: any body decodes to Kyverno's shape, with the
// status.
func FuzzDecodeResponse(f *testing.F) {
	for _, s := range []string{`{"a": 1}`, `[1, 2]`, `"x"`, `null`, ``, `not json`, `{"statusCode": "x"}`, `{"a": 1} {"b": 2}`, `{"body": 1}`} {
		f.Add([]byte(s), 200)
	}
	f.Fuzz(func(t *testing.T, data []byte, status int) {
		m, ok := decodeResponse(data, status).(map[string]any)
		if !ok || m["statusCode"] != status {
			t.Fatalf("%q: %#v", data, m)
		}
		if b, has := m["body"]; has && len(m) == 2 {
			if _, isMap := b.(map[string]any); isMap {
				t.Fatalf("%q: an object body wrapped: %#v", data, m)
			}
		}
	})
}
