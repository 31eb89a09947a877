// Package deploy_test checks the Kubernetes manifests under deploy/ (not
// deploy/examples, which holds policies): every document decodes into the
// Kubernetes API types in strict mode (an unknown or misspelt field, a
// duplicate key or a wrong type fails), every file is part of the
// kustomization, and the pieces fit together — selectors, ports, service
// names, probes, the webhook configuration and its match conditions, the
// certificates and the mutual TLS between the workloads (tls_test.go) —
// and the workloads pass the Pod Security policies in deploy/examples.
package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	serializerjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/kubesource"
)

const (
	examplesDir   = "examples"
	chartDir      = "chart"
	monitoringDir = "monitoring"
	image         = "ghcr.io/arbiter-pdp/arbiter"
)

// notManifests are the directories under deploy/ that hold no kustomize
// manifests: policies (examples), the Helm chart's templates and values
// (chart_test.go) and the Prometheus rules and Grafana dashboard
// (monitoring_test.go).
var notManifests = map[string]bool{examplesDir: true, chartDir: true, monitoringDir: true}

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, rbacv1.AddToScheme,
		admissionregistrationv1.AddToScheme, networkingv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// strict decodes Kubernetes YAML into the typed API structs, refusing
// unknown fields, duplicate keys and wrong types.
var strict = serializerjson.NewSerializerWithOptions(serializerjson.DefaultMetaFactory, scheme, scheme,
	serializerjson.SerializerOptions{Yaml: true, Strict: true})

// doc is one YAML document of a file under deploy/.
type doc struct {
	file  string
	index int
	raw   []byte
	gvk   schema.GroupVersionKind
	obj   runtime.Object // Kubernetes types
}

func (d *doc) String() string { return fmt.Sprintf("%s#%d (%s)", d.file, d.index, d.gvk.Kind) }

// kustomization is the part of kustomize's Kustomization and Component the
// manifests use, decoded strictly: a field not listed here fails.
type kustomization struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Namespace  string            `json:"namespace,omitempty"`
	Labels     []kustomizeLabels `json:"labels,omitempty"`
	Resources  []string          `json:"resources,omitempty"`
	Components []string          `json:"components,omitempty"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images,omitempty"`
	Patches []struct {
		Path   string `json:"path,omitempty"`
		Patch  string `json:"patch,omitempty"`
		Target *struct {
			Group   string `json:"group,omitempty"`
			Version string `json:"version,omitempty"`
			Kind    string `json:"kind,omitempty"`
			Name    string `json:"name,omitempty"`
		} `json:"target,omitempty"`
	} `json:"patches,omitempty"`
}

type kustomizeLabels struct {
	Pairs            map[string]string `json:"pairs"`
	IncludeSelectors bool              `json:"includeSelectors,omitempty"`
	IncludeTemplates bool              `json:"includeTemplates,omitempty"`
}

// cert-manager.io/v1 Issuer and Certificate, the fields the manifests use
// (names and shapes as in cert-manager's API), decoded strictly.
type certManagerObject struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		// Issuer
		SelfSigned *struct{} `json:"selfSigned,omitempty"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca,omitempty"`
		// Certificate
		IsCA        bool     `json:"isCA,omitempty"`
		CommonName  string   `json:"commonName,omitempty"`
		SecretName  string   `json:"secretName,omitempty"`
		DNSNames    []string `json:"dnsNames,omitempty"`
		IPAddresses []string `json:"ipAddresses,omitempty"`
		Duration    string   `json:"duration,omitempty"`
		RenewBefore string   `json:"renewBefore,omitempty"`
		Usages      []string `json:"usages,omitempty"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm,omitempty"`
			Size           int    `json:"size,omitempty"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
		IssuerRef *struct {
			Name  string `json:"name"`
			Kind  string `json:"kind,omitempty"`
			Group string `json:"group,omitempty"`
		} `json:"issuerRef,omitempty"`
	} `json:"spec"`
}

// monitoring.coreos.com/v1 PodMonitor and PrometheusRule (the Helm
// chart's metrics values), the fields the chart uses, decoded strictly.
type promOperatorObject struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		// PodMonitor
		Selector            *metav1.LabelSelector `json:"selector,omitempty"`
		PodMetricsEndpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path,omitempty"`
			Interval string `json:"interval,omitempty"`
		} `json:"podMetricsEndpoints,omitempty"`
		// PrometheusRule
		Groups []map[string]any `json:"groups,omitempty"`
	} `json:"spec"`
}

// manifests is everything under deploy/ but examples/.
type manifests struct {
	docs           []*doc
	kustomizations map[string]*kustomization // by file
	certManager    []*certManagerObject
	promOperator   []*promOperatorObject
}

func splitYAML(b []byte) ([][]byte, error) {
	docs, index, err := manifest.SplitDocuments(b)
	if err != nil {
		return nil, fmt.Errorf("document %d: %w", index, err)
	}
	var out [][]byte
	for _, d := range docs {
		var probe map[string]any
		if err := yaml.Unmarshal(d, &probe); err != nil {
			return nil, err
		}
		if len(probe) > 0 {
			out = append(out, d)
		}
	}
	return out, nil
}

// decodeDoc decodes one document by its apiVersion and kind, strictly.
func (m *manifests) decodeDoc(file string, i int, raw []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(raw, &tm); err != nil {
		return err
	}
	switch {
	case strings.HasPrefix(tm.APIVersion, "kustomize.config.k8s.io/"):
		var k kustomization
		if err := yaml.UnmarshalStrict(raw, &k); err != nil {
			return err
		}
		if !(k.APIVersion == "kustomize.config.k8s.io/v1beta1" && k.Kind == "Kustomization" ||
			k.APIVersion == "kustomize.config.k8s.io/v1alpha1" && k.Kind == "Component") {
			return fmt.Errorf("unknown kustomize kind %s %s", k.APIVersion, k.Kind)
		}
		m.kustomizations[file] = &k
		return nil
	case tm.APIVersion == "cert-manager.io/v1":
		var c certManagerObject
		if err := yaml.UnmarshalStrict(raw, &c); err != nil {
			return err
		}
		if c.Kind != "Issuer" && c.Kind != "Certificate" {
			return fmt.Errorf("unexpected cert-manager kind %s", c.Kind)
		}
		m.certManager = append(m.certManager, &c)
		return nil
	case tm.APIVersion == "monitoring.coreos.com/v1":
		var p promOperatorObject
		if err := yaml.UnmarshalStrict(raw, &p); err != nil {
			return err
		}
		if p.Kind != "PodMonitor" && p.Kind != "PrometheusRule" {
			return fmt.Errorf("unexpected monitoring.coreos.com kind %s", p.Kind)
		}
		m.promOperator = append(m.promOperator, &p)
		return nil
	}
	obj, gvk, err := strict.Decode(raw, nil, nil)
	if err != nil {
		return err
	}
	m.docs = append(m.docs, &doc{file: file, index: i, raw: raw, gvk: *gvk, obj: obj})
	return nil
}

