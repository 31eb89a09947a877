package e2e

// The real kube-apiserver calling the webhook shim's /mutate and /validate
// (the Mutating- and ValidatingWebhookConfiguration of deploy/) in front of
// a real `arbiter serve` holding MutatingPolicies and a ValidatingPolicy:
// Pods and Deployments come back mutated, a Pod that only a mutation makes
// compliant is admitted, one that stays non-compliant is denied with the
// validating policy's message. Skipped when ARBITER_K8S_RUN is not set.

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/internal/certs/certstest"
	"github.com/arbiter-pdp/arbiter/internal/k8stest"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// mutationPolicies: labels, a defaulted securityContext and an added
// volume (apply configurations, so autogen rewrites them for Deployments),
// and a ValidatingPolicy that requires runAsNonRoot.
const mutationPolicies = `
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata:
  name: default-team-label
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  matchConditions:
    - name: no-team
      expression: "!has(object.metadata.labels) || !('team' in object.metadata.labels)"
  mutations:
    - patchType: ApplyConfiguration
      applyConfiguration:
        expression: 'Object{metadata: Object.metadata{labels: {"team": "unassigned"}}}'
---
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata:
  name: default-run-as-non-root
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  matchConditions:
    - name: unset
      expression: "!has(object.spec.securityContext) || !has(object.spec.securityContext.runAsNonRoot)"
  mutations:
    - patchType: ApplyConfiguration
      applyConfiguration:
        expression: 'Object{spec: Object.spec{securityContext: Object.spec.securityContext{runAsNonRoot: true}}}'
---
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata:
  name: add-tmp-volume
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  mutations:
    - patchType: ApplyConfiguration
      applyConfiguration:
        expression: >-
          Object{spec: Object.spec{volumes: [Object.spec.volumes{name: "tmp", emptyDir: Object.spec.volumes.emptyDir{}}]}}
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: require-run-as-non-root
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  validations:
    - expression: "has(object.spec.securityContext) && object.spec.securityContext.?runAsNonRoot.orValue(false) == true"
      message: "pods must run as non-root"
`

// TestMutationThroughAPIServer: kube-apiserver → the shim's /mutate, then
// /validate → `arbiter serve`.
func TestMutationThroughAPIServer(t *testing.T) {
	api := k8stest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	primary := startPrimary(t)
	docs, err := manifest.SplitNonEmptyDocuments([]byte(mutationPolicies))
	if err != nil {
		t.Fatal(err)
	}
	var changes []*arbiterv1.Change
	for _, doc := range docs {
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		changes = append(changes, upsert(obj))
	}
	write(t, primary, changes...)

	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "ca")
	leaf := ca.Issue(t, "shim", certstest.Spec{CommonName: "arbiter-webhook", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	shimAddr := freeAddr(t)
	s := startShim(t, shimAddr, primary.addr, leaf, ca)

	cs, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("mutation-%d", time.Now().UnixNano()%1_000_000)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"arbiter-e2e": ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// deploy/'s webhook configurations, pointed at the shim and narrowed
	// to the test's namespace.
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

	pods := cs.CoreV1().Pods(ns)
	no := false
	pod := func(name string, sc *corev1.PodSecurityContext) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &no, SecurityContext: sc,
			Containers: []corev1.Container{{Name: "c", Image: "nginx:1.29"}}}}
	}
	// Both webhooks are registered when a Pod comes back mutated (the API
	// server's webhook configuration cache is eventually consistent).
	var created *corev1.Pod
	deadline := time.Now().Add(30 * time.Second)
	for {
		created, err = pods.Create(ctx, pod("probe", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil && created.Labels["team"] == "unassigned" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server never called the mutating webhook (%v):\n%s", err, tail(s.log.String(), 30))
		}
		time.Sleep(200 * time.Millisecond)
	}

	// A Pod only the mutations make compliant: admitted, and stored mutated.
	created, err = pods.Create(ctx, pod("plain", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("CREATE a Pod the mutations make compliant: %v", err)
	}
	if created.Labels["team"] != "unassigned" || created.Spec.SecurityContext == nil || created.Spec.SecurityContext.RunAsNonRoot == nil ||
		!*created.Spec.SecurityContext.RunAsNonRoot || len(created.Spec.Volumes) != 1 || created.Spec.Volumes[0].Name != "tmp" || created.Spec.Volumes[0].EmptyDir == nil {
		t.Errorf("the stored Pod is not mutated: labels %v, securityContext %+v, volumes %+v", created.Labels, created.Spec.SecurityContext, created.Spec.Volumes)
	}

	// A Pod that stays non-compliant (it says runAsNonRoot: false, which the
	// defaulting leaves alone): denied with the validating policy's message.
	_, err = pods.Create(ctx, pod("root", &corev1.PodSecurityContext{RunAsNonRoot: &no}), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `admission webhook "validate.arbiter.dev" denied the request`) ||
		!strings.Contains(err.Error(), "Policy require-run-as-non-root failed: pods must run as non-root") {
		t.Errorf("CREATE a Pod that stays non-compliant: %v", err)
	}

	// A Deployment: the autogen variants mutate its pod template.
	one := int32(1)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: appsv1.DeploymentSpec{Replicas: &one,
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
			Spec: pod("", nil).Spec}}}
	got, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("CREATE Deployment: %v", err)
	}
	tmpl := got.Spec.Template
	if tmpl.Labels["team"] != "unassigned" || tmpl.Labels["app"] != "web" || tmpl.Spec.SecurityContext == nil || tmpl.Spec.SecurityContext.RunAsNonRoot == nil ||
		!*tmpl.Spec.SecurityContext.RunAsNonRoot || len(tmpl.Spec.Volumes) != 1 || tmpl.Spec.Volumes[0].Name != "tmp" {
		t.Errorf("the stored Deployment's template is not mutated: labels %v, securityContext %+v, volumes %+v", tmpl.Labels, tmpl.Spec.SecurityContext, tmpl.Spec.Volumes)
	}
	if _, ok := got.Labels["team"]; ok {
		t.Errorf("the Deployment itself was labelled: %v", got.Labels)
	}
}
