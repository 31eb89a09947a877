package e2e

// The Helm chart installed for real: `helm install` (helm pinned in
// tools/helm/go.mod) into the real kube-apiserver, then Arbiter's processes
// started as the installed objects configure them — no kubelet here, so
// the test plays it: each workload's container args and env, its Secret,
// ConfigMap and emptyDir volumes written where the args expect them, the
// Services' DNS names resolved to the pods' loopback addresses — the
// policies pushed with the chart's admin certificate, and the API server
// calling the shim through the chart's webhook configuration. Then `helm
// upgrade` to changed values and `helm rollback`, as docs/operations.md
// writes them, while requests keep being admitted and denied: no
// admission error during the switch. Skipped without ARBITER_K8S_RUN.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/internal/k8stest"
)

// helmCmd runs the helm of tools/helm/go.mod against kubeconfig.
func helmCmd(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"tool", "-modfile=" + filepath.Join(root, "tools", "helm", "go.mod"), "helm"}, args...)...)
	cmd.Dir = root
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig,
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// podProc is one pod of a chart workload, run as a process.
type podProc struct {
	name    string
	labels  map[string]string
	addr    string // gRPC (servers) or HTTPS (the shim)
	metrics string
	volumes map[string]string // volume name → local directory
	secrets map[string]string // local directory → Secret name
	cmd     *exec.Cmd
	log     *syncBuffer
	done    chan struct{}
}

// kubelet plays the kubelet for the chart's workloads in one namespace.
type kubelet struct {
	t        *testing.T
	cs       *kubernetes.Clientset
	ns       string
	services map[string]string // Service DNS name → a ready pod's local address
	pods     []*podProc
}

// writeVolume writes a Secret's or ConfigMap's keys into dir, replacing
// its files at once (the kubelet swaps a symlink; a rename per file here).
func writeVolume(t *testing.T, dir string, data map[string][]byte) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		tmp := filepath.Join(dir, "."+k+".tmp")
		if err := os.WriteFile(tmp, data[k], 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, k)); err != nil {
			t.Fatal(err)
		}
	}
}

func (k *kubelet) secretData(ctx context.Context, name string) map[string][]byte {
	k.t.Helper()
	s, err := k.cs.CoreV1().Secrets(k.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		k.t.Fatalf("Secret %s: %v", name, err)
	}
	return s.Data
}

var envRef = regexp.MustCompile(`\$\(([A-Z_]+)\)`)

