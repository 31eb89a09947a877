package e2e

// `arbiter serve --kube-source` replicas against a real kube-apiserver
// (internal/k8stest), skipped when ARBITER_K8S_RUN is not set.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/arbiter-pdp/arbiter/internal/k8stest"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// kubeEnv is the shared API server with the policies.kyverno.io CRDs.
func kubeEnv(t *testing.T) (*k8stest.Server, *k8stest.Client) {
	t.Helper()
	api := k8stest.Shared(t)
	kc, err := k8stest.NewClient(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := kc.InstallCRDs(ctx, "../deploy/kube-source/crds/*.json"); err != nil {
		t.Fatal(err)
	}
	return api, kc
}

func kubeApply(t *testing.T, kc *k8stest.Client, obj map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kc.Apply(ctx, obj); err != nil {
		t.Fatal(err)
	}
}

func kubeDelete(t *testing.T, kc *k8stest.Client, obj map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := kc.Delete(ctx, obj); err != nil {
		t.Error(err)
	}
}

// roles waits until exactly one of procs is a serving primary and every
// other one a serving follower of it.
func roles(t *testing.T, timeout time.Duration, procs ...*proc) (*proc, []*proc) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var primary *proc
		var followers []*proc
		var seen []string
		for _, p := range procs {
			st := p.status()
			seen = append(seen, fmt.Sprintf("%s=%s(primary %q, serving %v, rev %d)", p.name, st.GetRole(), st.GetPrimary(), st.GetServing(), st.GetRevision()))
			switch {
			case st.GetRole() == arbiterv1.Role_ROLE_PRIMARY && st.GetServing():
				if primary != nil {
					t.Fatalf("two primaries: %s", strings.Join(seen, " "))
				}
				primary = p
			case st.GetRole() == arbiterv1.Role_ROLE_FOLLOWER && st.GetServing():
				followers = append(followers, p)
			}
		}
		ok := primary != nil && len(followers) == len(procs)-1
		for _, f := range followers {
			if ok && f.status().GetPrimary() != primary.addr {
				ok = false
			}
		}
		if ok {
			return primary, followers
		}
		if time.Now().After(deadline) {
			for _, p := range procs {
				t.Logf("--- %s log:\n%s", p.name, tail(p.log.String(), 30))
			}
			t.Fatalf("no primary with every other replica following it: %s", strings.Join(seen, " "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func decideOn(t *testing.T, p *proc, pod []byte, minRevision uint64) *arbiterv1.DecideResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := p.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: pod, MinRevision: minRevision, Operation: arbiterv1.Operation_OPERATION_CREATE})
	if err != nil {
		t.Fatalf("%s: decide at min_revision %d: %v", p.name, minRevision, err)
	}
	if resp.GetRevision() < minRevision {
		t.Fatalf("%s decided at %d, below min_revision %d", p.name, resp.GetRevision(), minRevision)
	}
	return resp
}

// untilPrimaryDecides polls the primary until the pod's decision is
// allowed (or not), and returns the revision it was made at: the first
// revision the primary has with the change.
func untilPrimaryDecides(t *testing.T, p *proc, pod []byte, allowed bool) uint64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp := decideOn(t, p, pod, 0)
		if resp.GetAllowed() == allowed {
			return resp.GetRevision()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the decision did not become allowed=%v: %v\n%s", p.name, allowed, resp, tail(p.log.String(), 30))
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func podIn(name, ns string) []byte {
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": "nginx"}}},
	})
	return b
}

