package deploy_test

// The Helm chart in deploy/chart: `helm lint` and `helm template` (helm
// pinned in tools/helm/go.mod) for every value set — the defaults and each
// file in chart/ci — and every rendered document validated three ways:
// decoded strictly into the k8s.io/api types, validated against the
// Kubernetes v1.37 OpenAPI schema that client-go v0.37 carries (unknown
// fields, wrong types, wrong list/map shapes), and checked for how the
// pieces fit (selectors, Services, budgets, certificates, probes,
// GOMEMLIMIT, webhook exclusions and failurePolicy). The chart's RBAC is
// the kustomization's (deploy/kube-source), and its default rendering is
// deploy/'s kustomization but for the labels Helm adds.

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/applyconfigurations"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// chartNamespace is the namespace the tests render the chart into: not
// the kustomization's, so a name hard-coded in a template shows.
const chartNamespace = "arbiter-system"

// kubeVersion is the Kubernetes version the chart is rendered and linted
// for (helm's own default, without a cluster, is older than the chart's
// kubeVersion allows).
const kubeVersion = "1.37.2"

// openAPI validates objects against the structural schema client-go
// v0.37 generated from the Kubernetes v1.37 OpenAPI document
// (k8s.io/client-go/applyconfigurations/internal).
var openAPI = sync.OnceValue(func() managedfields.TypeConverter {
	return applyconfigurations.NewTypeConverter(clientgoscheme.Scheme)
})

// helm runs the helm of tools/helm/go.mod (built by `go tool` on first
// use, then cached) with its state directories in a temporary directory.
func helm(t testing.TB, args ...string) []byte {
	t.Helper()
	out, err := helmOutput(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func helmOutput(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"tool", "-modfile=" + filepath.Join(root, "tools", "helm", "go.mod"), "helm"}, args...)...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	if os.Getenv("KUBECONFIG") == "" {
		cmd.Env = append(cmd.Env, "KUBECONFIG="+filepath.Join(home, "no-kubeconfig"))
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%w\n%s%s", err, out, stderr.Bytes())
	}
	return out, nil
}

// valueSet is one set of values the chart is tested with.
type valueSet struct {
	name string
	file string // "" for the chart's defaults
}

// chartValueSets: the defaults and every file in chart/ci.
func chartValueSets(t testing.TB) []valueSet {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sets := []valueSet{{name: "default"}}
	for _, f := range files {
		sets = append(sets, valueSet{name: strings.TrimSuffix(filepath.Base(f), "-values.yaml"), file: f})
	}
	if len(sets) < 3 {
		t.Fatalf("%d value sets, want at least 3", len(sets))
	}
	return sets
}

// values reads a value set's file (nil for the defaults).
func (v valueSet) values(t testing.TB) map[string]any {
	t.Helper()
	if v.file == "" {
		return nil
	}
	b, err := os.ReadFile(v.file)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// lookup reads a dotted path from values, then from the chart's defaults.
func (v valueSet) lookup(t testing.TB, path string) any {
	t.Helper()
	get := func(m map[string]any) (any, bool) {
		var cur any = m
		for _, k := range strings.Split(path, ".") {
			mm, ok := cur.(map[string]any)
			if !ok {
				return nil, false
			}
			if cur, ok = mm[k]; !ok {
				return nil, false
			}
		}
		return cur, true
	}
	if x, ok := get(v.values(t)); ok {
		return x
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var defaults map[string]any
	if err := yaml.Unmarshal(b, &defaults); err != nil {
		t.Fatal(err)
	}
	x, ok := get(defaults)
	if !ok {
		t.Fatalf("no value %s", path)
	}
	return x
}

// rendered is the chart rendered with one value set.
type rendered struct {
	*manifests
	raw [][]byte
}

// renderChart runs helm template for a value set (and --set overrides).
func renderChart(t testing.TB, ns string, v valueSet, set ...string) *rendered {
	t.Helper()
	args := []string{"template", "arbiter", chartDir, "--namespace", ns, "--kube-version", kubeVersion}
	if v.file != "" {
		args = append(args, "-f", v.file)
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return decodeRendered(t, helm(t, args...))
}

func decodeRendered(t testing.TB, out []byte) *rendered {
	t.Helper()
	docs, err := splitYAML(out)
	if err != nil {
		t.Fatal(err)
	}
	r := &rendered{manifests: &manifests{kustomizations: map[string]*kustomization{}}, raw: docs}
	for i, raw := range docs {
		if err := r.decodeDoc("helm template", i, raw); err != nil {
			t.Fatalf("rendered document %d: %v\n%s", i, err, raw)
		}
	}
	return r
}

// TestChartLint: helm lint --strict with every value set.
func TestChartLint(t *testing.T) {
	for _, v := range chartValueSets(t) {
		t.Run(v.name, func(t *testing.T) {
			args := []string{"lint", "--strict", chartDir, "--namespace", chartNamespace, "--kube-version", kubeVersion}
			if v.file != "" {
				args = append(args, "-f", v.file)
			}
			out := helm(t, args...)
			if !bytes.Contains(out, []byte("0 chart(s) failed")) {
				t.Errorf("helm lint: %s", out)
			}
		})
	}
}

// TestChartRejectsBadValues: a wrong value is refused at render time,
// naming the value.
func TestChartRejectsBadValues(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"mode=pull", `values: mode "pull": want push or kube`},
		{"tls.source=vault", `values: tls.source "vault"`},
		{"webhook.failurePolicy=Allow", `values: webhook.failurePolicy "Allow": want Fail or Ignore`},
		{"kube.webhooks=managed", "values: kube.webhooks managed needs mode kube"},
		{"webhook.timeoutSeconds=31", "values: webhook.timeoutSeconds 31: want 1 to 30"},
		{"tls.source=existing", "values: tls.source existing needs tls.caBundle"},
		// Helm merges maps: a budget given as minAvailable over the default
		// maxUnavailable would have both, which the API server refuses.
		{"followers.podDisruptionBudget.minAvailable=1", "values: followers.podDisruptionBudget: minAvailable and maxUnavailable are both set"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			_, err := helmOutput(t, "template", "arbiter", chartDir, "--kube-version", kubeVersion, "--set", tc.set)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template --set %s: %v, want an error with %q", tc.set, err, tc.want)
			}
		})
	}
}

