package e2e

// Mutate-existing MutatingPolicies through a real kube-apiserver: `arbiter
// serve --kube-source --kube-webhooks managed` and the webhook shim; the
// MutatingWebhookConfiguration made from the policies sends the triggers
// to the shim's /mutate; the replica that decides them updates the targets
// through the API server. Skipped when ARBITER_K8S_RUN is not set.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
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
// updated by the targetMatchConstraints expression, although the primary's
// first read of it comes before the update is persisted (a validating
// webhook of the test holds the update until the primary read the
// trigger, which the proxy between the primary and the API server sees).
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
	// The primary reaches the API server through a proxy that sees its
	// reads of the expression's trigger.
	proxy := startKubeProxy(t, api.Config, dir, "/api/v1/namespaces/"+ns+"/secrets/expr-trigger-settings")
	primary := startPrimary(t, "--kube-source", "--kubeconfig", proxy.kubeconfig, "--lease-name", "",
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
	// trigger as updated, so it selects the ConfigMap the new annotation
	// names. The API server persists the update after the webhooks
	// answered: a validating webhook of the test holds it until the
	// primary has read the trigger (through the proxy), so that the
	// primary's first read finds the trigger not updated yet, always, and
	// the primary must wait for the update to land.
	eventually("the expression's triggers are labelled by the rules' policy", func() bool {
		for _, n := range []string{"expr-trigger-settings", "expr-trigger-excluded"} {
			if sec, err := secrets.Get(ctx, n, metav1.GetOptions{}); err != nil || sec.Labels["mutated-by"] != "label-targets" {
				return false
			}
		}
		return true
	})
	hold := startHoldWebhook(t, cs, ca, name+"-hold", id, "expr-trigger-settings", proxy.reads)
	eventually("the API server sends the trigger's updates to the holding webhook", func() bool {
		sec, err := secrets.Get(ctx, "expr-trigger-settings", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := secrets.Update(ctx, sec, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Fatal(err)
		}
		return hold.dryRuns.Load() > 0
	})
	proxy.reads.arm()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sec, err := secrets.Get(ctx, "expr-trigger-settings", metav1.GetOptions{})
		if err != nil {
			return err
		}
		sec.Annotations["target"] = "second"
		_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !hold.released.Load() {
		t.Fatalf("the primary did not read the trigger while its update was held (%v): it does not re-read the trigger\nprimary:\n%s",
			holdTimeout, tail(primary.log.String(), 30))
	}
	eventually("second is annotated after the trigger's update (the trigger was read once persisted, not as it was before)", func() bool {
		cm, err := cms.Get(ctx, "second", metav1.GetOptions{})
		return err == nil && cm.Annotations["trigger"] == "expr-trigger-settings"
	})
}

// kubeProxy passes a process's requests to the API server, and counts
// its GETs of one path (reads).
type kubeProxy struct {
	kubeconfig string
	reads      *pathReads
}

// pathReads is a signal: armed, it is fired by the first GET of path
// answered after arm.
type pathReads struct {
	path  string
	mu    sync.Mutex
	armed bool
	fired chan struct{}
}

func (r *pathReads) arm() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed = true
}

func (r *pathReads) read() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.armed {
		r.armed = false
		close(r.fired)
	}
}

// startKubeProxy serves a reverse proxy to the API server of rc on
// loopback (plain HTTP, the proxy authenticates) and writes a kubeconfig
// for it under dir.
func startKubeProxy(t *testing.T, rc *rest.Config, dir, path string) *kubeProxy {
	t.Helper()
	target, err := url.Parse(rc.Host)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := rest.TransportFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	p := &kubeProxy{reads: &pathReads{path: path, fired: make(chan struct{})}}
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }, Transport: rt, FlushInterval: -1}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rp.ServeHTTP(w, r)
		if r.Method == http.MethodGet && r.URL.Path == path {
			p.reads.read()
		}
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["proxy"] = &clientcmdapi.Cluster{Server: "http://" + l.Addr().String()}
	cfg.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	cfg.CurrentContext = "proxy"
	p.kubeconfig = filepath.Join(dir, "proxy-kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p.kubeconfig); err != nil {
		t.Fatal(err)
	}
	return p
}

// holdTimeout bounds how long the holding webhook holds an update (below
// the webhook's 30 s timeout).
const holdTimeout = 20 * time.Second

// holdWebhook is a validating webhook that holds the UPDATEs of one
// Secret (not dry runs) until reads fires (or holdTimeout), then allows
// them; it allows everything else at once.
type holdWebhook struct {
	dryRuns  atomic.Int32
	released atomic.Bool
}

func startHoldWebhook(t *testing.T, cs kubernetes.Interface, ca *certstest.CA, name, id, secret string, reads *pathReads) *holdWebhook {
	t.Helper()
	h := &holdWebhook{}
	addr := freeAddr(t)
	leaf := ca.Issue(t, name, certstest.Spec{CommonName: "hold", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	mux := http.NewServeMux()
	mux.HandleFunc("/validate", func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		req := review.Request
		if req.Name == secret && req.Operation == admissionv1.Update {
			if req.DryRun != nil && *req.DryRun {
				h.dryRuns.Add(1)
			} else {
				select {
				case <-reads.fired:
					h.released.Store(true)
				case <-time.After(holdTimeout):
				case <-r.Context().Done():
				}
			}
		}
		review.Response = &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(&review)
	})
	srv := &http.Server{Addr: addr, Handler: mux}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeTLS(l, leaf.CertFile, leaf.KeyFile)
	t.Cleanup(func() { srv.Close() })

	hookURL := "https://" + addr + "/validate"
	none, fail := admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Fail
	scope := admissionregistrationv1.NamespacedScope
	timeout := int32(30)
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "hold.arbiter-e2e.test",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &hookURL, CABundle: ca.CertPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}, Scope: &scope},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"arbiter-e2e": id}},
			SideEffects:             &none,
			FailurePolicy:           &fail,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	ctx := context.Background()
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
	return h
}
