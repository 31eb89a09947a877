package e2e

// Mutate-existing MutatingPolicies through a real kube-apiserver: `arbiter
// serve --kube-source --kube-webhooks managed` and the webhook shim; the
// MutatingWebhookConfiguration made from the policies sends the triggers
// to the shim's /mutate; the replica that decides them updates the targets
// through the API server. Skipped when ARBITER_K8S_RUN is not set.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/internal/certs/certstest"
)

// mutateExistingPolicies: a ConfigMap named trigger labels every Secret
// and ConfigMap of the namespaces labelled arbiter-e2e=ID (resource rules
// of targetMatchConstraints); a Secret named expr-trigger annotates the
// ConfigMap its target annotation names (targetMatchConstraints
// expression), except one targetMatchConditions excludes.
const mutateExistingPolicies = `
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata:
  name: label-targets-ID
spec:
  evaluation:
    mutateExisting:
      enabled: true
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  matchConditions:
    - name: trigger
      expression: "object.metadata.name == 'trigger'"
  targetMatchConstraints:
    namespaceSelector:
      matchLabels: {arbiter-e2e: "ID"}
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [UPDATE], resources: [secrets, configmaps]}
  mutations:
    - patchType: ApplyConfiguration
      applyConfiguration:
        expression: "Object{metadata: Object.metadata{labels: {'mutated-by': 'label-targets'}}}"
---
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata:
  name: annotate-by-expression-ID
spec:
  evaluation:
    mutateExisting:
      enabled: true
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [secrets]}
  matchConditions:
    - name: trigger
      expression: "object.metadata.name.startsWith('expr-trigger')"
  targetMatchConstraints:
    expression: "resource.get('v1', 'configmaps', object.metadata.namespace, object.metadata.annotations['target'])"
  targetMatchConditions:
    - name: not-excluded
      expression: "!has(object.metadata.labels) || !('excluded' in object.metadata.labels)"
  mutations:
    - patchType: ApplyConfiguration
      applyConfiguration:
        expression: "Object{metadata: Object.metadata{annotations: {'trigger': request.object.metadata.name}}}"
`