// TestChartRender renders every value set and validates every document.
func TestChartRender(t *testing.T) {
	for _, v := range chartValueSets(t) {
		t.Run(v.name, func(t *testing.T) {
			r := renderChart(t, chartNamespace, v)
			validateOpenAPI(t, r)
			checkChart(t, r, v, chartNamespace)
		})
	}
}

// validateOpenAPI validates each Kubernetes document, as rendered (not
// through the Go types), against the v1.37 OpenAPI schema.
func validateOpenAPI(t *testing.T, r *rendered) {
	t.Helper()
	n := 0
	for i, raw := range r.raw {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal(raw, &u.Object); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		if g := u.GroupVersionKind().Group; g == "cert-manager.io" || g == "monitoring.coreos.com" {
			continue // not built-in kinds: decoded strictly by decodeDoc
		}
		if _, err := openAPI().ObjectToTyped(&u); err != nil {
			t.Errorf("%s %s: not valid against the v1.37 OpenAPI schema: %v", u.GetKind(), u.GetName(), err)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no Kubernetes object rendered")
	}
}

// TestOpenAPIValidationCatches: the OpenAPI validation refuses what
// helm template would happily print.
func TestOpenAPIValidationCatches(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field":  "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {clusterIp: None}\n",
		"wrong type":     "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: three}\n",
		"list not a map": "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: x}\nspec: {selector: {matchLabels: [a]}}\n",
	} {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		if _, err := openAPI().ObjectToTyped(&u); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// checkChart checks how a rendering fits together.
func checkChart(t *testing.T, r *rendered, v valueSet, ns string) {
	t.Helper()
	mode := v.lookup(t, "mode").(string)
	tlsSource := v.lookup(t, "tls.source").(string)
	managed := mode == "kube" && v.lookup(t, "kube.webhooks") == "managed"

	for _, d := range r.docs {
		acc, _ := metaAccessor(d.obj)
		cluster := map[string]bool{"ValidatingWebhookConfiguration": true, "MutatingWebhookConfiguration": true, "ClusterRole": true, "ClusterRoleBinding": true}[d.gvk.Kind]
		if !cluster && acc.GetNamespace() != ns {
			t.Errorf("%s %s: namespace %q, want %q", d.gvk.Kind, acc.GetName(), acc.GetNamespace(), ns)
		}
		if acc.GetLabels()["app.kubernetes.io/part-of"] != "arbiter" || acc.GetLabels()["app.kubernetes.io/instance"] != "arbiter" {
			t.Errorf("%s %s: labels %v", d.gvk.Kind, acc.GetName(), acc.GetLabels())
		}
	}

	// Workloads: the right ones for the mode, selectors, probes, limits,
	// GOMEMLIMIT, token mounting, and every mounted Secret rendered.
	secrets := map[string]bool{}
	for _, s := range all[*corev1.Secret](r.manifests) {
		secrets[s.Name] = true
	}
	for _, c := range r.certManager {
		if c.Kind == "Certificate" {
			secrets[c.Spec.SecretName] = true
		}
	}
	want := map[string]bool{"Deployment arbiter-webhook": true}
	if mode == "push" {
		want["StatefulSet arbiter-primary"], want["Deployment arbiter-follower"] = true, true
	} else {
		want["Deployment arbiter-server"] = true
	}
	got := map[string]bool{}
	for _, w := range workloads(r.manifests) {
		name := w.kind + " " + w.name
		got[name] = true
		sel, err := metav1.LabelSelectorAsSelector(w.selector)
		if err != nil || !sel.Matches(labels.Set(w.pod.Labels)) {
			t.Errorf("%s: selector %v does not match the pod labels %v", name, w.selector, w.pod.Labels)
		}
		spec := w.pod.Spec
		if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
			t.Errorf("%s: pod may run as root", name)
		}
		kubeSource := w.name == "arbiter-server"
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken != kubeSource {
			t.Errorf("%s: automountServiceAccountToken %v, want %v", name, spec.AutomountServiceAccountToken, kubeSource)
		}
		for _, c := range spec.Containers {
			if c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("%s: resources %+v", name, c.Resources)
			}
			var gomemlimit bool
			for _, e := range c.Env {
				if e.Name == "GOMEMLIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" {
					gomemlimit = true
				}
			}
			if !gomemlimit {
				t.Errorf("%s: no GOMEMLIMIT from limits.memory", name)
			}
			if c.ReadinessProbe == nil || c.LivenessProbe == nil {
				t.Errorf("%s: probes missing", name)
			}
			for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
				if p != nil && p.HTTPGet != nil {
					if _, ok := containerPort(&c, p.HTTPGet.Port); !ok {
						t.Errorf("%s: probe port %v is not a container port", name, p.HTTPGet.Port)
					}
				}
			}
			if got, want := arg(&c, "--kube-source") != "" || slices.Contains(c.Args, "--kube-source"), kubeSource; got != want {
				t.Errorf("%s: --kube-source %v, want %v", name, got, want)
			}
		}
		for _, vol := range spec.Volumes {
			if vol.Secret != nil && !secrets[vol.Secret.SecretName] {
				t.Errorf("%s: volume %s: Secret %s is not rendered (tls.source %s)", name, vol.Name, vol.Secret.SecretName, tlsSource)
			}
		}
	}
	if tlsSource == "existing" {
		want = got // nothing more to check about the Secrets
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("workloads %v, want %v", got, want)
	}

	// Services select one workload each, on a named port it has; the
	// addresses in the arguments name Services that exist.
	svcs := map[string]bool{}
	for _, svc := range all[*corev1.Service](r.manifests) {
		svcs[svc.Name+"."+svc.Namespace+".svc"] = true
		w := serviceFor(t, r.manifests, svc)
		for _, p := range svc.Spec.Ports {
			if _, ok := portByName(w, p.TargetPort.StrVal); !ok {
				t.Errorf("Service %s: targetPort %s not in %s", svc.Name, p.TargetPort.StrVal, w.name)
			}
		}
	}
	for _, w := range workloads(r.manifests) {
		c := &w.pod.Spec.Containers[0]
		for _, flag := range []string{"--server", "--follow", "--follow-server-name"} {
			addr := strings.TrimPrefix(arg(c, flag), "dns:///")
			if addr == "" {
				continue
			}
			host, _, _ := strings.Cut(addr, ":")
			if !svcs[host] {
				t.Errorf("%s: %s=%s names no Service of the chart", w.name, flag, addr)
			}
		}
	}

	// Budgets: each selects a workload of two or more replicas... or lets
	// all of its pods go.
	pdbs := all[*policyv1.PodDisruptionBudget](r.manifests)
	if len(pdbs) != 2 {
		t.Errorf("%d PodDisruptionBudgets, want the decision replicas' and the shim's", len(pdbs))
	}
	for _, pdb := range pdbs {
		if (pdb.Spec.MinAvailable == nil) == (pdb.Spec.MaxUnavailable == nil) {
			t.Errorf("PodDisruptionBudget %s: want one of minAvailable and maxUnavailable: %+v", pdb.Name, pdb.Spec)
		}
		sel, _ := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		var n int
		for _, w := range workloads(r.manifests) {
			if sel.Matches(labels.Set(w.pod.Labels)) {
				n++
				if w.kind == "StatefulSet" {
					t.Errorf("PodDisruptionBudget %s covers the primary", pdb.Name)
				}
			}
		}
		if n != 1 {
			t.Errorf("PodDisruptionBudget %s selects %d workloads", pdb.Name, n)
		}
	}

	// Webhook configurations: the values' failurePolicy, timeout and
	// exclusions, and a CA (injected or in caBundle).
	vwcs := all[*admissionregistrationv1.ValidatingWebhookConfiguration](r.manifests)
	mwcs := all[*admissionregistrationv1.MutatingWebhookConfiguration](r.manifests)
	excluded := []string{ns}
	for _, x := range v.lookup(t, "webhook.excludedNamespaces").([]any) {
		if !slices.Contains(excluded, x.(string)) {
			excluded = append(excluded, x.(string))
		}
	}
	if managed {
		if len(vwcs)+len(mwcs) != 0 {
			t.Errorf("kube.webhooks managed: %d static webhook configurations", len(vwcs)+len(mwcs))
		}
		server := find(r.manifests, "Deployment", "arbiter-server").(*appsv1.Deployment)
		c := &server.Spec.Template.Spec.Containers[0]
		if arg(c, "--kube-webhooks") != "managed" || arg(c, "--kube-webhook-exclude-namespaces") != strings.Join(excluded, ",") ||
			arg(c, "--kube-webhook-service") != ns+"/arbiter-webhook:443" {
			t.Errorf("managed webhook flags: %v", c.Args)
		}
	} else {
		wantMutating := v.lookup(t, "webhook.mutating").(bool)
		if len(vwcs) != 1 || len(mwcs) != map[bool]int{true: 1, false: 0}[wantMutating] {
			t.Fatalf("%d validating, %d mutating webhook configurations", len(vwcs), len(mwcs))
		}
		type hook struct {
			meta   metav1.ObjectMeta
			fp     *admissionregistrationv1.FailurePolicyType
			to     *int32
			ns     *metav1.LabelSelector
			client admissionregistrationv1.WebhookClientConfig
		}
		var hooks []hook
		for _, c := range vwcs {
			hooks = append(hooks, hook{c.ObjectMeta, c.Webhooks[0].FailurePolicy, c.Webhooks[0].TimeoutSeconds, c.Webhooks[0].NamespaceSelector, c.Webhooks[0].ClientConfig})
		}
		for _, c := range mwcs {
			hooks = append(hooks, hook{c.ObjectMeta, c.Webhooks[0].FailurePolicy, c.Webhooks[0].TimeoutSeconds, c.Webhooks[0].NamespaceSelector, c.Webhooks[0].ClientConfig})
		}
		for _, h := range hooks {
			if string(*h.fp) != v.lookup(t, "webhook.failurePolicy") || float64(*h.to) != v.lookup(t, "webhook.timeoutSeconds").(float64) {
				t.Errorf("%s: failurePolicy %s, timeout %d", h.meta.Name, *h.fp, *h.to)
			}
			me := h.ns.MatchExpressions
			if want, _ := v.lookup(t, "webhook.namespaceSelector").(map[string]any)["matchLabels"].(map[string]any); len(want) != len(h.ns.MatchLabels) {
				t.Errorf("%s: namespaceSelector matchLabels %v, want %v", h.meta.Name, h.ns.MatchLabels, want)
			}
			if len(me) != 1 || me[0].Key != "kubernetes.io/metadata.name" || me[0].Operator != metav1.LabelSelectorOpNotIn || !slices.Equal(me[0].Values, excluded) {
				t.Errorf("%s: namespaceSelector %+v, want NotIn %v", h.meta.Name, h.ns, excluded)
			}
			if s := h.client.Service; s == nil || s.Namespace != ns || !svcs[s.Name+"."+s.Namespace+".svc"] {
				t.Errorf("%s: clientConfig %+v", h.meta.Name, h.client)
			}
			switch tlsSource {
			case "certManager":
				if h.meta.Annotations["cert-manager.io/inject-ca-from"] != ns+"/arbiter-webhook" || len(h.client.CABundle) != 0 {
					t.Errorf("%s: annotations %v, caBundle %d bytes", h.meta.Name, h.meta.Annotations, len(h.client.CABundle))
				}
			case "generate":
				checkGeneratedCA(t, r, h.client.CABundle, ns)
			}
		}
	}

	// RBAC only for the Kubernetes source.
	nRBAC := len(all[*rbacv1.ClusterRole](r.manifests)) + len(all[*rbacv1.Role](r.manifests))
	if (nRBAC > 0) != (mode == "kube") {
		t.Errorf("mode %s: %d (Cluster)Roles", mode, nRBAC)
	}

	// The workloads pass the Pod Security policies of deploy/examples.
	checkPodSecurity(t, r)
}