// Three `serve --kube-source` replicas elect one primary with a Lease; a
// policy and an exception created through client-go are honoured by every
// replica from the revision their commit produced; killing the primary
// moves the Lease, the new primary re-lists, writes resume at revisions
// above the old term's on every replica, and the old primary, restarted,
// follows the new one and converges although it was ahead of it.
func TestKubeSourceHA(t *testing.T) {
	api, kc := kubeEnv(t)
	id := fmt.Sprintf("%04d", rand.IntN(10000))
	ns, lease := "arbiter-e2e-"+id, "arbiter-e2e-"+id
	kubeApply(t, kc, namespace(ns, nil))
	args := []string{"--kube-source", "--kubeconfig", api.Kubeconfig, "--lease-name", lease, "--lease-namespace", ns,
		"--lease-duration", "3s", "--lease-renew-deadline", "2s", "--lease-retry-period", "250ms"}
	var procs []*proc
	for i := range 3 {
		name := fmt.Sprintf("replica-%d", i)
		procs = append(procs, startProc(t, name, t.TempDir(), freeAddr(t), append(args, "--replica-id", name)...))
	}
	primary, followers := roles(t, 30*time.Second, procs...)
	t.Logf("primary %s, followers %s %s", primary.name, followers[0].name, followers[1].name)

	// A write to a follower names the primary.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := followers[0].c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{upsert(namespace("x", nil))}})
	cancel()
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), primary.addr) {
		t.Fatalf("write to a follower: %v", err)
	}

	prefix := "hae2e" + id
	vp := policy("e2e-ha-"+id, prefix)
	t.Cleanup(func() { kubeDelete(t, kc, vp) })
	kubeApply(t, kc, vp)
	bad := podIn(prefix+"-pod", ns)
	r1 := untilPrimaryDecides(t, primary, bad, false)
	if r1>>32 == 0 {
		t.Fatalf("revision %d carries no term", r1)
	}
	for _, f := range followers {
		if resp := decideOn(t, f, bad, r1); resp.GetAllowed() {
			t.Fatalf("%s at revision %d ignores the policy: %v", f.name, r1, resp)
		}
	}

	ex := exception("e2e-ha-"+id, "e2e-ha-"+id, prefix+"-pod")
	ex["metadata"].(map[string]any)["namespace"] = ns
	kubeApply(t, kc, ex)
	r2 := untilPrimaryDecides(t, primary, bad, true)
	if r2 <= r1 {
		t.Fatalf("exception at %d, policy at %d", r2, r1)
	}
	for _, f := range followers {
		if resp := decideOn(t, f, bad, r2); !resp.GetAllowed() {
			t.Fatalf("%s at revision %d ignores the exception: %v", f.name, r2, resp)
		}
	}
	waitConverged(t, 10*time.Second, procs...)
	t.Logf("policy at revision %d (term %d), exception at %d on every replica", r1, r1>>32, r2)

	// Kill the primary: the Lease moves, the new primary starts a term.
	primary.stop(syscall.SIGKILL)
	next, rest := roles(t, 30*time.Second, followers...)
	st := next.status()
	t.Logf("new primary %s at revision %d (term %d)", next.name, st.GetRevision(), st.GetRevision()>>32)
	if st.GetRevision()>>32 <= r2>>32 {
		t.Fatalf("the new primary is at revision %d (term %d), not in a term after %d (term %d)", st.GetRevision(), st.GetRevision()>>32, r2, r2>>32)
	}
	// It re-listed: the exception still holds there.
	if resp := decideOn(t, next, bad, st.GetRevision()); !resp.GetAllowed() {
		t.Fatalf("the new primary lost the exception: %v", resp)
	}

	// Writes resume.
	prefix2 := "hbe2e" + id // not under the first policy's prefix
	vp2 := policy("e2e-ha2-"+id, prefix2)
	t.Cleanup(func() { kubeDelete(t, kc, vp2) })
	kubeApply(t, kc, vp2)
	bad2 := podIn(prefix2+"-pod", ns)
	r3 := untilPrimaryDecides(t, next, bad2, false)
	if r3 <= st.GetRevision() {
		t.Fatalf("the new policy at %d, the term started at %d", r3, st.GetRevision())
	}
	for _, f := range rest {
		if resp := decideOn(t, f, bad2, r3); resp.GetAllowed() {
			t.Fatalf("%s at revision %d ignores the new policy: %v", f.name, r3, resp)
		}
	}

	// The old primary comes back with its store (ahead of where the new
	// term started, in the old term) and converges on the new primary.
	primary.restart()
	all := append([]*proc{next}, rest...)
	all = append(all, primary)
	p2, _ := roles(t, 30*time.Second, all...)
	if p2 != next {
		t.Fatalf("the primary moved to %s without a failure", p2.name)
	}
	rev, _ := waitConverged(t, 20*time.Second, all...)
	t.Logf("new policy at revision %d; the restarted old primary follows, all at %d", r3, rev)
	if rev < r3 {
		t.Fatalf("converged at %d, below %d", rev, r3)
	}
	for _, p := range all {
		if resp := decideOn(t, p, bad2, r3); resp.GetAllowed() {
			t.Fatalf("%s ignores the new policy: %v", p.name, resp)
		}
		if resp := decideOn(t, p, bad, r3); !resp.GetAllowed() {
			t.Fatalf("%s ignores the exception: %v", p.name, resp)
		}
	}

	// A graceful stop releases the Lease: another replica takes over
	// without waiting for it to expire, in a new term.
	start := time.Now()
	next.stop(syscall.SIGTERM)
	var left []*proc
	for _, p := range all {
		if p != next {
			left = append(left, p)
		}
	}
	third, _ := roles(t, 30*time.Second, left...)
	st3 := third.status()
	t.Logf("after a graceful stop, %s is the primary in %v, at revision %d (term %d)", third.name, time.Since(start).Round(10*time.Millisecond), st3.GetRevision(), st3.GetRevision()>>32)
	if st3.GetRevision()>>32 <= rev>>32 {
		t.Fatalf("the third primary is at %d, not in a term after %d", st3.GetRevision(), rev)
	}
	waitConverged(t, 20*time.Second, left...)
}
