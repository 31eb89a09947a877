package e2e

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// apply --server: one stream pinned to one revision, PolicyReports,
// JUnit, --fail-on, stdin, and what-if candidates.
func TestApplyAgainstServer(t *testing.T) {
	primary := startPrimary(t, "--load", "../deploy/examples/pod-security")
	dir := "testdata/seed000"
	pods := []string{filepath.Join(dir, "web-app.yaml"), filepath.Join(dir, "legacy-app-compliant.yaml")}

	out, errOut, code := run(t, append([]string{"apply", "--server", primary.addr, "-o", "json"}, pods...)...)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (web-app runs as root)\n%s%s", code, out, errOut)
	}
	var reports []report
	if err := json.Unmarshal([]byte(out), &reports); err != nil || len(reports) != 2 || len(reports[0].Results) != 16 {
		t.Fatalf("reports: %v\n%s", err, out)
	}

	// The reports the server makes (-o json asks for them) are the ones
	// local apply makes in admission mode, byte for byte: namespaced and
	// cluster-scoped resources, a Pod without a namespace, a Deployment,
	// a List, JSON and YAML the fast path declines.
	inputs := append([]string{"testdata/reports"}, pods...)
	remote, errOut, code := run(t, append([]string{"apply", "--server", primary.addr, "-o", "json"}, inputs...)...)
	local, errLocal, codeLocal := run(t, append([]string{"apply", "--mode", "admission", "-o", "json", "../deploy/examples/pod-security"}, inputs...)...)
	if code != codeLocal || remote != local || strings.Count(remote, `"apiVersion": "wgpolicyk8s.io/v1alpha2"`) != 8 {
		t.Fatalf("--server (exit %d) and local (exit %d) reports differ:\n%s%s\n----\n%s%s", code, codeLocal, remote, errOut, local, errLocal)
	}

	// JUnit for CI systems.
	out, _, code = run(t, append([]string{"apply", "--server", primary.addr, "-o", "junit"}, pods...)...)
	var suites struct {
		XMLName  xml.Name `xml:"testsuites"`
		Tests    int      `xml:"tests,attr"`
		Failures int      `xml:"failures,attr"`
		Suites   []struct {
			Name string `xml:"name,attr"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal([]byte(out), &suites); err != nil || suites.Tests != 32 || suites.Failures == 0 || len(suites.Suites) != 2 || code != 1 {
		t.Fatalf("junit (exit %d): %v\n%s", code, err, out)
	}

	// --fail-on warn with a compliant pod only: no fail, no warn → exit 0.
	compliant := "../docs/tour/compliant-pod.yaml"
	_, _, code = run(t, "apply", "--server", primary.addr, "--fail-on", "warn", compliant)
	if code != 0 {
		t.Fatalf("compliant pod: exit %d", code)
	}

	// Multi-document stdin, as `helm template ... | arbiter apply -`.
	cmd := exec.Command(binary, "apply", "--server", primary.addr, "-", "-o", "json")
	cmd.Stdin = strings.NewReader(strings.Repeat("---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec: {containers: [{name: c, image: x}]}\n", 3))
	b, _ := cmd.Output()
	if err := json.Unmarshal(b, &reports); err != nil || len(reports) != 3 {
		t.Fatalf("stdin: %v\n%s", err, b)
	}

	// What-if: a label policy would deny the compliant pod and change the
	// results of web-app (denied either way); nothing is committed.
	out, errOut, code = run(t, "apply", "--server", primary.addr, "--candidate", "testdata/whatif/require-team.yaml", "-o", "json", compliant, pods[0])
	if code != 1 {
		t.Fatalf("what-if exit %d, want 1 (a manifest would now be denied)\n%s%s", code, out, errOut)
	}
	var diff struct {
		Summary        string
		NewlyDenied    int
		ResultsChanged int
		Items          []struct{ Resource string }
	}
	if err := json.Unmarshal([]byte(out), &diff); err != nil || diff.NewlyDenied != 1 || diff.ResultsChanged != 1 || len(diff.Items) != 2 ||
		diff.Summary != "would now deny 1 manifest; would change the results of 1 manifest without changing the verdict" {
		t.Fatalf("what-if: %v %+v\n%s", err, diff, out)
	}
	if st := primary.status(); st.GetRevision() != 1 || st.GetPolicies() != 16 {
		t.Fatalf("what-if committed: %v", st)
	}
	// Policy objects in the inputs are refused with --server.
	_, errOut, code = run(t, "apply", "--server", primary.addr, filepath.Join(dir, "policy.yaml"), pods[0])
	if code != 2 || !strings.Contains(errOut, "--candidate") {
		t.Fatalf("policy input with --server: exit %d %s", code, errOut)
	}

	// An item the server refuses ends the run with exit 2 naming it; the
	// -o json written so far (the reports before it) is cut short there.
	strict := startPrimary(t, "--load", "../deploy/examples/pod-security", "--max-object-bytes", "1500")
	big := filepath.Join(t.TempDir(), "big.yaml")
	bigPod := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: big\n  namespace: default\n  annotations:\n    note: " + strings.Repeat("x", 2000) + "\nspec:\n  containers:\n  - name: c\n    image: x\n"
	if err := os.WriteFile(big, []byte(bigPod), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = run(t, "apply", "--server", strict.addr, "-o", "json", compliant, big, compliant)
	if code != 2 || !strings.Contains(errOut, "big.yaml: Pod default/big: ") || !strings.Contains(errOut, "1500") {
		t.Fatalf("refused item: exit %d\n%s", code, errOut)
	}
	full, _, _ := run(t, "apply", "--server", primary.addr, "-o", "json", compliant)
	if !strings.HasPrefix(full, out) || strings.HasSuffix(strings.TrimSpace(out), "]") {
		t.Fatalf("refused item: output is not the reports before it, cut short:\n%s", out)
	}
}

// apply -o json|yaml with MutatingPolicies: each mutated resource, as it
// would be admitted, comes before its PolicyReport — with --server the
// server's admitted object (-o json) or its patch applied here (-o yaml),
// locally the engine's result — and both print the same, byte for byte.
func TestApplyMutatedAgainstServer(t *testing.T) {
	policies, mutations := "../deploy/examples/pod-security", "../engine/testdata/bench/mutating"
	primary := startPrimary(t, "--load", policies, "--load", mutations)
	pods := []string{"../docs/tour/compliant-pod.yaml", "../docs/tour/root-pod.yaml", "testdata/reports"}
	for _, format := range []string{"json", "yaml"} {
		remote, errOut, code := run(t, append([]string{"apply", "--server", primary.addr, "-o", format}, pods...)...)
		local, errLocal, codeLocal := run(t, append([]string{"apply", "--mode", "admission", "-o", format, policies, mutations}, pods...)...)
		if code != codeLocal || remote != local {
			t.Fatalf("-o %s: --server (exit %d) and local (exit %d) differ:\n%s%s\n----\n%s%s", format, code, codeLocal, remote, errOut, local, errLocal)
		}
		if !strings.Contains(remote, "cluster-autoscaler.kubernetes.io/safe-to-evict") || !strings.Contains(remote, "RuntimeDefault") {
			t.Fatalf("-o %s: the mutated resources are missing:\n%s", format, remote)
		}
	}
	out, _, _ := run(t, append([]string{"apply", "--server", primary.addr, "-o", "json"}, pods[0])...)
	var docs []map[string]any
	if err := json.Unmarshal([]byte(out), &docs); err != nil || len(docs) != 2 {
		t.Fatalf("one mutated Pod: want the Pod then its report: %v\n%s", err, out)
	}
	if docs[0]["kind"] != "Pod" || docs[1]["kind"] != "PolicyReport" {
		t.Fatalf("order: %v, %v", docs[0]["kind"], docs[1]["kind"])
	}
	ann, _ := docs[0]["metadata"].(map[string]any)["annotations"].(map[string]any)
	if ann["cluster-autoscaler.kubernetes.io/safe-to-evict"] != "true" {
		t.Fatalf("the Pod is not as admitted: %v", docs[0])
	}
}