// checkGeneratedCA: caBundle is the CA in every generated Secret, and it
// signs the shim's certificate for the shim's Service name, the servers'
// for both Services, and the client certificates with their common names.
func checkGeneratedCA(t *testing.T, r *rendered, caBundle []byte, ns string) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caBundle) {
		t.Fatalf("caBundle holds no PEM certificate")
	}
	for _, tc := range []struct {
		secret, name, cn string
		usage            x509.ExtKeyUsage
	}{
		{"arbiter-webhook-tls", "arbiter-webhook." + ns + ".svc", "", x509.ExtKeyUsageServerAuth},
		{"arbiter-server-tls", "arbiter-decision." + ns + ".svc", "arbiter-server", x509.ExtKeyUsageServerAuth},
		{"arbiter-server-tls", "arbiter-primary." + ns + ".svc", "arbiter-server", x509.ExtKeyUsageClientAuth},
		{"arbiter-webhook-client-tls", "", "arbiter-webhook", x509.ExtKeyUsageClientAuth},
		{"arbiter-admin-tls", "", "arbiter-admin", x509.ExtKeyUsageClientAuth},
	} {
		s, _ := find(r.manifests, "Secret", tc.secret).(*corev1.Secret)
		if s == nil {
			t.Errorf("no Secret %s", tc.secret)
			continue
		}
		if !bytes.Equal(s.Data["ca.crt"], caBundle) {
			t.Errorf("Secret %s: ca.crt is not the webhooks' caBundle", tc.secret)
		}
		block, _ := pem.Decode(s.Data["tls.crt"])
		if block == nil {
			t.Errorf("Secret %s: tls.crt holds no PEM", tc.secret)
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: tc.name, Roots: pool, KeyUsages: []x509.ExtKeyUsage{tc.usage}}); err != nil {
			t.Errorf("Secret %s: %v", tc.secret, err)
		}
		if tc.cn != "" && cert.Subject.CommonName != tc.cn {
			t.Errorf("Secret %s: common name %q, want %q", tc.secret, cert.Subject.CommonName, tc.cn)
		}
	}
}

