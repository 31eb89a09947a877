package kubesource

// Background scans into PolicyReports against a real kube-apiserver
// (internal/k8stest). Skipped when ARBITER_K8S_RUN is not set.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/store"
)

// startScan runs a primary fed by a Source that scans in the background.
func startScan(t *testing.T, rc *ReportsConfig) *fixture {
	t.Helper()
	needAPIServer(t)
	f := startScanTB(t, rc)
	f.t = t
	return f
}

func startScanTB(t testing.TB, rc *ReportsConfig) *fixture {
	t.Helper()
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if os.Getenv("ARBITER_SCAN_BENCH") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	srv, err := server.New(context.Background(), server.Config{DataDir: t.TempDir(), NoSync: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	src, err := New(Config{Rest: apiserver.Config, Logger: log, BatchDelay: 10 * time.Millisecond, Resync: time.Hour,
		RetryInterval: time.Second, Reports: rc}, srv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = src.Run(ctx)
	}()
	halt := sync.OnceFunc(func() {
		cancel()
		<-done
	})
	t.Cleanup(func() {
		halt()
		srv.Shutdown(context.Background())
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	})
	select {
	case <-src.Ready():
	case <-time.After(60 * time.Second):
		t.Fatal("the source did not write its first comparison in 60 s")
	}
	return &fixture{srv: srv, src: src, halt: halt}
}

// scanNamespace makes a namespace labelled scan=id with the default
// ServiceAccount the ServiceAccount admission plugin looks for.
func scanNamespace(t *testing.T, cs kubernetes.Interface, name, id string) {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{"scan": id}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

func scanPod(name string) *corev1.Pod {
	no := false
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
		AutomountServiceAccountToken: &no, Containers: []corev1.Container{{Name: "c", Image: "nginx:1.29"}}}}
}

// scanPolicy fails the pods named prefix* of the namespaces labelled
// scan=id, with message msg; background set (nil: default).
func scanPolicy(name, id, prefix, msg string, background *bool) map[string]any {
	spec := map[string]any{
		"validationActions": []any{"Audit"},
		"matchConstraints": map[string]any{
			"resourceRules": []any{map[string]any{
				"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE", "UPDATE"}, "resources": []any{"pods"},
			}},
			"namespaceSelector": map[string]any{"matchLabels": map[string]any{"scan": id}},
		},
		"validations": []any{map[string]any{
			"expression": fmt.Sprintf("!object.metadata.name.startsWith('%s')", prefix),
			"message":    msg,
		}},
	}
	if background != nil {
		spec["evaluation"] = map[string]any{"background": map[string]any{"enabled": *background}}
	}
	return map[string]any{
		"apiVersion": "policies.kyverno.io/v1",
		"kind":       "ValidatingPolicy",
		"metadata": map[string]any{"name": name, "annotations": map[string]any{
			"policies.kyverno.io/category": "Testing", "policies.kyverno.io/severity": "medium"}},
		"spec": spec,
	}
}