func loadManifests(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{kustomizations: map[string]*kustomization{}}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && notManifests[path] {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".yaml") && !strings.HasSuffix(path, ".yml") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		docs, err := splitYAML(b)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if len(docs) == 0 {
			return fmt.Errorf("%s: no document", path)
		}
		for i, raw := range docs {
			if err := m.decodeDoc(path, i, raw); err != nil {
				return fmt.Errorf("%s, document %d: %w", path, i, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.docs) == 0 || len(m.kustomizations) == 0 {
		t.Fatal("no manifests found")
	}
	return m
}

func all[T runtime.Object](m *manifests) []T {
	var out []T
	for _, d := range m.docs {
		if o, ok := d.obj.(T); ok {
			out = append(out, o)
		}
	}
	return out
}

// TestManifestsDecodeStrictly decodes every manifest, and shows that a typo
// in any of them would fail.
func TestManifestsDecodeStrictly(t *testing.T) {
	m := loadManifests(t)
	kinds := map[string]int{}
	for _, d := range m.docs {
		kinds[d.gvk.Kind]++
		// Every object names itself and its namespace (the kustomization
		// sets it too, but the files are applied alone as well).
		acc, err := metaAccessor(d.obj)
		if err != nil || acc.GetName() == "" {
			t.Errorf("%s: no name", d)
		}
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "Service", "StatefulSet", "Deployment", "PodDisruptionBudget", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"} {
		if kinds[k] == 0 {
			t.Errorf("no %s under deploy/", k)
		}
	}
	// The decoder is strict: a misspelt field, a duplicate key and a wrong
	// type each fail.
	var sts *doc
	for _, d := range m.docs {
		if d.gvk.Kind == "StatefulSet" {
			sts = d
		}
	}
	for name, mutate := range map[string]func([]byte) []byte{
		"misspelt field": func(b []byte) []byte { return bytes.Replace(b, []byte("  replicas:"), []byte("  replica:"), 1) },
		"duplicate key": func(b []byte) []byte {
			return bytes.Replace(b, []byte("  replicas: 1\n"), []byte("  replicas: 1\n  replicas: 2\n"), 1)
		},
		"wrong type": func(b []byte) []byte {
			return bytes.Replace(b, []byte("  replicas: 1\n"), []byte("  replicas: one\n"), 1)
		},
	} {
		bad := mutate(sts.raw)
		if bytes.Equal(bad, sts.raw) {
			t.Fatalf("%s: the mutation did not apply", name)
		}
		if _, _, err := strict.Decode(bad, nil, nil); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
	if err := yaml.UnmarshalStrict([]byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresource: [a.yaml]\n"), &kustomization{}); err == nil {
		t.Error("a misspelt kustomization field decoded without error")
	}
}

func metaAccessor(o runtime.Object) (metav1.Object, error) {
	if a, ok := o.(metav1.Object); ok {
		return a, nil
	}
	return nil, fmt.Errorf("%T has no metadata", o)
}

// TestKustomization: every manifest is in exactly one kustomization, every
// path a kustomization names exists, and every patch decodes strictly and
// targets an object that exists.
func TestKustomization(t *testing.T) {
	m := loadManifests(t)
	root, ok := m.kustomizations["kustomization.yaml"]
	if !ok || root.Kind != "Kustomization" || root.Namespace != "arbiter" {
		t.Fatalf("deploy/kustomization.yaml: %+v", root)
	}
	listed := map[string]int{}
	for file, k := range m.kustomizations {
		dir := filepath.Dir(file)
		for _, r := range k.Resources {
			p := filepath.Join(dir, r)
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s: resource %s: %v", file, r, err)
			}
			listed[p]++
		}
		for _, c := range k.Components {
			p := filepath.Join(dir, c, "kustomization.yaml")
			if ck, ok := m.kustomizations[p]; !ok || ck.Kind != "Component" {
				t.Errorf("%s: component %s is not a kustomize Component", file, c)
			}
		}
		for i, p := range k.Patches {
			if p.Patch == "" || p.Target == nil {
				t.Errorf("%s: patch %d: want an inline patch with a target", file, i)
				continue
			}
			// A strategic-merge patch may delete its target ($patch: delete).
			patch, _ := strings.CutPrefix(p.Patch, "$patch: delete\n")
			obj, gvk, err := strict.Decode([]byte(patch), nil, nil)
			if err != nil {
				t.Errorf("%s: patch %d: %v", file, i, err)
				continue
			}
			acc, _ := metaAccessor(obj)
			if gvk.Kind != p.Target.Kind || gvk.Group != p.Target.Group || acc.GetName() != p.Target.Name || find(m, gvk.Kind, acc.GetName()) == nil {
				t.Errorf("%s: patch %d targets %s %s, which is not among the manifests", file, i, p.Target.Kind, p.Target.Name)
			}
		}
		for _, img := range k.Images {
			if img.Name != image || img.NewTag == "" && img.Digest == "" {
				t.Errorf("%s: image %+v", file, img)
			}
		}
	}
	files := map[string]bool{}
	for _, d := range m.docs {
		files[d.file] = true
	}
	_ = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if d.IsDir() && notManifests[path] {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".yaml") && m.kustomizations[path] == nil {
			files[path] = true
		}
		return nil
	})
	for f := range files {
		if listed[f] != 1 {
			t.Errorf("%s is listed in %d kustomizations, want 1", f, listed[f])
		}
	}
}

func find(m *manifests, kind, name string) runtime.Object {
	for _, d := range m.docs {
		if acc, err := metaAccessor(d.obj); err == nil && d.gvk.Kind == kind && acc.GetName() == name {
			return d.obj
		}
	}
	return nil
}

// workload is a Deployment or StatefulSet.
type workload struct {
	kind, name, namespace string
	replicas              int32
	selector              *metav1.LabelSelector
	pod                   *corev1.PodTemplateSpec
}

