package kyvernotest

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestArbiterTestCommand builds the arbiter binary and runs `arbiter test`
// on testdata suites: exit 0 when every result passes, 1 when one fails,
// 2 when a suite cannot be loaded.
func TestArbiterTestCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the arbiter binary")
	}
	bin := filepath.Join(t.TempDir(), "arbiter")
	build := exec.Command("go", "build", "-o", bin, "github.com/arbiter-pdp/arbiter/cmd/arbiter")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(args ...string) (string, string, int) {
		cmd := exec.Command(bin, append([]string{"test"}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String(), code
	}
	suite := func(name string) string { return filepath.Join("testdata", "suites", name) }

	out, errOut, code := run(suite("basic"), suite("excluded"))
	if code != 0 {
		t.Errorf("passing suites: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"│ ID │ POLICY", "Test Summary: 8 tests passed and 0 tests failed",
		"Test Summary: 6 tests passed and 0 tests failed", "Excluded",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.HasSuffix(out, "\n17 passed, 0 failed\n") {
		t.Errorf("closing line: %q", out[max(0, len(out)-40):])
	}

	out, _, code = run(suite("notfound"))
	if code != 1 {
		t.Errorf("failing suite: exit %d, want 1\n%s", code, out)
	}
	if !strings.HasSuffix(out, "\n1 passed, 6 failed\n") || !strings.Contains(out, "Not found") || !strings.Contains(out, "Want pass, got fail") {
		t.Errorf("failing suite output:\n%s", out)
	}

	out, errOut, code = run(suite("loaderrors"))
	if code != 2 {
		t.Errorf("unloadable suites: exit %d, want 2\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"results[0].resource: unknown field", "spec.validations[0].expression", "9 test(s) could not be loaded"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if !strings.HasSuffix(out, "\n1 passed, 0 failed\n") {
		t.Errorf("unloadable suites: the loadable one still runs:\n%s", out)
	}

	out, _, code = run("-o", "json", suite("skip"))
	var report JSONReport
	if err := json.Unmarshal([]byte(out), &report); err != nil || code != 0 || report.Passed != 7 || report.Failed != 0 {
		t.Errorf("-o json: exit %d, %v\n%s", code, err, out)
	}

	_, _, code = run(suite("no-such-suite"))
	if code != 2 {
		t.Errorf("missing path: exit %d, want 2", code)
	}
	out, _, code = run("-v", "-t", "policy=no-latest", suite("basic"))
	if code != 0 || strings.Contains(out, "require-team-label") || !strings.Contains(out, "MESSAGE") {
		t.Errorf("-t/-v: exit %d\n%s", code, out)
	}
}