func getReport(t *testing.T, ns, uid string) *unstructured.Unstructured {
	t.Helper()
	u, err := kc.Dynamic.Resource(polrGVR).Namespace(ns).Get(context.Background(), uid, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// waitReport waits until the report of the object uid in ns satisfies ok
// (nil report: absent) and returns it.
func waitReport(t *testing.T, ns, uid string, within time.Duration, ok func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		u := getReport(t, ns, uid)
		if ok(u) {
			return u
		}
		if time.Now().After(deadline) {
			if u == nil {
				t.Fatalf("report %s/%s: absent", ns, uid)
			}
			t.Fatalf("report %s/%s: %s", ns, uid, mustJSON(u.Object))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func results(u *unstructured.Unstructured) []map[string]any {
	if u == nil {
		return nil
	}
	l, _ := u.Object["results"].([]any)
	out := make([]map[string]any, len(l))
	for i, r := range l {
		out[i], _ = r.(map[string]any)
	}
	return out
}

// oneResult says whether the report holds exactly one result, of policy,
// with result and a message containing msg.
func oneResult(policy, result, msg string) func(*unstructured.Unstructured) bool {
	return func(u *unstructured.Unstructured) bool {
		rs := results(u)
		return len(rs) == 1 && rs[0]["policy"] == policy && rs[0]["result"] == result && strings.Contains(fmt.Sprint(rs[0]["message"]), msg)
	}
}

func absent(u *unstructured.Unstructured) bool { return u == nil }

// TestBackgroundReports: existing pods get one PolicyReport each, in
// Kyverno's layout; a policy change updates the reports it changes (and
// only those); an exception turns a fail into a skip; an expired exception
// counts as not there, from the instant it expires; a deleted pod, and a
// policy whose background evaluation is turned off, take their reports with
// them.
func TestBackgroundReports(t *testing.T) {
	needAPIServer(t)
	cs, err := kubernetes.NewForConfig(apiserver.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := fmt.Sprintf("%04d", time.Now().UnixNano()%10000)
	ns := "scan-" + id
	scanNamespace(t, cs, ns, id)
	pods := cs.CoreV1().Pods(ns)
	bad, err := pods.Create(ctx, scanPod("bad-1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	good, err := pods.Create(ctx, scanPod("good-1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := startScan(t, &ReportsConfig{Delay: 50 * time.Millisecond})
	name := "scan-" + id
	pol := scanPolicy(name, id, "bad", "bad pods are not allowed", nil)
	t.Cleanup(func() { _ = kc.Delete(context.Background(), pol) })
	apply(t, pol)

	r := waitReport(t, ns, string(bad.UID), 30*time.Second, oneResult(name, "fail", "bad pods are not allowed"))
	if got := r.GetLabels(); len(got) != 1 || got["app.kubernetes.io/managed-by"] != "kyverno" {
		t.Errorf("labels %v", got)
	}
	if o := r.GetOwnerReferences(); len(o) != 1 || o[0].APIVersion != "v1" || o[0].Kind != "Pod" || o[0].Name != "bad-1" || o[0].UID != bad.UID {
		t.Errorf("owner references %+v", o)
	}
	wantScope := map[string]any{"apiVersion": "v1", "kind": "Pod", "name": "bad-1", "namespace": ns, "uid": string(bad.UID)}
	if mustJSON(r.Object["scope"]) != mustJSON(wantScope) {
		t.Errorf("scope %v", r.Object["scope"])
	}
	if mustJSON(r.Object["summary"]) != `{"error":0,"fail":1,"pass":0,"skip":0,"warn":0}` {
		t.Errorf("summary %v", r.Object["summary"])
	}
	res := results(r)[0]
	if res["source"] != "KyvernoValidatingPolicy" || res["scored"] != true || res["category"] != "Testing" || res["severity"] != "medium" || res["rule"] != nil {
		t.Errorf("result %v", res)
	}
	if mustJSON(res["properties"]) != `{"cel.validationIndex":"0","process":"background scan"}` {
		t.Errorf("properties %v", res["properties"])
	}
	if ts, _ := res["timestamp"].(map[string]any); ts["nanos"] != int64(0) || ts["seconds"].(int64) < time.Now().Add(-time.Minute).Unix() {
		t.Errorf("timestamp %v", res["timestamp"])
	}
	rev, err := strconv.ParseUint(r.GetAnnotations()[RevisionAnnotation], 10, 64)
	if err != nil || rev == 0 || rev > f.srv.Current().Revision {
		t.Errorf("revision annotation %q (serving %d)", r.GetAnnotations()[RevisionAnnotation], f.srv.Current().Revision)
	}
	g := waitReport(t, ns, string(good.UID), 30*time.Second, oneResult(name, "pass", ""))
	if mustJSON(g.Object["summary"]) != `{"error":0,"fail":0,"pass":1,"skip":0,"warn":0}` {
		t.Errorf("summary %v", g.Object["summary"])
	}

	// A pod created while the primary runs is scanned when it appears.
	late, err := pods.Create(ctx, scanPod("bad-2"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitReport(t, ns, string(late.UID), 30*time.Second, oneResult(name, "fail", "bad pods are not allowed"))

	// A policy change: the failing reports change; the passing
	// one is not written again.
	goodRV := getReport(t, ns, string(good.UID)).GetResourceVersion()
	changed := time.Now()
	apply(t, scanPolicy(name, id, "bad", "bad pods are forbidden here", nil))
	waitReport(t, ns, string(bad.UID), 30*time.Second, oneResult(name, "fail", "forbidden here"))
	waitReport(t, ns, string(late.UID), 30*time.Second, oneResult(name, "fail", "forbidden here"))
	t.Logf("reports updated %v after the policy change", time.Since(changed).Round(time.Millisecond))
	if rv := getReport(t, ns, string(good.UID)).GetResourceVersion(); rv != goodRV {
		t.Errorf("the unchanged report was written again (resourceVersion %s → %s)", goodRV, rv)
	}

	// An exception for bad-1: skipped.
	ex := polex("scan-ex-"+id, ns, name, "bad-1")
	t.Cleanup(func() { _ = kc.Delete(context.Background(), ex) })
	apply(t, ex)
	r = waitReport(t, ns, string(bad.UID), 30*time.Second, oneResult(name, "skip", "rule is skipped due to policy exception"))
	if res := results(r)[0]; res["rule"] != "exception" || fmt.Sprint(res["properties"].(map[string]any)["exceptions"]) != "scan-ex-"+id {
		t.Errorf("exception result %v", res)
	}
	if mustJSON(r.Object["summary"]) != `{"error":0,"fail":0,"pass":0,"skip":1,"warn":0}` {
		t.Errorf("summary %v", r.Object["summary"])
	}

	// The exception expires in 3 s: from then on it counts as not there,
	// with no change in the cluster to trigger a scan.
	expires := time.Now().Add(3 * time.Second).UTC().Truncate(time.Second).Add(time.Second)
	ex["spec"].(map[string]any)["expiresAt"] = expires.Format(time.RFC3339)
	apply(t, ex)
	waitReport(t, ns, string(bad.UID), 30*time.Second, oneResult(name, "fail", "forbidden here"))
	if time.Now().Before(expires) {
		t.Errorf("the exception stopped counting before it expired (%v)", expires)
	}
	t.Logf("fail again %v after the exception expired", time.Since(expires).Round(time.Millisecond))

	// An exception that has already expired counts as not there.
	ex2 := polex("scan-ex2-"+id, ns, name, "bad-2")
	ex2["spec"].(map[string]any)["expiresAt"] = time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	t.Cleanup(func() { _ = kc.Delete(context.Background(), ex2) })
	apply(t, ex2)
	f.waitKey(polexKey(ns, "scan-ex2-"+id), true, nil)
	time.Sleep(2 * time.Second) // a scan ran at the exception's revision
	if rs := results(getReport(t, ns, string(late.UID))); len(rs) != 1 || rs[0]["result"] != "fail" {
		t.Errorf("an expired exception counted: %v", rs)
	}

	// A deleted pod takes its report with it (there is no garbage
	// collector here).
	if err := pods.Delete(ctx, "bad-2", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitReport(t, ns, string(late.UID), 30*time.Second, absent)

	// A report deleted by someone else is written again.
	if err := kc.Dynamic.Resource(polrGVR).Namespace(ns).Delete(ctx, string(good.UID), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReport(t, ns, string(good.UID), 30*time.Second, oneResult(name, "pass", ""))

	// Background evaluation turned off: no results, no reports.
	off := false
	apply(t, scanPolicy(name, id, "bad", "bad pods are forbidden here", &off))
	waitReport(t, ns, string(bad.UID), 30*time.Second, absent)
	waitReport(t, ns, string(good.UID), 30*time.Second, absent)
	st := f.src.ScanStats()
	if st.Created < 3 || st.Deleted < 3 || st.WriteErrors != 0 {
		t.Errorf("stats %+v", st)
	}
}

func polexKey(ns, name string) store.Key {
	return store.Key{Group: kyvernoapi.Group, Kind: kyvernoapi.KindPolicyException, Namespace: ns, Name: name}
}

// TestBackgroundReportsVAP: a ValidatingAdmissionPolicy and its binding
// (Audit) report on the existing objects they match (ConfigMaps here),
// source ValidatingAdmissionPolicy; a MutatingPolicy reports that its
// mutation is not applied; a ClusterPolicyReport for a
// cluster-scoped object (a Namespace matched by ValidatingPolicies), whose
// result from a policy that says status.generated goes.
func TestBackgroundReportsVAP(t *testing.T) {
	needAPIServer(t)
	cs, err := kubernetes.NewForConfig(apiserver.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := fmt.Sprintf("%04d", time.Now().UnixNano()%10000)
	ns := "scanvap-" + id
	scanNamespace(t, cs, ns, id)
	bad, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "forbidden"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	startScan(t, &ReportsConfig{Delay: 50 * time.Millisecond})
	vap := map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
		"metadata": map[string]any{"name": "scan-vap-" + id},
		"spec": map[string]any{
			"failurePolicy": "Fail",
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE", "UPDATE"}, "resources": []any{"configmaps"}}}},
			"validations": []any{map[string]any{"expression": "object.metadata.name != 'forbidden'", "message": "forbidden ConfigMap"}},
		},
	}
	binding := map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
		"metadata": map[string]any{"name": "scan-vap-" + id},
		"spec": map[string]any{
			"policyName": "scan-vap-" + id, "validationActions": []any{"Audit"},
			"matchResources": map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"scan": id}}},
		},
	}
	t.Cleanup(func() {
		_ = kc.Delete(context.Background(), binding)
		_ = kc.Delete(context.Background(), vap)
	})
	apply(t, vap)
	apply(t, binding)
	r := waitReport(t, ns, string(bad.UID), 30*time.Second, func(u *unstructured.Unstructured) bool {
		rs := results(u)
		return len(rs) == 1 && rs[0]["result"] == "fail"
	})
	if res := results(r)[0]; res["source"] != "ValidatingAdmissionPolicy" || !strings.Contains(fmt.Sprint(res["message"]), "forbidden ConfigMap") ||
		res["properties"].(map[string]any)["process"] != "background scan" {
		t.Errorf("result %v", res)
	}

	// A MutatingPolicy that would label ConfigMaps: "mutation is not
	// applied" on the existing ones, as Kyverno reports it.
	mp := map[string]any{
		"apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy",
		"metadata": map[string]any{"name": "scan-mpol-" + id},
		"spec": map[string]any{
			"matchConstraints": map[string]any{
				"resourceRules":     []any{rule("", "configmaps", "CREATE")},
				"namespaceSelector": map[string]any{"matchLabels": map[string]any{"scan": id}},
			},
			"mutations": []any{map[string]any{"patchType": "ApplyConfiguration", "applyConfiguration": map[string]any{
				"expression": `Object{metadata: Object.metadata{labels: {"seen": "yes"}}}`}}},
		},
	}
	t.Cleanup(func() { _ = kc.Delete(context.Background(), mp) })
	apply(t, mp)
	r = waitReport(t, ns, string(bad.UID), 30*time.Second, func(u *unstructured.Unstructured) bool { return len(results(u)) == 2 })
	if res := results(r)[0]; res["source"] != "KyvernoMutatingPolicy" || res["policy"] != "scan-mpol-"+id || res["result"] != "fail" || res["message"] != "mutation is not applied" {
		t.Errorf("mutating policy result %v", res)
	}

	// A ValidatingPolicy on Namespaces: a ClusterPolicyReport.
	nsPol := map[string]any{
		"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
		"metadata": map[string]any{"name": "scan-ns-" + id},
		"spec": map[string]any{
			"validationActions": []any{"Audit"},
			"matchConstraints": map[string]any{
				"resourceRules":  []any{map[string]any{"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE", "UPDATE"}, "resources": []any{"namespaces"}}},
				"objectSelector": map[string]any{"matchLabels": map[string]any{"scan": id}},
			},
			"validations": []any{map[string]any{"expression": "has(object.metadata.labels.owner)", "message": "namespaces need an owner"}},
		},
	}
	// A second one, which passes.
	nsPol2 := (&unstructured.Unstructured{Object: nsPol}).DeepCopy().Object
	nsPol2["metadata"] = map[string]any{"name": "scan-ns2-" + id}
	nsPol2["spec"].(map[string]any)["validations"] = []any{map[string]any{"expression": "true", "message": "never"}}
	t.Cleanup(func() {
		_ = kc.Delete(context.Background(), nsPol)
		_ = kc.Delete(context.Background(), nsPol2)
	})
	apply(t, nsPol)
	apply(t, nsPol2)
	nsObj, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		u, err := kc.Dynamic.Resource(cpolrGVR).Get(ctx, string(nsObj.UID), metav1.GetOptions{})
		if err == nil {
			rs := results(u)
			if len(rs) == 2 {
				if rs[0]["result"] != "fail" || rs[0]["policy"] != "scan-ns-"+id || rs[1]["result"] != "pass" || u.Object["scope"].(map[string]any)["kind"] != "Namespace" {
					t.Fatalf("cluster report %s", mustJSON(u.Object))
				}
				break
			}
		}
		if !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no ClusterPolicyReport for the Namespace")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// status.generated (Kyverno generated a ValidatingAdmissionPolicy from
	// the policy and leaves the policy to it): no results of its own.
	u, err := kc.Dynamic.Resource(resources[kyvernoapi.KindValidatingPolicy]).Get(ctx, "scan-ns-"+id, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u.Object["status"] = map[string]any{"generated": true}
	if _, err := kc.Dynamic.Resource(resources[kyvernoapi.KindValidatingPolicy]).UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		u, err := kc.Dynamic.Resource(cpolrGVR).Get(ctx, string(nsObj.UID), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rs := results(u); len(rs) == 1 && rs[0]["policy"] == "scan-ns2-"+id {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the generated policy's result stays: %s", mustJSON(u.Object))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReportWriteRetried: a report the API server refuses (its namespace
// is terminating: nothing here finishes deleting it) is retried, for its
// object alone — no full rescan — with a growing backoff.
func TestReportWriteRetried(t *testing.T) {
	needAPIServer(t)
	cs, err := kubernetes.NewForConfig(apiserver.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := fmt.Sprintf("%04d", time.Now().UnixNano()%10000)
	ns := "scanretry-" + id
	scanNamespace(t, cs, ns, id)
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, scanPod("bad-1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No pod is left in the namespace, which stays terminating, for the
	// scans of later tests.
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods(ns).Delete(context.Background(), "bad-1", metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f := startScan(t, &ReportsConfig{Delay: 50 * time.Millisecond})
	name := "scan-retry-" + id
	pol := scanPolicy(name, id, "bad", "bad pods are not allowed", nil)
	t.Cleanup(func() { _ = kc.Delete(context.Background(), pol) })
	apply(t, pol)
	// Once the informers all listed (each listing asks for a full scan).
	eventually(t, "refused report writes", func() bool { return f.src.ScanStats().WriteErrors >= 3 })
	st := f.src.ScanStats()
	eventually(t, "the write retried twice", func() bool { return f.src.ScanStats().WriteErrors >= st.WriteErrors+2 })
	if got := f.src.ScanStats(); got.FullScans != st.FullScans || got.Scans <= st.Scans {
		t.Errorf("retries: %+v, then %+v", st, got)
	}
}

// TestReportsDigest: a report carries the digest of what Arbiter wrote; a
// new term trusts it (writes nothing), and adds it to a report without
// it, keeping the results' timestamps; a report someone else changes
// (results, with the digest left as it was) is written again, one whose
// metadata alone someone else changes is not.
func TestReportsDigest(t *testing.T) {
	needAPIServer(t)
	cs, err := kubernetes.NewForConfig(apiserver.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := fmt.Sprintf("%04d", time.Now().UnixNano()%10000)
	ns := "scandigest-" + id
	scanNamespace(t, cs, ns, id)
	bad, err := cs.CoreV1().Pods(ns).Create(ctx, scanPod("bad-1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	good, err := cs.CoreV1().Pods(ns).Create(ctx, scanPod("good-1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := startScan(t, &ReportsConfig{Delay: 50 * time.Millisecond})
	name := "scan-digest-" + id
	pol := scanPolicy(name, id, "bad", "bad pods are not allowed", nil)
	t.Cleanup(func() { _ = kc.Delete(context.Background(), pol) })
	apply(t, pol)
	r := waitReport(t, ns, string(bad.UID), 30*time.Second, oneResult(name, "fail", "not allowed"))
	g := waitReport(t, ns, string(good.UID), 30*time.Second, oneResult(name, "pass", ""))
	for _, u := range []*unstructured.Unstructured{r, g} {
		if d := u.GetAnnotations()[DigestAnnotation]; d != digestOf(canonical(u)) {
			t.Errorf("report %s: digest %q, content %s", u.GetName(), d, digestOf(canonical(u)))
		}
	}
	first.halt()
	// One report loses its digest (as written by an older Arbiter).
	ann := g.GetAnnotations()
	delete(ann, DigestAnnotation)
	g.SetAnnotations(ann)
	if g, err = kc.Dynamic.Resource(polrGVR).Namespace(ns).Update(ctx, g, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A new term: the report with its digest holds what it wants; the
	// other is read and written once, with the digest and its result's
	// timestamp.
	f := startScan(t, &ReportsConfig{Delay: 50 * time.Millisecond})
	eventually(t, "the report without a digest rewritten", func() bool { return f.src.ScanStats().Updated >= 1 })
	eventually(t, "a full scan of the new term", func() bool { return f.src.ScanStats().FullScans > 1 })
	time.Sleep(time.Second) // the scans of the pods' listing ran
	if st := f.src.ScanStats(); st.Created+st.Deleted != 0 || st.Updated != 1 {
		t.Errorf("the new term wrote reports: %+v", st)
	}
	if rv := getReport(t, ns, string(bad.UID)).GetResourceVersion(); rv != r.GetResourceVersion() {
		t.Errorf("the report was written again (resourceVersion %s → %s)", r.GetResourceVersion(), rv)
	}
	cur := getReport(t, ns, string(good.UID))
	if cur.GetAnnotations()[DigestAnnotation] != digestOf(canonical(cur)) || mustJSON(results(cur)[0]["timestamp"]) != mustJSON(results(g)[0]["timestamp"]) {
		t.Errorf("the report without a digest, rewritten: %s", mustJSON(cur.Object))
	}

	// Someone else adds a label to one report and changes the other's
	// results, leaving its annotations.
	g = getReport(t, ns, string(good.UID))
	g.SetLabels(map[string]string{ManagedByReportLabel: ManagedByReportValue, "team": "a"})
	if g, err = kc.Dynamic.Resource(polrGVR).Namespace(ns).Update(ctx, g, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r = getReport(t, ns, string(bad.UID))
	results(r)[0]["message"] = "all is well"
	results(r)[0]["result"] = "pass"
	r.Object["summary"] = map[string]any{"pass": int64(1), "fail": int64(0), "warn": int64(0), "error": int64(0), "skip": int64(0)}
	if _, err := kc.Dynamic.Resource(polrGVR).Namespace(ns).Update(ctx, r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r = waitReport(t, ns, string(bad.UID), 30*time.Second, oneResult(name, "fail", "not allowed"))
	if d := r.GetAnnotations()[DigestAnnotation]; d != digestOf(canonical(r)) {
		t.Errorf("repaired report: digest %q, content %s", d, digestOf(canonical(r)))
	}
	eventually(t, "the repair counted", func() bool { return f.src.ScanStats().Updated == 2 })
	time.Sleep(time.Second) // the label's scan ran with the repair's
	if cur := getReport(t, ns, string(good.UID)); cur.GetResourceVersion() != g.GetResourceVersion() || cur.GetLabels()["team"] != "a" {
		t.Errorf("the report whose label changed was written again: %s", mustJSON(cur.Object["metadata"]))
	}
	if st := f.src.ScanStats(); st.Updated != 2 || st.Created != 0 || st.WriteErrors != 0 {
		t.Errorf("stats %+v", st)
	}
}
