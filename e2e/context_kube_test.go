package e2e

// Policies that read the cluster, end to end: `arbiter serve --kube-source
// --kube-webhooks managed` against a real kube-apiserver, the API server
// calling the shim, a follower fed by Sync. Skipped when ARBITER_K8S_RUN
// is not set.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/arbiter-pdp/arbiter/internal/certs/certstest"
)

// quotaPolicy refuses a ConfigMap labelled quota=yes in a namespace that
// already holds two of them (resource.List with constant arguments).
func quotaPolicy(name string) map[string]any {
	return map[string]any{
		"apiVersion": "policies.kyverno.io/v1",
		"kind":       "ValidatingPolicy",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"validationActions": []any{"Deny"},
			"matchConstraints": map[string]any{
				"resourceRules": []any{map[string]any{
					"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"configmaps"},
				}},
				"objectSelector": map[string]any{"matchLabels": map[string]any{"quota": "yes"}},
			},
			"variables": []any{map[string]any{"name": "cms", "expression": "resource.List('v1', 'configmaps', object.metadata.namespace)"}},
			"validations": []any{map[string]any{
				"expression": "size(dyn(variables.cms.items).filter(c, c.metadata.?labels.?quota.orValue('') == 'yes')) < 2",
				"message":    "at most 2 quota ConfigMaps per namespace",
			}},
		},
	}
}

// registryPolicy refuses Pods whose images do not start with the prefix
// a GlobalContextEntry projects from a ConfigMap.
func registryPolicy(name, entry string) map[string]any {
	return map[string]any{
		"apiVersion": "policies.kyverno.io/v1",
		"kind":       "ValidatingPolicy",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"validationActions": []any{"Deny"},
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"pods"},
			}}},
			"validations": []any{map[string]any{
				"expression": fmt.Sprintf("object.spec.containers.all(c, c.image.startsWith(string(globalContext.Get('%s', 'prefix'))))", entry),
				"message":    "images must come from the allowed registry",
			}},
		},
	}
}

// registryEntry projects data.prefix of the ConfigMap "registries" of ns.
func registryEntry(name, ns string) map[string]any {
	return map[string]any{
		"apiVersion": "kyverno.io/v2",
		"kind":       "GlobalContextEntry",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"kubernetesResource": map[string]any{"group": "", "version": "v1", "resource": "configmaps", "namespace": ns},
			"projections":        []any{map[string]any{"name": "prefix", "jmesPath": "[?metadata.name=='registries'].data.prefix | [0]"}},
		},
	}
}

// verdictPolicy asks an HTTP service about ConfigMaps labelled
// checked=yes (http.Get).
func verdictPolicy(name, url string) map[string]any {
	return map[string]any{
		"apiVersion": "policies.kyverno.io/v1",
		"kind":       "ValidatingPolicy",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"validationActions": []any{"Deny"},
			"matchConstraints": map[string]any{
				"resourceRules": []any{map[string]any{
					"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"configmaps"},
				}},
				"objectSelector": map[string]any{"matchLabels": map[string]any{"checked": "yes"}},
			},
			"variables": []any{map[string]any{"name": "verdict", "expression": fmt.Sprintf("http.Get('%s/' + object.metadata.name)", url)}},
			"validations": []any{map[string]any{
				"expression":        "variables.verdict.allowed == true",
				"messageExpression": "'the service said no: ' + string(variables.verdict.reason)",
			}},
		},
	}
}

func configMapObject(ns, name string, labels, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}, Data: data}
}

func objectJSON(t *testing.T, o any) []byte {
	t.Helper()
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// podWithImage is a Pod of ns with one container of image.
func podWithImage(ns, name, image string) *corev1.Pod {
	no := false
	return &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{AutomountServiceAccountToken: &no, Containers: []corev1.Container{{Name: "c", Image: image}}}}
}