func workloads(m *manifests) []workload {
	var out []workload
	for _, d := range all[*appsv1.Deployment](m) {
		out = append(out, workload{"Deployment", d.Name, d.Namespace, *d.Spec.Replicas, d.Spec.Selector, &d.Spec.Template})
	}
	for _, s := range all[*appsv1.StatefulSet](m) {
		out = append(out, workload{"StatefulSet", s.Name, s.Namespace, *s.Spec.Replicas, s.Spec.Selector, &s.Spec.Template})
	}
	return out
}

func arg(c *corev1.Container, flag string) string {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// TestWorkloads: replicas, selectors, service accounts, images, resources,
// security contexts and probes of every Deployment and StatefulSet.
func TestWorkloads(t *testing.T) {
	m := loadManifests(t)
	ws := workloads(m)
	if len(ws) != 3 {
		t.Fatalf("%d workloads, want the primary, the followers and the shim", len(ws))
	}
	for _, w := range ws {
		name := w.kind + " " + w.name
		sel, err := metav1.LabelSelectorAsSelector(w.selector)
		if err != nil || !sel.Matches(labels.Set(w.pod.Labels)) {
			t.Errorf("%s: selector %v does not match its pod labels %v", name, w.selector, w.pod.Labels)
		}
		spec := &w.pod.Spec
		if sa := find(m, "ServiceAccount", spec.ServiceAccountName); sa == nil {
			t.Errorf("%s: service account %q is not among the manifests", name, spec.ServiceAccountName)
		}
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("%s: mounts a service account token it does not use", name)
		}
		if psc := spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil {
			t.Errorf("%s: pod security context %+v", name, psc)
		}
		for _, c := range spec.Containers {
			cname := name + " container " + c.Name
			if c.Image != image {
				t.Errorf("%s: image %q, want %q (the tag is the kustomization's)", cname, c.Image, image)
			}
			req, lim := c.Resources.Requests, c.Resources.Limits
			if req.Cpu().IsZero() || req.Memory().IsZero() || lim.Memory().IsZero() || lim.Cpu().IsZero() {
				t.Errorf("%s: resources %+v: want cpu and memory requests and limits", cname, c.Resources)
			}
			sc := c.SecurityContext
			if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil ||
				!*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("%s: security context %+v", cname, sc)
			}
			if c.ReadinessProbe == nil || c.LivenessProbe == nil {
				t.Errorf("%s: want readiness and liveness probes", cname)
				continue
			}
			switch c.Args[0] {
			case "serve":
				// gRPC is TLS, which the kubelet's grpc probes cannot speak:
				// ready is /readyz (the gRPC health of the decision service),
				// alive /healthz, both plain HTTP on --metrics-listen.
				metricsPort := ""
				if _, port, err := net.SplitHostPort(arg(&c, "--metrics-listen")); err == nil {
					metricsPort = port
				}
				for _, pc := range []struct {
					name string
					p    *corev1.Probe
					path string
				}{{"readiness", c.ReadinessProbe, "/readyz"}, {"startup", c.StartupProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/healthz"}} {
					p := pc.p
					if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != pc.path || p.HTTPGet.Scheme != "" && p.HTTPGet.Scheme != corev1.URISchemeHTTP {
						t.Errorf("%s: want an HTTP %s probe of %s: %+v", cname, pc.name, pc.path, p)
						continue
					}
					if port, ok := containerPort(&c, p.HTTPGet.Port); !ok || fmt.Sprint(port) != metricsPort {
						t.Errorf("%s: the %s probe's port %s is not --metrics-listen %q", cname, pc.name, p.HTTPGet.Port.String(), arg(&c, "--metrics-listen"))
					}
				}
				if arg(&c, "--data") == "" || !mounted(&c, arg(&c, "--data")) {
					t.Errorf("%s: --data %q is not a mounted volume", cname, arg(&c, "--data"))
				}
				// Mutual TLS, and the authorization rules from a file.
				for _, flag := range []string{"--tls-cert", "--tls-key", "--tls-client-ca", "--config"} {
					if arg(&c, flag) == "" || !mounted(&c, filepath.Dir(arg(&c, flag))) {
						t.Errorf("%s: %s %q is not on a mounted volume", cname, flag, arg(&c, flag))
					}
				}
				if slices.Contains(c.Args, "--insecure") || slices.Contains(c.Args, "--pprof") {
					t.Errorf("%s: --insecure or --pprof", cname)
				}
			case "webhook":
				r, l := c.ReadinessProbe.HTTPGet, c.LivenessProbe.HTTPGet
				if r == nil || r.Path != "/readyz" || r.Scheme != corev1.URISchemeHTTPS || l == nil || l.Path != "/healthz" || l.Scheme != corev1.URISchemeHTTPS {
					t.Errorf("%s: want HTTPS /readyz and /healthz probes", cname)
				}
				dir := filepath.Dir(arg(&c, "--cert"))
				if !mounted(&c, dir) || filepath.Dir(arg(&c, "--key")) != dir {
					t.Errorf("%s: --cert and --key are not on a mounted volume", cname)
				}
				// Mutual TLS to the decision service.
				dir = filepath.Dir(arg(&c, "--server-cert-file"))
				if !mounted(&c, dir) || filepath.Dir(arg(&c, "--server-key-file")) != dir || filepath.Dir(arg(&c, "--server-ca-file")) != dir {
					t.Errorf("%s: --server-ca-file, --server-cert-file and --server-key-file are not on a mounted volume", cname)
				}
				if slices.Contains(c.Args, "--server-insecure") {
					t.Errorf("%s: --server-insecure", cname)
				}
			default:
				t.Errorf("%s: unknown command %v", cname, c.Args)
			}
		}
	}
}

func hasPort(c *corev1.Container, port int32) bool {
	for _, p := range c.Ports {
		if p.ContainerPort == port {
			return true
		}
	}
	return false
}

// containerPort resolves a probe's port (a number or a port name).
func containerPort(c *corev1.Container, port intstr.IntOrString) (int32, bool) {
	if port.Type == intstr.Int {
		return port.IntVal, hasPort(c, port.IntVal)
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// fileSource is the volume that holds the file at path in container c of
// w (the volume mounted at the file's directory), and the file's key in it.
func fileSource(w workload, c *corev1.Container, path string) (*corev1.Volume, string) {
	dir, key := filepath.Split(path)
	dir = filepath.Clean(dir)
	for _, m := range c.VolumeMounts {
		if filepath.Clean(m.MountPath) != dir {
			continue
		}
		for i := range w.pod.Spec.Volumes {
			if v := &w.pod.Spec.Volumes[i]; v.Name == m.Name {
				return v, key
			}
		}
	}
	return nil, ""
}

func mounted(c *corev1.Container, path string) bool {
	for _, v := range c.VolumeMounts {
		if v.MountPath == path {
			return true
		}
	}
	return false
}

func portByName(w workload, name string) (int32, bool) {
	for _, c := range w.pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort, true
			}
		}
	}
	return 0, false
}

