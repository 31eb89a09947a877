package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// brokenPipe is an output that cannot be written (a closed pipe, a full
// disk).
type brokenPipe struct{}

var errBrokenPipe = errors.New("write |1: broken pipe")

func (brokenPipe) Write([]byte) (int, error) { return 0, errBrokenPipe }

// TestLostOutputFails: a command whose output cannot be written fails (exit
// status 2, the write error in its message) rather than ending in 0, in
// every output format.
func TestLostOutputFails(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	resource := filepath.Join(dir, "resource.yaml")
	if err := os.WriteFile(policy, []byte(`apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: owner
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
    - expression: "has(object.metadata.labels) && 'owner' in object.metadata.labels"
      message: owner required
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(resource, []byte(`apiVersion: v1
kind: ConfigMap
metadata:
  name: good
  namespace: default
  labels: {owner: me}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	suite := "../../kyvernotest/fixtures/testdata/suites/cli__test-validating-policy__restrict-image-registries"
	for _, args := range [][]string{
		{"decide", "-f", resource, policy},
		{"decide", "-o", "json", "-f", resource, policy},
		{"decide", "-o", "yaml", "-f", resource, policy},
		{"apply", policy, "--resource", resource},
		{"apply", "-o", "json", policy, "--resource", resource},
		{"apply", "-o", "yaml", policy, "--resource", resource},
		{"apply", "-o", "junit", policy, "--resource", resource},
		{"export", "vap", policy},
		{"test", suite},
		{"test", "-o", "json", suite},
	} {
		root := newRootCommand()
		root.SetOut(brokenPipe{})
		root.SetErr(io.Discard)
		root.SetArgs(args)
		err := root.Execute()
		if exitCode(err) != exitLoad || !strings.Contains(err.Error(), errBrokenPipe.Error()) {
			t.Errorf("%v: %v (exit status %d), want the write error and 2", args, err, exitCode(err))
		}
	}
}
