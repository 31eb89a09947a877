package kyvernotest

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseTestFile feeds arbitrary bytes to the kyverno-test.yaml parser:
// it must never panic, and what it accepts must be a usable test.
func FuzzParseTestFile(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "suites", "*", "kyverno-test.yaml"))
	more, _ := filepath.Glob(filepath.Join("testdata", "suites", "*", "*", "kyverno-test.yaml"))
	for _, p := range append(files, more...) {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nresults:\n- policy: p\n  result: pass\n  resources: [a/b/c]\n"))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte("apiVersion: x\nkind: Test\nvalues:\n  namespaces:\n  - metadata: {name: a}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		docs, err := ParseTestFile("fuzz.yaml", data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		for _, d := range docs {
			if d.Test == nil || d.Test.APIVersion == "" || d.Test.Kind == "" {
				t.Fatalf("accepted an incomplete test: %+v", d.Test)
			}
			for _, r := range d.Test.Results {
				if !resultWords[r.Result] || r.Policy == "" {
					t.Fatalf("accepted a bad result: %+v", r)
				}
			}
			_ = d.Ref()
		}
	})
}