// serviceFor returns the workload a Service selects (exactly one).
func serviceFor(t *testing.T, m *manifests, svc *corev1.Service) workload {
	t.Helper()
	var found []workload
	for _, w := range workloads(m) {
		if w.namespace == svc.Namespace && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(w.pod.Labels)) {
			found = append(found, w)
		}
	}
	if len(found) != 1 {
		t.Fatalf("Service %s selects %d workloads, want 1", svc.Name, len(found))
	}
	return found[0]
}

// TestServicesAndBudgets: each Service selects one workload and its target
// ports exist; each PodDisruptionBudget selects a workload of two or more
// replicas and lets one go; the addresses in the arguments name Services
// and ports that exist.
func TestServicesAndBudgets(t *testing.T) {
	m := loadManifests(t)
	svcs := map[string]*corev1.Service{}
	for _, svc := range all[*corev1.Service](m) {
		svcs[svc.Name] = svc
		w := serviceFor(t, m, svc)
		for _, p := range svc.Spec.Ports {
			if _, ok := portByName(w, p.TargetPort.StrVal); !ok {
				t.Errorf("Service %s: target port %v is not a port of %s %s", svc.Name, p.TargetPort, w.kind, w.name)
			}
		}
	}
	budgeted := map[string]bool{}
	for _, pdb := range all[*policyv1.PodDisruptionBudget](m) {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, w := range workloads(m) {
			if !sel.Matches(labels.Set(w.pod.Labels)) {
				continue
			}
			n++
			budgeted[w.name] = true
			if w.replicas < 2 {
				t.Errorf("PDB %s covers %s %s of %d replica(s)", pdb.Name, w.kind, w.name, w.replicas)
			}
			if mu := pdb.Spec.MaxUnavailable; mu != nil && mu.IntValue() < 1 ||
				pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.IntValue() >= int(w.replicas) {
				t.Errorf("PDB %s allows no disruption of %s (it would block node drains)", pdb.Name, w.name)
			}
		}
		if n != 1 {
			t.Errorf("PDB %s selects %d workloads, want 1", pdb.Name, n)
		}
	}
	for _, w := range workloads(m) {
		if w.replicas >= 2 && !budgeted[w.name] {
			t.Errorf("%s %s (%d replicas) has no PodDisruptionBudget", w.kind, w.name, w.replicas)
		}
	}
	// --follow and --server name a Service of this namespace and its port.
	for _, w := range workloads(m) {
		c := &w.pod.Spec.Containers[0]
		for _, flag := range []string{"--follow", "--server"} {
			addr := strings.TrimPrefix(arg(c, flag), "dns:///")
			if addr == "" {
				continue
			}
			host, port, _ := strings.Cut(addr, ":")
			name, ns, _ := strings.Cut(strings.TrimSuffix(host, ".svc"), ".")
			svc := svcs[name]
			if svc == nil || ns != svc.Namespace || fmt.Sprint(svc.Spec.Ports[0].Port) != port {
				t.Errorf("%s: %s %s is not a Service port among the manifests", w.name, flag, arg(c, flag))
				continue
			}
			target := serviceFor(t, m, svc)
			switch flag {
			case "--follow":
				if !strings.Contains(strings.Join(target.pod.Spec.Containers[0].Args, " "), "serve") || arg(&target.pod.Spec.Containers[0], "--follow") != "" {
					t.Errorf("%s follows %s, which is not a primary", w.name, target.name)
				}
			case "--server":
				if svc.Spec.ClusterIP != corev1.ClusterIPNone || !strings.HasPrefix(arg(c, flag), "dns:///") {
					t.Errorf("%s: --server should be a headless Service resolved with dns:/// (round robin over replicas)", w.name)
				}
			}
		}
	}
}

// TestWebhookConfiguration: the ValidatingWebhookConfiguration calls the
// shim's Service on /validate with v1 reviews, no side effects, Fail, a
// timeout above the shim's own deadline, and leaves out the shim's own
// namespace.
func TestWebhookConfiguration(t *testing.T) {
	m := loadManifests(t)
	vwcs := all[*admissionregistrationv1.ValidatingWebhookConfiguration](m)
	if len(vwcs) != 1 || len(vwcs[0].Webhooks) != 1 {
		t.Fatalf("want one ValidatingWebhookConfiguration with one webhook")
	}
	wh := vwcs[0].Webhooks[0]
	if !slices.Equal(wh.AdmissionReviewVersions, []string{"v1"}) {
		t.Errorf("admissionReviewVersions %v", wh.AdmissionReviewVersions)
	}
	if wh.SideEffects == nil || *wh.SideEffects != admissionregistrationv1.SideEffectClassNone {
		t.Errorf("sideEffects %v, want None (so server-side dry runs reach the webhook)", wh.SideEffects)
	}
	if wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("failurePolicy %v", wh.FailurePolicy)
	}
	if wh.TimeoutSeconds == nil || *wh.TimeoutSeconds != 10 {
		t.Errorf("timeoutSeconds %v, want 10", wh.TimeoutSeconds)
	}
	ref := wh.ClientConfig.Service
	if ref == nil || ref.Path == nil || *ref.Path != "/validate" || wh.ClientConfig.URL != nil {
		t.Fatalf("clientConfig %+v: want the shim's Service, path /validate", wh.ClientConfig)
	}
	svc, ok := find(m, "Service", ref.Name).(*corev1.Service)
	if !ok || svc.Namespace != ref.Namespace || ref.Port == nil || svc.Spec.Ports[0].Port != *ref.Port {
		t.Fatalf("clientConfig.service %s/%s:%v is not a Service port among the manifests", ref.Namespace, ref.Name, ref.Port)
	}
	shim := serviceFor(t, m, svc)
	c := &shim.pod.Spec.Containers[0]
	if c.Args[0] != "webhook" {
		t.Fatalf("the webhook Service selects %s, not the shim", shim.name)
	}
	timeout, err := time.ParseDuration(arg(c, "--timeout"))
	if err != nil || timeout >= time.Duration(*wh.TimeoutSeconds)*time.Second {
		t.Errorf("the shim's --timeout %s must be below timeoutSeconds %d", arg(c, "--timeout"), *wh.TimeoutSeconds)
	}
	sel, err := metav1.LabelSelectorAsSelector(wh.NamespaceSelector)
	if err != nil {
		t.Fatal(err)
	}
	for ns, want := range map[string]bool{ref.Namespace: false, "kube-system": false, "default": true, "team-a": true} {
		if got := sel.Matches(labels.Set{"kubernetes.io/metadata.name": ns}); got != want {
			t.Errorf("namespaceSelector on namespace %s: %v, want %v", ns, got, want)
		}
	}
	if len(wh.MatchConditions) == 0 {
		t.Error("no matchConditions")
	}
}