// checkPodSecurity evaluates the rendered workloads against the Pod
// Security (restricted) policies of deploy/examples with the engine.
func checkPodSecurity(t *testing.T, r *rendered) {
	t.Helper()
	docs, err := manifest.ReadPaths(nil, filepath.Join(examplesDir, "pod-security"))
	if err != nil {
		t.Fatal(err)
	}
	var policies []*manifest.Object
	for _, o := range manifest.FromDocuments(docs) {
		if o.Kind == "ValidatingPolicy" {
			policies = append(policies, o)
		}
	}
	ps, err := engine.Compile(policies, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, raw := range r.raw {
		d, err := manifest.Parse(fmt.Sprintf("rendered#%d", i), raw)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range manifest.FromDocuments(d) {
			if o.Kind != "Deployment" && o.Kind != "StatefulSet" {
				continue
			}
			req := &admission.Request{Object: o.Content}
			req.Fill()
			dec := ps.Evaluate(context.Background(), req, nil)
			if !dec.Allowed {
				t.Errorf("%s %s: refused by the restricted Pod Security policies: %s", o.Kind, o.Name, dec.Message)
			}
		}
	}
}

// grants are RBAC rules flattened to (group, resource, verb, name).
type grant struct{ group, resource, verb, name string }

func grantsOf(objs []any) map[grant]bool {
	got := map[grant]bool{}
	for _, o := range objs {
		var rules []rbacv1.PolicyRule
		switch o := o.(type) {
		case *rbacv1.ClusterRole:
			rules = o.Rules
		case *rbacv1.Role:
			rules = o.Rules
		}
		for _, r := range rules {
			names := r.ResourceNames
			if names == nil {
				names = []string{""}
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						for _, n := range names {
							got[grant{g, res, v, n}] = true
						}
					}
				}
			}
		}
	}
	return got
}

