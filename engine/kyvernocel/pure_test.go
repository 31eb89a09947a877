package kyvernocel

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/cel-go/common/types"
)

func TestRandomStringMatches(t *testing.T) {
	for _, pattern := range []string{
		"[0-9a-z]{8}", "[a-z]{5}", "(foo|bar)-[0-9]{3}", "a{2,3}b+c?", "x*", "[A-Z][a-z]{0,4}", "abc", "[^a-z\n]{3}",
		"(a|b|c){10}", "^start-[0-9]+$", "[[:alpha:]]{3}", "\\.",
		".{4}", // '.' draws from all int32 runes, mostly invalid, so mostly U+FFFD, as in goregen
	} {
		re := regexp.MustCompile("^(?:" + pattern + ")$")
		seen := map[string]bool{}
		for i := 0; i < 50; i++ {
			s, err := RandomString(pattern)
			if err != nil {
				t.Fatalf("%s: %v", pattern, err)
			}
			if !re.MatchString(s) {
				t.Fatalf("%s: %q does not match", pattern, s)
			}
			seen[s] = true
		}
		if strings.ContainsAny(pattern, "[*+?|{") && pattern != "x*" && pattern != ".{4}" && len(seen) < 2 {
			t.Errorf("%s: no randomness: %v", pattern, seen)
		}
	}
	// unbounded repeats stop at 4096
	for i := 0; i < 20; i++ {
		s, _ := RandomString("a+")
		if len(s) < 1 || len(s) > 4096 {
			t.Fatalf("a+ gave %d runes", len(s))
		}
	}
	for pattern, want := range map[string]string{
		`\d`:                   "error parsing regexp: invalid escape sequence: `\\d`",
		"[":                    "error parsing regexp: missing closing ]: `[`",
		"[^\\x00-\\x{10FFFF}]": "invalid argument to Int31n",
	} {
		if _, err := RandomString(pattern); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %q", pattern, err, want)
		}
	}
}

func TestTimeNow(t *testing.T) {
	defer func(old func() time.Time) { Now = old }(Now)
	Now = func() time.Time { return time.Date(2025, 6, 7, 8, 9, 10, 0, time.UTC) }
	for expr, want := range map[string]any{
		`time.now() == timestamp("2025-06-07T08:09:10Z")`:       true,
		`time.toCron(time.now())`:                               "9 8 7 6 6",
		`time.truncate(time.now(), duration("24h")).getHours()`: int64(0),
	} {
		got, err := evalExpr(t, false, expr, map[string]any{})
		if err != nil || got.Value() != want {
			t.Errorf("%s = %v (%v), want %v", expr, got, err, want)
		}
	}
}

func TestGoHelpers(t *testing.T) {
	if sa := ParseServiceAccount("system:serviceaccount:ns:a:b"); sa.Namespace != "ns" || sa.Name != "a:b" {
		t.Errorf("%+v", sa)
	}
	if sa := ParseServiceAccount("system:serviceaccount:ns"); sa != (ServiceAccount{}) {
		t.Errorf("%+v", sa)
	}
	r, err := ParseImageReference("docker.io/nginx:1.25@sha256:" + strings.Repeat("a", 64))
	if err != nil {
		t.Fatal(err)
	}
	if r.Registry() != "index.docker.io" || r.RepositoryStr() != "library/nginx" || r.Tag() != "1.25" ||
		!r.IsDigest() || r.Digest() != "sha256:"+strings.Repeat("a", 64) || r.String() != "docker.io/nginx:1.25@sha256:"+strings.Repeat("a", 64) {
		t.Errorf("%+v", r)
	}
	if _, err := ParseImageReference("a:b:"); err == nil || err.Error() != "could not parse reference: a:b:" {
		t.Errorf("%v", err)
	}
	if m, err := DecodeX509("x"); err == nil || m != nil {
		t.Errorf("DecodeX509: %v %v", m, err)
	}
	v := mathRound(types.Double(2.675), types.Int(2))
	if v != types.Double(2.68) && v != types.Double(2.67) {
		t.Errorf("math.round: %v", v)
	}
}

func TestExpressionsUse(t *testing.T) {
	for _, tc := range []struct {
		exprs      []string
		http, gctx bool
	}{
		{[]string{`http.get("x")`}, true, false},
		{[]string{"", "object.x", `globalContext.Get("a", "")`}, false, true},
		{[]string{`object.http == 1`, `"http.get"`}, false, false},
		{[]string{`[1].map(http, http)`}, true, false}, // Kyverno's check is syntactic too
		{[]string{`)(`, `variables.x`}, false, false},
	} {
		if got := ExpressionsUseHTTP(tc.exprs...); got != tc.http {
			t.Errorf("ExpressionsUseHTTP(%q) = %v", tc.exprs, got)
		}
		if got := ExpressionsUseGlobalContext(tc.exprs...); got != tc.gctx {
			t.Errorf("ExpressionsUseGlobalContext(%q) = %v", tc.exprs, got)
		}
	}
}
