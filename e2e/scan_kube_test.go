package e2e

// Background scans into PolicyReports across a failover: `arbiter serve
// --kube-source` replicas (real processes) against a real kube-apiserver.
// Skipped when ARBITER_K8S_RUN is not set.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
)

var polrGVR = schema.GroupVersionResource{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "policyreports"}

func scanWrites(p *proc) []string {
	var out []string
	for _, l := range strings.Split(p.log.String(), "\n") {
		if strings.Contains(l, "component=kube-scan") && strings.Contains(l, "background scan") {
			out = append(out, l)
		}
	}
	return out
}

// TestBackgroundScanFailover: the primary is killed (SIGKILL) while its
// background scan is writing the reports of 300 pods (writes slowed to 20
// a second); the replica that takes over finishes: every pod ends with
// exactly one report, with the right result, the reports the first primary
// wrote are not written again, and the standby wrote nothing before it
// became the primary.
func TestBackgroundScanFailover(t *testing.T) {
	api, kc := kubeEnv(t)
	cs, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := fmt.Sprintf("%04d", rand.IntN(10000))
	ns, lease := "scanfo-"+id, "arbiter-scanfo-"+id
	testNamespace(t, cs, ns, id)
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	const n = 300
	uids := map[string]string{} // pod UID → name
	for i := range n {
		name := fmt.Sprintf("good-%03d", i)
		if i%2 == 1 {
			name = fmt.Sprintf("bad-%03d", i)
		}
		p, err := cs.CoreV1().Pods(ns).Create(ctx, podObject(name), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[string(p.UID)] = name
	}
	args := []string{"--kube-source", "--kubeconfig", api.Kubeconfig, "--lease-name", lease, "--lease-namespace", ns,
		"--lease-duration", "3s", "--lease-renew-deadline", "2s", "--lease-retry-period", "250ms",
		"--kube-policy-status=false", "--kube-report-qps", "20", "--kube-report-workers", "2"}
	var procs []*proc
	for i := range 2 {
		name := fmt.Sprintf("replica-%d", i)
		procs = append(procs, startProc(t, name, t.TempDir(), freeAddr(t), append(args, "--replica-id", name)...))
	}
	primary, followers := roles(t, 30*time.Second, procs...)

	// A policy failing the bad-* pods of this namespace only.
	pol := policy("e2e-scanfo-"+id, "bad")
	mc := pol["spec"].(map[string]any)["matchConstraints"].(map[string]any)
	mc["namespaceSelector"] = map[string]any{"matchLabels": map[string]any{"arbiter-e2e": id}}
	t.Cleanup(func() { kubeDelete(t, kc, pol) })
	kubeApply(t, kc, pol)

	reports := func() map[string]string { // report name → resourceVersion
		l, err := kc.Dynamic.Resource(polrGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, r := range l.Items {
			out[r.GetName()] = r.GetResourceVersion()
		}
		return out
	}
	deadline := time.Now().Add(60 * time.Second)
	var before map[string]string
	for {
		before = reports()
		if len(before) >= 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d reports after 60 s:\n%s", len(before), tail(primary.log.String(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(before) >= n {
		t.Fatalf("the scan finished before the primary was killed (%d reports)", len(before))
	}
	for _, f := range followers {
		if w := scanWrites(f); len(w) > 0 {
			t.Fatalf("standby %s scanned:\n%s", f.name, strings.Join(w, "\n"))
		}
	}
	primary.stop(syscall.SIGKILL)
	t.Logf("primary %s killed with %d of %d reports written", primary.name, len(before), n)
	next, _ := roles(t, 30*time.Second, followers...)

	deadline = time.Now().Add(90 * time.Second)
	var after map[string]string
	for {
		after = reports()
		if len(after) >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d reports of %d after the failover:\n%s", len(after), n, tail(next.log.String(), 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
	l, err := kc.Dynamic.Resource(polrGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range l.Items {
		name, ok := uids[r.GetName()]
		if !ok {
			t.Errorf("report %s names no pod", r.GetName())
			continue
		}
		if seen[r.GetName()] {
			t.Errorf("two reports for %s", name)
		}
		seen[r.GetName()] = true
		rs, _ := r.Object["results"].([]any)
		want := "pass"
		if strings.HasPrefix(name, "bad-") {
			want = "fail"
		}
		if len(rs) != 1 || rs[0].(map[string]any)["result"] != want {
			t.Errorf("report of %s: %v", name, rs)
		}
		if owners := r.GetOwnerReferences(); len(owners) != 1 || owners[0].Name != name {
			t.Errorf("report of %s: owners %+v", name, owners)
		}
	}
	if len(seen) != n {
		t.Errorf("%d pods have a report, want %d", len(seen), n)
	}
	for name, rv := range before {
		if after[name] != rv {
			t.Errorf("report %s (%s), written by the killed primary, was written again (%s → %s)", name, uids[name], rv, after[name])
		}
	}
}