// TestWebhookMatchConditions evaluates the webhook's namespaceSelector and
// matchConditions with the engine's Kubernetes CEL environment on requests
// as the API server sees them: they compile, never error (an error would
// apply failurePolicy), and cut exactly the intended traffic.
func TestWebhookMatchConditions(t *testing.T) {
	m := loadManifests(t)
	wh := all[*admissionregistrationv1.ValidatingWebhookConfiguration](m)[0].Webhooks[0]
	var conds []any
	for _, c := range wh.MatchConditions {
		conds = append(conds, map[string]any{"name": c.Name, "expression": c.Expression})
	}
	var exprs []any
	for _, e := range wh.NamespaceSelector.MatchExpressions {
		vals := make([]any, len(e.Values))
		for i, v := range e.Values {
			vals[i] = v
		}
		exprs = append(exprs, map[string]any{"key": e.Key, "operator": string(e.Operator), "values": vals})
	}
	var ops, res []any
	for _, o := range wh.Rules[0].Operations {
		ops = append(ops, string(o))
	}
	for _, r := range wh.Rules[0].Resources {
		res = append(res, r)
	}
	policy := manifest.NewObject("webhook", map[string]any{
		"apiVersion": "policies.kyverno.io/v1",
		"kind":       "ValidatingPolicy",
		"metadata":   map[string]any{"name": "sent-to-webhook"},
		"spec": map[string]any{
			"validationActions": []any{"Deny"},
			"matchConstraints": map[string]any{
				"resourceRules":     []any{map[string]any{"apiGroups": []any{"*"}, "apiVersions": []any{"*"}, "operations": ops, "resources": res}},
				"namespaceSelector": map[string]any{"matchExpressions": exprs},
			},
			"matchConditions": conds,
			"validations":     []any{map[string]any{"expression": "false", "message": "sent"}},
		},
	})
	ps, err := engine.Compile([]*manifest.Object{policy}, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	obj := func(apiVersion, kind, ns, name string) map[string]any {
		md := map[string]any{"name": name}
		if ns != "" {
			md["namespace"] = ns
		}
		return map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": md}
	}
	namespace := func(name string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{
			"name": name, "labels": map[string]any{"kubernetes.io/metadata.name": name}}}
	}
	kubelet := admission.UserInfo{Username: "system:node:worker-1", Groups: []string{"system:nodes"}}
	alice := admission.UserInfo{Username: "alice@example.com", Groups: []string{"system:authenticated"}}
	controller := admission.UserInfo{Username: "system:serviceaccount:kube-system:statefulset-controller"}
	gvr := func(g, v, r string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: g, Version: v, Resource: r}
	}
	for _, tc := range []struct {
		name string
		sent bool
		req  admission.Request
	}{
		{"pod create", true, admission.Request{Operation: "CREATE", Object: obj("v1", "Pod", "team-a", "web"), UserInfo: alice}},
		{"deployment create", true, admission.Request{Operation: "CREATE", Object: obj("apps/v1", "Deployment", "team-a", "web"), UserInfo: alice}},
		{"configmap delete", true, admission.Request{Operation: "DELETE", OldObject: obj("v1", "ConfigMap", "team-a", "c"), UserInfo: alice}},
		{"pod exec", true, admission.Request{Operation: "CONNECT", Object: obj("v1", "PodExecOptions", "", ""), Kind: schema.GroupVersionKind{Version: "v1", Kind: "PodExecOptions"},
			Resource: gvr("", "v1", "pods"), SubResource: "exec", Name: "web", Namespace: "team-a", UserInfo: alice}},
		{"pod status by a controller", true, admission.Request{Operation: "UPDATE", Object: obj("v1", "Pod", "team-a", "web"), OldObject: obj("v1", "Pod", "team-a", "web"),
			SubResource: "status", UserInfo: controller}},
		{"namespace create", true, admission.Request{Operation: "CREATE", Object: namespace("team-b"), UserInfo: alice}},
		{"node lease", false, admission.Request{Operation: "UPDATE", Object: obj("coordination.k8s.io/v1", "Lease", "kube-node-lease", "worker-1"),
			OldObject: obj("coordination.k8s.io/v1", "Lease", "kube-node-lease", "worker-1"), Resource: gvr("coordination.k8s.io", "v1", "leases"), UserInfo: kubelet}},
		{"leader election lease", false, admission.Request{Operation: "UPDATE", Object: obj("coordination.k8s.io/v1", "Lease", "team-a", "operator-lock"),
			OldObject: obj("coordination.k8s.io/v1", "Lease", "team-a", "operator-lock"), Resource: gvr("coordination.k8s.io", "v1", "leases"), UserInfo: controller}},
		{"core event", false, admission.Request{Operation: "CREATE", Object: obj("v1", "Event", "team-a", "web.17f"), Resource: gvr("", "v1", "events"), UserInfo: kubelet}},
		{"events.k8s.io event", false, admission.Request{Operation: "CREATE", Object: obj("events.k8s.io/v1", "Event", "team-a", "web.17f"), Resource: gvr("events.k8s.io", "v1", "events"), UserInfo: controller}},
		{"token review", false, admission.Request{Operation: "CREATE", Object: obj("authentication.k8s.io/v1", "TokenReview", "", ""), Resource: gvr("authentication.k8s.io", "v1", "tokenreviews"), UserInfo: controller}},
		{"subject access review", false, admission.Request{Operation: "CREATE", Object: obj("authorization.k8s.io/v1", "SubjectAccessReview", "", ""), Resource: gvr("authorization.k8s.io", "v1", "subjectaccessreviews"), UserInfo: controller}},
		{"pod status by the kubelet", false, admission.Request{Operation: "UPDATE", Object: obj("v1", "Pod", "team-a", "web"), OldObject: obj("v1", "Pod", "team-a", "web"),
			SubResource: "status", UserInfo: kubelet}},
		{"node status by the kubelet", false, admission.Request{Operation: "UPDATE", Object: obj("v1", "Node", "", "worker-1"), OldObject: obj("v1", "Node", "", "worker-1"),
			SubResource: "status", UserInfo: kubelet}},
		{"pod in arbiter's namespace", false, admission.Request{Operation: "CREATE", Object: obj("v1", "Pod", "arbiter", "x"), UserInfo: alice}},
		{"pod in kube-system", false, admission.Request{Operation: "CREATE", Object: obj("v1", "Pod", "kube-system", "coredns-x"), UserInfo: controller}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.Fill()
			if req.Namespace != "" {
				req.NamespaceObject = namespace(req.Namespace)
			} else if req.Kind.Kind == "Namespace" {
				req.NamespaceObject = req.Object
			}
			d := ps.Evaluate(context.Background(), &req, nil)
			sent := false
			for _, r := range d.Results {
				switch r.Result {
				case "fail":
					sent = true
				case "error":
					t.Fatalf("the conditions error (failurePolicy would apply): %s", r.Message)
				}
			}
			if sent != tc.sent {
				t.Fatalf("sent to the webhook: %v, want %v (%+v)", sent, tc.sent, d.Results)
			}
		})
	}
}

