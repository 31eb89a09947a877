package kubesource

// The primary writing back to a real kube-apiserver (internal/k8stest):
// policy status through the CRDs' status subresource, and the managed
// webhook configurations. Skipped when ARBITER_K8S_RUN is not set.

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/jsonpath"

	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/internal/k8stest"
	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/store"
)

// startCluster runs a primary fed by a Source that writes the policies'
// status and (with hooks) the managed webhook configurations.
func startCluster(t *testing.T, status *StatusConfig, hooks *WebhookConfig) *fixture {
	t.Helper()
	needAPIServer(t)
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := server.New(context.Background(), server.Config{DataDir: t.TempDir(), NoSync: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	src, err := New(Config{Rest: apiserver.Config, Logger: log, BatchDelay: 10 * time.Millisecond, Resync: time.Hour,
		RetryInterval: time.Second, Status: status, Webhooks: hooks}, srv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = src.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
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
	return &fixture{t: t, srv: srv, src: src}
}

var resources = map[string]schema.GroupVersionResource{
	kyvernoapi.KindValidatingPolicy:      {Group: kyvernoapi.Group, Version: "v1", Resource: "validatingpolicies"},
	kyvernoapi.KindMutatingPolicy:        {Group: kyvernoapi.Group, Version: "v1", Resource: "mutatingpolicies"},
	kyvernoapi.KindImageValidatingPolicy: {Group: kyvernoapi.Group, Version: "v1", Resource: "imagevalidatingpolicies"},
}

func getPolicy(t *testing.T, kind, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := kc.Dynamic.Resource(resources[kind]).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// jsonPath evaluates a kubectl -o jsonpath template on an object.
func jsonPath(t *testing.T, u *unstructured.Unstructured, tmpl string) string {
	t.Helper()
	jp := jsonpath.New("t").AllowMissingKeys(true)
	if err := jp.Parse(tmpl); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := jp.Execute(&b, u.Object); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// waitStatus waits until the policy's status satisfies ok and returns it.
func waitStatus(t *testing.T, kind, name string, ok func(policyStatus) bool) (*unstructured.Unstructured, policyStatus) {
	t.Helper()
	var u *unstructured.Unstructured
	var st policyStatus
	deadline := time.Now().Add(30 * time.Second)
	for {
		u = getPolicy(t, kind, name)
		st = decodeStatus(statusOf(u))
		if ok(st) {
			return u, st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s: status %s", kind, name, mustJSON(statusOf(u)))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func conditionsAre(want ...string) func(policyStatus) bool {
	return func(st policyStatus) bool {
		var got []string
		for _, c := range st.ConditionStatus.Conditions {
			got = append(got, c.Type+"="+string(c.Status))
		}
		return slices.Equal(got, want)
	}
}

func withRules(obj map[string]any, rules ...map[string]any) map[string]any {
	rs := make([]any, len(rules))
	for i, r := range rules {
		rs[i] = r
	}
	obj["spec"].(map[string]any)["matchConstraints"] = map[string]any{"resourceRules": rs}
	return obj
}

func rule(group, resource string, ops ...string) map[string]any {
	o := make([]any, len(ops))
	for i, op := range ops {
		o[i] = op
	}
	return map[string]any{"apiGroups": []any{group}, "apiVersions": []any{"v1"}, "operations": o, "resources": []any{resource}}
}

func mpolicy(name string) map[string]any {
	return map[string]any{
		"apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"matchConstraints": map[string]any{"resourceRules": []any{rule("", "pods", "CREATE")}},
			"mutations": []any{map[string]any{"patchType": "ApplyConfiguration", "applyConfiguration": map[string]any{
				"expression": `Object{metadata: Object.metadata{labels: {"seen": "yes"}}}`}}},
		},
	}
}

// bindView grants a service account what the view ClusterRole grants of
// the pods and their controllers (what Kyverno's reports controller
// holds; run-apiserver has no controller manager to aggregate view
// itself), and returns its user name.
func bindView(t *testing.T, id string) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(apiserver.Config)
	if err != nil {
		t.Fatal(err)
	}
	read := []string{"get", "list", "watch"}
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "reports-" + id}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "configmaps", "services"}, Verbs: read},
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets", "deployments", "replicasets", "statefulsets"}, Verbs: read},
		{APIGroups: []string{"batch"}, Resources: []string{"jobs", "cronjobs"}, Verbs: read},
	}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "reports-" + id},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "reports-" + id}}}
	ctx := context.Background()
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{})
		_ = cs.RbacV1().ClusterRoles().Delete(ctx, cr.Name, metav1.DeleteOptions{})
	})
	return "system:serviceaccount:default:reports-" + id
}

