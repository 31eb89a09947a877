package engine_test

import (
	"path/filepath"
	"strings"
	"testing"
)

// Pod Security golden cases (testdata/psa) use the ValidatingAdmissionPolicy
// harness: Namespaces, a PodSecurityConfiguration, PolicyExceptions and
// resources, and an Expect document that also checks the code and reason
// of a denial, the denials and the audit annotations.
func TestPSAGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/psa/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Pod Security golden cases: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) { runVAPGolden(t, file) })
	}
}