// TestMutateExistingThroughAPIServer: a dry-run trigger sets off nothing;
// a trigger created through the API server updates the targets, except a
// target already compliant (not written: its resourceVersion stays) and
// one the targetMatchConditions exclude; an updated trigger is read as
// updated by the targetMatchConstraints expression.
func TestMutateExistingThroughAPIServer(t *testing.T) {
	api, kc := kubeEnv(t)
	cs, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := fmt.Sprintf("%04d", rand.IntN(10000))
	ns, name := "mexist-"+id, "arbiter-e2e-mexist-"+id
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

	for _, doc := range strings.Split(strings.ReplaceAll(mutateExistingPolicies, "ID", id), "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { kubeDelete(t, kc, obj) })
		kubeApply(t, kc, obj)
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s\nprimary:\n%s\nshim:\n%s", what, tail(primary.log.String(), 30), tail(s.log.String(), 10))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The MutatingWebhookConfiguration made from the policies sends the
	// API server's CREATEs of ConfigMaps and Secrets to /mutate.
	eventually("the MutatingWebhookConfiguration has the policies' rules", func() bool {
		mwc, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		found := map[string]bool{}
		for _, w := range mwc.Webhooks {
			if !strings.HasSuffix(*w.ClientConfig.URL, "/mutate") {
				continue
			}
			for _, r := range w.Rules {
				for _, res := range r.Resources {
					found[res] = true
				}
			}
		}
		return found["configmaps"] && found["secrets"]
	})

	cms, secrets := cs.CoreV1().ConfigMaps(ns), cs.CoreV1().Secrets(ns)
	// The ConfigMap the expression reads is in the store (a context kind)
	// before its trigger comes.
	rev := primary.status().Revision
	create := func(cm *corev1.ConfigMap) *corev1.ConfigMap {
		t.Helper()
		out, err := cms.Create(ctx, cm, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}})
	create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "second"}})
	create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "excluded", Labels: map[string]string{"excluded": "yes"}}})
	eventually("the source stored the ConfigMaps", func() bool { return primary.status().Revision > rev })
	plain := create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "plain"}})
	compliant := create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "compliant", Labels: map[string]string{"mutated-by": "label-targets"}}})
	if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "plain-secret"}, StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A dry run of the trigger, until the API server's webhook cache sends
	// it to the shim: no trigger is queued.
	trig := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "trigger"}}
	eventually("the API server sent the dry-run trigger to /mutate", func() bool {
		if _, err := cms.Create(ctx, trig, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Fatal(err)
		}
		return strings.Contains(s.log.String(), "name=trigger")
	})
	if !strings.Contains(s.log.String(), "dry_run=true") {
		t.Fatalf("the shim did not see a dry run:\n%s", tail(s.log.String(), 10))
	}

	// The expression's trigger: the ConfigMap it names is annotated; the
	// one the targetMatchConditions exclude is not written.
	for _, target := range []string{"settings", "excluded"} {
		if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "expr-trigger-" + target,
			Annotations: map[string]string{"target": target}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually("settings is annotated by the expression's policy", func() bool {
		cm, err := cms.Get(ctx, "settings", metav1.GetOptions{})
		return err == nil && cm.Annotations["trigger"] == "expr-trigger-settings"
	})
	eventually("excluded is skipped", func() bool {
		return strings.Contains(primary.log.String(), "mutate-existing target skipped") && strings.Contains(primary.log.String(), "configmaps "+ns+"/excluded")
	})
	if cm, err := cms.Get(ctx, "excluded", metav1.GetOptions{}); err != nil || cm.Annotations["trigger"] != "" {
		t.Fatalf("excluded was written: %v %v", err, cm.Annotations)
	}
	// The dry run queued nothing, and labelled nothing.
	if strings.Contains(primary.log.String(), "ConfigMap "+ns+"/trigger") {
		t.Fatalf("the dry-run trigger was queued:\n%s", tail(primary.log.String(), 30))
	}
	if cm, err := cms.Get(ctx, "plain", metav1.GetOptions{}); err != nil || cm.Labels["mutated-by"] != "" {
		t.Fatalf("plain was labelled before the trigger: %v %v", err, cm.Labels)
	}

	// The trigger, created: every Secret and ConfigMap of the namespace is
	// labelled; the compliant ConfigMap is evaluated and not written.
	if _, err := cms.Create(ctx, trig, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("plain and plain-secret are labelled", func() bool {
		cm, err := cms.Get(ctx, "plain", metav1.GetOptions{})
		if err != nil || cm.Labels["mutated-by"] != "label-targets" {
			return false
		}
		sec, err := secrets.Get(ctx, "plain-secret", metav1.GetOptions{})
		return err == nil && sec.Labels["mutated-by"] == "label-targets"
	})
	eventually("compliant is evaluated", func() bool {
		for _, l := range strings.Split(primary.log.String(), "\n") {
			if strings.Contains(l, "mutate-existing target unchanged") && strings.Contains(l, "configmaps "+ns+"/compliant") {
				return true
			}
		}
		return false
	})
	got, err := cms.Get(ctx, "compliant", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != compliant.ResourceVersion {
		t.Fatalf("the compliant ConfigMap was written: resourceVersion %s, was %s", got.ResourceVersion, compliant.ResourceVersion)
	}
	if got, _ := cms.Get(ctx, "plain", metav1.GetOptions{}); got.ResourceVersion == plain.ResourceVersion {
		t.Fatal("plain keeps its resourceVersion")
	}
	if n := strings.Count(primary.log.String(), "mutate-existing target updated"); n < 3 {
		t.Fatalf("%d updates logged, want at least 3 (plain, plain-secret, settings):\n%s", n, tail(primary.log.String(), 30))
	}

	// An UPDATE of the expression's trigger: the expression reads the
	// trigger as updated (the API server persists it after the webhook
	// answered), so it selects the ConfigMap the new annotation names.
	sec, err := secrets.Get(ctx, "expr-trigger-settings", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec.Annotations["target"] = "second"
	if _, err := secrets.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("second is annotated after the trigger's update", func() bool {
		cm, err := cms.Get(ctx, "second", metav1.GetOptions{})
		return err == nil && cm.Annotations["trigger"] == "expr-trigger-settings"
	})
}