// TestWorkloadsPassPodSecurity: Arbiter's own pods pass the restricted Pod
// Security policies it ships (deploy/examples/pod-security), through the
// engine's autogen rules for Deployments and StatefulSets.
func TestWorkloadsPassPodSecurity(t *testing.T) {
	docs, err := manifest.ReadPaths(nil, filepath.Join(examplesDir, "pod-security"), "primary.yaml", "followers.yaml", "webhook.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs := manifest.FromDocuments(docs)
	var policies, resources []*manifest.Object
	for _, o := range objs {
		switch o.Kind {
		case "Deployment", "StatefulSet":
			resources = append(resources, o)
		case "ValidatingPolicy":
			policies = append(policies, o)
		}
	}
	ps, err := engine.Compile(policies, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(policies) != 16 || len(resources) != 3 {
		t.Fatalf("%d policies, %d workloads", len(policies), len(resources))
	}
	for _, o := range resources {
		req := &admission.Request{Object: o.Content}
		req.Fill()
		d := ps.Evaluate(context.Background(), req, nil)
		if !d.Allowed || len(d.Results) != 16 {
			t.Errorf("%s %s: allowed=%v, %d results: %s", o.Kind, o.Name, d.Allowed, len(d.Results), d.Message)
		}
		for _, r := range d.Results {
			if r.Result != "pass" {
				t.Errorf("%s %s: %s: %s %s", o.Kind, o.Name, r.Policy, r.Result, r.Message)
			}
		}
	}
}

// TestCertManager: the webhook certificate is issued for the shim's Service
// name into the Secret the shim mounts, by an issuer that exists, and its
// CA is what cert-manager injects into the webhook configuration.
func TestCertManager(t *testing.T) {
	m := loadManifests(t)
	issuers := map[string]*certManagerObject{}
	certs := map[string]*certManagerObject{}
	for _, c := range m.certManager {
		switch c.Kind {
		case "Issuer":
			issuers[c.Metadata.Name] = c
		case "Certificate":
			certs[c.Metadata.Name] = c
			if _, err := time.ParseDuration(c.Spec.Duration); err != nil {
				t.Errorf("Certificate %s: duration: %v", c.Metadata.Name, err)
			}
			if _, err := time.ParseDuration(c.Spec.RenewBefore); err != nil {
				t.Errorf("Certificate %s: renewBefore: %v", c.Metadata.Name, err)
			}
		}
	}
	for _, c := range certs {
		if ref := c.Spec.IssuerRef; ref == nil || issuers[ref.Name] == nil {
			t.Errorf("Certificate %s: issuer %+v is not among the manifests", c.Metadata.Name, c.Spec.IssuerRef)
		}
	}
	// The injected CA: the annotation the component patches in.
	var inject string
	for _, k := range m.kustomizations {
		for _, p := range k.Patches {
			obj, _, err := strict.Decode([]byte(p.Patch), nil, nil)
			if err != nil {
				continue
			}
			if vwc, ok := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration); ok {
				inject = vwc.Annotations["cert-manager.io/inject-ca-from"]
			}
		}
	}
	ns, name, _ := strings.Cut(inject, "/")
	cert := certs[name]
	if cert == nil || cert.Metadata.Namespace != ns {
		t.Fatalf("cert-manager.io/inject-ca-from %q names no Certificate", inject)
	}
	vwc := all[*admissionregistrationv1.ValidatingWebhookConfiguration](m)[0]
	ref := vwc.Webhooks[0].ClientConfig.Service
	if want := ref.Name + "." + ref.Namespace + ".svc"; !slices.Contains(cert.Spec.DNSNames, want) {
		t.Errorf("Certificate %s: dnsNames %v lack %s, the name the API server dials", name, cert.Spec.DNSNames, want)
	}
	shim := serviceFor(t, m, find(m, "Service", ref.Name).(*corev1.Service))
	c := &shim.pod.Spec.Containers[0]
	secret := ""
	if v, _ := fileSource(shim, c, arg(c, "--cert")); v != nil && v.Secret != nil {
		secret = v.Secret.SecretName
	}
	if secret == "" || secret != cert.Spec.SecretName {
		t.Errorf("the shim serves the certificate of Secret %q; the Certificate writes %q", secret, cert.Spec.SecretName)
	}
}

// TestKustomizeBuild builds deploy/ with `kubectl kustomize` when kubectl
// is installed, and decodes its output strictly: every namespaced object
// lands in the arbiter namespace and the image gets its tag.
func TestKustomizeBuild(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed")
	}
	out, err := exec.Command(kubectl, "kustomize", ".").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("kubectl kustomize: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	docs, err := splitYAML(out)
	if err != nil {
		t.Fatal(err)
	}
	m := &manifests{kustomizations: map[string]*kustomization{}}
	for i, raw := range docs {
		if err := m.decodeDoc("kustomize build", i, raw); err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, raw)
		}
	}
	if len(m.docs) < 13 || len(m.certManager) != 7 {
		t.Fatalf("%d Kubernetes and %d cert-manager objects", len(m.docs), len(m.certManager))
	}
	for _, d := range m.docs {
		acc, _ := metaAccessor(d.obj)
		clusterScoped := d.gvk.Kind == "Namespace" || d.gvk.Kind == "ValidatingWebhookConfiguration" || d.gvk.Kind == "MutatingWebhookConfiguration"
		if !clusterScoped && acc.GetNamespace() != "arbiter" {
			t.Errorf("%s %s: namespace %q", d.gvk.Kind, acc.GetName(), acc.GetNamespace())
		}
		if acc.GetLabels()["app.kubernetes.io/part-of"] != "arbiter" {
			t.Errorf("%s %s: labels %v", d.gvk.Kind, acc.GetName(), acc.GetLabels())
		}
	}
	for _, w := range workloads(m) {
		if img := w.pod.Spec.Containers[0].Image; !strings.HasPrefix(img, image+":") {
			t.Errorf("%s: image %q has no tag", w.name, img)
		}
	}
	vwc := all[*admissionregistrationv1.ValidatingWebhookConfiguration](m)
	if len(vwc) != 1 || vwc[0].Annotations["cert-manager.io/inject-ca-from"] == "" {
		t.Errorf("the built ValidatingWebhookConfiguration lacks the CA injection annotation")
	}
	mwc := all[*admissionregistrationv1.MutatingWebhookConfiguration](m)
	if len(mwc) != 1 || mwc[0].Annotations["cert-manager.io/inject-ca-from"] != vwc[0].Annotations["cert-manager.io/inject-ca-from"] {
		t.Errorf("the built MutatingWebhookConfiguration lacks the validating one's CA injection annotation")
	}
}