// managed is a webhook configuration that calls nowhere and matches no
// namespace in use (the API server never calls it), unique to the test.
func managed(t *testing.T, id string) *WebhookConfig {
	t.Helper()
	cfg := &WebhookConfig{Name: "arbiter-test-" + id, URL: "https://127.0.0.1:1", CABundle: []byte("not a CA"),
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"arbiter-test": id}}, Resync: time.Second}
	t.Cleanup(func() {
		cs, err := kubernetes.NewForConfig(apiserver.Config)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, cfg.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
		if err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, cfg.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
	return cfg
}

// TestPolicyStatus: the primary writes Kyverno's status through the
// status subresource: the two conditions in Kyverno's order with its
// reasons and messages, ready, the revision; kubectl reads Ready with a
// jsonpath (kubectl wait --for=condition cannot: the CRD prunes
// .status.conditions). RBACPermissionsGranted asks about the reporting
// user: with view, pods/ephemeralcontainers is missing, as in Kyverno.
// MutatingPolicies get the same. A full comparison writes nothing.
func TestPolicyStatus(t *testing.T) {
	needAPIServer(t)
	id := unique("st")
	user := bindView(t, id)
	f := startCluster(t, &StatusConfig{ReportsUser: user}, managed(t, id))
	good, restrict, mp := id+"-good", id+"-restrict", id+"-mutate"
	t.Cleanup(func() {
		remove(t, vpol(good, "x"))
		remove(t, vpol(restrict, "x"))
		remove(t, mpolicy(mp))
	})
	apply(t, vpol(good, "stbad"))
	apply(t, withRules(vpol(restrict, "stbad"), map[string]any{"apiGroups": []any{""}, "apiVersions": []any{"v1"},
		"operations": []any{"CREATE", "UPDATE"}, "resources": []any{"pods", "pods/ephemeralcontainers"}}))
	apply(t, mpolicy(mp))

	u, st := waitStatus(t, kyvernoapi.KindValidatingPolicy, good, conditionsAre("WebhookConfigured=True", "RBACPermissionsGranted=True"))
	want := []struct{ typ, reason, msg string }{
		{"WebhookConfigured", "Succeeded", "Webhook configured."},
		{"RBACPermissionsGranted", "Succeeded", "Policy is ready for reporting."},
	}
	for i, w := range want {
		c := st.ConditionStatus.Conditions[i]
		if c.Type != w.typ || c.Reason != w.reason || c.Message != w.msg || c.LastTransitionTime.IsZero() || c.ObservedGeneration != u.GetGeneration() {
			t.Errorf("condition %d: %+v, want %+v", i, c, w)
		}
	}
	if got := jsonPath(t, u, "{.status.conditionStatus.ready}"); got != "true" {
		t.Errorf("jsonpath ready = %q", got)
	}
	rev := f.srv.Current().Revision
	if msg := jsonPath(t, u, "{.status.conditionStatus.message}"); !strings.HasPrefix(msg, "Arbiter revision ") || !strings.HasSuffix(msg, " holds generation 1.") {
		t.Errorf("message %q (revision %d)", msg, rev)
	}
	if got := jsonPath(t, u, "{.status.autogen.configs.defaults.targets[*].kind}"); got != "DaemonSet Deployment ReplicaSet StatefulSet Job" {
		t.Errorf("autogen targets %q", got)
	}
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		out, err := exec.Command(kubectl, "--kubeconfig", apiserver.Kubeconfig, "wait", "--timeout=20s",
			"--for=jsonpath={.status.conditionStatus.ready}=true", "validatingpolicies.policies.kyverno.io/"+good).CombinedOutput()
		if err != nil {
			t.Errorf("kubectl wait --for=jsonpath: %v\n%s", err, out)
		}
	}

	_, st = waitStatus(t, kyvernoapi.KindValidatingPolicy, restrict, conditionsAre("WebhookConfigured=True", "RBACPermissionsGranted=False"))
	wantMsg := "Policy is not ready for reporting, missing permissions: get /v1, Resource=pods/ephemeralcontainers: ; list /v1, Resource=pods/ephemeralcontainers: ; watch /v1, Resource=pods/ephemeralcontainers: ."
	if c := st.ConditionStatus.Conditions[1]; c.Reason != "Failed" || c.Message != wantMsg {
		t.Errorf("RBACPermissionsGranted %+v\nwant %q", c, wantMsg)
	}
	if *st.ConditionStatus.Ready {
		t.Error("ready with a False condition")
	}

	u, _ = waitStatus(t, kyvernoapi.KindMutatingPolicy, mp, conditionsAre("WebhookConfigured=True", "RBACPermissionsGranted=True"))
	if got := jsonPath(t, u, "{.status.conditionStatus.ready}"); got != "true" {
		t.Errorf("MutatingPolicy ready = %q", got)
	}

	// Steady: a full comparison and a permission refresh write nothing.
	rvs := map[string]string{}
	for _, n := range []string{good, restrict} {
		rvs[n] = getPolicy(t, kyvernoapi.KindValidatingPolicy, n).GetResourceVersion()
	}
	writes := f.src.Stats().StatusWrites
	n0 := f.src.Stats().Reconciles
	f.src.markFull()
	f.src.cluster.perms.expire()
	f.src.cluster.poke()
	eventually(t, "a full comparison", func() bool { return f.src.Stats().Reconciles > n0 })
	time.Sleep(1500 * time.Millisecond)
	if w := f.src.Stats().StatusWrites; w != writes {
		t.Errorf("%d status writes in a steady state", w-writes)
	}
	for n, rv := range rvs {
		if got := getPolicy(t, kyvernoapi.KindValidatingPolicy, n).GetResourceVersion(); got != rv {
			t.Errorf("%s changed in a steady state (%s → %s)", n, rv, got)
		}
	}
}

