// Command chainsawe2e runs Kyverno's chainsaw tests (Kyverno's policy
// library, unchanged) against a real kube-apiserver whose only admission
// webhook is Arbiter, and prints "N passed, M failed" (make conformance-e2e).
//
// It starts run-apiserver (a kube-apiserver and etcd, no controller
// manager), installs deploy/kube-source/crds, starts `arbiter serve
// --kube-source --kube-webhooks managed --kube-cleanup` and the webhook shim (`arbiter
// webhook`) with a CA of its own, and runs chainsaw once over the test
// folders with the configuration upstream runs them with (chainsaw.yaml
// beside this file: one test at a time, 1m30s timeouts).
//
// The API server has no controller manager; the harness does the work of
// the two controllers the tests depend on, and nothing more:
//   - the ServiceAccount controller: every Namespace gets its "default"
//     ServiceAccount (the ServiceAccount admission plugin refuses every Pod
//     without it);
//   - the namespace controller: a deleted Namespace is emptied and
//     finalized, so chainsaw's cleanup, which waits for its test namespace
//     to go, ends.
//
// It also does what a Kyverno installation has: the kyverno Namespace with
// its ConfigMap, and the reports controller's ServiceAccount bound to the
// view ClusterRole (the identity the RBACPermissionsGranted condition is
// checked for, --kube-reports-user).
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/arbiter-pdp/arbiter/internal/k8stest"
)

// reportsUser is the identity whose rights RBACPermissionsGranted checks:
// Kyverno's reports controller, bound to the view ClusterRole.
const (
	kyvernoNS   = "kyverno"
	reportsSA   = "kyverno-reports-controller"
	reportsUser = "system:serviceaccount:" + kyvernoNS + ":" + reportsSA
	webhookName = "arbiter-conformance"
)

type options struct {
	arbiter, chainsaw, kubectl, runAPIServer, crds, config, work string
	keep                                                         bool
	dirs                                                         []string
}