// start runs one pod of a pod template: volumes written, env resolved,
// the args' paths moved to the local volumes, listen addresses on free
// loopback ports (listen if set), Service names resolved through
// k.services with the TLS name kept.
func (k *kubelet) start(ctx context.Context, name string, tmpl *corev1.PodTemplateSpec, listen string, extra ...string) *podProc {
	t := k.t
	t.Helper()
	p := &podProc{name: name, labels: tmpl.Labels, volumes: map[string]string{}, secrets: map[string]string{}}
	root := t.TempDir()
	for _, v := range tmpl.Spec.Volumes {
		dir := filepath.Join(root, v.Name)
		p.volumes[v.Name] = dir
		switch {
		case v.Secret != nil:
			writeVolume(t, dir, k.secretData(ctx, v.Secret.SecretName))
			p.secrets[dir] = v.Secret.SecretName
		case v.ConfigMap != nil:
			cm, err := k.cs.CoreV1().ConfigMaps(k.ns).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			data := map[string][]byte{}
			for key, val := range cm.Data {
				data[key] = []byte(val)
			}
			writeVolume(t, dir, data)
		default: // emptyDir
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, ok := p.volumes["data"]; !ok { // the StatefulSet's volumeClaimTemplate
		p.volumes["data"] = filepath.Join(root, "data")
		if err := os.MkdirAll(p.volumes["data"], 0o700); err != nil {
			t.Fatal(err)
		}
	}
	c := tmpl.Spec.Containers[0]
	env := map[string]string{}
	var environ []string
	for _, e := range c.Env {
		val := e.Value
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			val = map[string]string{"metadata.name": name, "metadata.namespace": k.ns, "status.podIP": "127.0.0.1"}[e.ValueFrom.FieldRef.FieldPath]
		case e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil:
			q := c.Resources.Limits[corev1.ResourceName(strings.TrimPrefix(e.ValueFrom.ResourceFieldRef.Resource, "limits."))]
			val = fmt.Sprint(q.Value())
		}
		if val == "" {
			t.Fatalf("%s: env %s resolves to nothing", name, e.Name)
		}
		env[e.Name] = val
		environ = append(environ, e.Name+"="+val)
	}
	var args []string
	for _, a := range c.Args {
		a = envRef.ReplaceAllStringFunc(a, func(m string) string { return env[m[2:len(m)-1]] })
		for _, m := range c.VolumeMounts {
			a = strings.ReplaceAll(a, m.MountPath+"/", p.volumes[m.Name]+"/")
			if strings.HasSuffix(a, "="+m.MountPath) {
				a = strings.TrimSuffix(a, m.MountPath) + p.volumes[m.Name]
			}
		}
		flag, val, _ := strings.Cut(a, "=")
		switch flag {
		case "--listen":
			p.addr = listen
			if p.addr == "" {
				p.addr = freeAddr(t)
			}
			a = flag + "=" + p.addr
		case "--advertise-address": // $(POD_IP):port: every pod is on 127.0.0.1 here
			a = flag + "=" + p.addr
		case "--metrics-listen":
			p.metrics = freeAddr(t)
			a = flag + "=" + p.metrics
		case "--follow", "--server":
			host, _, _ := strings.Cut(strings.TrimPrefix(val, "dns:///"), ":")
			local := k.services[host]
			if local == "" {
				t.Fatalf("%s: %s: no ready pod behind %s", name, a, host)
			}
			a = flag + "=" + local
			nameFlag := map[string]string{"--follow": "--follow-server-name", "--server": "--server-name"}[flag]
			args = append(args, nameFlag+"="+host)
		}
		args = append(args, a)
	}
	args = append(args, extra...)
	p.log = &syncBuffer{}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Env = append(os.Environ(), environ...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	k.pods = append(k.pods, p)
	return p
}

// ready waits for a pod's readiness probe (the chart's /readyz on the
// metrics port, or the shim's over HTTPS), then points the Services that
// select it at it.
func (k *kubelet) ready(ctx context.Context, p *podProc, caPEM []byte) {
	t := k.t
	t.Helper()
	url := "http://" + p.metrics + "/readyz"
	hc := &http.Client{Timeout: 2 * time.Second}
	if p.metrics == "" {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(caPEM)
		hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}}
		url = "https://" + p.addr + "/readyz"
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-p.done:
			t.Fatalf("%s exited:\n%s", p.name, p.log.String())
		default:
		}
		resp, err := hc.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready (%v):\n%s", p.name, err, tail(p.log.String(), 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
	svcs, err := k.cs.CoreV1().Services(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs.Items {
		if labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(p.labels)) && k.services[s.Name+"."+k.ns+".svc"] == "" {
			k.services[s.Name+"."+k.ns+".svc"] = p.addr
		}
	}
}

// refreshSecrets writes every mounted Secret again from the API server,
// as the kubelet does when a Secret changes.
func (k *kubelet) refreshSecrets(ctx context.Context) {
	for _, p := range k.pods {
		for dir, name := range p.secrets {
			writeVolume(k.t, dir, k.secretData(ctx, name))
		}
	}
}

