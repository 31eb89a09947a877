package e2e

// ImageValidatingPolicies served by a real `arbiter serve` whose image
// verifier is configured by the imageVerification section of its config
// file, against an in-process OCI registry (internal/ivtest) holding
// cosign-signed images: `arbiter apply --server`, the Prometheus metrics,
// and (with ARBITER_K8S_RUN) the real kube-apiserver calling the webhook
// shim, which admits a signed image with its tag pinned to the digest in
// the stored Pod and denies an unsigned one.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/internal/certs/certstest"
	"github.com/arbiter-pdp/arbiter/internal/ivtest"
	"github.com/arbiter-pdp/arbiter/internal/k8stest"
)

// imageServer starts a primary whose config file's imageVerification
// section lets it reach the registry r over plain HTTP, with the extra
// flags, and writes r's cosign policy "signed-images" to it.
func imageServer(t *testing.T, r *ivtest.Registry, key *ivtest.CosignKey, extra ...string) *proc {
	t.Helper()
	config := filepath.Join(t.TempDir(), "arbiter.yaml")
	if err := os.WriteFile(config, []byte("imageVerification:\n  timeout: 5s\n  insecureRegistries: ["+r.Host+"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startPrimary(t, append([]string{"--config", config}, extra...)...)
	write(t, p, upsert(r.Policy("signed-images", key)))
	return p
}

// TestImageVerificationServe: `arbiter apply --server` against a server
// holding an ImageValidatingPolicy: the signed image passes, the unsigned
// one fails with the policy's message; the metrics endpoint exports the
// verifier's counters; bad configurations are refused naming the field.
func TestImageVerificationServe(t *testing.T) {
	r := ivtest.NewRegistry(t)
	key := ivtest.NewCosignKey(t)
	signed := r.Push("app:v1")
	key.Sign(t, signed)
	unsigned := r.Push("unsigned:v1")
	metricsAddr := freeAddr(t)
	p := imageServer(t, r, key, "--metrics-listen", metricsAddr)

	dir := t.TempDir()
	manifests := filepath.Join(dir, "pods.yaml")
	pods := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: signed, namespace: apps}
spec: {containers: [{name: c, image: %q}]}
---
apiVersion: v1
kind: Pod
metadata: {name: unsigned, namespace: apps}
spec: {containers: [{name: c, image: %q}]}
`, r.Ref("app:v1"), unsigned.String())
	if err := os.WriteFile(manifests, []byte(pods), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, "apply", "--server", p.addr, "-o", "json", manifests)
	if code != 1 {
		t.Fatalf("apply --server: exit %d, want 1 (an unsigned image)\n%s%s", code, out, errOut)
	}
	// apply --server decides as admission does: the tag is pinned (the
	// mutated Pod is printed before the reports).
	var items []json.RawMessage
	if err := json.Unmarshal([]byte(out), &items); err != nil || len(items) != 3 {
		t.Fatalf("apply --server output: %v\n%s", err, out)
	}
	var mutated struct {
		Kind string
		Spec struct{ Containers []struct{ Image string } }
	}
	if err := json.Unmarshal(items[0], &mutated); err != nil || mutated.Kind != "Pod" || len(mutated.Spec.Containers) != 1 ||
		mutated.Spec.Containers[0].Image != r.Ref("app:v1")+"@"+signed.DigestStr() {
		t.Errorf("apply --server: the signed Pod is not printed pinned: %v\n%s", err, items[0])
	}
	got := map[string]string{}
	for _, item := range items[1:] {
		var rep report
		if err := json.Unmarshal(item, &rep); err != nil || rep.Kind != "PolicyReport" {
			t.Fatalf("report: %v\n%s", err, item)
		}
		for _, res := range rep.Results {
			if res.Policy == "signed-images" && res.Rule == "signed-images" {
				got[rep.Scope.Name] = res.Result + ": " + res.Message
			}
		}
	}
	if got["signed"] != "pass: success" || got["unsigned"] != "fail: images must be signed" {
		t.Fatalf("apply --server results: %v\n%s", got, out)
	}

	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`arbiter_image_verifications_total{outcome="verified"} 1`,
		`arbiter_image_verifications_total{outcome="not_verified"} 1`,
		"arbiter_image_registry_request_duration_seconds_count ",
		`arbiter_image_verification_cache_total{result="miss"}`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, grepLines(string(body), "arbiter_image_"))
		}
	}

	// Refused configurations, naming what is wrong.
	bad := filepath.Join(dir, "bad.yaml")
	for _, c := range []struct{ config, flag, want string }{
		{"imageVerification:\n  timout: 5s\n", "", `imageVerification: json: unknown field "timout"`},
		{"imageVerification:\n  insecureRegistries: [http://x]\n", "", `imageVerification: insecureRegistries[0]: "http://x" is not a registry host[:port]`},
		{"imageVerification: {}\n", "--image-verification-config=" + bad, "--image-verification-config and the config file's imageVerification section both configure the image verifier"},
		{"imageVerification: {}\n", "--no-image-verification", "--no-image-verification: the config file has an imageVerification section"},
	} {
		if err := os.WriteFile(bad, []byte(c.config), 0o644); err != nil {
			t.Fatal(err)
		}
		args := []string{"serve", "--config", bad, "--listen", freeAddr(t), "--data", t.TempDir()}
		if c.flag != "" {
			args = append(args, c.flag)
		}
		_, errOut, code := run(t, args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("serve with %q %s: exit %d, want 2 and %q:\n%s", c.config, c.flag, code, c.want, errOut)
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestImageVerificationThroughAPIServer: kube-apiserver → the shim's
// /mutate and /validate → `arbiter serve` with an ImageValidatingPolicy:
// a Pod of a signed image given by tag is admitted and stored with the
// tag pinned to the verified digest; a Pod of an unsigned image is denied
// with the policy's message; the same for Deployments (autogen: the pod
// template is pinned).
func TestImageVerificationThroughAPIServer(t *testing.T) {
	api := k8stest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	r := ivtest.NewRegistry(t)
	key := ivtest.NewCosignKey(t)
	signed := r.Push("app:v1")
	key.Sign(t, signed)
	r.Push("unsigned:v1")
	primary := imageServer(t, r, key)

	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "ca")
	leaf := ca.Issue(t, "shim", certstest.Spec{CommonName: "arbiter-webhook", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	shimAddr := freeAddr(t)
	s := startShim(t, shimAddr, primary.addr, leaf, ca)

	cs, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("ivpol-%d", time.Now().UnixNano()%1_000_000)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"arbiter-e2e": ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	installWebhooks(ctx, t, cs, ns, shimAddr, ca)

	pods := cs.CoreV1().Pods(ns)
	no := false
	pod := func(name, image string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &no, Containers: []corev1.Container{{Name: "c", Image: image}}}}
	}
	pinned := r.Ref("app:v1") + "@" + signed.DigestStr()
	// Both webhooks are registered when a dry-run Pod comes back pinned
	// (the API server's webhook configuration cache is eventually
	// consistent).
	deadline := time.Now().Add(30 * time.Second)
	for {
		created, err := pods.Create(ctx, pod("probe", r.Ref("app:v1")), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil && created.Spec.Containers[0].Image == pinned {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server never called the mutating webhook (%v):\n%s\n%s", err, tail(s.log.String(), 30), tail(primary.log.String(), 30))
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Signed, by tag: admitted, stored pinned to the digest.
	if _, err := pods.Create(ctx, pod("signed", r.Ref("app:v1")), metav1.CreateOptions{}); err != nil {
		t.Fatalf("CREATE a Pod of a signed image: %v", err)
	}
	stored, err := pods.Get(ctx, "signed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := stored.Spec.Containers[0].Image; got != pinned {
		t.Errorf("stored image %q, want %q", got, pinned)
	}

	// Unsigned: denied with the policy's message.
	_, err = pods.Create(ctx, pod("unsigned", r.Ref("unsigned:v1")), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `denied the request`) ||
		!strings.Contains(err.Error(), "Policy signed-images failed: images must be signed") {
		t.Errorf("CREATE a Pod of an unsigned image: %v", err)
	}
	if _, err := pods.Get(ctx, "unsigned", metav1.GetOptions{}); err == nil {
		t.Errorf("the unsigned Pod was stored")
	}

	// A Deployment (the policy's autogen for Pod controllers): its pod
	// template is pinned; an unsigned template image is denied.
	one := int32(1)
	deployment := func(name, image string) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.DeploymentSpec{Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: pod("", image).Spec}}}
	}
	deps := cs.AppsV1().Deployments(ns)
	got, err := deps.Create(ctx, deployment("signed", r.Ref("app:v1")), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("CREATE a Deployment of a signed image: %v", err)
	}
	if img := got.Spec.Template.Spec.Containers[0].Image; img != pinned {
		t.Errorf("stored Deployment template image %q, want %q", img, pinned)
	}
	_, err = deps.Create(ctx, deployment("unsigned", r.Ref("unsigned:v1")), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "Policy signed-images failed: images must be signed") {
		t.Errorf("CREATE a Deployment of an unsigned image: %v", err)
	}
}

// installWebhooks creates deploy/'s Mutating- and
// ValidatingWebhookConfiguration, pointed at the shim at shimAddr and
// narrowed to namespace ns; they are deleted when the test ends.
func installWebhooks(ctx context.Context, t *testing.T, cs *kubernetes.Clientset, ns, shimAddr string, ca *certstest.CA) {
	t.Helper()
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	for file, into := range map[string]any{"../deploy/mutatingwebhookconfiguration.yaml": &mwc, "../deploy/validatingwebhookconfiguration.yaml": &vwc} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(raw, into); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	point := func(cc *admissionregistrationv1.WebhookClientConfig, sel *metav1.LabelSelector) {
		url := "https://" + shimAddr + *cc.Service.Path
		*cc = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca.CertPEM}
		sel.MatchLabels = map[string]string{"arbiter-e2e": ns}
	}
	mwc.Name, vwc.Name = "arbiter-"+ns, "arbiter-"+ns
	point(&mwc.Webhooks[0].ClientConfig, mwc.Webhooks[0].NamespaceSelector)
	point(&vwc.Webhooks[0].ClientConfig, vwc.Webhooks[0].NamespaceSelector)
	mwcs := cs.AdmissionregistrationV1().MutatingWebhookConfigurations()
	vwcs := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := mwcs.Create(ctx, &mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := vwcs.Create(ctx, &vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := mwcs.Delete(ctx, mwc.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting the mutating webhook configuration: %v", err)
		}
		if err := vwcs.Delete(ctx, vwc.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting the validating webhook configuration: %v", err)
		}
	})
}