func main() {
	var o options
	flag.StringVar(&o.arbiter, "arbiter", "bin/arbiter", "the arbiter binary")
	flag.StringVar(&o.chainsaw, "chainsaw", "", "the chainsaw v0.2.12 binary (../shared/conformance/build-chainsaw prints it)")
	flag.StringVar(&o.kubectl, "kubectl", "", "the kubectl the tests' scripts call (default: the newest kubectl.1.N beside the kubectl on PATH, else that kubectl)")
	flag.StringVar(&o.runAPIServer, "run-apiserver", "../shared/k8s/run-apiserver", "run-apiserver")
	flag.StringVar(&o.crds, "crds", "deploy/kube-source/crds/*.json", "the CRDs to install (glob)")
	flag.StringVar(&o.config, "config", "internal/chainsawe2e/chainsaw.yaml", "chainsaw's configuration")
	flag.StringVar(&o.work, "work", "", "a folder for the logs and the certificates (default: a temporary one, removed unless -keep)")
	flag.BoolVar(&o.keep, "keep", false, "keep the work folder")
	flag.Usage = func() {
		_, _ = fmt.Fprintf(flag.CommandLine.Output(), "usage: chainsawe2e [flags] FOLDER...\n\nRuns the chainsaw tests under each FOLDER against a real kube-apiserver with Arbiter as its admission webhook.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	o.dirs = flag.Args()
	if len(o.dirs) == 0 || o.chainsaw == "" {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	passed, failed, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chainsawe2e:", err)
		os.Exit(2)
	}
	fmt.Printf("%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) (passed, failed int, err error) {
	for _, p := range []*string{&o.arbiter, &o.chainsaw, &o.runAPIServer, &o.config} {
		if *p, err = filepath.Abs(*p); err != nil {
			return 0, 0, err
		}
	}
	if o.kubectl, err = findKubectl(o.kubectl); err != nil {
		return 0, 0, err
	}
	if o.work == "" {
		if o.work, err = os.MkdirTemp("", "chainsawe2e-"); err != nil {
			return 0, 0, err
		}
		if !o.keep {
			defer func() { _ = os.RemoveAll(o.work) }()
		}
	} else if err := os.MkdirAll(o.work, 0o755); err != nil {
		return 0, 0, err
	}
	logf("work folder %s; kubectl %s", o.work, o.kubectl)

	if err := os.Setenv(k8stest.Env, o.runAPIServer); err != nil {
		return 0, 0, err
	}
	api, err := k8stest.Start()
	if err != nil {
		return 0, 0, fmt.Errorf("starting the API server: %w", err)
	}
	defer api.Stop()
	logf("API server ready (%s)", api.Kubeconfig)
	kc, err := k8stest.NewClient(api.Config)
	if err != nil {
		return 0, 0, err
	}
	cs, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		return 0, 0, err
	}
	if err := kc.InstallCRDs(ctx, o.crds); err != nil {
		return 0, 0, err
	}

	disc, err := discovery.NewDiscoveryClientForConfig(api.Config)
	if err != nil {
		return 0, 0, err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := startControllers(cctx, cs, kc.Dynamic, disc); err != nil {
		return 0, 0, err
	}
	if err := installKyvernoBits(ctx, cs); err != nil {
		return 0, 0, err
	}

	ca, cert, key, err := writeCerts(o.work)
	if err != nil {
		return 0, 0, err
	}
	serveAddr, shimAddr, err := freeAddrs(2)
	if err != nil {
		return 0, 0, err
	}
	serve, err := startProc(o.work, "serve", o.arbiter, "serve", "--listen", serveAddr, "--data", filepath.Join(o.work, "data"),
		"--log-format", "text", "--kube-source", "--kubeconfig", api.Kubeconfig, "--lease-name", "",
		"--kube-webhooks", "managed", "--kube-webhook-name", webhookName, "--kube-webhook-url", "https://"+shimAddr,
		"--kube-webhook-ca-file", ca, "--kube-webhook-exclude-namespaces", "kube-system,"+kyvernoNS,
		"--kube-reports-user", reportsUser, "--kube-cleanup")
	if err != nil {
		return 0, 0, err
	}
	defer serve.stop()
	shim, err := startProc(o.work, "webhook", o.arbiter, "webhook", "--listen", shimAddr, "--server", serveAddr,
		"--cert", cert, "--key", key, "--log-format", "text")
	if err != nil {
		return 0, 0, err
	}
	defer shim.stop()
	if err := waitReady(ctx, cs, shimAddr, serve, shim); err != nil {
		return 0, 0, err
	}
	logf("arbiter serve (%s) and its webhook (%s) ready", serveAddr, shimAddr)
	return runChainsaw(ctx, o, api.Kubeconfig)
}

// findKubectl returns the kubectl to use: want, or the newest versioned
// kubectl.1.N beside the kubectl on PATH (a dispatcher that picks one by
// the cluster's version), or that kubectl.
func findKubectl(want string) (string, error) {
	if want != "" {
		return exec.LookPath(want)
	}
	k, err := exec.LookPath("kubectl")
	if err != nil {
		return "", errors.New("no kubectl on PATH: give -kubectl")
	}
	real, err := filepath.EvalSymlinks(k)
	if err != nil {
		return "", err
	}
	best, bestMinor := "", -1
	for _, dir := range []string{filepath.Dir(real), filepath.Dir(k)} {
		ms, _ := filepath.Glob(filepath.Join(dir, "kubectl.1.*"))
		for _, m := range ms {
			minor, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(m), "kubectl.1."))
			if err == nil && minor > bestMinor {
				best, bestMinor = m, minor
			}
		}
	}
	if best == "" {
		return k, nil
	}
	return best, nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "chainsawe2e: "+format+"\n", args...)
}

// startControllers starts the ServiceAccount and namespace controllers'
// stand-ins.
func startControllers(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, disc discovery.DiscoveryInterface) error {
	f := informers.NewSharedInformerFactory(cs, 0)
	inf := f.Core().V1().Namespaces().Informer()
	var mu sync.Mutex
	finalizing := map[string]bool{}
	handle := func(obj any) {
		ns, ok := obj.(*corev1.Namespace)
		if !ok {
			return
		}
		if ns.DeletionTimestamp == nil {
			ensureServiceAccount(ctx, cs, ns.Name)
			return
		}
		mu.Lock()
		if finalizing[ns.Name] {
			mu.Unlock()
			return
		}
		finalizing[ns.Name] = true
		mu.Unlock()
		go func() {
			defer func() { mu.Lock(); delete(finalizing, ns.Name); mu.Unlock() }()
			if err := finalizeNamespace(ctx, cs, dyn, disc, ns.Name); err != nil && ctx.Err() == nil {
				logf("finalizing namespace %s: %v", ns.Name, err)
			}
		}()
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
	}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return errors.New("the namespace informer did not sync")
	}
	return nil
}