// TestStatusOfARefusedPolicy: a policy that does not compile gets Ready
// false with the compile error (PolicyCached), besides the Event, and is
// not configured in the webhook while nothing of it is stored; fixed, it
// is ready; broken again, the version still decided with stays in the
// webhook and the message names the revision that holds it. Status writes
// record no further Event.
func TestStatusOfARefusedPolicy(t *testing.T) {
	needAPIServer(t)
	id := unique("bad")
	f := startCluster(t, &StatusConfig{}, managed(t, id))
	name := id + "-policy"
	t.Cleanup(func() { remove(t, vpol(name, "x")) })

	apply(t, withExpression(vpol(name, "x"), "object.metadata.name.startsWith("))
	_, st := waitStatus(t, kyvernoapi.KindValidatingPolicy, name, conditionsAre("WebhookConfigured=False", "RBACPermissionsGranted=True", "PolicyCached=False"))
	if c := st.ConditionStatus.Conditions[0]; c.Message != "Policy is not configured in the webhook." || c.Reason != "Failed" {
		t.Errorf("WebhookConfigured %+v", c)
	}
	if c := st.ConditionStatus.Conditions[2]; !strings.Contains(c.Message, "spec.validations[0].expression") || c.Reason != "Failed" {
		t.Errorf("PolicyCached %+v", c)
	}
	if *st.ConditionStatus.Ready {
		t.Error("a refused policy is ready")
	}
	if m := st.ConditionStatus.Message; m != "Arbiter refused generation 1 (see the PolicyCached condition); no revision holds this policy." {
		t.Errorf("message %q", m)
	}

	apply(t, vpol(name, "badfixed"))
	_, st = waitStatus(t, kyvernoapi.KindValidatingPolicy, name, conditionsAre("WebhookConfigured=True", "RBACPermissionsGranted=True"))
	if !*st.ConditionStatus.Ready {
		t.Error("the fixed policy is not ready")
	}
	held := st.ConditionStatus.Message // Arbiter revision R holds generation 2.
	if !strings.HasSuffix(held, " holds generation 2.") {
		t.Fatalf("message %q", held)
	}

	apply(t, withExpression(vpol(name, "x"), "object.spec.nope(("))
	_, st = waitStatus(t, kyvernoapi.KindValidatingPolicy, name, conditionsAre("WebhookConfigured=True", "RBACPermissionsGranted=True", "PolicyCached=False"))
	r := strings.TrimSuffix(strings.TrimPrefix(held, "Arbiter revision "), " holds generation 2.")
	if m := st.ConditionStatus.Message; m != "Arbiter refused generation 3 (see the PolicyCached condition); revision "+r+" holds the version Arbiter decides with." {
		t.Errorf("message %q", m)
	}
	if resp := f.decide(pod("badfixed-pod", "default"), 0); resp.GetAllowed() {
		t.Errorf("the version held no longer decides: %v", resp)
	}
	time.Sleep(time.Second)
	if evs := rejectedEvents(t, name); len(evs) != 2 {
		t.Errorf("%d ArbiterRejected Events, want 2 (one per refused content): %q", len(evs), evs)
	}
}

