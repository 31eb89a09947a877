package kyvernotest

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/golden")

// render runs the suites under path and renders them as `arbiter test -v`
// does (load errors inline), with the closing line.
func render(t *testing.T, filter *Filter, paths ...string) (string, Summary) {
	t.Helper()
	var b bytes.Buffer
	results, err := RunPaths(context.Background(), paths, Options{Filter: filter}, func(r *SuiteResult) {
		if err := r.Err(); err != nil {
			fmt.Fprintf(&b, "error: cannot load test: %v\n", err)
			return
		}
		RenderText(&b, r, RenderOptions{Detailed: true})
	})
	if err != nil {
		t.Fatal(err)
	}
	sum := Summarize(results)
	RenderSummary(&b, sum)
	return b.String(), sum
}

// TestGoldenSuites runs every suite of testdata/suites and compares the
// rendered tables with testdata/golden/<suite>.txt (go test -update
// rewrites them). Each suite covers one part of `kyverno test` semantics;
// its kyverno-test.yaml says which.
func TestGoldenSuites(t *testing.T) {
	wants := map[string]struct{ failed, loadErrors bool }{
		"authz":              {},
		"basic":              {},
		"clusterresources":   {},
		"context":            {},
		"excluded":           {},
		"generate":           {},
		"generate-fail":      {failed: true},
		"json":               {},
		"loaderrors":         {loadErrors: true},
		"mutate":             {},
		"mutating-admission": {},
		"mutate-existing":    {},
		"mutate-fail":        {failed: true},
		"notfound":           {failed: true},
		"numbers":            {},
		"operations":         {},
		"skip":               {},
		"vap":                {},
	}
	entries, err := os.ReadDir("testdata/suites")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		want, ok := wants[name]
		if !ok {
			t.Errorf("suite %s: add it to the table of TestGoldenSuites", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			got, sum := render(t, nil, filepath.Join("testdata", "suites", name))
			if (sum.Failed > 0) != want.failed {
				t.Errorf("failed rows: %d, want failures: %v", sum.Failed, want.failed)
			}
			if (sum.LoadErrors > 0) != want.loadErrors {
				t.Errorf("load errors: %d, want load errors: %v", sum.LoadErrors, want.loadErrors)
			}
			if sum.Passed == 0 {
				t.Errorf("no passing row")
			}
			golden := filepath.Join("testdata", "golden", name+".txt")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			wantText, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if got != string(wantText) {
				t.Errorf("output differs from %s (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", golden, got, wantText)
			}
		})
	}
}

func TestLoadErrorsNameFileTestAndField(t *testing.T) {
	cases := map[string][]string{
		"bad-cel":          {"bad-cel/policy.yaml", "ValidatingPolicy p", "spec.validations[0].expression"},
		"bad-exception":    {"Test bad-exception: exceptions: cannot load exceptions", "bad-exception/exception.yaml", "PolicyException default/e", "spec.matchConditions[0].expression"},
		"bad-operation":    {"bad-operation/kyverno-test.yaml", "Test bad-operation", "results[0].operation"},
		"bad-result":       {"Test bad-result", "results[0].result"},
		"bad-values":       {"Test bad-values", "variables", "bad-values/values.yaml", "namespaceSelectors: unknown field"},
		"deprecated":       {"deprecated/kyverno-test.yaml", "apiVersion"},
		"missing-policy":   {"Test missing-policy", "policies[0]", "no-such-policy.yaml"},
		"unknown-field":    {"Test unknown-field", "results[0].resource: unknown field"},
		"unsupported-kind": {"Test unsupported-kind", "policies[0]", "ClusterPolicy p", "kind"},
	}
	for name, wants := range cases {
		results, err := RunPaths(context.Background(), []string{filepath.Join("testdata", "suites", "loaderrors", name)}, Options{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(results) != 1 || results[0].Err() == nil {
			t.Errorf("%s: want one load error, got %+v", name, results)
			continue
		}
		msg := results[0].Err().Error()
		for _, w := range wants {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: error %q does not contain %q", name, msg, w)
			}
		}
	}
}

func TestFilter(t *testing.T) {
	f, err := ParseFilter("policy=require-*,resource=good")
	if err != nil {
		t.Fatal(err)
	}
	got, sum := render(t, f, filepath.Join("testdata", "suites", "basic", "kyverno-test.yaml"))
	if sum.Failed != 0 || sum.Passed != 2 {
		t.Errorf("passed %d failed %d, want 2 and 0:\n%s", sum.Passed, sum.Failed, got)
	}
	if strings.Contains(got, "no-latest") {
		t.Errorf("the policy filter kept no-latest:\n%s", got)
	}
	if _, err := ParseFilter("colour=red"); err == nil {
		t.Error("an unknown selector key is accepted")
	}
	if _, err := ParseFilter("policy"); err == nil {
		t.Error("a selector without = is accepted")
	}
}

func TestWildcardMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true},
		{"*", "abc", true},
		{"a*c", "abc", true},
		{"a*c", "abd", false},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"*-pod", "good-pod", true},
		{"good", "good-pod", false},
		{"**x", "yx", true},
	} {
		if got := wildcardMatch(c.pattern, c.s); got != c.want {
			t.Errorf("wildcardMatch(%q, %q) = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}

// TestSimpleMatch pins the CLI's hasSelector: only a policy whose
// constraints are one plain resource rule loses its empty responses.
func TestSimpleMatch(t *testing.T) {
	rule := admissionregistrationv1.NamedRuleWithOperations{}
	named := admissionregistrationv1.NamedRuleWithOperations{ResourceNames: []string{"x"}}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
	for i, c := range []struct {
		m    *admissionregistrationv1.MatchResources
		want bool
	}{
		{nil, false},
		{&admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{rule}}, true},
		{&admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{rule}, NamespaceSelector: &metav1.LabelSelector{}}, true},
		{&admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{rule}, NamespaceSelector: sel}, false},
		{&admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{rule}, ObjectSelector: sel}, false},
		{&admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{rule, rule}}, false},
		{&admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{named}}, false},
		{&admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{rule}, ExcludeResourceRules: []admissionregistrationv1.NamedRuleWithOperations{rule}}, false},
	} {
		if got := simpleMatch(c.m); got != c.want {
			t.Errorf("case %d: simpleMatch = %v, want %v", i, got, c.want)
		}
	}
}