func ensureServiceAccount(ctx context.Context, cs kubernetes.Interface, ns string) {
	_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) && !apierrors.IsForbidden(err) && ctx.Err() == nil {
		// Forbidden: the namespace is terminating.
		logf("creating the default ServiceAccount of %s: %v", ns, err)
	}
}

// finalizeNamespace does the namespace controller's work for a deleted
// namespace: delete everything in it (Pods at once: no kubelet will stop
// them), drop the finalizers nothing will run, then finalize it.
func finalizeNamespace(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, disc discovery.DiscoveryInterface, ns string) error {
	zero := int64(0)
	bg := metav1.DeletePropagationBackground
	for attempt := 0; ; attempt++ {
		lists, err := disc.ServerPreferredNamespacedResources()
		if err != nil && len(lists) == 0 {
			return err
		}
		left := 0
		for _, l := range lists {
			gv, err := schema.ParseGroupVersion(l.GroupVersion)
			if err != nil {
				continue
			}
			for _, r := range l.APIResources {
				if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "delete") {
					continue
				}
				ri := dyn.Resource(gv.WithResource(r.Name)).Namespace(ns)
				items, err := ri.List(ctx, metav1.ListOptions{})
				if err != nil {
					continue
				}
				for _, it := range items.Items {
					left++
					if len(it.GetFinalizers()) > 0 && it.GetDeletionTimestamp() != nil {
						_, _ = ri.Patch(ctx, it.GetName(), types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
						continue
					}
					_ = ri.Delete(ctx, it.GetName(), metav1.DeleteOptions{GracePeriodSeconds: &zero, PropagationPolicy: &bg})
				}
			}
		}
		if left == 0 {
			break
		}
		if attempt > 100 {
			return fmt.Errorf("%d objects left after %d attempts", left, attempt)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	n.Spec.Finalizers = nil
	if _, err := cs.CoreV1().Namespaces().Finalize(ctx, n, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// installKyvernoBits makes what a Kyverno installation leaves in a
// cluster and the tests read: the kyverno Namespace and its ConfigMap, and
// the reports controller's ServiceAccount with the view ClusterRole.
func installKyvernoBits(ctx context.Context, cs kubernetes.Interface) error {
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kyvernoNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := cs.CoreV1().ConfigMaps(kyvernoNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kyverno"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := cs.CoreV1().ServiceAccounts(kyvernoNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: reportsSA}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := aggregateClusterRoles(ctx, cs); err != nil {
		return err
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: reportsSA + ":view"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: reportsSA, Namespace: kyvernoNS}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// aggregateClusterRoles does the clusterrole-aggregation controller's
// work once: each ClusterRole with an aggregationRule (view, edit, admin)
// gets the rules of the ClusterRoles its selectors match. The API server
// creates the bootstrap roles with their aggregationRule but no rules.
func aggregateClusterRoles(ctx context.Context, cs kubernetes.Interface) error {
	roles, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, r := range roles.Items {
		if r.AggregationRule == nil {
			continue
		}
		var rules []rbacv1.PolicyRule
		for _, sel := range r.AggregationRule.ClusterRoleSelectors {
			s, err := metav1.LabelSelectorAsSelector(&sel)
			if err != nil {
				return fmt.Errorf("ClusterRole %s: %w", r.Name, err)
			}
			for _, o := range roles.Items {
				if o.Name != r.Name && s.Matches(labels.Set(o.Labels)) {
					for _, rule := range o.Rules {
						if !slices.ContainsFunc(rules, func(x rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(x, rule) }) {
							rules = append(rules, rule)
						}
					}
				}
			}
		}
		r.Rules = rules
		if _, err := cs.RbacV1().ClusterRoles().Update(ctx, &r, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("aggregating ClusterRole %s: %w", r.Name, err)
		}
	}
	return nil
}

// writeCerts writes a CA and the shim's serving certificate for
// 127.0.0.1.
func writeCerts(dir string) (caFile, certFile, keyFile string, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "chainsawe2e CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", "", "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "arbiter-webhook"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", "", err
	}
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "webhook.pem"), filepath.Join(dir, "webhook-key.pem")
	for f, b := range map[string]*pem.Block{caFile: {Type: "CERTIFICATE", Bytes: caDER}, certFile: {Type: "CERTIFICATE", Bytes: der},
		keyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(f, pem.EncodeToMemory(b), 0o600); err != nil {
			return "", "", "", err
		}
	}
	return caFile, certFile, keyFile, nil
}

func freeAddrs(n int) (string, string, error) {
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", "", err
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs[0], addrs[1], nil
}

// proc is a child process logging to a file of the work folder.
type proc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

func startProc(work, name, bin string, args ...string) (*proc, error) {
	p := &proc{name: name, log: filepath.Join(work, name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); _ = f.Close(); close(p.done) }()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

// waitReady waits until the primary has written its webhook configuration
// and the shim accepts connections.
func waitReady(ctx context.Context, cs kubernetes.Interface, shimAddr string, procs ...*proc) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		for _, p := range procs {
			if p.exited() {
				return fmt.Errorf("arbiter %s exited:\n%s", p.name, p.tail())
			}
		}
		_, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, webhookName, metav1.GetOptions{})
		if err == nil {
			if c, derr := net.DialTimeout("tcp", shimAddr, time.Second); derr == nil {
				c.Close()
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("arbiter is not ready after 90 s (%v):\n%s", err, procs[0].tail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

var summaryRe = regexp.MustCompile(`^- (Passed|Failed|Skipped) +tests (\d+)`)

// report is what chainsaw's JSON report says (pkg/report/json.go).
type report struct {
	Tests []struct {
		BasePath  string    `json:"basePath"`
		Name      string    `json:"name"`
		StartTime time.Time `json:"startTime"`
		EndTime   time.Time `json:"endTime"`
		Steps     []struct {
			Name       string `json:"name"`
			Operations []struct {
				Name    string `json:"name"`
				Type    string `json:"type"`
				Failure *struct {
					Err string `json:"error"`
				} `json:"failure"`
			} `json:"operations"`
		} `json:"steps"`
	} `json:"tests"`
}

// runChainsaw runs chainsaw over the folders, its output to ours, and
// returns the counts of its summary; it lists each test's result and its
// failed operations from chainsaw's JSON report.
func runChainsaw(ctx context.Context, o options, kubeconfig string) (passed, failed int, err error) {
	bin := filepath.Join(o.work, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return 0, 0, err
	}
	if err := os.Symlink(o.kubectl, filepath.Join(bin, "kubectl")); err != nil && !errors.Is(err, os.ErrExist) {
		return 0, 0, err
	}
	args := []string{"test", "--config", o.config, "--no-color", "--report-format", "JSON", "--report-path", o.work, "--report-name", "chainsaw-report"}
	for _, d := range o.dirs {
		args = append(args, "--test-dir", d)
	}
	cmd := exec.CommandContext(ctx, o.chainsaw, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	logf("%s %s", o.chainsaw, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	summary := false
	sc := bufio.NewScanner(io.TeeReader(out, os.Stdout))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		m := summaryRe.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		switch m[1] {
		case "Passed":
			passed, summary = n, true
		case "Failed":
			failed = n
		}
	}
	werr := cmd.Wait()
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) || !summary {
		return 0, 0, fmt.Errorf("chainsaw printed no summary (%v)", werr)
	}
	b, err := os.ReadFile(filepath.Join(o.work, "chainsaw-report.json"))
	if err != nil {
		logf("no report: %v", err)
		return passed, failed, nil
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, 0, fmt.Errorf("chainsaw's report: %w", err)
	}
	// Names relative to the folders' common parent.
	root := filepath.Dir(filepath.Clean(o.dirs[0]))
	for _, d := range o.dirs[1:] {
		for d = filepath.Clean(d); root != "/" && root != "." && !strings.HasPrefix(d, root+string(filepath.Separator)); {
			root = filepath.Dir(root)
		}
	}
	fmt.Println()
	for _, t := range r.Tests {
		var fails []string
		for _, st := range t.Steps {
			for _, op := range st.Operations {
				if op.Failure != nil {
					fails = append(fails, fmt.Sprintf("    %s %s %s: %s", st.Name, op.Type, op.Name, op.Failure.Err))
				}
			}
		}
		result := "PASS"
		if len(fails) > 0 {
			result = "FAIL"
		}
		rel, err := filepath.Rel(root, t.BasePath)
		if err != nil {
			rel = t.BasePath
		}
		fmt.Printf("%s %-70s %5.1fs\n", result, strings.TrimSuffix(rel, "/.chainsaw-test"), t.EndTime.Sub(t.StartTime).Seconds())
		for _, f := range fails {
			fmt.Println(f)
		}
	}
	return passed, failed, nil
}
