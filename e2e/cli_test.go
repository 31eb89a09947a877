package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// run runs the arbiter binary and returns stdout, stderr and the exit code.
func run(t testing.TB, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

type report struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Scope struct {
		Kind, Name, Namespace string
	} `json:"scope"`
	Results []struct {
		Policy, Rule, Result, Message, Source string
		Properties                            map[string]string
		Scored                                bool
	} `json:"results"`
	Summary map[string]int `json:"summary"`
}

// The seed 000 table through `arbiter apply` and `arbiter decide`: result,
// message and allowed for each of the four pods.
func TestSeedTableThroughCLI(t *testing.T) {
	dir := "testdata/seed000"
	rows := []struct {
		pod       string
		allowed   bool
		result    string
		rule      string
		message   string
		exception string
	}{
		{"legacy-app-granted", true, "skip", "exception", "rule is skipped due to policy exception: legacy-apps/allow-root-legacy-app", "allow-root-legacy-app"},
		{"legacy-app-no-ticket", false, "fail", "", "Compensating Control Failure: Exception requires a security ticket annotation ('security.company.com/ticket-id').", "allow-root-legacy-app"},
		{"legacy-app-compliant", true, "pass", "", "success", ""},
		{"web-app", false, "fail", "", "Running as root is not allowed. Every container must set securityContext.runAsNonRoot to true.", ""},
	}
	for _, r := range rows {
		t.Run(r.pod, func(t *testing.T) {
			pod := filepath.Join(dir, r.pod+".yaml")
			// apply: one PolicyReport, exit 1 when the Deny policy fails.
			out, errOut, code := run(t, "apply", filepath.Join(dir, "policy.yaml"), "--exception", filepath.Join(dir, "exception.yaml"), "--resource", pod, "-o", "json")
			wantCode := 0
			if !r.allowed {
				wantCode = 1
			}
			if code != wantCode {
				t.Fatalf("apply exit %d, want %d\n%s%s", code, wantCode, out, errOut)
			}
			var reports []report
			if err := json.Unmarshal([]byte(out), &reports); err != nil {
				t.Fatalf("apply -o json: %v\n%s", err, out)
			}
			if len(reports) != 1 || len(reports[0].Results) != 1 {
				t.Fatalf("reports: %+v", reports)
			}
			rep := reports[0]
			res := rep.Results[0]
			if rep.APIVersion != "wgpolicyk8s.io/v1alpha2" || rep.Kind != "PolicyReport" || rep.Metadata.Namespace != "legacy-apps" ||
				rep.Scope.Kind != "Pod" || rep.Scope.Name != r.pod || rep.Summary[r.result] != 1 {
				t.Fatalf("report shape: %+v", rep)
			}
			if res.Policy != "disallow-root-user" || res.Result != r.result || res.Rule != r.rule || res.Message != r.message ||
				res.Source != "KyvernoValidatingPolicy" || !res.Scored || res.Properties["exceptions"] != r.exception {
				t.Fatalf("apply result: %+v", res)
			}
			// decide: allowed and the denial text.
			out, errOut, code = run(t, "decide", "-f", pod, filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "exception.yaml"), "-o", "json")
			if code != wantCode {
				t.Fatalf("decide exit %d, want %d\n%s%s", code, wantCode, out, errOut)
			}
			var d struct {
				Allowed bool
				Message string
				Results []struct{ Policy, Rule, Result, Message string }
			}
			if err := json.Unmarshal([]byte(out), &d); err != nil {
				t.Fatal(err)
			}
			if d.Allowed != r.allowed || len(d.Results) != 1 || d.Results[0].Result != r.result || d.Results[0].Message != r.message {
				t.Fatalf("decide: %+v", d)
			}
			if !r.allowed && d.Message != "Policy disallow-root-user failed: "+r.message {
				t.Fatalf("denial %q", d.Message)
			}
		})
	}
}

// A manifest that cannot be loaded: exit 2, naming the file, the object and
// the field.
func TestLoadErrorsNameFileObjectField(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := write("bad.yaml", `apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: broken}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  validations:
  - expression: "object.spec.containers.all(c, "
`)
	pod := write("pod.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec: {containers: [{name: c, image: x}]}\n")
	for _, args := range [][]string{
		{"apply", bad, pod},
		{"decide", "-f", pod, bad},
	} {
		out, errOut, code := run(t, args...)
		if code != 2 {
			t.Fatalf("%v: exit %d, want 2\n%s%s", args, code, out, errOut)
		}
		for _, want := range []string{bad, "ValidatingPolicy broken", "spec.validations[0].expression"} {
			if !strings.Contains(errOut, want) {
				t.Fatalf("%v: stderr does not name %q:\n%s", args, want, errOut)
			}
		}
	}
	yamlBad := write("syntax.yaml", "kind: Pod\nmetadata: [unclosed\n")
	_, errOut, code := run(t, "apply", yamlBad)
	if code != 2 || !strings.Contains(errOut, yamlBad) {
		t.Fatalf("bad YAML: exit %d\n%s", code, errOut)
	}
	unknown := write("unknown.yaml", "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: c}\nspec: {}\n")
	_, errOut, code = run(t, "apply", unknown, pod)
	if code != 2 || !strings.Contains(errOut, "unsupported kind ClusterPolicy") {
		t.Fatalf("unknown kind: exit %d\n%s", code, errOut)
	}
	gpol := write("gpol.yaml", "apiVersion: policies.kyverno.io/v1\nkind: GeneratingPolicy\nmetadata: {name: g}\nspec: {}\n")
	_, errOut, code = run(t, "apply", gpol, pod)
	if code != 2 || !strings.Contains(errOut, "GeneratingPolicy g: spec.matchConstraints: Required value") {
		t.Fatalf("invalid GeneratingPolicy: exit %d\n%s", code, errOut)
	}
}

// `arbiter apply -` reads manifests from stdin (helm template | arbiter apply -).
func TestApplyFromStdin(t *testing.T) {
	cmd := exec.Command(binary, "apply", "-", "-o", "json")
	policy, _ := os.ReadFile("testdata/seed000/policy.yaml")
	pod, _ := os.ReadFile("testdata/seed000/web-app.yaml")
	cmd.Stdin = strings.NewReader(string(policy) + "\n---\n" + string(pod))
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v\n%s", err, out)
	}
	var reports []report
	if err := json.Unmarshal(out, &reports); err != nil || len(reports) != 1 || reports[0].Results[0].Result != "fail" {
		t.Fatalf("reports %s: %v", out, err)
	}
}
