package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/arbiter-pdp/arbiter/internal/k8stest"
)

// results are a run's results: "Kind namespace/name policy result message",
// sorted.
func results(t *testing.T, out string) []string {
	t.Helper()
	var reports []report
	if err := json.Unmarshal([]byte(out), &reports); err != nil {
		t.Fatalf("apply -o json: %v\n%s", err, out)
	}
	var rows []string
	for _, r := range reports {
		for _, res := range r.Results {
			rows = append(rows, fmt.Sprintf("%s %s/%s %s %s %s", r.Scope.Kind, r.Scope.Namespace, r.Scope.Name, res.Policy, res.Result, res.Message))
		}
	}
	sort.Strings(rows)
	return rows
}

// The same policies give the same results offline, with the objects they
// read in --context files (plain manifests, or a Kyverno CLI context
// file), as in the server with the same objects stored (serve --load,
// arbiter push), through apply and decide.
func TestContextOfflineEqualsServer(t *testing.T) {
	dir := "testdata/context"
	policies, objects := filepath.Join(dir, "policies"), filepath.Join(dir, "objects")
	resources := filepath.Join(dir, "resources")
	want := []string{
		"ConfigMap empty/first configmaps-per-namespace pass success",
		"ConfigMap full/three configmaps-per-namespace fail namespace full already has 2 ConfigMaps (at most 2)",
		"ConfigMap roomy/three configmaps-per-namespace pass success",
		"Pod jobs/jobs-pod pods-beside-web fail no web Deployment in namespace jobs",
		"Pod shop/shop-pod pods-beside-web pass success",
		"Service shop/orphan services-owned fail no ServiceAccount owned by team-b",
		"Service shop/owned services-owned pass success",
	}
	offline := map[string][]string{}
	for name, ctxPath := range map[string]string{"manifests": objects, "kyverno context file": filepath.Join(dir, "kyverno-context")} {
		out, errOut, code := run(t, "apply", policies, "--context", ctxPath, "--resource", resources, "--mode", "admission", "-o", "json")
		if code != 1 {
			t.Fatalf("%s: apply exit %d\n%s", name, code, errOut)
		}
		offline[name] = results(t, out)
		if !reflect.DeepEqual(offline[name], want) {
			t.Fatalf("%s: offline results\n%s\nwant\n%s", name, strings.Join(offline[name], "\n"), strings.Join(want, "\n"))
		}
	}

	p := startPrimary(t, "--load", policies, "--load", objects)
	out, errOut, code := run(t, "apply", "--server", p.addr, "--resource", resources, "-o", "json")
	if code != 1 {
		t.Fatalf("apply --server exit %d\n%s", code, errOut)
	}
	if got := results(t, out); !reflect.DeepEqual(got, want) {
		t.Fatalf("server results\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// push of the same objects changes nothing and counts the context
	// objects.
	out, errOut, code = run(t, "push", "--server", p.addr, policies, objects, "-o", "json")
	var ack struct {
		Unchanged      bool
		ContextObjects int `json:"contextObjects"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &ack) != nil || !ack.Unchanged || ack.ContextObjects != 8 {
		t.Fatalf("push exit %d: %s %s", code, out, errOut)
	}
	// decide, locally and on the server, on one resource.
	full := filepath.Join(t.TempDir(), "cm.yaml")
	if err := os.WriteFile(full, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: three, namespace: full}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	local, _, lcode := run(t, "decide", "-f", full, policies, "--context", objects, "-o", "json")
	remote, _, rcode := run(t, "decide", "-f", full, "--server", p.addr, "-o", "json")
	var ld, rd struct {
		Allowed bool
		Message string
	}
	if lcode != 1 || rcode != 1 || json.Unmarshal([]byte(local), &ld) != nil || json.Unmarshal([]byte(remote), &rd) != nil ||
		ld != rd || !strings.Contains(ld.Message, "namespace full already has 2 ConfigMaps") {
		t.Fatalf("decide: local %d %s, server %d %s", lcode, local, rcode, remote)
	}
	// Without the context, the policies say what is not configured.
	out, _, _ = run(t, "apply", policies, "--resource", resources, "--mode", "admission", "-o", "json")
	for _, r := range results(t, out) {
		if !strings.Contains(r, " error ") || !strings.Contains(r, "no context objects are configured") {
			t.Fatalf("without --context: %s", r)
		}
	}
	// --context refuses policy objects, and --server refuses --context.
	if _, errOut, code := run(t, "apply", policies, "--context", policies, "--resource", resources); code != 2 || !strings.Contains(errOut, "--context takes context objects") {
		t.Fatalf("policy in --context: exit %d %s", code, errOut)
	}
	if _, errOut, code := run(t, "apply", "--server", p.addr, "--context", objects, "--resource", resources); code != 2 || !strings.Contains(errOut, "the context is the server's") {
		t.Fatalf("--server --context: exit %d %s", code, errOut)
	}
}

// apply --cluster reads what the policies read from a live API server,
// read-only: with the objects of testdata/context created in the cluster,
// the results are those of --context and of the server.
func TestContextFromCluster(t *testing.T) {
	api, kc := kubeEnv(t)
	dir := "testdata/context"
	objs, err := k8stest.ReadObjects(filepath.Join(dir, "objects", "objects.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"full", "roomy", "shop", "jobs", "empty"} {
		kubeApply(t, kc, map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}})
	}
	for _, o := range objs {
		kubeApply(t, kc, o)
		t.Cleanup(func() { kubeDelete(t, kc, o) })
	}
	offline, errOut, code := run(t, "apply", filepath.Join(dir, "policies"), "--context", filepath.Join(dir, "objects"), "--resource", filepath.Join(dir, "resources"), "--mode", "admission", "-o", "json")
	if code != 1 {
		t.Fatalf("offline: exit %d %s", code, errOut)
	}
	live, errOut, code := run(t, "apply", filepath.Join(dir, "policies"), "--cluster", "--kubeconfig", api.Kubeconfig, "--resource", filepath.Join(dir, "resources"), "--mode", "admission", "-o", "json")
	if code != 1 {
		t.Fatalf("--cluster: exit %d %s", code, errOut)
	}
	if got, want := results(t, live), results(t, offline); !reflect.DeepEqual(got, want) {
		t.Fatalf("--cluster results\n%s\nwant (offline)\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
