package kubesource

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/arbiter-pdp/arbiter/internal/k8stest"
)

// benchWorkload is the shared benchmark workload (16 Pod Security policies,
// a compliant and a violating pod).
const benchWorkload = "/work/shared/bench/workload"

// BenchmarkBackgroundScan measures, against the real API server, a new
// primary scanning ARBITER_SCAN_BENCH_PODS (default 10,000) existing Pods
// (half compliant, half violating) with the 16 Pod Security
// ValidatingPolicies of the shared workload until every Pod has its
// PolicyReport (s/full-scan), then how long after a change of one policy's
// message the reports it changes (those of the violating Pods) are all
// updated (s/policy-change), and after an exception exempting 1 violating
// Pod in 50 from one policy, their reports (s/exception). Gated by ARBITER_SCAN_BENCH=1 (and
// ARBITER_K8S_RUN); one iteration: -benchtime=1x.
func BenchmarkBackgroundScan(b *testing.B) {
	if os.Getenv("ARBITER_SCAN_BENCH") == "" || apiserver == nil {
		b.Skip("set ARBITER_SCAN_BENCH=1 and ARBITER_K8S_RUN")
	}
	n := 10000
	if v := os.Getenv("ARBITER_SCAN_BENCH_PODS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	rc := rest.CopyConfig(apiserver.Config)
	rc.QPS, rc.Burst = 2000, 2000
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	ns := fmt.Sprintf("bench-scan-%04d", time.Now().UnixNano()%10000)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var templates []map[string]any
	for _, f := range []string{"compliant-pod.yaml", "violating-pod.yaml"} {
		objs, err := k8stest.ReadObjects(filepath.Join(benchWorkload, "pods", f))
		if err != nil {
			b.Fatal(err)
		}
		// The API server refuses privileged containers (no --allow-privileged).
		if cs, ok, _ := unstructured.NestedSlice(objs[0], "spec", "containers"); ok {
			for _, c := range cs {
				if sc, ok := c.(map[string]any)["securityContext"].(map[string]any); ok {
					delete(sc, "privileged")
				}
			}
			_ = unstructured.SetNestedSlice(objs[0], cs, "spec", "containers")
		}
		templates = append(templates, objs[0])
	}
	start := time.Now()
	pods := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}).Namespace(ns)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				u := &unstructured.Unstructured{Object: deepCopyMap(templates[i%2])}
				u.SetName(fmt.Sprintf("pod-%05d", i))
				u.SetNamespace(ns)
				_ = unstructured.SetNestedField(u.Object, false, "spec", "automountServiceAccountToken")
				unstructured.RemoveNestedField(u.Object, "spec", "serviceAccountName")
				if i%100 == 1 { // violating, exempted by the exception below
					labels := u.GetLabels()
					labels["exempt"] = "yes"
					u.SetLabels(labels)
				}
				if _, err := pods.Create(ctx, u, metav1.CreateOptions{}); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	b.Logf("%d pods created in %v", n, time.Since(start).Round(time.Millisecond))
	files, err := filepath.Glob(filepath.Join(benchWorkload, "pss", "*", "*.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	policies, err := k8stest.ReadObjects(files...)
	if err != nil {
		b.Fatal(err)
	}
	if len(policies) != 16 {
		b.Fatalf("%d policies", len(policies))
	}
	for _, p := range policies {
		// Limited to the benchmark's namespace: other tests' pods stay out.
		spec := p["spec"].(map[string]any)
		mc := spec["matchConstraints"].(map[string]any)
		mc["namespaceSelector"] = map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": ns}}
		if _, err := kc.Apply(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		for _, p := range policies {
			_ = kc.Delete(context.Background(), p)
		}
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})

	for b.Loop() {
		start = time.Now()
		cpu0, self0 := serverCPU(), procCPU("/proc/self")
		if out := os.Getenv("ARBITER_SCAN_BENCH_PPROF"); out != "" {
			// A CPU profile of the API server during the scan.
			go profileServer(b, cs, out, 5*time.Second, 10)
		}
		f := startScanTB(b, &ReportsConfig{Workers: benchWorkers()})
		for f.src.ScanStats().Created < uint64(n) {
			if time.Since(start) > 10*time.Minute {
				b.Fatalf("after 10 min: %+v", f.src.ScanStats())
			}
			time.Sleep(10 * time.Millisecond)
		}
		full := time.Since(start)
		st := f.src.ScanStats()
		b.Logf("full scan: %d reports in %v (%+v)", n, full.Round(time.Millisecond), st)
		b.ReportMetric(full.Seconds(), "s/full-scan")
		cpu1, self1 := serverCPU(), procCPU("/proc/self")
		b.ReportMetric(float64((cpu1-cpu0).Milliseconds())/float64(n), "apiserver+etcd-cpu-ms/create")
		b.ReportMetric(float64((self1-self0).Milliseconds())/float64(n), "arbiter-cpu-ms/report")

		// One policy's message changes: the reports of the violating pods change.
		var changed map[string]any
		for _, p := range policies {
			if p["metadata"].(map[string]any)["name"] == "disallow-host-namespaces" {
				changed = p
			}
		}
		v := changed["spec"].(map[string]any)["validations"].([]any)[0].(map[string]any)
		v["message"] = fmt.Sprint(v["message"]) + " (changed)"
		before := f.src.ScanStats().Updated
		start = time.Now()
		if _, err := kc.Apply(ctx, changed); err != nil {
			b.Fatal(err)
		}
		if out := os.Getenv("ARBITER_SCAN_BENCH_PPROF_CHANGE"); out != "" {
			// A CPU profile of the API server while the reports are updated.
			go profileServer(b, cs, out, time.Second, 8)
		}
		if out := os.Getenv("ARBITER_SCAN_BENCH_SELF_PPROF"); out != "" {
			// A CPU profile of Arbiter (this process) likewise.
			go profileSelf(b, out, time.Second, 8*time.Second)
		}
		want := before + uint64(n/2)
		for f.src.ScanStats().Updated < want {
			if time.Since(start) > 5*time.Minute {
				b.Fatalf("after 5 min: %+v", f.src.ScanStats())
			}
			time.Sleep(10 * time.Millisecond)
		}
		upd := time.Since(start)
		b.Logf("policy change: %d reports updated in %v (%+v)", n/2, upd.Round(time.Millisecond), f.src.ScanStats())
		b.ReportMetric(upd.Seconds(), "s/policy-change")
		b.ReportMetric(float64((serverCPU()-cpu1).Milliseconds())/float64(n/2), "apiserver+etcd-cpu-ms/update")
		b.ReportMetric(float64((procCPU("/proc/self")-self1).Milliseconds())/float64(n/2), "arbiter-cpu-ms/update")

		// An exception for 1 violating pod in 50: their reports change.
		ex := map[string]any{
			"apiVersion": "policies.kyverno.io/v1", "kind": "PolicyException",
			"metadata": map[string]any{"name": "bench-exempt", "namespace": ns},
			"spec": map[string]any{
				"policyRefs":      []any{map[string]any{"name": "disallow-host-namespaces", "kind": "ValidatingPolicy"}},
				"matchConditions": []any{map[string]any{"name": "exempt", "expression": "object.metadata.?labels.exempt.orValue('') == 'yes'"}},
			},
		}
		before = f.src.ScanStats().Updated
		start = time.Now()
		if _, err := kc.Apply(ctx, ex); err != nil {
			b.Fatal(err)
		}
		exempt := uint64((n + 98) / 100)
		for f.src.ScanStats().Updated < before+exempt {
			if time.Since(start) > 5*time.Minute {
				b.Fatalf("after 5 min: %+v", f.src.ScanStats())
			}
			time.Sleep(10 * time.Millisecond)
		}
		upd = time.Since(start)
		b.Logf("exception: %d reports updated in %v", exempt, upd.Round(time.Millisecond))
		b.ReportMetric(upd.Seconds(), "s/exception")

		// Every pod has exactly one report, with 16 results.
		list, err := dyn.Resource(polrGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if len(list.Items) != n {
			b.Fatalf("%d reports for %d pods", len(list.Items), n)
		}
		for _, r := range list.Items {
			if rs, _ := r.Object["results"].([]any); len(rs) != 16 {
				b.Fatalf("report %s: %d results", r.GetName(), len(rs))
			}
		}
	}
}

// profileServer writes a CPU profile of the API server of seconds, taken
// after wait, to out.
func profileServer(b *testing.B, cs kubernetes.Interface, out string, wait time.Duration, seconds int) {
	time.Sleep(wait)
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(seconds)).DoRaw(context.Background())
	if err == nil {
		err = os.WriteFile(out, raw, 0o600)
	}
	if err != nil {
		b.Log("profiling the API server:", err)
	}
}

// profileSelf writes a CPU profile of this process for d, taken after
// wait, to out.
func profileSelf(b *testing.B, out string, wait, d time.Duration) {
	time.Sleep(wait)
	f, err := os.Create(out)
	if err != nil {
		b.Log("profiling:", err)
		return
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Log("profiling:", err)
		return
	}
	time.Sleep(d)
	pprof.StopCPUProfile()
}

func deepCopyMap(m map[string]any) map[string]any {
	return (&unstructured.Unstructured{Object: m}).DeepCopy().Object
}

// benchWorkers is ARBITER_SCAN_BENCH_WORKERS (default: ReportsConfig's).
func benchWorkers() int {
	n, _ := strconv.Atoi(os.Getenv("ARBITER_SCAN_BENCH_WORKERS"))
	return n
}

// serverCPU returns the CPU time (user + system) the test's kube-apiserver
// and its etcd have used so far, found by their command lines (0 when not
// found: another platform, or the script mode).
func serverCPU() time.Duration {
	u, err := url.Parse(apiserver.Config.Host)
	if err != nil {
		return 0
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var etcdURL string
	var total time.Duration
	cmdlines := map[string]string{}
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		cl := strings.ReplaceAll(string(b), "\x00", " ")
		cmdlines[filepath.Dir(p)] = cl
		if strings.Contains(cl, "--secure-port="+u.Port()+" ") {
			if i := strings.Index(cl, "--etcd-servers="); i >= 0 {
				etcdURL, _, _ = strings.Cut(cl[i+len("--etcd-servers="):], " ")
			}
			total += procCPU(filepath.Dir(p))
		}
	}
	if etcdURL == "" {
		return 0
	}
	for dir, cl := range cmdlines {
		if strings.Contains(cl, "--listen-client-urls "+etcdURL+" ") {
			total += procCPU(dir)
		}
	}
	return total
}

// procCPU is utime + stime of /proc/PID (USER_HZ 100).
func procCPU(dir string) time.Duration {
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return 0
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+2:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
