package e2e

// `arbiter serve --kube-source --kube-webhooks managed` against a real
// kube-apiserver: the webhook configurations made from the policies send
// the API server to the shim only for what some policy matches; the
// policies' status is written by the primary only, and survives a
// failover unchanged. Skipped when ARBITER_K8S_RUN is not set.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/arbiter-pdp/arbiter/internal/certs/certstest"
	"github.com/arbiter-pdp/arbiter/internal/k8stest"
)

var vpolGVR = schema.GroupVersionResource{Group: "policies.kyverno.io", Version: "v1", Resource: "validatingpolicies"}

// cleanupWebhooks deletes the managed configurations named name when the
// test ends (a Fail webhook left behind would police the next tests).
func cleanupWebhooks(t *testing.T, cs kubernetes.Interface, name string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
		if err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
}

// testNamespace makes a namespace labelled arbiter-e2e=id, with the
// ServiceAccount the ServiceAccount admission plugin looks for.
func testNamespace(t *testing.T, cs kubernetes.Interface, name, id string) {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{"arbiter-e2e": id}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// policyReady waits until the ValidatingPolicy's status says ready
// (kubectl's jsonpath {.status.conditionStatus.ready}) and returns it.
func policyReady(t *testing.T, kc *k8stest.Client, name string) *unstructured.Unstructured {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		u, err := kc.Dynamic.Resource(vpolGVR).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ready, _, _ := unstructured.NestedBool(u.Object, "status", "conditionStatus", "ready"); ready {
			return u
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not ready: %v", name, u.Object["status"])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func podObject(name string) *corev1.Pod {
	no := false
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
		AutomountServiceAccountToken: &no, Containers: []corev1.Container{{Name: "c", Image: "nginx:1.29"}}}}
}

