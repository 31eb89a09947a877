package e2e

// `arbiter serve --kube-source --kube-cleanup` replicas against a real
// kube-apiserver: only the primary runs the DeletingPolicies; killed in the
// middle of a run, the next primary finishes it without deleting, logging
// or recording anything twice. Skipped when ARBITER_K8S_RUN is not set.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/arbiter-pdp/arbiter/internal/k8stest"
)

var deletedRe = regexp.MustCompile(`msg="resource deleted".* name=(\S+)`)

// deletedIn returns how many times each object's deletion is logged.
func deletedIn(procs ...*proc) map[string]int {
	out := map[string]int{}
	for _, p := range procs {
		for _, m := range deletedRe.FindAllStringSubmatch(p.log.String(), -1) {
			out[m[1]]++
		}
	}
	return out
}

func leftConfigMaps(t *testing.T, kc *k8stest.Client, ns string) int {
	t.Helper()
	l, err := kc.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace(ns).List(context.Background(),
		metav1.ListOptions{LabelSelector: "cleanup=yes"})
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

// TestCleanupFailover: three replicas; the primary alone runs the
// DeletingPolicy (the followers log no run); SIGKILLed while it deletes a
// batch of ConfigMaps, the next primary deletes the rest; no deletion is
// logged twice, no object has two Events.
func TestCleanupFailover(t *testing.T) {
	api, kc := kubeEnv(t)
	cs, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("%04d", rand.IntN(10000))
	ns, lease, name := "cleanup-"+id, "arbiter-cleanup-"+id, "e2e-cleanup-"+id
	kubeApply(t, kc, namespace(ns, nil))
	args := []string{"--kube-source", "--kubeconfig", api.Kubeconfig, "--lease-name", lease, "--lease-namespace", ns,
		"--lease-duration", "3s", "--lease-renew-deadline", "2s", "--lease-retry-period", "250ms", "--kube-cleanup"}
	var procs []*proc
	for i := range 3 {
		n := fmt.Sprintf("replica-%d", i)
		procs = append(procs, startProc(t, n, t.TempDir(), freeAddr(t), append(args, "--replica-id", n)...))
	}
	primary, followers := roles(t, 30*time.Second, procs...)
	pol := map[string]any{
		"apiVersion": "policies.kyverno.io/v1", "kind": "DeletingPolicy",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"schedule": "*/2 * * * * * *",
			"matchConstraints": map[string]any{
				"resourceRules":     []any{map[string]any{"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"configmaps"}}},
				"objectSelector":    map[string]any{"matchLabels": map[string]any{"cleanup": "yes"}},
				"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": ns}},
			},
			"conditions": []any{map[string]any{"name": "all", "expression": "true"}},
		},
	}
	t.Cleanup(func() { kubeDelete(t, kc, pol) })
	cm := func(name string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"cleanup": "yes"}}}
	}
	// The primary alone runs it.
	for i := range 10 {
		kubeApply(t, kc, cm(fmt.Sprintf("first-%02d", i)))
	}
	kubeApply(t, kc, pol)
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				for _, p := range procs {
					t.Logf("--- %s log:\n%s", p.name, tail(p.log.String(), 40))
				}
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wait("the first batch deleted", func() bool { return leftConfigMaps(t, kc, ns) == 0 })
	for _, f := range followers {
		if strings.Contains(f.log.String(), "running the DeletingPolicy") || len(deletedIn(f)) > 0 {
			t.Fatalf("follower %s ran the DeletingPolicy:\n%s", f.name, tail(f.log.String(), 40))
		}
	}

	// Killed in the middle of a batch.
	const n = 150
	for i := range n {
		kubeApply(t, kc, cm(fmt.Sprintf("second-%03d", i)))
	}
	wait("the primary deleting the second batch", func() bool {
		c := 0
		for k := range deletedIn(primary) {
			if strings.HasPrefix(k, "second-") {
				c++
			}
		}
		return c >= 5
	})
	primary.stop(syscall.SIGKILL)
	killedAt := leftConfigMaps(t, kc, ns)
	next, rest := roles(t, 30*time.Second, followers...)
	t.Logf("primary %s killed with %d ConfigMaps left, %s took over", primary.name, killedAt, next.name)
	wait("the second batch deleted", func() bool { return leftConfigMaps(t, kc, ns) == 0 })
	for _, f := range rest {
		if strings.Contains(f.log.String(), "running the DeletingPolicy") {
			t.Errorf("follower %s ran the DeletingPolicy", f.name)
		}
	}
	logged := deletedIn(procs...)
	for k, c := range logged {
		if c > 1 {
			t.Errorf("%s: deletion logged %d times", k, c)
		}
	}
	// Every deletion has at most one Event (one was lost only if the kill
	// fell between a deletion and its Event).
	evs, err := cs.EventsV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	perObject := map[string]int{}
	for _, e := range evs.Items {
		if e.Regarding.Name == name && e.Related != nil && e.Reason == "PolicyApplied" {
			perObject[e.Related.Name]++
		}
	}
	for k, c := range perObject {
		if c > 1 {
			t.Errorf("%s: %d PolicyApplied Events", k, c)
		}
	}
	if len(perObject) < 10+n-1 || len(logged) < 10+n-1 {
		t.Errorf("%d objects evented, %d logged, of %d deleted", len(perObject), len(logged), 10+n)
	}
	if c := len(deletedIn(next)); c == 0 || killedAt == 0 {
		t.Errorf("the kill did not fall in the middle of the batch (%d left), or the new primary deleted nothing (%d)", killedAt, c)
	}
}
