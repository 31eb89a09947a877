package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const podSecurityFixture = `
apiVersion: pod-security.admission.config.k8s.io/v1
kind: PodSecurityConfiguration
defaults:
  enforce: baseline
---
apiVersion: v1
kind: Namespace
metadata:
  name: prod
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/warn: restricted
    pod-security.kubernetes.io/warn-version: v1.30
---
apiVersion: policies.kyverno.io/v1
kind: PolicyException
metadata: {name: legacy, namespace: ops}
spec:
  policyRefs: [{kind: PodSecurity, name: restricted}]
  matchConditions:
    - {name: legacy, expression: "object.metadata.name == 'legacy'"}
`

// squeeze collapses runs of spaces, so table rows compare without their
// column padding.
func squeeze(s string) string { return regexp.MustCompile(` +`).ReplaceAllString(s, " ") }

// arbiter get policies shows the Pod Security levels as policies of kind
// PodSecurity, then where each is in effect; get applicable shows the
// levels of an object's namespace with their modes and versions.
func TestGetPodSecurity(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "psa.yaml"), []byte(podSecurityFixture), 0o600); err != nil {
		t.Fatal(err)
	}
	pod := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(pod, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: legacy, namespace: prod}\nspec:\n  containers: [{name: app, image: app:1}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	serveInBackground(t, "--listen", addr, "--data", filepath.Join(dir, "data"), "--load", filepath.Join(dir, "psa.yaml"))
	ctx := context.Background()
	var out string
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if out, err = runCLI(t, ctx, "get", "policies", "--server", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("get policies: %v", err)
	}
	want := `KIND NAME ACTIONS RESOURCES EXCEPTIONS
PodSecurity baseline Deny v1/pods 0
PodSecurity restricted Deny,Warn v1/pods,+8 workload resources 1
revision 1: 2 policies

POD SECURITY MODE VERSION IN EFFECT IN
baseline enforce latest (configuration defaults)
restricted enforce latest prod
restricted warn v1.30 prod
`
	if squeeze(out) != want {
		t.Fatalf("get policies:\n%s\nwant:\n%s", out, want)
	}
	out, err = runCLI(t, ctx, "get", "policies", "restricted", "--kind", "PodSecurity", "--server", addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"PodSecurity restricted Deny,Warn v1/pods,+8 workload resources 1", "restricted warn v1.30 prod", "ops/legacy PodSecurity/restricted never false skip"} {
		if !strings.Contains(squeeze(out), line) {
			t.Errorf("get policies restricted lacks %q:\n%s", line, out)
		}
	}
	out, err = runCLI(t, ctx, "get", "applicable", "-f", pod, "--server", addr)
	if err != nil {
		t.Fatal(err)
	}
	want = `revision 1: 1 policies apply
  PodSecurity restricted enforce=restricted:latest warn=restricted:v1.30 [Deny,Warn]
    exception ops/legacy: matches
`
	if out != want {
		t.Fatalf("get applicable:\n%s\nwant:\n%s", out, want)
	}
}