// TestContextPoliciesThroughWebhook: three policies that read beyond the
// admitted object, enforced by the API server through the shim in front
// of a --kube-source primary, with a follower fed by Sync:
//   - a ValidatingPolicy limiting ConfigMaps per namespace with
//     resource.List: the ConfigMaps created in the cluster are stored as
//     context objects, and from the revision that holds the second one a
//     third is refused — on the primary, and on the follower asked with
//     that revision as min_revision (read-your-writes); the decision log
//     says which context objects the decision read; a ConfigMap deleted
//     admits again from its revision;
//   - a ValidatingPolicy reading a GlobalContextEntry (kubernetesResource)
//     that projects a registry prefix from a ConfigMap: editing the
//     ConfigMap in the cluster flips the decisions from its revision on
//     every replica;
//   - a ValidatingPolicy asking a local HTTP service (http.Get) through
//     the server's callout allowlist.
func TestContextPoliciesThroughWebhook(t *testing.T) {
	api, kc := kubeEnv(t)
	cs, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	id := fmt.Sprintf("%04d", rand.IntN(10000))
	ns, cfgNS, name := "ctx-"+id, "ctx-cfg-"+id, "arbiter-ctx-"+id
	testNamespace(t, cs, ns, id)
	kubeApply(t, kc, namespace(cfgNS, nil)) // not policed
	cleanupWebhooks(t, cs, name)

	// The HTTP service the verdict policy asks.
	var calls atomic.Int32
	service := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if strings.HasPrefix(filepath.Base(r.URL.Path), "nope") {
			_, _ = io.WriteString(w, `{"allowed": false, "reason": "not on the list"}`)
			return
		}
		_, _ = io.WriteString(w, `{"allowed": true}`)
	}))
	defer service.Close()
	dir := t.TempDir()
	config := filepath.Join(dir, "arbiter.yaml")
	if err := os.WriteFile(config, []byte("callout:\n  timeout: 2s\n  allowedURLPrefixes: ["+service.URL+"/verdict/]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	decisionLog := filepath.Join(dir, "decisions.jsonl")

	ca := certstest.NewCA(t, dir, "ca")
	leaf := ca.Issue(t, "shim", certstest.Spec{CommonName: "arbiter-webhook", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	shimAddr := freeAddr(t)
	primary := startPrimary(t, "--config", config, "--decision-log", decisionLog,
		"--kube-source", "--kubeconfig", api.Kubeconfig, "--lease-name", "",
		"--kube-webhooks", "managed", "--kube-webhook-name", name, "--kube-webhook-url", "https://"+shimAddr,
		"--kube-webhook-ca-file", ca.File, "--kube-webhook-namespace-selector", "arbiter-e2e="+id)
	follower := startFollower(t, "follower", primary, "--config", config)
	s := startShim(t, shimAddr, primary.addr, leaf, ca)

	cms, pods := cs.CoreV1().ConfigMaps(ns), cs.CoreV1().Pods(ns)
	if _, err := cs.CoreV1().ConfigMaps(cfgNS).Create(ctx, configMapObject(cfgNS, "registries", nil, map[string]string{"prefix": "good.example/"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	quota, registry, verdict, entry := "ctx-quota-"+id, "ctx-registry-"+id, "ctx-verdict-"+id, "ctx-registries-"+id
	for _, o := range []map[string]any{registryEntry(entry, cfgNS), quotaPolicy(quota), registryPolicy(registry, entry), verdictPolicy(verdict, service.URL+"/verdict")} {
		t.Cleanup(func() { kubeDelete(t, kc, o) })
		kubeApply(t, kc, o)
	}
	for _, p := range []string{quota, registry, verdict} {
		policyReady(t, kc, p)
	}

	// refused checks err is the webhook's refusal with the policy's message.
	refused := func(what string, err error, policy, message string) {
		t.Helper()
		want := fmt.Sprintf("Policy %s failed: %s", policy, message)
		if err == nil || !strings.Contains(err.Error(), `denied the request`) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v, want the webhook's denial %q\n%s", what, err, want, tail(s.log.String(), 20))
		}
	}
	// The API server's webhook cache has the configuration once a bad Pod
	// is refused.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := pods.Create(ctx, podWithImage(ns, "probe", "bad.example/nginx"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "images must come from the allowed registry") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bad pod is still admitted (%v):\n%s\n%s", err, tail(s.log.String(), 20), tail(primary.log.String(), 40))
		}
		time.Sleep(200 * time.Millisecond)
	}

	// ---- resource.List: at most 2 quota ConfigMaps per namespace ----
	q := map[string]string{"quota": "yes"}
	for _, n := range []string{"q1", "q2"} {
		if _, err := cms.Create(ctx, configMapObject(ns, n, q, nil), metav1.CreateOptions{}); err != nil {
			t.Fatalf("CREATE quota ConfigMap %s: %v", n, err)
		}
	}
	// A third is refused from the revision that holds q1 and q2.
	q3 := configMapObject(ns, "q3", q, nil)
	q3.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
	r1 := untilPrimaryDecides(t, primary, objectJSON(t, q3), false)
	if resp := decideOn(t, follower, objectJSON(t, q3), r1); resp.GetAllowed() {
		t.Fatalf("the follower at min_revision %d (revision %d) admits a third quota ConfigMap: %v", r1, resp.GetRevision(), resp)
	}
	_, err = cms.Create(ctx, q3, metav1.CreateOptions{})
	refused("CREATE a third quota ConfigMap", err, quota, "at most 2 quota ConfigMaps per namespace")
	if _, err := cms.Create(ctx, configMapObject(ns, "plain", nil, nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("CREATE a ConfigMap the quota does not count: %v", err)
	}
	// The decision log says what the refusal read.
	var read []string
	found := false
	for deadline := time.Now().Add(10 * time.Second); !found && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		read = nil
		for _, e := range readContextLog(t, decisionLog) {
			if e.Request.Namespace == ns && e.Request.Name == "q3" && !e.Allowed {
				for _, r := range e.ContextReads {
					read = append(read, fmt.Sprintf("%s %s/%s %s count=%d", r.Op, r.APIVersion, r.Resource, r.Namespace, r.Count))
					found = found || (r.Op == "list" && r.APIVersion == "v1" && r.Resource == "configmaps" && r.Namespace == ns && r.Count >= 2)
				}
			}
		}
	}
	if !found {
		t.Fatalf("the decision log's context reads for the refused q3: %q, want a list of v1/configmaps in %s of 2 or more", read, ns)
	}
	// Deleting q1 in the cluster admits a third again, from its revision.
	if err := cms.Delete(ctx, "q1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r2 := untilPrimaryDecides(t, primary, objectJSON(t, q3), true)
	if r2 <= r1 {
		t.Fatalf("the deletion at revision %d, not after %d", r2, r1)
	}
	if resp := decideOn(t, follower, objectJSON(t, q3), r2); !resp.GetAllowed() {
		t.Fatalf("the follower at min_revision %d refuses: %v", r2, resp)
	}
	if _, err := cms.Create(ctx, q3, metav1.CreateOptions{}); err != nil {
		t.Fatalf("CREATE q3 after q1 was deleted: %v", err)
	}

	// ---- globalContext: the registry prefix from a ConfigMap ----
	good, bad := podWithImage(ns, "good", "good.example/nginx"), podWithImage(ns, "bad", "bad.example/nginx")
	_, err = pods.Create(ctx, bad, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	refused("CREATE a Pod from bad.example", err, registry, "images must come from the allowed registry")
	if _, err := pods.Create(ctx, good, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("CREATE a Pod from good.example: %v", err)
	}
	if _, err := cs.CoreV1().ConfigMaps(cfgNS).Patch(ctx, "registries", types.MergePatchType, []byte(`{"data":{"prefix":"bad.example/"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	r3 := untilPrimaryDecides(t, primary, objectJSON(t, bad), true)
	if r3 <= r2 {
		t.Fatalf("the edit at revision %d, not after %d", r3, r2)
	}
	for _, p := range []*proc{primary, follower} {
		if resp := decideOn(t, p, objectJSON(t, bad), r3); !resp.GetAllowed() {
			t.Fatalf("%s at min_revision %d refuses bad.example: %v", p.name, r3, resp)
		}
		if resp := decideOn(t, p, objectJSON(t, good), r3); resp.GetAllowed() {
			t.Fatalf("%s at min_revision %d admits good.example: %v", p.name, r3, resp)
		}
	}
	_, err = pods.Create(ctx, good, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	refused("CREATE a Pod from good.example after the edit", err, registry, "images must come from the allowed registry")
	if _, err := pods.Create(ctx, bad, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("CREATE a Pod from bad.example after the edit: %v", err)
	}

	// ---- http.Get: the service decides ----
	before := calls.Load()
	checked := map[string]string{"checked": "yes"}
	if _, err := cms.Create(ctx, configMapObject(ns, "fine", checked, nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("CREATE a ConfigMap the service accepts: %v", err)
	}
	_, err = cms.Create(ctx, configMapObject(ns, "nope-1", checked, nil), metav1.CreateOptions{})
	refused("CREATE a ConfigMap the service refuses", err, verdict, "the service said no: not on the list")
	if n := calls.Load() - before; n != 2 {
		t.Fatalf("%d calls reached the service, want 2", n)
	}
	nope := configMapObject(ns, "nope-2", checked, nil)
	nope.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
	if resp := decideOn(t, follower, objectJSON(t, nope), 0); resp.GetAllowed() {
		t.Fatalf("the follower admits what the service refuses: %v", resp)
	}
	if n := calls.Load() - before; n != 3 {
		t.Fatalf("%d calls reached the service, want 3 (the follower calls out too)", n)
	}
	waitConverged(t, 10*time.Second, primary, follower)
}

// contextLogEntry is what TestContextPoliciesThroughWebhook reads of a
// decision log line.
type contextLogEntry struct {
	Allowed bool `json:"allowed"`
	Request struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"request"`
	ContextReads []struct {
		Op         string `json:"op"`
		APIVersion string `json:"apiVersion"`
		Resource   string `json:"resource"`
		Namespace  string `json:"namespace"`
		Count      int    `json:"count"`
	} `json:"contextReads"`
}

func readContextLog(t *testing.T, path string) []contextLogEntry {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []contextLogEntry
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var e contextLogEntry
		if json.Unmarshal([]byte(line), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}