// TestManagedWebhooksThroughAPIServer: the primary keeps a
// ValidatingWebhookConfiguration made from the cluster's ValidatingPolicy
// (pods only), pointing at the shim with the configured CA: the API
// server calls the shim for Pods and never for ConfigMaps; the policy is
// enforced, its status says Ready; deleted, its webhook goes, and the API
// server stops calling the shim.
func TestManagedWebhooksThroughAPIServer(t *testing.T) {
	api, kc := kubeEnv(t)
	cs, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := fmt.Sprintf("%04d", rand.IntN(10000))
	ns, name := "managed-"+id, "arbiter-e2e-"+id
	testNamespace(t, cs, ns, id)
	cleanupWebhooks(t, cs, name)

	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "ca")
	leaf := ca.Issue(t, "shim", certstest.Spec{CommonName: "arbiter-webhook", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	shimAddr := freeAddr(t)
	primary := startPrimary(t, "--kube-source", "--kubeconfig", api.Kubeconfig, "--lease-name", "",
		"--kube-webhooks", "managed", "--kube-webhook-name", name, "--kube-webhook-url", "https://"+shimAddr,
		"--kube-webhook-ca-file", ca.File, "--kube-webhook-namespace-selector", "arbiter-e2e="+id)
	s := startShim(t, shimAddr, primary.addr, leaf, ca)

	prefix := "mwe2e" + id
	vp := policy("e2e-managed-"+id, prefix)
	t.Cleanup(func() { kubeDelete(t, kc, vp) })
	kubeApply(t, kc, vp)
	u := policyReady(t, kc, "e2e-managed-"+id)
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditionStatus", "conditions")
	if len(conds) != 2 || conds[0].(map[string]any)["message"] != "Webhook configured." {
		t.Fatalf("conditions %v", conds)
	}

	// Enforced once the API server's webhook cache has the configuration.
	pods := cs.CoreV1().Pods(ns)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := pods.Create(ctx, podObject(prefix+"-probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), prefix+" pods are not allowed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bad pod is still admitted (%v):\n%s", err, tail(s.log.String(), 20))
		}
		time.Sleep(200 * time.Millisecond)
	}
	vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(vwc.Webhooks) != 1 || string(vwc.Webhooks[0].ClientConfig.CABundle) != string(ca.CertPEM) || *vwc.Webhooks[0].ClientConfig.URL != "https://"+shimAddr+"/validate" {
		t.Fatalf("webhooks %+v", vwc.Webhooks)
	}

	// A ConfigMap, a kind no policy matches: the shim is not called.
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, podObject("fine"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a compliant pod is refused: %v", err)
	}
	calls := func(kind string) int { return strings.Count(s.log.String(), "kind="+kind+" ") }
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s:\n%s", what, tail(s.log.String(), 20))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	eventually("the shim logged the pod's decision", func() bool { return strings.Contains(s.log.String(), "name=fine") })
	if n := calls("v1/ConfigMap"); n != 0 {
		t.Fatalf("the API server called the shim %d times for a ConfigMap:\n%s", n, tail(s.log.String(), 20))
	}

	// Without the policy: no webhook, no call for Pods either.
	kubeDelete(t, kc, vp)
	deadline = time.Now().Add(30 * time.Second)
	for {
		vwc, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err == nil && len(vwc.Webhooks) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook stayed: %v %+v", err, vwc)
		}
		time.Sleep(50 * time.Millisecond)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		_, err := pods.Create(ctx, podObject(prefix+"-after"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bad pod is still refused without the policy: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	before := calls("v1/Pod")
	if _, err := pods.Create(ctx, podObject("later"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if n := calls("v1/Pod") - before; n != 0 {
		t.Fatalf("with no policy the API server still called the shim %d times for a Pod", n)
	}
}

// statusWrites are the lines of a replica's log that say it wrote to the
// cluster.
func statusWrites(p *proc) []string {
	var out []string
	for _, l := range strings.Split(p.log.String(), "\n") {
		if strings.Contains(l, "policy status written") || strings.Contains(l, "WebhookConfiguration written") {
			out = append(out, l)
		}
	}
	return out
}

// TestPolicyStatusFailover: with three replicas, only the primary writes
// the status and the webhook configurations; killed, the next primary
// writes nothing for what did not change (the status keeps its revision
// and transition times: no flapping), then keeps both up to date.
func TestPolicyStatusFailover(t *testing.T) {
	api, kc := kubeEnv(t)
	cs, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := fmt.Sprintf("%04d", rand.IntN(10000))
	ns, lease, name := "failover-"+id, "arbiter-failover-"+id, "arbiter-failover-"+id
	kubeApply(t, kc, namespace(ns, nil))
	cleanupWebhooks(t, cs, name)
	args := []string{"--kube-source", "--kubeconfig", api.Kubeconfig, "--lease-name", lease, "--lease-namespace", ns,
		"--lease-duration", "3s", "--lease-renew-deadline", "2s", "--lease-retry-period", "250ms",
		"--kube-webhooks", "managed", "--kube-webhook-name", name, "--kube-webhook-url", "https://127.0.0.1:1",
		"--kube-webhook-namespace-selector", "arbiter-e2e=" + id}
	var procs []*proc
	for i := range 3 {
		n := fmt.Sprintf("replica-%d", i)
		procs = append(procs, startProc(t, n, t.TempDir(), freeAddr(t), append(args, "--replica-id", n)...))
	}
	primary, followers := roles(t, 30*time.Second, procs...)

	a := policy("e2e-failover-a-"+id, "fa"+id)
	t.Cleanup(func() { kubeDelete(t, kc, a) })
	kubeApply(t, kc, a)
	before := policyReady(t, kc, "e2e-failover-a-"+id)
	vwcs := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	var vwc *admissionregistrationv1.ValidatingWebhookConfiguration
	deadline := time.Now().Add(30 * time.Second)
	for {
		vwc, err = vwcs.Get(ctx, name, metav1.GetOptions{})
		if err == nil && len(vwc.Webhooks) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no webhook: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, f := range followers {
		if w := statusWrites(f); len(w) > 0 {
			t.Fatalf("follower %s wrote to the cluster:\n%s", f.name, strings.Join(w, "\n"))
		}
	}

	vwcRV := vwc.ResourceVersion
	primary.stop(syscall.SIGKILL)
	next, rest := roles(t, 30*time.Second, followers...)
	t.Logf("primary %s killed, %s took over", primary.name, next.name)

	// A change after the failover: the new primary writes its status and
	// webhook. By then it has reconciled everything else.
	b := policy("e2e-failover-b-"+id, "fb"+id)
	t.Cleanup(func() { kubeDelete(t, kc, b) })
	kubeApply(t, kc, b)
	policyReady(t, kc, "e2e-failover-b-"+id)
	deadline = time.Now().Add(30 * time.Second)
	for {
		vwc, err = vwcs.Get(ctx, name, metav1.GetOptions{})
		if err == nil && len(vwc.Webhooks) == 1 && strings.Contains(fmt.Sprint(vwc.Webhooks[0].Rules), "pods") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhooks after the failover: %v %+v", err, vwc)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if vwc.ResourceVersion != vwcRV {
		t.Errorf("the ValidatingWebhookConfiguration was rewritten although the second policy adds no rule (%s → %s)", vwcRV, vwc.ResourceVersion)
	}
	after, err := kc.Dynamic.Resource(vpolGVR).Get(ctx, "e2e-failover-a-"+id, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.GetResourceVersion() != before.GetResourceVersion() {
		t.Errorf("the new primary rewrote an unchanged policy's status:\nbefore %v\nafter  %v", before.Object["status"], after.Object["status"])
	}
	for _, l := range statusWrites(next) {
		if strings.Contains(l, "e2e-failover-a-") {
			t.Errorf("the new primary wrote the unchanged policy's status: %s", l)
		}
	}
	if len(statusWrites(next)) == 0 {
		t.Error("the new primary wrote nothing")
	}
	for _, f := range rest {
		if w := statusWrites(f); len(w) > 0 {
			t.Errorf("follower %s wrote to the cluster:\n%s", f.name, strings.Join(w, "\n"))
		}
	}

	// The new primary keeps them up to date.
	kubeDelete(t, kc, a)
	kubeDelete(t, kc, b)
	deadline = time.Now().Add(30 * time.Second)
	for {
		vwc, err = vwcs.Get(ctx, name, metav1.GetOptions{})
		if err == nil && len(vwc.Webhooks) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhooks left after the policies went: %v %+v", err, vwc)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