func TestJSONOutput(t *testing.T) {
	results, err := RunPaths(context.Background(), []string{filepath.Join("testdata", "suites", "notfound")}, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := RenderJSON(&b, results); err != nil {
		t.Fatal(err)
	}
	var report struct {
		Suites []struct {
			Name string `json:"name"`
			Rows []Row  `json:"rows"`
		} `json:"suites"`
		Passed int `json:"passed"`
		Failed int `json:"failed"`
	}
	if err := json.Unmarshal(b.Bytes(), &report); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if len(report.Suites) != 1 || report.Suites[0].Name != "notfound" || report.Passed != 1 || report.Failed != 6 {
		t.Errorf("unexpected report: %s", b.String())
	}
	if r := report.Suites[0].Rows[0]; r.Reason != "Not found" || !r.Failure || r.Expected != "pass" {
		t.Errorf("first row: %+v", r)
	}
}

func TestFindTestFiles(t *testing.T) {
	files, err := FindTestFiles("", filepath.Join("testdata", "suites", "basic"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		filepath.Join("testdata", "suites", "basic", ".kyverno-test", "kyverno-test.yaml"),
		filepath.Join("testdata", "suites", "basic", "kyverno-test.yaml"),
	}
	if strings.Join(files, ",") != strings.Join(want, ",") {
		t.Errorf("got %v, want %v", files, want)
	}
	if _, err := FindTestFiles("", filepath.Join("testdata", "no-such-folder")); err == nil {
		t.Error("a missing path is not an error")
	}
}

// A test file is split by manifest.SplitNonEmptyDocuments: empty documents
// (blank, comments, separators only) are skipped, and an invalid separator
// is an error naming the document (Kyverno's splitter silently drops
// everything from it on).
func TestParseTestFileDocuments(t *testing.T) {
	test := "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: %s}\n"
	docs, err := ParseTestFile("t.yaml", []byte("---\n# comment\n---\n"+fmt.Sprintf(test, "a")+"---\n---\n"+fmt.Sprintf(test, "b")))
	if err != nil || len(docs) != 2 || docs[1].Test.ObjectMeta.Name != "b" {
		t.Fatalf("got %d tests, %v", len(docs), err)
	}
	_, err = ParseTestFile("t.yaml", []byte(fmt.Sprintf(test, "a")+"---x\n"+fmt.Sprintf(test, "b")))
	if err == nil || !strings.Contains(err.Error(), "t.yaml") || !strings.Contains(err.Error(), "document 1: invalid Yaml document separator: x") {
		t.Fatalf("error %v", err)
	}
}

// TestFixupGenerateLabels: the CLI's label fix-up before comparing
// patched resources (resource.FixupGenerateLabels on unstructured
// objects).
func TestFixupGenerateLabels(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{}`, `{"metadata":{"labels":{"app.kubernetes.io/managed-by":"kyverno"}}}`},
		{`{"metadata":{"name":"a"}}`, `{"metadata":{"labels":{"app.kubernetes.io/managed-by":"kyverno"},"name":"a"}}`},
		{`{"metadata":{"labels":{"a":"1","generate.kyverno.io/x":"y","app.kubernetes.io/managed-by":"helm"}}}`,
			`{"metadata":{"labels":{"a":"1","app.kubernetes.io/managed-by":"helm"}}}`},
		// labels that are not all strings are not read: only managed-by remains
		{`{"metadata":{"labels":{"a":"1","b":2}}}`, `{"metadata":{"labels":{"app.kubernetes.io/managed-by":"kyverno"}}}`},
		// a metadata that is not an object is left alone
		{`{"metadata":null}`, `{"metadata":null}`},
		{`{"metadata":"x"}`, `{"metadata":"x"}`},
	} {
		var obj map[string]any
		if err := json.Unmarshal([]byte(c.in), &obj); err != nil {
			t.Fatal(err)
		}
		fixupGenerateLabels(obj)
		if got, _ := json.Marshal(obj); string(got) != c.want {
			t.Errorf("%s: got %s, want %s", c.in, got, c.want)
		}
	}
}