// binding is a (Cluster)RoleBinding reduced to what it grants to whom.
type binding struct{ kind, role, roleKind, subject string }

func bindingsOf(objs []any) map[binding]bool {
	out := map[binding]bool{}
	for _, o := range objs {
		switch b := o.(type) {
		case *rbacv1.ClusterRoleBinding:
			for _, s := range b.Subjects {
				out[binding{"ClusterRoleBinding", b.RoleRef.Name, b.RoleRef.Kind, s.Kind + "/" + s.Name}] = true
			}
		case *rbacv1.RoleBinding:
			for _, s := range b.Subjects {
				out[binding{"RoleBinding", b.RoleRef.Name, b.RoleRef.Kind, s.Kind + "/" + s.Name}] = true
			}
		}
	}
	return out
}

// aggregationsOf maps each aggregated ClusterRole to its selectors.
func aggregationsOf(objs []any) map[string]string {
	out := map[string]string{}
	for _, o := range objs {
		if r, ok := o.(*rbacv1.ClusterRole); ok && r.AggregationRule != nil {
			out[r.Name] = fmt.Sprint(r.AggregationRule.ClusterRoleSelectors)
		}
	}
	return out
}

func rbacObjects(docs []*doc, keep func(*doc) bool) []any {
	var out []any
	for _, d := range docs {
		if !keep(d) {
			continue
		}
		switch d.obj.(type) {
		case *rbacv1.ClusterRole, *rbacv1.Role, *rbacv1.ClusterRoleBinding, *rbacv1.RoleBinding:
			out = append(out, d.obj)
		}
	}
	return out
}