// TestMutatingWebhookConfiguration: the MutatingWebhookConfiguration calls
// the same shim on /mutate for CREATE and UPDATE, with reinvocationPolicy
// IfNeeded, and otherwise the validating webhook's exclusions, timeout,
// failurePolicy and matchConditions.
func TestMutatingWebhookConfiguration(t *testing.T) {
	m := loadManifests(t)
	mwcs := all[*admissionregistrationv1.MutatingWebhookConfiguration](m)
	if len(mwcs) != 1 || len(mwcs[0].Webhooks) != 1 {
		t.Fatalf("want one MutatingWebhookConfiguration with one webhook")
	}
	mw := mwcs[0].Webhooks[0]
	vw := all[*admissionregistrationv1.ValidatingWebhookConfiguration](m)[0].Webhooks[0]
	if mw.ReinvocationPolicy == nil || *mw.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy {
		t.Errorf("reinvocationPolicy %v, want IfNeeded", mw.ReinvocationPolicy)
	}
	ref := mw.ClientConfig.Service
	if ref == nil || ref.Path == nil || *ref.Path != "/mutate" || ref.Name != vw.ClientConfig.Service.Name || ref.Namespace != vw.ClientConfig.Service.Namespace {
		t.Fatalf("clientConfig %+v: want the shim's Service, path /mutate", mw.ClientConfig)
	}
	ops := mw.Rules[0].Operations
	if len(mw.Rules) != 1 || !slices.Equal(ops, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}) ||
		!slices.Equal(mw.Rules[0].Resources, vw.Rules[0].Resources) {
		t.Errorf("rules %+v: want CREATE and UPDATE of %v", mw.Rules, vw.Rules[0].Resources)
	}
	if *mw.FailurePolicy != *vw.FailurePolicy || *mw.TimeoutSeconds != *vw.TimeoutSeconds || *mw.SideEffects != *vw.SideEffects ||
		!reflect.DeepEqual(mw.NamespaceSelector, vw.NamespaceSelector) || !reflect.DeepEqual(mw.MatchConditions, vw.MatchConditions) ||
		!slices.Equal(mw.AdmissionReviewVersions, vw.AdmissionReviewVersions) {
		t.Errorf("the mutating webhook differs from the validating one beyond path, operations and reinvocation")
	}
}

