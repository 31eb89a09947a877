package e2e

// The real kube-apiserver calling the webhook shim (`arbiter webhook`) in
// front of a real `arbiter serve`: the ValidatingWebhookConfiguration from
// deploy/, client-go creating, updating and deleting Pods and Deployments.
// Skipped when ARBITER_K8S_RUN is not set.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/internal/certs/certstest"
	"github.com/arbiter-pdp/arbiter/internal/k8stest"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// warnings collects the API server's warnings (the Warn results).
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.msgs
	w.msgs = nil
	return out
}

// shim is a running `arbiter webhook`.
type shim struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
}

func startShim(t *testing.T, addr, server string, leaf *certstest.Leaf, ca *certstest.CA) *shim {
	t.Helper()
	s := &shim{log: &syncBuffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(binary, "webhook", "--listen", addr, "--server", server, "--cert", leaf.CertFile, "--key", leaf.KeyFile,
		"--timeout", "3s", "--log-format", "text", "--log-level", "debug")
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(15 * time.Second):
			s.cmd.Process.Kill()
			<-s.done
		}
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get("https://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case <-s.done:
			t.Fatalf("the shim exited:\n%s", s.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shim is not ready (%v):\n%s", err, s.log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// admissionPolicies are what Arbiter decides in TestAdmissionThroughAPIServer.
const admissionPolicies = `
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: disallow-latest-tag
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [CREATE, UPDATE]
        resources: [pods]
  validations:
    - expression: "object.spec.containers.all(c, !c.image.endsWith(':latest'))"
      message: "images must not use the latest tag"
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: require-team-label
spec:
  validationActions: [Warn]
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [CREATE, UPDATE]
        resources: [pods]
  validations:
    - expression: "'team' in object.metadata.?labels.orValue({})"
      message: "pods should carry a team label"
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: frozen-label
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [UPDATE]
        resources: [pods]
  validations:
    - expression: "object.metadata.?labels.?frozen.orValue('') == oldObject.metadata.?labels.?frozen.orValue('')"
      message: "the frozen label cannot change"
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: protect-pods
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [DELETE]
        resources: [pods]
  validations:
    - expression: "oldObject.metadata.?labels.?protected.orValue('') != 'true'"
      message: "protected pods cannot be deleted"
`

// TestAdmissionThroughAPIServer: kube-apiserver → the shim → `arbiter
// serve`, with the webhook configuration of deploy/ (pointed at the shim on
// loopback and narrowed to the test's namespace so other tests sharing the
// API server are not policed): a denied Pod or Deployment is refused with
// Arbiter's message, Warn comes back as an API warning, UPDATE sees
// oldObject and DELETE the deleted object, a PolicyException admits,
// server-side dry-run reaches the webhook marked as dry run, and with the
// decision service stopped failurePolicy decides: Fail refuses, Ignore
// admits.
func TestAdmissionThroughAPIServer(t *testing.T) {
	api := k8stest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Arbiter: a primary with the policies, logging its decisions.
	decisionLog := filepath.Join(t.TempDir(), "decisions.jsonl")
	primary := startPrimary(t, "--decision-log", decisionLog)
	var changes []*arbiterv1.Change
	docs, err := manifest.SplitNonEmptyDocuments([]byte(admissionPolicies))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range docs {
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		changes = append(changes, upsert(obj))
	}
	write(t, primary, changes...)

	// The shim, serving a certificate for 127.0.0.1 from a test CA.
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "ca")
	leaf := ca.Issue(t, "shim", certstest.Spec{CommonName: "arbiter-webhook", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	shimAddr := freeAddr(t)
	s := startShim(t, shimAddr, primary.addr, leaf, ca)

	cfg := rest.CopyConfig(api.Config)
	warn := &warnings{}
	cfg.WarningHandler = warn
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	// A namespace of the test's own, with the ServiceAccount the
	// ServiceAccount admission plugin looks for (no controller makes it).
	ns := fmt.Sprintf("admission-%d", time.Now().UnixNano()%1_000_000)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"arbiter-e2e": ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The webhook configuration of deploy/, as it is, but for where the
	// shim is and which namespace it polices.
	raw, err := os.ReadFile("../deploy/validatingwebhookconfiguration.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(raw, &vwc); err != nil {
		t.Fatal(err)
	}
	if len(vwc.Webhooks) != 1 || *vwc.Webhooks[0].FailurePolicy != admissionregistrationv1.Fail || vwc.Webhooks[0].ClientConfig.Service == nil {
		t.Fatalf("deploy/validatingwebhookconfiguration.yaml: want one webhook with failurePolicy Fail and a Service: %+v", vwc.Webhooks)
	}
	vwc.Name = "arbiter-" + ns
	wh := &vwc.Webhooks[0]
	url := "https://" + shimAddr + *wh.ClientConfig.Service.Path
	wh.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca.CertPEM}
	wh.NamespaceSelector.MatchLabels = map[string]string{"arbiter-e2e": ns}
	whc := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := whc.Create(ctx, &vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := whc.Delete(ctx, vwc.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting the webhook configuration: %v", err)
		}
	})

	pods := cs.CoreV1().Pods(ns)
	pod := func(name, image string, labels map[string]string) *corev1.Pod {
		no := false
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &no,
			Containers:                   []corev1.Container{{Name: "c", Image: image}}}}
	}
	team := map[string]string{"team": "a"}
	// denied checks err is the webhook's refusal carrying Arbiter's message.
	denied := func(what string, err error, policy, message string) {
		t.Helper()
		want := fmt.Sprintf("Policy %s failed: %s", policy, message)
		if err == nil {
			t.Errorf("%s: admitted, want refused with %q", what, want)
			return
		}
		if !strings.Contains(err.Error(), `admission webhook "validate.arbiter.dev" denied the request`) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want the webhook's denial %q", what, err, want)
		}
	}

	// The webhook is registered when it first refuses (the API server's
	// webhook configuration cache is eventually consistent).
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := pods.Create(ctx, pod("probe", "nginx:latest", team), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server never called the webhook:\n%s", s.log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	warn.take()

	// CREATE: refused with the policy's message; compliant admitted.
	_, err = pods.Create(ctx, pod("web-latest", "nginx:latest", team), metav1.CreateOptions{})
	denied("CREATE Pod with nginx:latest", err, "disallow-latest-tag", "images must not use the latest tag")
	if _, err := pods.Create(ctx, pod("web", "nginx:1.29", team), metav1.CreateOptions{}); err != nil {
		t.Fatalf("CREATE compliant Pod: %v", err)
	}
	if w := warn.take(); len(w) != 0 {
		t.Errorf("compliant Pod: warnings %q", w)
	}

	// Warn: admitted, with the policy's message as an API warning.
	if _, err := pods.Create(ctx, pod("no-team", "nginx:1.29", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("CREATE Pod without a team label (Warn): %v", err)
	}
	if w := warn.take(); !slices.ContainsFunc(w, func(m string) bool { return strings.Contains(m, "pods should carry a team label") }) {
		t.Errorf("CREATE Pod without a team label: warnings %q, want the Warn policy's message", w)
	}

	// UPDATE: the policy compares object with oldObject.
	if _, err := pods.Create(ctx, pod("frozen", "nginx:1.29", map[string]string{"team": "a", "frozen": "v1", "protected": "true"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := func(name, labels string) error {
		_, err := pods.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":`+labels+`}}`), metav1.PatchOptions{})
		return err
	}
	denied("UPDATE changing the frozen label", patch("frozen", `{"frozen":"v2"}`), "frozen-label", "the frozen label cannot change")
	if err := patch("frozen", `{"other":"x"}`); err != nil {
		t.Errorf("UPDATE keeping the frozen label: %v", err)
	}

	// DELETE: the policy reads the deleted object (oldObject).
	denied("DELETE a protected Pod", pods.Delete(ctx, "frozen", metav1.DeleteOptions{}), "protect-pods", "protected pods cannot be deleted")
	if err := pods.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Errorf("DELETE an unprotected Pod: %v", err)
	}

	// A Deployment: the pod-controller rule autogen made from the Pod policy.
	dep := func(name, image string) *appsv1.Deployment {
		one := int32(1)
		sel := map[string]string{"app": name}
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.DeploymentSpec{Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name, "team": "a"}},
				Spec: pod("", image, nil).Spec}}}
	}
	deps := cs.AppsV1().Deployments(ns)
	_, err = deps.Create(ctx, dep("api-latest", "nginx:latest"), metav1.CreateOptions{})
	denied("CREATE Deployment with nginx:latest", err, "disallow-latest-tag", "images must not use the latest tag")
	if _, err := deps.Create(ctx, dep("api", "nginx:1.29"), metav1.CreateOptions{}); err != nil {
		t.Errorf("CREATE compliant Deployment: %v", err)
	}
	// An UPDATE of the Deployment to the latest tag is refused too.
	_, err = deps.Patch(ctx, "api", types.StrategicMergePatchType,
		[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"nginx:latest"}]}}}}`), metav1.PatchOptions{})
	denied("UPDATE Deployment to nginx:latest", err, "disallow-latest-tag", "images must not use the latest tag")

	// Server-side dry run reaches the webhook, which decides it marked as a
	// dry run, and nothing is stored.
	_, err = pods.Create(ctx, pod("dry-latest", "nginx:latest", team), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	denied("dry-run CREATE Pod with nginx:latest", err, "disallow-latest-tag", "images must not use the latest tag")
	if _, err := pods.Create(ctx, pod("dry-ok", "nginx:1.29", team), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("dry-run CREATE compliant Pod: %v", err)
	}
	if _, err := pods.Get(ctx, "dry-ok", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the dry-run Pod was stored: %v", err)
	}
	dry := map[string]bool{}
	for _, e := range readDecisionLog(t, decisionLog) {
		if e.Request.Namespace == ns {
			dry[e.Request.Name] = e.DryRun
		}
	}
	if !dry["dry-latest"] || !dry["dry-ok"] || dry["web"] {
		t.Errorf("decision log dry-run marks %v: want dry-latest and dry-ok marked, web not", dry)
	}

	// A PolicyException (written to Arbiter) admits the Pod it names.
	legacy := pod("legacy", "legacy:latest", team)
	_, err = pods.Create(ctx, legacy, metav1.CreateOptions{})
	denied("CREATE legacy Pod before the exception", err, "disallow-latest-tag", "images must not use the latest tag")
	ex := exception("legacy-latest", "disallow-latest-tag", "legacy")
	write(t, primary, upsert(ex))
	if _, err := pods.Create(ctx, legacy, metav1.CreateOptions{}); err != nil {
		t.Errorf("CREATE legacy Pod with a granted exception: %v", err)
	}

	// The decision service stops: failurePolicy Fail refuses (the shim
	// answers 500, never an allow) ...
	primary.stop(syscall.SIGTERM)
	_, err = pods.Create(ctx, pod("while-down", "nginx:1.29", team), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `failed calling webhook "validate.arbiter.dev"`) {
		t.Errorf("CREATE with the decision service down, failurePolicy Fail: %v, want a refusal for the failed call", err)
	}
	// ... and Ignore admits, even what the policies would refuse.
	cur, err := whc.Get(ctx, vwc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ignore := admissionregistrationv1.Ignore
	cur.Webhooks[0].FailurePolicy = &ignore
	if _, err := whc.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		_, err := pods.Create(ctx, pod(fmt.Sprintf("ignored-%d", i), "nginx:latest", team), metav1.CreateOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CREATE with the decision service down, failurePolicy Ignore: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(s.log.String(), "decision service") {
		t.Errorf("the shim did not log the failed decisions:\n%s", tail(s.log.String(), 20))
	}
}

// readDecisionLog reads the decision log's JSON lines.
func readDecisionLog(t *testing.T, path string) []decisionEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []decisionEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e decisionEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("decision log: %v: %s", err, sc.Text())
		}
		out = append(out, e)
	}
	return out
}

type decisionEntry struct {
	DryRun  bool `json:"dryRun"`
	Request struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"request"`
}