// TestChartRBACIsTheKustomizations: in mode kube with managed webhooks the
// chart grants exactly what deploy/kube-source (with managed-webhooks and
// reporting.yaml) grants — which TestKubeSourceRBAC holds to what the
// source uses — bound the same way; with managed webhooks off the
// configurations' grants go, with kube.reporting off the view binding,
// with kube.policyStatus off the status updates.
func TestChartRBACIsTheKustomizations(t *testing.T) {
	m := loadManifests(t)
	kustomize := rbacObjects(m.docs, func(d *doc) bool { return strings.HasPrefix(d.file, "kube-source/") })
	wantGrants, wantBindings := grantsOf(kustomize), bindingsOf(kustomize)
	if len(wantGrants) == 0 || len(wantBindings) == 0 {
		t.Fatal("no RBAC in deploy/kube-source")
	}
	kube := valueSet{name: "kube", file: filepath.Join(chartDir, "ci", "kube-managed-values.yaml")}
	r := renderChart(t, chartNamespace, kube)
	chart := rbacObjects(r.docs, func(*doc) bool { return true })
	if got := grantsOf(chart); !reflect.DeepEqual(got, wantGrants) {
		for g := range got {
			if !wantGrants[g] {
				t.Errorf("the chart grants %+v, the kustomization does not", g)
			}
		}
		for g := range wantGrants {
			if !got[g] {
				t.Errorf("the kustomization grants %+v, the chart does not", g)
			}
		}
	}
	if got := bindingsOf(chart); !reflect.DeepEqual(got, wantBindings) {
		t.Errorf("bindings %v, want %v", got, wantBindings)
	}
	if got, want := aggregationsOf(chart), aggregationsOf(kustomize); !reflect.DeepEqual(got, want) || len(want) == 0 {
		t.Errorf("aggregated ClusterRoles %v, want %v", got, want)
	}
	for _, b := range all[*rbacv1.RoleBinding](r.manifests) {
		if b.Namespace != chartNamespace || b.Subjects[0].Namespace != chartNamespace {
			t.Errorf("RoleBinding %s in %s for %s", b.Name, b.Namespace, b.Subjects[0].Namespace)
		}
	}

	// Each switch takes away exactly its grants.
	for _, tc := range []struct {
		set  string
		gone func(grant) bool
		bind string
	}{
		{"kube.webhooks=static", func(g grant) bool { return strings.HasSuffix(g.resource, "webhookconfigurations") }, "arbiter-kube-source-webhooks"},
		// (GlobalContextEntries' status is written either way.)
		{"kube.policyStatus=false", func(g grant) bool {
			return g.group == "policies.kyverno.io" && strings.HasSuffix(g.resource, "/status") && !strings.Contains(g.resource, "deletingpolicies")
		}, ""},
		// (the DeletingPolicies' lastExecutionTime is kube.cleanup's.)
		{"kube.cleanup=false", func(g grant) bool {
			return strings.Contains(g.resource, "deletingpolicies/status") || g.group == "events.k8s.io"
		}, "arbiter-kube-source-cleanup"},
		{"kube.reporting=false", func(grant) bool { return false }, "view"},
		{"kube.backgroundScan=false", func(g grant) bool { return g.group == "wgpolicyk8s.io" }, ""},
	} {
		r := renderChart(t, chartNamespace, kube, tc.set)
		objs := rbacObjects(r.docs, func(*doc) bool { return true })
		want := map[grant]bool{}
		for g := range wantGrants {
			if !tc.gone(g) {
				want[g] = true
			}
		}
		if got := grantsOf(objs); !reflect.DeepEqual(got, want) {
			t.Errorf("--set %s: %d grants, want %d", tc.set, len(got), len(want))
		}
		for b := range bindingsOf(objs) {
			if b.role == tc.bind {
				t.Errorf("--set %s: still bound: %+v", tc.set, b)
			}
		}
	}
	// The Lease name follows the value.
	r = renderChart(t, chartNamespace, kube, "kube.leaseName=arbiter-lease")
	if !grantsOf(rbacObjects(r.docs, func(*doc) bool { return true }))[grant{"coordination.k8s.io", "leases", "update", "arbiter-lease"}] {
		t.Error("kube.leaseName=arbiter-lease: the Lease's grant does not follow")
	}
	server := find(r.manifests, "Deployment", "arbiter-server").(*appsv1.Deployment)
	if arg(&server.Spec.Template.Spec.Containers[0], "--lease-name") != "arbiter-lease" {
		t.Error("kube.leaseName=arbiter-lease: --lease-name does not follow")
	}
}