// TestHelmInstallUpgradeRollback: see the file comment.
func TestHelmInstallUpgradeRollback(t *testing.T) {
	api := k8stest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	n := time.Now().UnixNano() % 1_000_000
	release := fmt.Sprintf("arbiter-helm-%d", n)
	apps := fmt.Sprintf("apps-helm-%d", n)
	// The namespace the webhooks police: labelled as the value set asks,
	// and for this test only (other tests share the API server).
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: apps,
		Labels: map[string]string{"arbiter.dev/policed": "true", "arbiter-e2e": apps}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(apps).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// helm install: the ci value set with generated certificates, the shim
	// reached on loopback (no Service routing without kube-proxy).
	shimAddr := freeAddr(t)
	local := filepath.Join(t.TempDir(), "local-values.yaml")
	if err := os.WriteFile(local, fmt.Appendf(nil, "webhook:\n  url: https://%s\n  namespaceSelector:\n    matchLabels:\n      arbiter-e2e: %s\ntls:\n  webhookIPAddresses: [127.0.0.1]\n", shimAddr, apps), 0o600); err != nil {
		t.Fatal(err)
	}
	out := helmCmd(t, api.Kubeconfig, "install", "arbiter", "deploy/chart", "-n", release, "--create-namespace",
		"-f", "deploy/chart/ci/push-generated-values.yaml", "-f", local)
	t.Cleanup(func() {
		helmCmd(t, api.Kubeconfig, "uninstall", "arbiter", "-n", release)
	})
	if !strings.Contains(out, "STATUS: deployed") || !strings.Contains(out, "--server-name arbiter-primary."+release+".svc") {
		t.Errorf("helm install: no release or no NOTES:\n%s", out)
	}

	// Play the kubelet: the primary, then the followers, then the shim.
	k := &kubelet{t: t, cs: cs, ns: release, services: map[string]string{}}
	ca := k.secretData(ctx, "arbiter-ca")["ca.crt"]
	sts, err := cs.AppsV1().StatefulSets(release).Get(ctx, "arbiter-primary", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	primary := k.start(ctx, "arbiter-primary-0", &sts.Spec.Template, "")
	k.ready(ctx, primary, ca)
	followers, err := cs.AppsV1().Deployments(release).Get(ctx, "arbiter-follower", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range int(*followers.Spec.Replicas) {
		f := k.start(ctx, fmt.Sprintf("arbiter-follower-%d", i), &followers.Spec.Template, "")
		k.ready(ctx, f, ca)
	}
	shimDep, err := cs.AppsV1().Deployments(release).Get(ctx, "arbiter-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	shim := k.start(ctx, "arbiter-webhook-0", &shimDep.Spec.Template, shimAddr)
	k.ready(ctx, shim, ca)

	// Push the policies with the operators' certificate (Secret
	// arbiter-admin-tls), as deploy/kustomization.yaml describes.
	adminDir := filepath.Join(t.TempDir(), "admin")
	writeVolume(t, adminDir, k.secretData(ctx, "arbiter-admin-tls"))
	policies := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(policies, []byte(admissionPolicies), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(binary, "push", "--server", k.services["arbiter-primary."+release+".svc"],
		"--server-name", "arbiter-primary."+release+".svc", "--ca-file", filepath.Join(adminDir, "ca.crt"),
		"--cert-file", filepath.Join(adminDir, "tls.crt"), "--key-file", filepath.Join(adminDir, "tls.key"), policies).CombinedOutput(); err != nil {
		t.Fatalf("arbiter push: %v\n%s", err, out)
	}

	// Admission through the chart's webhook configuration.
	pods := cs.CoreV1().Pods(apps)
	pod := func(name, image string) *corev1.Pod {
		no := false
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"team": "a"}}, Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &no, Containers: []corev1.Container{{Name: "c", Image: image}}}}
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	const denial = "Policy disallow-latest-tag failed: images must not use the latest tag"
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := pods.Create(ctx, pod("probe", "nginx:latest"), dry)
		if err != nil && strings.Contains(err.Error(), denial) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the chart's webhook never denied (last: %v):\n%s", err, tail(shim.log.String(), 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := pods.Create(ctx, pod("web", "nginx:1.29"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a compliant Pod: %v", err)
	}

	// Requests keep flowing through upgrade and rollback: every compliant
	// one admitted, every latest-tag one denied by the policy.
	var checks, failures atomic.Int64
	var mu sync.Mutex
	var firstFailures []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, okErr := pods.Create(ctx, pod(fmt.Sprintf("ok-%d", i), "nginx:1.29"), dry)
			_, badErr := pods.Create(ctx, pod(fmt.Sprintf("bad-%d", i), "nginx:latest"), dry)
			checks.Add(1)
			if okErr != nil || badErr == nil || !strings.Contains(badErr.Error(), denial) {
				failures.Add(1)
				mu.Lock()
				if len(firstFailures) < 5 {
					firstFailures = append(firstFailures, fmt.Sprintf("compliant: %v; latest: %v", okErr, badErr))
				}
				mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	vwcs := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	webhookState := func() (admissionregistrationv1.FailurePolicyType, []byte) {
		t.Helper()
		v, err := vwcs.Get(ctx, "arbiter", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return *v.Webhooks[0].FailurePolicy, v.Webhooks[0].ClientConfig.CABundle
	}
	fp0, ca0 := webhookState()
	oldLeaf := k.secretData(ctx, "arbiter-webhook-tls")["tls.crt"]
	waitRequests := func(more int64) {
		t.Helper()
		target := checks.Load() + more
		deadline := time.Now().Add(60 * time.Second)
		for checks.Load() < target {
			if time.Now().After(deadline) {
				t.Fatalf("requests stalled at %d", checks.Load())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitRequests(5)

	// helm upgrade (docs/operations.md): new values, new leaf certificates
	// under the kept CA; the kubelet refreshes the mounted Secrets and the
	// processes reload them.
	helmCmd(t, api.Kubeconfig, "upgrade", "arbiter", "deploy/chart", "-n", release, "--reuse-values", "--set", "webhook.failurePolicy=Ignore")
	fp1, ca1 := webhookState()
	newLeaf := k.secretData(ctx, "arbiter-webhook-tls")["tls.crt"]
	if fp0 != admissionregistrationv1.Fail || fp1 != admissionregistrationv1.Ignore || !bytes.Equal(ca0, ca1) || bytes.Equal(oldLeaf, newLeaf) {
		t.Fatalf("after the upgrade: failurePolicy %s → %s, caBundle kept %v, the shim's certificate renewed %v", fp0, fp1, bytes.Equal(ca0, ca1), !bytes.Equal(oldLeaf, newLeaf))
	}
	k.refreshSecrets(ctx)
	// The shim serves the renewed certificate (reloaded from the files).
	deadline = time.Now().Add(60 * time.Second)
	for !servesCert(shimAddr, newLeaf) {
		if time.Now().After(deadline) {
			t.Fatalf("the shim never served the renewed certificate:\n%s", tail(shim.log.String(), 20))
		}
		time.Sleep(200 * time.Millisecond)
	}
	waitRequests(5)
	history := helmCmd(t, api.Kubeconfig, "history", "arbiter", "-n", release)
	if !strings.Contains(history, "Upgrade complete") {
		t.Errorf("helm history:\n%s", history)
	}

	// helm rollback to the first revision: Fail again, same CA.
	helmCmd(t, api.Kubeconfig, "rollback", "arbiter", "1", "-n", release)
	k.refreshSecrets(ctx)
	fp2, ca2 := webhookState()
	if fp2 != admissionregistrationv1.Fail || !bytes.Equal(ca2, ca0) {
		t.Errorf("after the rollback: failurePolicy %s, caBundle kept %v", fp2, bytes.Equal(ca2, ca0))
	}
	waitRequests(10)
	close(stop)
	wg.Wait()
	t.Logf("%d request pairs (compliant admitted, latest tag denied) during upgrade and rollback, %d failed", checks.Load(), failures.Load())
	if failures.Load() != 0 {
		t.Errorf("%d of %d request pairs failed during upgrade and rollback, first: %q", failures.Load(), checks.Load(), firstFailures)
	}
	for _, p := range k.pods {
		select {
		case <-p.done:
			t.Errorf("%s exited:\n%s", p.name, tail(p.log.String(), 20))
		default:
		}
	}
}

// servesCert reports whether the TLS server at addr presents leafPEM.
func servesCert(addr string, leafPEM []byte) bool {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only reads the certificate
	if err != nil {
		return false
	}
	defer conn.Close()
	certs := conn.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return false
	}
	block, _ := pem.Decode(leafPEM)
	if block == nil {
		return false
	}
	want, err := x509.ParseCertificate(block.Bytes)
	return err == nil && certs[0].Equal(want)
}

// TestChartValueSetsServerSideDryRun: every value set the chart tests
// render (its defaults and deploy/chart/ci), applied object by object to
// the real kube-apiserver v1.37 — server-side apply, dry run, strict field
// validation — is accepted: the API server's own OpenAPI schema and
// validation (beyond the structural schema deploy/'s tests check
// offline). cert-manager's and prometheus-operator's objects are left
// out (no such CRDs here). An invalid object is refused, so the check can fail.
func TestChartValueSetsServerSideDryRun(t *testing.T) {
	api := k8stest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	c, err := k8stest.NewClient(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("arbiter-dryrun-%d", time.Now().UnixNano()%1_000_000)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apply := func(obj map[string]any) error {
		u := &unstructured.Unstructured{Object: obj}
		r, err := c.Resource(u)
		if err != nil {
			return err
		}
		js, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		force := true
		_, err = r.Patch(ctx, u.GetName(), types.ApplyPatchType, js, metav1.PatchOptions{
			FieldManager: "arbiter-chart-test", Force: &force, DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
		return err
	}
	sets, err := filepath.Glob("../deploy/chart/ci/*-values.yaml")
	if err != nil || len(sets) < 2 {
		t.Fatalf("value sets: %v %v", sets, err)
	}
	for _, set := range append([]string{""}, sets...) {
		name := "default"
		args := []string{"template", "arbiter", "deploy/chart", "-n", ns, "--kube-version", "1.37.2"}
		if set != "" {
			name = strings.TrimSuffix(filepath.Base(set), "-values.yaml")
			args = append(args, "-f", strings.TrimPrefix(set, "../"))
		}
		t.Run(name, func(t *testing.T) {
			docs, err := manifest.SplitNonEmptyDocuments([]byte(helmCmd(t, api.Kubeconfig, args...)))
			if err != nil {
				t.Fatal(err)
			}
			var applied, skipped int
			for _, doc := range docs {
				var obj map[string]any
				if err := yaml.Unmarshal(doc, &obj); err != nil {
					t.Fatal(err)
				}
				if v := fmt.Sprint(obj["apiVersion"]); strings.HasPrefix(v, "cert-manager.io/") || strings.HasPrefix(v, "monitoring.coreos.com/") {
					skipped++
					continue
				}
				if err := apply(obj); err != nil {
					t.Errorf("%s %v: %v", obj["kind"], obj["metadata"].(map[string]any)["name"], err)
				}
				applied++
			}
			t.Logf("%d objects accepted, %d cert-manager and prometheus-operator objects skipped", applied, skipped)
			if applied < 8 {
				t.Errorf("only %d objects", applied)
			}
		})
	}
	for what, doc := range map[string]string{
		"unknown field":      "apiVersion: v1\nkind: Service\nmetadata: {name: x, namespace: " + ns + "}\nspec: {clusterIp: None, ports: [{port: 1}]}\n",
		"both budget fields": "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: x, namespace: " + ns + "}\nspec: {minAvailable: 1, maxUnavailable: 1}\n",
	} {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if err := apply(obj); err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
}

// TestHelmKubeMode: the chart's mode kube installed for real — two
// replicas with the Kubernetes source electing their primary with the
// chart's Lease, under the chart's RBAC (each process acts as the
// arbiter-server ServiceAccount: impersonation, as no kubelet mounts its
// token), the primary keeping the managed webhook configurations — a
// ValidatingPolicy created in the cluster reaches the replicas and the API
// server denies through the managed webhook, and the primary writes the
// policy's status; no request of the replicas is forbidden.
func TestHelmKubeMode(t *testing.T) {
	api := k8stest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := k8stest.NewClient(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := kc.InstallCRDs(ctx, "../deploy/kube-source/crds/*.json"); err != nil {
		t.Fatal(err)
	}
	n := time.Now().UnixNano() % 1_000_000
	release := fmt.Sprintf("arbiter-kube-%d", n)
	apps := fmt.Sprintf("apps-kube-%d", n)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: apps,
		Labels: map[string]string{"arbiter-e2e": apps}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(apps).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	shimAddr := freeAddr(t)
	local := filepath.Join(t.TempDir(), "local-values.yaml")
	// (No prometheus-operator CRDs here: its objects are off.)
	if err := os.WriteFile(local, fmt.Appendf(nil, "webhook:\n  url: https://%s\n  namespaceSelector:\n    matchLabels:\n      arbiter-e2e: %s\ntls:\n  webhookIPAddresses: [127.0.0.1]\nmetrics:\n  podMonitor: {enabled: false}\n  prometheusRule: {enabled: false}\n", shimAddr, apps), 0o600); err != nil {
		t.Fatal(err)
	}
	helmCmd(t, api.Kubeconfig, "install", "arbiter", "deploy/chart", "-n", release, "--create-namespace",
		"-f", "deploy/chart/ci/kube-managed-values.yaml", "-f", local)
	t.Cleanup(func() {
		helmCmd(t, api.Kubeconfig, "uninstall", "arbiter", "-n", release)
		// The managed configurations are the primary's, never deleted by it.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, "arbiter-managed", metav1.DeleteOptions{})
		_ = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, "arbiter-managed", metav1.DeleteOptions{})
	})

	// view's rules are aggregated by kube-controller-manager, which does not
	// run here: what it would aggregate of view for what the background
	// scans read (the policy's Pods and their controllers).
	viewRole := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "arbiter-e2e-view-" + release}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"", "apps", "batch"}, Resources: []string{"pods", "deployments", "replicasets", "daemonsets", "statefulsets", "jobs", "cronjobs"}, Verbs: []string{"get", "list", "watch"}}}}
	viewBinding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: viewRole.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: viewRole.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "arbiter-server", Namespace: release}}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, viewRole, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, viewBinding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), viewBinding.Name, metav1.DeleteOptions{})
		_ = cs.RbacV1().ClusterRoles().Delete(context.Background(), viewRole.Name, metav1.DeleteOptions{})
	})

	// The replicas act as the chart's ServiceAccount.
	kcfg, err := clientcmd.LoadFromFile(api.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range kcfg.AuthInfos {
		ai.Impersonate = "system:serviceaccount:" + release + ":arbiter-server"
		ai.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + release, "system:authenticated"}
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kcfg, kubeconfig); err != nil {
		t.Fatal(err)
	}

	k := &kubelet{t: t, cs: cs, ns: release, services: map[string]string{}}
	ca := k.secretData(ctx, "arbiter-ca")["ca.crt"]
	dep, err := cs.AppsV1().Deployments(release).Get(ctx, "arbiter-server", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var replicas []*podProc
	for i := range int(*dep.Spec.Replicas) {
		replicas = append(replicas, k.start(ctx, fmt.Sprintf("arbiter-server-%d", i), &dep.Spec.Template, "", "--kubeconfig="+kubeconfig))
	}
	for _, r := range replicas {
		k.ready(ctx, r, ca)
	}
	shimDep, err := cs.AppsV1().Deployments(release).Get(ctx, "arbiter-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	shim := k.start(ctx, "arbiter-webhook-0", &shimDep.Spec.Template, shimAddr)
	k.ready(ctx, shim, ca)

	// The Lease names one of the replicas.
	lease, err := cs.CoordinationV1().Leases(release).Get(ctx, "arbiter-primary", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the chart's Lease: %v", err)
	}
	holder, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "#")
	if holder != replicas[0].addr && holder != replicas[1].addr {
		t.Fatalf("Lease holder %q is none of the replicas", holder)
	}

	// A ValidatingPolicy in the cluster.
	docs, err := manifest.SplitNonEmptyDocuments([]byte(admissionPolicies))
	if err != nil {
		t.Fatal(err)
	}
	var policy map[string]any
	if err := yaml.Unmarshal(docs[0], &policy); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("helm-kube-latest-%d", n)
	policy["metadata"] = map[string]any{"name": name}
	if _, err := kc.Apply(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kc.Delete(context.Background(), policy) })

	pods := cs.CoreV1().Pods(apps)
	pod := func(name, image string) *corev1.Pod {
		no := false
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &no, Containers: []corev1.Container{{Name: "c", Image: image}}}}
	}
	denial := "Policy " + name + " failed: images must not use the latest tag"
	deadline := time.Now().Add(90 * time.Second)
	for {
		_, err := pods.Create(ctx, pod("probe", "nginx:latest"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), denial) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the managed webhook never denied (last: %v)\nprimary candidates:\n%s\n%s", err, tail(replicas[0].log.String(), 20), tail(replicas[1].log.String(), 20))
		}
		time.Sleep(250 * time.Millisecond)
	}
	if _, err := pods.Create(ctx, pod("web", "nginx:1.29"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a compliant Pod: %v", err)
	}
	vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "arbiter-managed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range vwc.Webhooks {
		if w.ClientConfig.URL == nil || !strings.HasPrefix(*w.ClientConfig.URL, "https://"+shimAddr+"/") || w.NamespaceSelector.MatchLabels["arbiter-e2e"] != apps {
			t.Errorf("managed webhook %s: clientConfig %+v, namespaceSelector %+v", w.Name, w.ClientConfig, w.NamespaceSelector)
		}
	}

	// The primary writes the policy's status with the chart's grants.
	vp := &unstructured.Unstructured{Object: policy}
	res, err := kc.Resource(vp)
	if err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		got, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// WebhookConfigured True. (RBACPermissionsGranted stays False here,
		// so ready stays false: no kube-controller-manager fills the
		// aggregated view ClusterRole the chart binds for reporting.)
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditionStatus", "conditions")
		status := map[string]string{}
		for _, c := range conds {
			if c, ok := c.(map[string]any); ok {
				status[fmt.Sprint(c["type"])] = fmt.Sprint(c["status"])
			}
		}
		if status["WebhookConfigured"] == "True" && status["RBACPermissionsGranted"] != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the policy's status was never written: %v", got.Object["status"])
		}
		time.Sleep(250 * time.Millisecond)
	}
	for _, p := range k.pods {
		if strings.Contains(p.log.String(), "forbidden") {
			t.Errorf("%s: a request was forbidden under the chart's RBAC:\n%s", p.name, tail(p.log.String(), 20))
		}
	}
}