func webhookConfigs(t *testing.T, name string) (*admissionregistrationv1.ValidatingWebhookConfiguration, *admissionregistrationv1.MutatingWebhookConfiguration) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(apiserver.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	v, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return v, m
}

// summary is "name: group/resource ops; ..." for each webhook.
func summary[W admissionregistrationv1.ValidatingWebhook | admissionregistrationv1.MutatingWebhook](ws []W) string {
	var parts []string
	for _, w := range ws {
		var name string
		var rules []admissionregistrationv1.RuleWithOperations
		switch w := any(w).(type) {
		case admissionregistrationv1.ValidatingWebhook:
			name, rules = w.Name, w.Rules
		case admissionregistrationv1.MutatingWebhook:
			name, rules = w.Name, w.Rules
		}
		var rs []string
		for _, r := range rules {
			ops := make([]string, len(r.Operations))
			for i, o := range r.Operations {
				ops[i] = string(o)
			}
			rs = append(rs, fmt.Sprintf("%s/%s %s", strings.Join(r.APIGroups, ","), strings.Join(r.Resources, ","), strings.Join(ops, ",")))
		}
		parts = append(parts, name+": "+strings.Join(rs, " + "))
	}
	return strings.Join(parts, "; ")
}

// waitWebhooks waits until the configurations' webhooks summarise as want
// (validating, mutating).
func waitWebhooks(t *testing.T, name, wantV, wantM string) (*admissionregistrationv1.ValidatingWebhookConfiguration, *admissionregistrationv1.MutatingWebhookConfiguration) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, m := webhookConfigs(t, name)
		var gotV, gotM string
		if v != nil {
			gotV = summary(v.Webhooks)
		}
		if m != nil {
			gotM = summary(m.Webhooks)
		}
		if v != nil && m != nil && gotV == wantV && gotM == wantM {
			return v, m
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhooks:\nvalidating %s\n      want %s\nmutating   %s\n      want %s", gotV, wantV, gotM, wantM)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const podControllers = " + apps/daemonsets,deployments,replicasets,statefulsets CREATE,UPDATE + batch/cronjobs CREATE,UPDATE + batch/jobs CREATE,UPDATE"

// TestManagedWebhooks: the configurations follow the policies as they are
// added, changed and removed; a Fail and an Ignore policy get separate
// webhooks; a MutatingPolicy goes to the MutatingWebhookConfiguration; a
// policy whose rules the API server refuses is left out (not configured)
// without holding back the others; a hand edit is undone.
func TestManagedWebhooks(t *testing.T) {
	needAPIServer(t)
	id := unique("wh")
	hooks := managed(t, id)
	f := startCluster(t, &StatusConfig{}, hooks)
	a, b, bad, mp := id+"-a", id+"-b", id+"-bad", id+"-m"
	t.Cleanup(func() {
		for _, n := range []string{a, b, bad} {
			remove(t, vpol(n, "x"))
		}
		remove(t, mpolicy(mp))
	})
	// Every policy in the cluster is in the configurations: the other
	// tests of the package remove theirs when they end.
	failName, ignoreName := vpolWebhookName+"-fail", vpolWebhookName+"-ignore"
	apply(t, vpol(a, "x"))
	v, _ := waitWebhooks(t, hooks.Name, failName+": /pods CREATE,UPDATE"+podControllers, "")
	w := v.Webhooks[0]
	if *w.ClientConfig.URL != "https://127.0.0.1:1/validate" || string(w.ClientConfig.CABundle) != "not a CA" || *w.FailurePolicy != admissionregistrationv1.Fail ||
		*w.SideEffects != admissionregistrationv1.SideEffectClassNoneOnDryRun || w.NamespaceSelector.MatchLabels["arbiter-test"] != id {
		t.Errorf("webhook %+v", w)
	}
	if v.Labels[ManagedByLabel] != "arbiter" {
		t.Errorf("labels %v", v.Labels)
	}

	ignored := vpol(b, "x")
	ignored["spec"].(map[string]any)["failurePolicy"] = "Ignore"
	apply(t, withRules(ignored, rule("", "configmaps", "CREATE")))
	waitWebhooks(t, hooks.Name, failName+": /pods CREATE,UPDATE"+podControllers+"; "+ignoreName+": /configmaps CREATE", "")

	apply(t, withRules(vpol(a, "x"), rule("apps", "deployments", "CREATE")))
	waitWebhooks(t, hooks.Name, failName+": apps/deployments CREATE; "+ignoreName+": /configmaps CREATE", "")

	apply(t, mpolicy(mp))
	waitWebhooks(t, hooks.Name, failName+": apps/deployments CREATE; "+ignoreName+": /configmaps CREATE",
		mpolWebhookName+"-fail: /pods CREATE"+strings.ReplaceAll(podControllers, "CREATE,UPDATE", "CREATE"))

	// The API server refuses "*" beside other groups: that webhook is left
	// out, the rest is written, and the policy says it is not configured.
	badPolicy := vpol(bad, "x")
	badPolicy["spec"].(map[string]any)["webhookConfiguration"] = map[string]any{"timeoutSeconds": int64(5)} // its own webhook
	apply(t, withRules(badPolicy, map[string]any{"apiGroups": []any{"*", "apps"}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"deployments"}}))
	_, st := waitStatus(t, kyvernoapi.KindValidatingPolicy, bad, conditionsAre("WebhookConfigured=False", "RBACPermissionsGranted=True"))
	if st.ConditionStatus.Conditions[0].Message != "Policy is not configured in the webhook." {
		t.Errorf("%+v", st.ConditionStatus.Conditions[0])
	}
	waitStatus(t, kyvernoapi.KindValidatingPolicy, a, conditionsAre("WebhookConfigured=True", "RBACPermissionsGranted=True"))
	remove(t, vpol(bad, "x"))

	remove(t, vpol(b, "x"))
	v, _ = waitWebhooks(t, hooks.Name, failName+": apps/deployments CREATE", mpolWebhookName+"-fail: /pods CREATE"+strings.ReplaceAll(podControllers, "CREATE,UPDATE", "CREATE"))

	// A hand edit is undone (Resync).
	cs, err := kubernetes.NewForConfig(apiserver.Config)
	if err != nil {
		t.Fatal(err)
	}
	v.Webhooks = nil
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(context.Background(), v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWebhooks(t, hooks.Name, failName+": apps/deployments CREATE", mpolWebhookName+"-fail: /pods CREATE"+strings.ReplaceAll(podControllers, "CREATE,UPDATE", "CREATE"))

	// What is written is what the revision's policies make.
	remove(t, vpol(a, "x"))
	remove(t, mpolicy(mp))
	v, m := waitWebhooks(t, hooks.Name, "", "")
	if len(v.Webhooks) != 0 || len(m.Webhooks) != 0 {
		t.Fatalf("webhooks left: %s / %s", summary(v.Webhooks), summary(m.Webhooks))
	}
	writes := f.src.Stats().WebhookWrites
	time.Sleep(2500 * time.Millisecond) // two resyncs
	if w := f.src.Stats().WebhookWrites; w != writes {
		t.Errorf("%d webhook configuration writes with nothing changed", w-writes)
	}
}

// TestImagePolicyInCluster: an ImageValidatingPolicy in the cluster is
// stored, gets its status, and is in both managed configurations (the
// mutating one pins digests) until mutateDigest is false.
func TestImagePolicyInCluster(t *testing.T) {
	needAPIServer(t)
	id := unique("iv")
	hooks := managed(t, id)
	f := startCluster(t, &StatusConfig{}, hooks)
	name := id + "-signed"
	policy := func(mutateDigest bool) map[string]any {
		return map[string]any{
			"apiVersion": "policies.kyverno.io/v1", "kind": "ImageValidatingPolicy",
			"metadata": map[string]any{"name": name},
			"spec": map[string]any{
				"matchConstraints":         map[string]any{"resourceRules": []any{rule("", "pods", "CREATE")}},
				"validationConfigurations": map[string]any{"mutateDigest": mutateDigest},
				"autogen":                  map[string]any{"podControllers": map[string]any{"controllers": []any{}}},
				"matchImageReferences":     []any{map[string]any{"glob": "registry.example/*"}},
				"attestors":                []any{map[string]any{"name": "cosign", "cosign": map[string]any{"key": map[string]any{"data": "k"}}}},
				"validations":              []any{map[string]any{"expression": "true"}},
			},
		}
	}
	t.Cleanup(func() { remove(t, policy(true)) })
	apply(t, policy(true))
	waitWebhooks(t, hooks.Name, ivpolWebhookName+"-fail: /pods CREATE", ivpolMutateWebhookName+"-fail: /pods CREATE")
	_, st := waitStatus(t, kyvernoapi.KindImageValidatingPolicy, name, conditionsAre("WebhookConfigured=True", "RBACPermissionsGranted=True"))
	if st.ConditionStatus.Ready == nil || !*st.ConditionStatus.Ready {
		t.Errorf("not ready: %+v", st.ConditionStatus)
	}
	f.waitKey(store.Key{Group: kyvernoapi.Group, Kind: kyvernoapi.KindImageValidatingPolicy, Name: name}, true, nil)
	apply(t, policy(false))
	waitWebhooks(t, hooks.Name, ivpolWebhookName+"-fail: /pods CREATE", "")
}

// TestDeployRBACSuffices: a replica with the rights deploy/ grants the
// server's account (kube-source and managed-webhooks components,
// impersonated) wins the Lease, writes the policies' status, records the
// Event of a refused policy, manages the webhook configurations and writes
// the background scans' reports, with no request refused.
func TestDeployRBACSuffices(t *testing.T) {
	needAPIServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := kc.Apply(ctx, namespace("arbiter", nil)); err != nil {
		t.Fatal(err)
	}
	objs, err := k8stest.ReadObjects("../deploy/kube-source/rbac.yaml", "../deploy/kube-source/reporting.yaml", "../deploy/kube-source/managed-webhooks/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if _, err := kc.Apply(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := kubernetes.NewForConfig(apiserver.Config)
	if err != nil {
		t.Fatal(err)
	}
	// view's rules are aggregated by kube-controller-manager, which does
	// not run here: what it would aggregate of view for what the policy
	// matches.
	viewRole := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "arbiter-test-view"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"", "apps", "batch"}, Resources: []string{"pods", "deployments", "replicasets", "daemonsets", "statefulsets", "jobs", "cronjobs"}, Verbs: []string{"get", "list", "watch"}}}}
	viewBinding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "arbiter-test-view"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: viewRole.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "arbiter-server", Namespace: "arbiter"}}}
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
	hooks := &WebhookConfig{URL: "https://127.0.0.1:1", NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"arbiter-test": "rbac"}}}
	hooks.Name = DefaultWebhookConfigName // the name the RBAC grants
	t.Cleanup(func() {
		cs, _ := kubernetes.NewForConfig(apiserver.Config)
		_ = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), hooks.Name, metav1.DeleteOptions{})
		_ = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), hooks.Name, metav1.DeleteOptions{})
	})
	rc := rest.CopyConfig(apiserver.Config)
	rc.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:arbiter:arbiter-server",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:arbiter", "system:authenticated"}}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := server.New(ctx, server.Config{DataDir: t.TempDir(), NoSync: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = RunHA(ctx, srv, HAConfig{Source: Config{Rest: rc, Logger: log, BatchDelay: 10 * time.Millisecond, Status: &StatusConfig{}, Webhooks: hooks,
			Reports: &ReportsConfig{Delay: 50 * time.Millisecond}},
			LeaseName: "arbiter-primary", LeaseNamespace: "arbiter", Address: "127.0.0.1:1",
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond})
	}()
	defer func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	}()

	id := unique("rbac")
	good, bad := id+"-good", id+"-bad"
	t.Cleanup(func() {
		remove(t, vpol(good, "x"))
		remove(t, vpol(bad, "x"))
	})
	apply(t, vpol(good, "rbacx"))
	apply(t, withExpression(vpol(bad, "x"), "object.nope(("))
	waitStatus(t, kyvernoapi.KindValidatingPolicy, good, func(st policyStatus) bool {
		return len(st.ConditionStatus.Conditions) == 2 && st.ConditionStatus.Conditions[0].Type == ConditionWebhookConfigured &&
			st.ConditionStatus.Conditions[0].Status == metav1.ConditionTrue
	})
	waitStatus(t, kyvernoapi.KindValidatingPolicy, bad, func(st policyStatus) bool {
		return len(st.ConditionStatus.Conditions) == 3 && st.ConditionStatus.Conditions[2].Type == ConditionPolicyCached
	})
	eventually(t, "an ArbiterRejected Event", func() bool { return len(rejectedEvents(t, bad)) > 0 })
	v, _ := webhookConfigs(t, hooks.Name)
	if v == nil || len(v.Webhooks) == 0 {
		t.Fatalf("no managed webhook: %+v", v)
	}
	scanNamespace(t, cs, id, id)
	p, err := cs.CoreV1().Pods(id).Create(ctx, scanPod("rbacx-1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitReport(t, id, string(p.UID), 30*time.Second, func(u *unstructured.Unstructured) bool {
		rs := results(u)
		return len(rs) > 0 && rs[0]["result"] == "fail"
	})
	if l := logs.String(); strings.Contains(l, "forbidden") {
		t.Fatalf("a request was refused:\n%s", l)
	}
}
