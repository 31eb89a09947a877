package imageverify_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/imageverify"
	"github.com/arbiter-pdp/arbiter/kyvernotest"
)

// The ImageValidatingPolicy suites of the conformance corpus, reproduced
// against an in-process registry: ghcr.io/kyverno/test-verify-image:signed
// is notary-signed there with a certificate made for the test, and carries
// a notary-signed sbom/cyclone-dx referrer; :unsigned has nothing. Each
// suite is copied with its image references, matchImageReferences globs
// and notary certificate rewritten; its policies and expectations are kept.

// sharedDir finds the shared folder beside the repository (or beside the
// worktree's parent).
func sharedDir(t *testing.T) string {
	for _, d := range []string{"../../shared", "../../../shared"} {
		if fi, err := os.Stat(filepath.Join(d, "conformance")); err == nil && fi.IsDir() {
			return d
		}
	}
	t.Skip("no shared conformance corpus beside the repository")
	return ""
}

// corpusRegistry is the registry of the corpus images.
type corpusRegistry struct {
	*testRegistry
	cert   *notaryCert
	signed name.Digest
}

func newCorpusRegistry(t *testing.T) *corpusRegistry {
	r := newRegistry(t)
	cert := newNotaryCert(t, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	signed := r.push("kyverno/test-verify-image:signed")
	r.notarySign(cert, signed)
	sbom := r.pushReferrer(signed, "sbom/cyclone-dx", "application/vnd.cyclonedx+json", []byte(`{"bomFormat":"CycloneDX","specVersion":"1.4"}`), nil)
	r.notarySign(cert, sbom)
	r.push("kyverno/test-verify-image:unsigned")
	return &corpusRegistry{testRegistry: r, cert: cert, signed: signed}
}

var certBlock = regexp.MustCompile(`(?m)^( *)-----BEGIN CERTIFICATE-----\n(?:.*\n)*?( *)-----END CERTIFICATE-----`)

// rewrite rewrites a suite file for the registry: image references, the
// ghcr.io globs, the notary certificate.
func (c *corpusRegistry) rewrite(data string) string {
	data = strings.ReplaceAll(data, "ghcr.io/kyverno/test-verify-image", c.host+"/kyverno/test-verify-image")
	data = regexp.MustCompile(`glob: *"?ghcr\.io/\*"?`).ReplaceAllString(data, `glob: "`+c.host+`/*"`)
	return certBlock.ReplaceAllStringFunc(data, func(m string) string {
		indent := certBlock.FindStringSubmatch(m)[1]
		lines := strings.Split(strings.TrimSpace(c.cert.pem), "\n")
		for i, l := range lines {
			lines[i] = indent + l
		}
		return strings.Join(lines, "\n")
	})
}

// copySuite copies a suite folder (hidden folders included) rewritten.
func (c *corpusRegistry) copySuite(t *testing.T, src string) string {
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	err := filepath.Walk(src, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		out := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(out, []byte(c.rewrite(string(data))), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func (c *corpusRegistry) verifier(t *testing.T) *imageverify.Verifier {
	v, err := imageverify.New(imageverify.Config{InsecureRegistries: []string{c.host}}, imageverify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestConformanceKyvernoTestSuites(t *testing.T) {
	shared := sharedDir(t)
	c := newCorpusRegistry(t)
	v := c.verifier(t)
	suites := []string{
		"conformance/kyverno-cli-more/test-image-validating-policy__sample-policy",
		"conformance/kyverno-cli-more/test-image-validating-policy__with-cel-exceptions",
		"conformance/kyverno-cli-more/test-context-resource-ivpol",
		"conformance/kyverno/cli__test-image-validating-policy__with-cel-exceptions",
		"conformance/kyverno/cli__sample-policy-exclusion",
	}
	for _, s := range suites {
		t.Run(filepath.Base(s), func(t *testing.T) {
			dir := c.copySuite(t, filepath.Join(shared, s))
			if filepath.Base(s) == "test-context-resource-ivpol" {
				// The suite's resources.yaml is missing, upstream too: two
				// Deployments of the signed image, pinned to its digest
				// (verifyDigest is at its default), one labelled env=prod
				// as the policy-cm ConfigMap requires.
				writeContextResources(t, filepath.Join(dir, ".kyverno-test", "resources.yaml"), c.host+"/kyverno/test-verify-image:signed@"+c.signed.DigestStr())
			}
			files, err := kyvernotest.FindTestFiles("", dir)
			if err != nil || len(files) == 0 {
				t.Fatalf("no test file: %v", err)
			}
			for _, f := range files {
				for _, r := range kyvernotest.RunFileWith(context.Background(), f, kyvernotest.Options{ImageVerifier: v}) {
					if r.Err() != nil {
						t.Fatalf("%s: %v", f, r.Err())
					}
					for _, row := range r.Rows {
						t.Logf("%s %s %s: %s (%s) %s", row.Policy, row.Resource, row.Expected, row.Result, row.Reason, row.Message)
					}
					if r.Failed > 0 || r.Passed == 0 {
						t.Errorf("%s: %d passed, %d failed", f, r.Passed, r.Failed)
					}
				}
			}
		})
	}
}

func writeContextResources(t *testing.T, path, image string) {
	doc := func(name string, labels string) string {
		return `apiVersion: apps/v1
kind: Deployment
metadata:
  name: ` + name + `
  namespace: default
  labels: {app: demo` + labels + `}
spec:
  selector: {matchLabels: {app: demo}}
  template:
    metadata: {labels: {app: demo}}
    spec:
      containers:
        - name: app
          image: ` + image + `
`
	}
	data := doc("negative-deployment", "") + "---\n" + doc("positive-deployment", ", env: prod")
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The chainsaw (admission) cases of the corpus: the policies and
// exceptions are loaded, each expected resource is decided at admission
// (digests pinned first, then validated) and allowed or denied as the case
// expects, with Kyverno's denial message after the webhook's prefix.
func TestConformanceChainsawCases(t *testing.T) {
	shared := sharedDir(t)
	data, err := os.ReadFile(filepath.Join(shared, "conformance/kyverno/cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Case       string   `json:"case"`
		Policies   []string `json:"policies"`
		Exceptions []string `json:"exceptions"`
		Resources  []string `json:"resources"`
		Expected   []struct {
			Resource, Kind, Result, Operation, Message string
		} `json:"expected"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	c := newCorpusRegistry(t)
	v := c.verifier(t)
	run := map[string]bool{
		"chainsaw__image-validating-policies__exceptions__regular":         true,
		"chainsaw__image-validating-policies__exceptions__wrong-exception": true,
		"chainsaw__image-validating-policies__exceptions__autogen":         true,
		// Kyverno runs with PolicyExceptions disabled: the exceptions are
		// not loaded.
		"chainsaw__policy-exceptions-disabled__image-validating-policies": false,
	}
	for _, cs := range cases {
		withExceptions, ok := run[cs.Case]
		if !ok {
			continue
		}
		t.Run(cs.Case, func(t *testing.T) {
			dir := c.copySuite(t, filepath.Join(shared, "conformance/kyverno", cs.Case))
			load := func(files []string) []*manifest.Object {
				var out []*manifest.Object
				for _, f := range files {
					data, err := os.ReadFile(filepath.Join(dir, f))
					if err != nil {
						t.Fatal(err)
					}
					docs, err := manifest.Parse(f, data)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, manifest.FromDocuments(docs)...)
				}
				return out
			}
			objs := load(cs.Policies)
			if withExceptions {
				objs = append(objs, load(cs.Exceptions)...)
			}
			ps, err := engine.Compile(objs, engine.Options{})
			if err != nil {
				t.Fatal(err)
			}
			resources := load(cs.Resources)
			for _, e := range cs.Expected {
				ns, nm, ok := strings.Cut(e.Resource, "/")
				if !ok {
					ns, nm = "", e.Resource
				}
				var obj *manifest.Object
				for _, o := range resources {
					if o.Kind == e.Kind && o.Name == nm && (ns == "" || o.Namespace == ns || o.Namespace == "" && ns == "default") {
						obj = o
					}
				}
				if obj == nil {
					t.Fatalf("no %s %s among the resources", e.Kind, e.Resource)
				}
				req := &admission.Request{Operation: admission.OpCreate, Object: obj.Content, Mode: admission.ModeAdmission, Namespace: obj.Namespace}
				if req.Namespace == "" {
					req.Namespace = "default"
				}
				req.Fill()
				d := ps.Evaluate(context.Background(), req, &engine.EvalOptions{ImageVerifier: v})
				if d.Allowed != (e.Result == "allow") {
					t.Errorf("%s %s: allowed=%v (%s), want %s", e.Kind, e.Resource, d.Allowed, d.Message, e.Result)
				}
				if e.Message != "" && !strings.HasSuffix(e.Message, "denied the request: "+d.Message) {
					t.Errorf("%s %s: message %q, want %q", e.Kind, e.Resource, d.Message, e.Message)
				}
				t.Logf("%s %s: allowed=%v %s", e.Kind, e.Resource, d.Allowed, d.Message)
			}
		})
	}
}