// TestChartIsTheKustomization: rendered with its defaults into the
// namespace arbiter, the chart makes the objects `kubectl kustomize
// deploy/` makes, with the same workload arguments, probes, resources,
// security contexts, volumes and webhook rules (Helm's labels, the
// --log-level flag and the POD_NAMESPACE/POD_IP variables aside).
func TestChartIsTheKustomization(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed")
	}
	out, err := exec.Command(kubectl, "kustomize", ".").Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v", err)
	}
	k := decodeRendered(t, out)
	r := renderChart(t, "arbiter", valueSet{name: "default"})

	names := func(m *manifests) []string {
		var out []string
		for _, d := range m.docs {
			acc, _ := metaAccessor(d.obj)
			out = append(out, d.gvk.Kind+" "+acc.GetName())
		}
		for _, c := range m.certManager {
			out = append(out, c.Kind+" "+c.Metadata.Name)
		}
		slices.Sort(out)
		return out
	}
	// The chart does not create its namespace (helm install --create-namespace).
	kn := slices.DeleteFunc(names(k.manifests), func(s string) bool { return s == "Namespace arbiter" })
	if got := names(r.manifests); !slices.Equal(got, kn) {
		t.Fatalf("objects differ:\n chart %v\n kustomize %v", got, kn)
	}
	for _, kw := range workloads(k.manifests) {
		var cw workload
		for _, w := range workloads(r.manifests) {
			if w.kind == kw.kind && w.name == kw.name {
				cw = w
			}
		}
		name := kw.kind + " " + kw.name
		if cw.replicas != kw.replicas {
			t.Errorf("%s: replicas %d, kustomize %d", name, cw.replicas, kw.replicas)
		}
		kp, cp := kw.pod.Spec, cw.pod.Spec
		ks, cs := kp.SecurityContext, cp.SecurityContext
		if !reflect.DeepEqual(ks.RunAsNonRoot, cs.RunAsNonRoot) || !reflect.DeepEqual(ks.RunAsUser, cs.RunAsUser) ||
			!reflect.DeepEqual(ks.RunAsGroup, cs.RunAsGroup) || !reflect.DeepEqual(ks.SeccompProfile, cs.SeccompProfile) {
			t.Errorf("%s: pod security context %+v, kustomize %+v", name, cs, ks)
		}
		if !reflect.DeepEqual(kp.Volumes, cp.Volumes) ||
			!reflect.DeepEqual(kp.TopologySpreadConstraints, cp.TopologySpreadConstraints) || kp.ServiceAccountName != cp.ServiceAccountName {
			t.Errorf("%s: pod spec differs", name)
		}
		for i := range kp.Containers {
			kc, cc := kp.Containers[i], cp.Containers[i]
			cargs := slices.DeleteFunc(slices.Clone(cc.Args), func(a string) bool { return strings.HasPrefix(a, "--log-level=") })
			kargs := slices.Clone(kc.Args)
			slices.Sort(cargs)
			slices.Sort(kargs)
			if !slices.Equal(cargs, kargs) {
				t.Errorf("%s: args\n chart %v\n kustomize %v", name, cargs, kc.Args)
			}
			cenv := slices.DeleteFunc(slices.Clone(cc.Env), func(e corev1.EnvVar) bool { return e.Name == "POD_NAMESPACE" || e.Name == "POD_IP" })
			if !reflect.DeepEqual(cenv, kc.Env) || !reflect.DeepEqual(cc.Ports, kc.Ports) || !reflect.DeepEqual(cc.Resources, kc.Resources) ||
				!reflect.DeepEqual(cc.ReadinessProbe, kc.ReadinessProbe) || !reflect.DeepEqual(cc.LivenessProbe, kc.LivenessProbe) ||
				!reflect.DeepEqual(cc.StartupProbe, kc.StartupProbe) || !reflect.DeepEqual(cc.SecurityContext, kc.SecurityContext) ||
				!reflect.DeepEqual(cc.VolumeMounts, kc.VolumeMounts) || cc.Image != kc.Image && !strings.HasPrefix(cc.Image, image+":") {
				t.Errorf("%s: container %s differs from the kustomization's", name, cc.Name)
			}
		}
	}
	// kustomize re-folds the YAML of long expressions: compare their words.
	normalize := func(conds []admissionregistrationv1.MatchCondition) {
		for i := range conds {
			conds[i].Expression = strings.Join(strings.Fields(conds[i].Expression), " ")
		}
	}
	for _, m := range []*manifests{k.manifests, r.manifests} {
		for _, c := range all[*admissionregistrationv1.ValidatingWebhookConfiguration](m) {
			normalize(c.Webhooks[0].MatchConditions)
		}
		for _, c := range all[*admissionregistrationv1.MutatingWebhookConfiguration](m) {
			normalize(c.Webhooks[0].MatchConditions)
		}
	}
	kv := all[*admissionregistrationv1.ValidatingWebhookConfiguration](k.manifests)[0]
	cv := all[*admissionregistrationv1.ValidatingWebhookConfiguration](r.manifests)[0]
	if !reflect.DeepEqual(kv.Webhooks, cv.Webhooks) || !reflect.DeepEqual(kv.Annotations, cv.Annotations) {
		t.Errorf("ValidatingWebhookConfiguration differs:\n chart %+v\n kustomize %+v", cv.Webhooks, kv.Webhooks)
	}
	km := all[*admissionregistrationv1.MutatingWebhookConfiguration](k.manifests)[0]
	cm := all[*admissionregistrationv1.MutatingWebhookConfiguration](r.manifests)[0]
	if !reflect.DeepEqual(km.Webhooks, cm.Webhooks) {
		t.Errorf("MutatingWebhookConfiguration differs")
	}
	kc := find(k.manifests, "ConfigMap", "arbiter-server-config").(*corev1.ConfigMap)
	cc := find(r.manifests, "ConfigMap", "arbiter-server-config").(*corev1.ConfigMap)
	var ka, ca map[string]any
	if yaml.Unmarshal([]byte(kc.Data["arbiter.yaml"]), &ka) != nil || yaml.Unmarshal([]byte(cc.Data["arbiter.yaml"]), &ca) != nil || !reflect.DeepEqual(ka, ca) {
		t.Errorf("server config differs:\n%s\n%s", cc.Data["arbiter.yaml"], kc.Data["arbiter.yaml"])
	}
	for i, c := range k.certManager {
		if !reflect.DeepEqual(c.Spec, r.certManager[slices.IndexFunc(r.certManager, func(x *certManagerObject) bool {
			return x.Kind == c.Kind && x.Metadata.Name == c.Metadata.Name
		})].Spec) {
			t.Errorf("cert-manager %s %s (#%d) differs", c.Kind, c.Metadata.Name, i)
		}
	}
}