// TestKubeSourceRBAC: the kube-source component (and managed-webhooks)
// grant the server's account exactly what `serve --kube-source` uses:
// reading the kinds it owns, updating only the status subresource of the
// policies and GlobalContextEntries it writes the status of, and (managed webhooks) creating and
// updating only the configurations it manages, reading and writing the
// background scans' reports (the only objects it deletes); no wildcard.
func TestKubeSourceRBAC(t *testing.T) {
	m := loadManifests(t)
	type grant struct{ group, resource, verb, name string }
	got := map[grant]bool{}
	for _, d := range m.docs {
		if !strings.HasPrefix(d.file, "kube-source/") {
			continue
		}
		var rules []rbacv1.PolicyRule
		switch o := d.obj.(type) {
		case *rbacv1.ClusterRole:
			rules = o.Rules
		case *rbacv1.Role:
			rules = o.Rules
		default:
			continue
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
							if g == "*" || res == "*" || v == "*" {
								t.Errorf("%s: wildcard in %+v", d, r)
							}
							got[grant{g, res, v, n}] = true
						}
					}
				}
			}
		}
	}
	want := map[grant]bool{}
	add := func(group string, resources, verbs []string, name string) {
		for _, r := range resources {
			for _, v := range verbs {
				want[grant{group, r, v, name}] = true
			}
		}
	}
	read := []string{"get", "list", "watch"}
	add("policies.kyverno.io", []string{"validatingpolicies", "namespacedvalidatingpolicies", "mutatingpolicies", "namespacedmutatingpolicies",
		"imagevalidatingpolicies", "namespacedimagevalidatingpolicies", "deletingpolicies", "namespaceddeletingpolicies", "policyexceptions"}, read, "")
	// The cleanup component: lastExecutionTime and the runs' Events (what
	// the policies delete is aggregated, granted by the cluster).
	add("policies.kyverno.io", []string{"deletingpolicies/status", "namespaceddeletingpolicies/status"}, []string{"patch"}, "")
	add("events.k8s.io", []string{"events"}, []string{"create"}, "")
	add("policies.kyverno.io", []string{"validatingpolicies/status", "namespacedvalidatingpolicies/status", "mutatingpolicies/status", "namespacedmutatingpolicies/status", "imagevalidatingpolicies/status", "namespacedimagevalidatingpolicies/status"}, []string{"update"}, "")
	add("admissionregistration.k8s.io", []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"}, read, "")
	add("", []string{"namespaces"}, read, "")
	add("", []string{"events"}, []string{"create", "patch"}, "")
	add("kyverno.io", []string{"globalcontextentries"}, read, "")
	add("kyverno.io", []string{"globalcontextentries/status"}, []string{"update"}, "")
	add("wgpolicyk8s.io", []string{"policyreports", "clusterpolicyreports"}, []string{"get", "list", "watch", "create", "update", "delete"}, "")
	add("coordination.k8s.io", []string{"leases"}, []string{"create"}, "")
	add("coordination.k8s.io", []string{"leases"}, []string{"get", "update"}, "arbiter-primary")
	add("admissionregistration.k8s.io", []string{"validatingwebhookconfigurations", "mutatingwebhookconfigurations"}, []string{"create"}, "")
	add("admissionregistration.k8s.io", []string{"validatingwebhookconfigurations", "mutatingwebhookconfigurations"}, []string{"get", "update"}, kubesource.DefaultWebhookConfigName)
	for g := range got {
		if !want[g] {
			t.Errorf("granted but not used: %+v", g)
		}
	}
	for g := range want {
		if !got[g] {
			t.Errorf("used but not granted: %+v", g)
		}
	}
	// The params' and context kinds' rights: aggregated from labelled
	// ClusterRoles, bound to the server's account.
	for _, agg := range []struct{ role, label string }{
		{"arbiter-kube-source-params", "arbiter.dev/aggregate-to-kube-source-params"},
		{"arbiter-kube-source-context", "arbiter.dev/aggregate-to-kube-source-context"},
		{"arbiter-kube-source-mutate-existing", "arbiter.dev/aggregate-to-mutate-existing"},
	} {
		var found, bound bool
		for _, r := range all[*rbacv1.ClusterRole](m) {
			if r.Name == agg.role && r.AggregationRule != nil && len(r.AggregationRule.ClusterRoleSelectors) == 1 &&
				r.AggregationRule.ClusterRoleSelectors[0].MatchLabels[agg.label] == "true" && len(r.Rules) == 0 {
				found = true
			}
		}
		for _, b := range all[*rbacv1.ClusterRoleBinding](m) {
			if b.RoleRef.Name == agg.role && len(b.Subjects) == 1 && b.Subjects[0].Name == "arbiter-server" && b.Subjects[0].Namespace == "arbiter" {
				bound = true
			}
		}
		if !found || !bound {
			t.Errorf("%s: aggregated from %s: %v, bound to arbiter-server: %v", agg.role, agg.label, found, bound)
		}
	}
	// The reporting identity: view for the server's account.
	var view bool
	for _, b := range all[*rbacv1.ClusterRoleBinding](m) {
		if b.RoleRef.Name == "view" && len(b.Subjects) == 1 && b.Subjects[0].Name == "arbiter-server" && b.Subjects[0].Namespace == "arbiter" {
			view = true
		}
	}
	if !view {
		t.Error("no view ClusterRoleBinding for arbiter-server (the reporting identity)")
	}
}

// TestKustomizeBuildManagedWebhooks: deploy/ with the kube-source and
// managed-webhooks components builds, without the static webhook
// configurations and with the RBAC of both.
func TestKustomizeBuildManagedWebhooks(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed")
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, here) // kustomize refuses absolute paths
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\ncomponents:\n  - %s\n  - %s\n",
		rel, filepath.Join(rel, "kube-source"), filepath.Join(rel, "kube-source", "managed-webhooks"))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubectl, "kustomize", dir).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("kubectl kustomize: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	docs, err := splitYAML(out)
	if err != nil {
		t.Fatal(err)
	}
	m := &manifests{kustomizations: map[string]*kustomization{}}
	for i, raw := range docs {
		if err := m.decodeDoc("kustomize build", i, raw); err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, raw)
		}
	}
	if n := len(all[*admissionregistrationv1.ValidatingWebhookConfiguration](m)) + len(all[*admissionregistrationv1.MutatingWebhookConfiguration](m)); n != 0 {
		t.Errorf("%d static webhook configurations left", n)
	}
	roles := map[string]bool{}
	for _, r := range all[*rbacv1.ClusterRole](m) {
		roles[r.Name] = true
	}
	for _, r := range []string{"arbiter-kube-source", "arbiter-kube-source-webhooks"} {
		if !roles[r] {
			t.Errorf("no ClusterRole %s", r)
		}
	}
}

// TestCleanupRBAC: the cleanup component grants what the runs write, and
// what they delete only through an aggregated ClusterRole that grants
// nothing by itself and gathers Arbiter's label and Kyverno's.
func TestCleanupRBAC(t *testing.T) {
	m := loadManifests(t)
	var targets *rbacv1.ClusterRole
	for _, r := range all[*rbacv1.ClusterRole](m) {
		if r.Name == "arbiter-kube-source-cleanup-targets" {
			targets = r
		}
	}
	if targets == nil || targets.AggregationRule == nil || len(targets.Rules) != 0 {
		t.Fatalf("arbiter-kube-source-cleanup-targets: %+v", targets)
	}
	labels := map[string]bool{}
	for _, s := range targets.AggregationRule.ClusterRoleSelectors {
		for k := range s.MatchLabels {
			labels[k] = true
		}
	}
	for _, l := range []string{"arbiter.dev/aggregate-to-cleanup", "rbac.kyverno.io/aggregate-to-cleanup-controller", "app.kubernetes.io/component"} {
		if !labels[l] {
			t.Errorf("the cleanup targets do not aggregate %s", l)
		}
	}
	bound := false
	for _, b := range all[*rbacv1.ClusterRoleBinding](m) {
		if b.RoleRef.Name == targets.Name && len(b.Subjects) == 1 && b.Subjects[0].Name == "arbiter-server" && b.Subjects[0].Namespace == "arbiter" {
			bound = true
		}
	}
	if !bound {
		t.Error("arbiter-kube-source-cleanup-targets is not bound to arbiter-server")
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed: the build of the component is not checked")
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, here)
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\ncomponents:\n  - %s\n  - %s\n",
		rel, filepath.Join(rel, "kube-source"), filepath.Join(rel, "kube-source", "cleanup"))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubectl, "kustomize", dir).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v", err)
	}
	for _, want := range []string{"name: arbiter-kube-source-cleanup\n", "name: arbiter-kube-source-cleanup-targets\n", "deletingpolicies/status"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the build has no %q", want)
		}
	}
}