// TestChartWebhookURL: webhook.url puts the shim's URL in the webhooks
// (clientConfig.url, /validate and /mutate appended) and
// tls.webhookIPAddresses puts the address in the shim's certificate,
// generated or from cert-manager.
func TestChartWebhookURL(t *testing.T) {
	v := valueSet{name: "push-generated", file: filepath.Join(chartDir, "ci", "push-generated-values.yaml")}
	r := renderChart(t, chartNamespace, v, "webhook.url=https://127.0.0.1:8443/", "tls.webhookIPAddresses={127.0.0.1}", "webhook.mutating=true")
	validateOpenAPI(t, r)
	vwc := all[*admissionregistrationv1.ValidatingWebhookConfiguration](r.manifests)[0].Webhooks[0].ClientConfig
	mwc := all[*admissionregistrationv1.MutatingWebhookConfiguration](r.manifests)[0].Webhooks[0].ClientConfig
	if vwc.Service != nil || vwc.URL == nil || *vwc.URL != "https://127.0.0.1:8443/validate" || mwc.URL == nil || *mwc.URL != "https://127.0.0.1:8443/mutate" {
		t.Fatalf("clientConfig %+v, %+v", vwc, mwc)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(vwc.CABundle)
	s := find(r.manifests, "Secret", "arbiter-webhook-tls").(*corev1.Secret)
	block, _ := pem.Decode(s.Data["tls.crt"])
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: "127.0.0.1", Roots: pool}); err != nil {
		t.Errorf("the shim's certificate for 127.0.0.1: %v", err)
	}
	r = renderChart(t, chartNamespace, valueSet{name: "default"}, "tls.webhookIPAddresses={127.0.0.1}")
	for _, c := range r.certManager {
		if c.Kind == "Certificate" && (c.Metadata.Name == "arbiter-webhook") != slices.Equal(c.Spec.IPAddresses, []string{"127.0.0.1"}) {
			t.Errorf("Certificate %s: ipAddresses %v", c.Metadata.Name, c.Spec.IPAddresses)
		}
	}
}

// TestChartManagedWebhookFlags: with kube.webhooks managed, webhook.url
// and the namespaceSelector's matchLabels reach the primary's flags.
func TestChartManagedWebhookFlags(t *testing.T) {
	v := valueSet{name: "kube-managed", file: filepath.Join(chartDir, "ci", "kube-managed-values.yaml")}
	r := renderChart(t, chartNamespace, v, "webhook.url=https://127.0.0.1:8443", "webhook.namespaceSelector.matchLabels.team=a", "webhook.namespaceSelector.matchLabels.env=prod")
	c := &find(r.manifests, "Deployment", "arbiter-server").(*appsv1.Deployment).Spec.Template.Spec.Containers[0]
	if arg(c, "--kube-webhook-url") != "https://127.0.0.1:8443" || arg(c, "--kube-webhook-service") != "" || arg(c, "--kube-webhook-namespace-selector") != "env=prod,team=a" {
		t.Errorf("managed webhook flags: %v", c.Args)
	}
}

// TestChartMonitoring: the PodMonitor scrapes the metrics port of every
// decision replica (not the shim, which has none) and the PrometheusRule
// holds deploy/monitoring's alert rules, of which the chart's
// files/arbiter-alerts.yaml is an exact copy.
func TestChartMonitoring(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(monitoringDir, "arbiter-alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(chartDir, "files", "arbiter-alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("chart/files/arbiter-alerts.yaml differs from monitoring/arbiter-alerts.yaml: cp deploy/monitoring/arbiter-alerts.yaml deploy/chart/files/")
	}
	var rules struct {
		Groups []map[string]any `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(want, &rules); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"push", "kube"} {
		r := renderChart(t, chartNamespace, valueSet{name: "default"}, "mode="+mode, "metrics.podMonitor.enabled=true", "metrics.prometheusRule.enabled=true")
		if len(r.promOperator) != 2 {
			t.Fatalf("mode %s: %d prometheus-operator objects", mode, len(r.promOperator))
		}
		for _, o := range r.promOperator {
			if o.Metadata.Namespace != chartNamespace {
				t.Errorf("%s: namespace %s", o.Kind, o.Metadata.Namespace)
			}
			switch o.Kind {
			case "PrometheusRule":
				if !reflect.DeepEqual(o.Spec.Groups, rules.Groups) {
					t.Errorf("mode %s: the PrometheusRule's groups are not deploy/monitoring's", mode)
				}
			case "PodMonitor":
				sel, err := metav1.LabelSelectorAsSelector(o.Spec.Selector)
				if err != nil || len(o.Spec.PodMetricsEndpoints) != 1 {
					t.Fatalf("PodMonitor %+v: %v", o.Spec, err)
				}
				var scraped []string
				for _, w := range workloads(r.manifests) {
					if !sel.Matches(labels.Set(w.pod.Labels)) {
						continue
					}
					scraped = append(scraped, w.name)
					if _, ok := portByName(w, o.Spec.PodMetricsEndpoints[0].Port); !ok {
						t.Errorf("%s has no port %s", w.name, o.Spec.PodMetricsEndpoints[0].Port)
					}
				}
				slices.Sort(scraped)
				wantScraped := map[string][]string{"push": {"arbiter-follower", "arbiter-primary"}, "kube": {"arbiter-server"}}[mode]
				if !slices.Equal(scraped, wantScraped) {
					t.Errorf("mode %s: the PodMonitor scrapes %v, want %v", mode, scraped, wantScraped)
				}
			}
		}
	}
}
