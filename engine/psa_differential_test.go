package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/pod-security-admission/admission"
	admissionapi "k8s.io/pod-security-admission/admission/api"
	"k8s.io/pod-security-admission/admission/api/load"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/metrics"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/engine"
	arbadmission "github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
	"github.com/arbiter-pdp/arbiter/engine/psa"
)

// The Pod Security differential test runs Pods, workload resources and
// Namespaces through Arbiter (engine.PolicySet.Evaluate, with the
// Namespaces and PodSecurityConfiguration as objects of the set) and
// through k8s.io/pod-security-admission's own admission code in-process
// (admission.Admission with a static namespace getter, no existing Pods,
// and the evaluator kube-apiserver builds), and requires the same
// decision, denial message, HTTP code and reason, warnings and audit
// annotations (kube-apiserver prefixes the library's audit annotation keys
// with pod-security.kubernetes.io/, as the PodSecurity plugin does).
//
// Pods are a compliant restricted Pod and one mutation per control value
// (every Pod Security Standards check, violating and compliant values);
// each is decided in a Namespace per level (baseline, restricted) and per
// version at which a check changes (and latest), in namespaces with mixed,
// partial and invalid labels, and with exempt users, namespaces and
// runtime classes; every Pod is also wrapped in a workload resource (all
// eight kinds in turn). Pod updates, Pod subresources and Namespace
// creates and updates complete it. It runs twice: with a
// PodSecurityConfiguration (defaults and exemptions) and without one.

const psaDiffConfig = `apiVersion: pod-security.admission.config.k8s.io/v1
kind: PodSecurityConfiguration
defaults:
  enforce: baseline
  enforce-version: latest
  audit: restricted
  audit-version: latest
  warn: restricted
  warn-version: v1.25
exemptions:
  usernames: ["alice", "system:serviceaccount:kube-system:replicaset-controller"]
  runtimeClasses: ["kata"]
  namespaces: ["kube-system", "exempt-ns"]
`

// psaVersions are the versions at which some check changes, the versions
// around them, and latest.
var psaVersions = []string{"v1.0", "v1.8", "v1.18", "v1.19", "v1.22", "v1.23", "v1.24", "v1.25",
	"v1.27", "v1.29", "v1.31", "v1.32", "v1.34", "v1.35", "v1.37", "v1.40", "latest"}

type psaNamespace struct {
	name   string
	labels map[string]string
}

func psaNamespaces() []psaNamespace {
	var out []psaNamespace
	for _, level := range []string{"baseline", "restricted"} {
		for _, v := range psaVersions {
			out = append(out, psaNamespace{
				name:   level[:1] + "-" + strings.ReplaceAll(v, ".", "-"),
				labels: map[string]string{psaapi.EnforceLevelLabel: level, psaapi.EnforceVersionLabel: v},
			})
		}
	}
	out = append(out,
		psaNamespace{"privileged", map[string]string{psaapi.EnforceLevelLabel: "privileged"}},
		psaNamespace{"mixed", map[string]string{
			psaapi.EnforceLevelLabel: "baseline", psaapi.EnforceVersionLabel: "v1.22",
			psaapi.AuditLevelLabel: "restricted", psaapi.WarnLevelLabel: "restricted", psaapi.WarnVersionLabel: "v1.25"}},
		psaNamespace{"audit-only", map[string]string{psaapi.AuditLevelLabel: "restricted"}},
		psaNamespace{"warn-only", map[string]string{psaapi.WarnLevelLabel: "baseline", psaapi.WarnVersionLabel: "v1.0"}},
		psaNamespace{"enforce-version-only", map[string]string{psaapi.EnforceVersionLabel: "v1.24"}},
		psaNamespace{"bad-labels", map[string]string{psaapi.EnforceLevelLabel: "strict", psaapi.EnforceVersionLabel: "v2"}},
		psaNamespace{"bad-audit", map[string]string{psaapi.AuditLevelLabel: "bogus", psaapi.EnforceLevelLabel: "baseline"}},
		psaNamespace{"unlabelled", map[string]string{"team": "a"}},
		psaNamespace{"exempt-ns", map[string]string{psaapi.EnforceLevelLabel: "restricted"}},
	)
	return out
}

// psaBasePod is a Pod that satisfies restricted:latest.
const psaBasePod = `apiVersion: v1
kind: Pod
metadata:
  name: app
  labels: {app: web}
spec:
  securityContext:
    runAsNonRoot: true
    seccompProfile: {type: RuntimeDefault}
  initContainers:
    - name: init
      image: busybox:1.36
      securityContext:
        allowPrivilegeEscalation: false
        capabilities: {drop: [ALL]}
  containers:
    - name: app
      image: nginx:1.27
      securityContext:
        allowPrivilegeEscalation: false
        capabilities: {drop: [ALL]}
`

type podMutation struct {
	name string
	f    func(p obj)
}

// obj is a JSON-shaped object with path helpers.
type obj map[string]any

func (o obj) m(path ...string) obj {
	cur := map[string]any(o)
	for _, k := range path {
		next, ok := cur[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			cur[k] = next
		}
		cur = next
	}
	return cur
}

func (o obj) set(path string, v any) {
	parts := strings.Split(path, ".")
	o.m(parts[:len(parts)-1]...)[parts[len(parts)-1]] = v
}

func (o obj) del(path string) {
	parts := strings.Split(path, ".")
	delete(o.m(parts[:len(parts)-1]...), parts[len(parts)-1])
}

func (o obj) container(list string, i int) obj {
	return obj(o.m("spec")[list].([]any)[i].(map[string]any))
}

func (o obj) app() obj  { return o.container("containers", 0) }
func (o obj) init() obj { return o.container("initContainers", 0) }

func (o obj) add(list string, c map[string]any) {
	spec := o.m("spec")
	l, _ := spec[list].([]any)
	spec[list] = append(l, c)
}

func psaMutations() []podMutation {
	sc := func(c obj) obj { return c.m("securityContext") }
	return []podMutation{
		{"compliant", func(p obj) {}},
		{"plain", func(p obj) {
			p.del("spec.securityContext")
			p.app().del("securityContext")
			p.init().del("securityContext")
		}},
		{"host-network", func(p obj) { p.set("spec.hostNetwork", true) }},
		{"host-pid", func(p obj) { p.set("spec.hostPID", true) }},
		{"host-ipc", func(p obj) { p.set("spec.hostIPC", true) }},
		{"host-network-false", func(p obj) { p.set("spec.hostNetwork", false) }},
		{"privileged", func(p obj) { sc(p.app())["privileged"] = true }},
		{"privileged-init", func(p obj) { sc(p.init())["privileged"] = true }},
		{"privileged-false", func(p obj) { sc(p.app())["privileged"] = false }},
		{"privileged-ephemeral", func(p obj) {
			p.add("ephemeralContainers", map[string]any{"name": "debug", "image": "busybox", "securityContext": map[string]any{"privileged": true}})
		}},
		{"ephemeral-compliant", func(p obj) {
			p.add("ephemeralContainers", map[string]any{"name": "debug", "image": "busybox", "securityContext": map[string]any{
				"allowPrivilegeEscalation": false, "capabilities": map[string]any{"drop": []any{"ALL"}}}})
		}},
		{"cap-net-admin", func(p obj) { sc(p.app()).m("capabilities")["add"] = []any{"NET_ADMIN"} }},
		{"cap-sys-admin-init", func(p obj) { sc(p.init()).m("capabilities")["add"] = []any{"SYS_ADMIN", "NET_RAW"} }},
		{"cap-chown", func(p obj) { sc(p.app()).m("capabilities")["add"] = []any{"CHOWN"} }},
		{"cap-net-bind", func(p obj) { sc(p.app()).m("capabilities")["add"] = []any{"NET_BIND_SERVICE"} }},
		{"cap-drop-missing", func(p obj) { sc(p.app()).m("capabilities")["drop"] = []any{"NET_RAW"} }},
		{"cap-drop-lowercase", func(p obj) { sc(p.app()).m("capabilities")["drop"] = []any{"all"} }},
		{"host-path", func(p obj) {
			p.set("spec.volumes", []any{map[string]any{"name": "h", "hostPath": map[string]any{"path": "/var/run"}}})
		}},
		{"host-port", func(p obj) {
			p.app()["ports"] = []any{map[string]any{"containerPort": int64(80), "hostPort": int64(8080)}}
		}},
		{"host-port-zero", func(p obj) {
			p.app()["ports"] = []any{map[string]any{"containerPort": int64(80), "hostPort": int64(0)}}
		}},
		{"apparmor-annotation-unconfined", func(p obj) {
			p.m("metadata", "annotations")["container.apparmor.security.beta.kubernetes.io/app"] = "unconfined"
		}},
		{"apparmor-annotation-default", func(p obj) {
			p.m("metadata", "annotations")["container.apparmor.security.beta.kubernetes.io/app"] = "runtime/default"
		}},
		{"apparmor-annotation-localhost", func(p obj) {
			p.m("metadata", "annotations")["container.apparmor.security.beta.kubernetes.io/app"] = "localhost/custom"
		}},
		{"apparmor-pod-unconfined", func(p obj) { p.m("spec", "securityContext")["appArmorProfile"] = map[string]any{"type": "Unconfined"} }},
		{"apparmor-container-unconfined", func(p obj) { sc(p.init())["appArmorProfile"] = map[string]any{"type": "Unconfined"} }},
		{"apparmor-container-localhost", func(p obj) {
			sc(p.app())["appArmorProfile"] = map[string]any{"type": "Localhost", "localhostProfile": "custom"}
		}},
		{"apparmor-pod-default", func(p obj) {
			p.m("spec", "securityContext")["appArmorProfile"] = map[string]any{"type": "RuntimeDefault"}
		}},
		{"selinux-spc", func(p obj) { p.m("spec", "securityContext")["seLinuxOptions"] = map[string]any{"type": "spc_t"} }},
		{"selinux-container-t", func(p obj) {
			sc(p.app())["seLinuxOptions"] = map[string]any{"type": "container_t", "level": "s0:c1,c2"}
		}},
		{"selinux-engine-t", func(p obj) { sc(p.app())["seLinuxOptions"] = map[string]any{"type": "container_engine_t"} }},
		{"selinux-user", func(p obj) { sc(p.init())["seLinuxOptions"] = map[string]any{"user": "system_u"} }},
		{"selinux-role", func(p obj) { p.m("spec", "securityContext")["seLinuxOptions"] = map[string]any{"role": "system_r"} }},
		{"proc-mount-unmasked", func(p obj) { sc(p.app())["procMount"] = "Unmasked" }},
		{"proc-mount-unmasked-userns", func(p obj) {
			sc(p.app())["procMount"] = "Unmasked"
			p.set("spec.hostUsers", false)
		}},
		{"proc-mount-default", func(p obj) { sc(p.app())["procMount"] = "Default" }},
		{"seccomp-pod-unconfined", func(p obj) { p.m("spec", "securityContext")["seccompProfile"] = map[string]any{"type": "Unconfined"} }},
		{"seccomp-container-unconfined", func(p obj) { sc(p.app())["seccompProfile"] = map[string]any{"type": "Unconfined"} }},
		{"seccomp-annotation-pod-unconfined", func(p obj) {
			p.m("metadata", "annotations")["seccomp.security.alpha.kubernetes.io/pod"] = "unconfined"
		}},
		{"seccomp-annotation-container-unconfined", func(p obj) {
			p.m("metadata", "annotations")["container.seccomp.security.alpha.kubernetes.io/app"] = "unconfined"
		}},
		{"seccomp-annotation-runtime-default", func(p obj) {
			p.m("metadata", "annotations")["seccomp.security.alpha.kubernetes.io/pod"] = "runtime/default"
		}},
		{"seccomp-missing", func(p obj) { p.m("spec", "securityContext").del("seccompProfile") }},
		{"seccomp-localhost", func(p obj) {
			p.m("spec", "securityContext")["seccompProfile"] = map[string]any{"type": "Localhost", "localhostProfile": "profiles/audit.json"}
		}},
		{"seccomp-containers-only", func(p obj) {
			p.m("spec", "securityContext").del("seccompProfile")
			sc(p.app())["seccompProfile"] = map[string]any{"type": "RuntimeDefault"}
			sc(p.init())["seccompProfile"] = map[string]any{"type": "RuntimeDefault"}
		}},
		{"sysctl-unsafe", func(p obj) { psaSysctl(p, "kernel.msgmax") }},
		{"sysctl-safe", func(p obj) { psaSysctl(p, "kernel.shm_rmid_forced") }},
		{"sysctl-1-27", func(p obj) { psaSysctl(p, "net.ipv4.ip_local_reserved_ports") }},
		{"sysctl-1-29", func(p obj) { psaSysctl(p, "net.ipv4.tcp_keepalive_time") }},
		{"sysctl-1-32", func(p obj) { psaSysctl(p, "net.ipv4.tcp_rmem") }},
		{"sysctl-1-37", func(p obj) { psaSysctl(p, "net.ipv4.tcp_slow_start_after_idle") }},
		{"windows-host-process", func(p obj) {
			sc(p.app())["windowsOptions"] = map[string]any{"hostProcess": true}
		}},
		{"windows-host-process-pod", func(p obj) {
			p.m("spec", "securityContext")["windowsOptions"] = map[string]any{"hostProcess": true}
			p.set("spec.hostNetwork", true)
		}},
		{"probe-http-host", func(p obj) {
			p.app()["livenessProbe"] = map[string]any{"httpGet": map[string]any{"port": int64(80), "host": "10.0.0.1"}}
		}},
		{"probe-tcp-host-init", func(p obj) {
			p.init()["startupProbe"] = map[string]any{"tcpSocket": map[string]any{"port": int64(80), "host": "example.com"}}
		}},
		{"lifecycle-host", func(p obj) {
			p.app()["lifecycle"] = map[string]any{"preStop": map[string]any{"httpGet": map[string]any{"port": int64(80), "host": "169.254.169.254"}}}
		}},
		{"probe-no-host", func(p obj) {
			p.app()["readinessProbe"] = map[string]any{"httpGet": map[string]any{"port": int64(80), "path": "/healthz"}}
		}},
		{"volume-nfs", func(p obj) {
			p.set("spec.volumes", []any{map[string]any{"name": "n", "nfs": map[string]any{"server": "nfs", "path": "/"}}})
		}},
		{"volume-gce", func(p obj) {
			p.set("spec.volumes", []any{
				map[string]any{"name": "c", "configMap": map[string]any{"name": "cm"}},
				map[string]any{"name": "g", "gcePersistentDisk": map[string]any{"pdName": "disk"}},
			})
		}},
		{"volumes-allowed", func(p obj) {
			p.set("spec.volumes", []any{
				map[string]any{"name": "a", "configMap": map[string]any{"name": "cm"}},
				map[string]any{"name": "b", "secret": map[string]any{"secretName": "s"}},
				map[string]any{"name": "c", "emptyDir": map[string]any{}},
				map[string]any{"name": "d", "projected": map[string]any{"sources": []any{}}},
				map[string]any{"name": "e", "persistentVolumeClaim": map[string]any{"claimName": "pvc"}},
				map[string]any{"name": "f", "csi": map[string]any{"driver": "csi.example.com"}},
				map[string]any{"name": "g", "downwardAPI": map[string]any{"items": []any{}}},
				map[string]any{"name": "h", "ephemeral": map[string]any{"volumeClaimTemplate": map[string]any{"spec": map[string]any{}}}},
			})
		}},
		{"ape-unset", func(p obj) { sc(p.app()).del("allowPrivilegeEscalation") }},
		{"ape-true", func(p obj) { sc(p.init())["allowPrivilegeEscalation"] = true }},
		{"run-as-non-root-pod-false", func(p obj) { p.set("spec.securityContext.runAsNonRoot", false) }},
		{"run-as-non-root-container-false", func(p obj) { sc(p.app())["runAsNonRoot"] = false }},
		{"run-as-non-root-missing", func(p obj) { p.m("spec", "securityContext").del("runAsNonRoot") }},
		{"run-as-non-root-containers-only", func(p obj) {
			p.m("spec", "securityContext").del("runAsNonRoot")
			sc(p.app())["runAsNonRoot"] = true
			sc(p.init())["runAsNonRoot"] = true
		}},
		{"run-as-user-pod-0", func(p obj) { p.set("spec.securityContext.runAsUser", int64(0)) }},
		{"run-as-user-container-0", func(p obj) { sc(p.app())["runAsUser"] = int64(0) }},
		{"run-as-user-1000", func(p obj) { p.set("spec.securityContext.runAsUser", int64(1000)) }},
		{"user-namespace-root", func(p obj) {
			p.set("spec.hostUsers", false)
			p.set("spec.securityContext.runAsUser", int64(0))
			p.set("spec.securityContext.runAsNonRoot", false)
		}},
		{"windows-os", func(p obj) {
			p.set("spec.os", map[string]any{"name": "windows"})
			p.m("spec", "securityContext").del("seccompProfile")
			p.app().del("securityContext")
			p.init().del("securityContext")
		}},
		{"linux-os-plain", func(p obj) {
			p.set("spec.os", map[string]any{"name": "linux"})
			p.app().del("securityContext")
		}},
		{"runtime-class-kata", func(p obj) {
			p.set("spec.runtimeClassName", "kata")
			p.set("spec.hostPID", true)
		}},
		{"runtime-class-runc", func(p obj) {
			p.set("spec.runtimeClassName", "runc")
			p.set("spec.hostPID", true)
		}},
		{"kitchen-sink", func(p obj) {
			p.set("spec.hostNetwork", true)
			p.set("spec.hostIPC", true)
			sc(p.app())["privileged"] = true
			sc(p.app()).m("capabilities")["add"] = []any{"SYS_ADMIN"}
			sc(p.init())["allowPrivilegeEscalation"] = true
			p.set("spec.securityContext.runAsUser", int64(0))
			p.set("spec.volumes", []any{map[string]any{"name": "h", "hostPath": map[string]any{"path": "/"}}})
			p.app()["ports"] = []any{map[string]any{"containerPort": int64(80), "hostPort": int64(80)}, map[string]any{"containerPort": int64(81), "hostPort": int64(81)}}
			psaSysctl(p, "kernel.sem")
		}},
	}
}

func psaSysctl(p obj, name string) {
	p.m("spec", "securityContext")["sysctls"] = []any{map[string]any{"name": name, "value": "1"}}
}

func psaPod(t testing.TB, m podMutation, ns string) obj {
	var p map[string]any
	if err := yaml.Unmarshal([]byte(psaBasePod), &p); err != nil {
		t.Fatal(err)
	}
	normalizeInts(p)
	o := obj(p)
	m.f(o)
	o.m("metadata")["name"] = m.name
	o.m("metadata")["namespace"] = ns
	return o
}

// normalizeInts turns float64 integers (sigs.k8s.io/yaml) into int64, as
// Arbiter's manifest reader gives them.
func normalizeInts(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = normalizeInts(e)
		}
	case []any:
		for i, e := range t {
			t[i] = normalizeInts(e)
		}
	case float64:
		if t == float64(int64(t)) {
			return int64(t)
		}
	}
	return v
}

// psaWorkloadKinds are the workload resources Pod Security evaluates.
var psaWorkloadKinds = []struct {
	apiVersion, kind, resource string
	wrap                       func(template map[string]any) map[string]any
}{
	{"apps/v1", "Deployment", "deployments", specTemplate},
	{"apps/v1", "ReplicaSet", "replicasets", specTemplate},
	{"apps/v1", "DaemonSet", "daemonsets", specTemplate},
	{"apps/v1", "StatefulSet", "statefulsets", specTemplate},
	{"batch/v1", "Job", "jobs", func(tpl map[string]any) map[string]any {
		return map[string]any{"spec": map[string]any{"template": tpl}}
	}},
	{"batch/v1", "CronJob", "cronjobs", func(tpl map[string]any) map[string]any {
		return map[string]any{"spec": map[string]any{"schedule": "* * * * *", "jobTemplate": map[string]any{"spec": map[string]any{"template": tpl}}}}
	}},
	{"v1", "ReplicationController", "replicationcontrollers", func(tpl map[string]any) map[string]any {
		return map[string]any{"spec": map[string]any{"selector": map[string]any{"app": "web"}, "template": tpl}}
	}},
	{"v1", "PodTemplate", "podtemplates", func(tpl map[string]any) map[string]any {
		return map[string]any{"template": tpl}
	}},
}

func specTemplate(tpl map[string]any) map[string]any {
	return map[string]any{"spec": map[string]any{
		"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
		"template": tpl,
	}}
}

func psaWorkload(pod obj, k int) obj {
	wk := psaWorkloadKinds[k%len(psaWorkloadKinds)]
	md := pod.m("metadata")
	tpl := map[string]any{"metadata": map[string]any{"labels": md["labels"]}, "spec": pod["spec"]}
	if a, ok := md["annotations"]; ok {
		tpl["metadata"].(map[string]any)["annotations"] = a
	}
	w := wk.wrap(tpl)
	w["apiVersion"], w["kind"] = wk.apiVersion, wk.kind
	w["metadata"] = map[string]any{"name": md["name"], "namespace": md["namespace"]}
	return w
}

// diffCase is one request.
type diffCase struct {
	name      string
	op        string
	object    obj
	oldObject obj
	sub       string
	user      string
	// namespace overrides the request's namespace (Namespace requests).
	namespace string
}

func psaDiffCases(t testing.TB, namespaces []psaNamespace) []diffCase {
	var cases []diffCase
	muts := psaMutations()
	for i, m := range muts {
		for j, ns := range namespaces {
			pod := psaPod(t, m, ns.name)
			cases = append(cases, diffCase{name: "pod " + ns.name + "/" + m.name, op: "CREATE", object: pod})
			w := psaWorkload(psaPod(t, m, ns.name), i+j)
			cases = append(cases, diffCase{name: fmt.Sprintf("%s %s/%s", w["kind"], ns.name, m.name), op: "CREATE", object: w})
		}
	}
	// Users: exempt and not, on violating Pods and workloads.
	for _, ns := range []string{"r-latest", "b-v1-0", "mixed", "unlabelled"} {
		for _, user := range []string{"alice", "bob", "system:serviceaccount:kube-system:replicaset-controller"} {
			for _, m := range []podMutation{muts[2], muts[1]} {
				cases = append(cases,
					diffCase{name: "pod by " + user + " " + ns + "/" + m.name, op: "CREATE", object: psaPod(t, m, ns), user: user},
					diffCase{name: "deployment by " + user + " " + ns + "/" + m.name, op: "CREATE", object: psaWorkload(psaPod(t, m, ns), 0), user: user})
			}
		}
	}
	// Pod updates: only exempt fields changed, an image changed, an
	// ephemeral container added; and Pod subresources.
	for _, ns := range []string{"r-latest", "b-latest", "r-v1-22", "mixed", "exempt-ns", "unlabelled"} {
		for _, m := range []podMutation{muts[0], muts[1], muts[2], muts[6]} {
			base := psaPod(t, m, ns)
			labels := psaPod(t, m, ns)
			labels.m("metadata", "labels")["version"] = "2"
			labels.m("metadata", "annotations")["note"] = "changed"
			tolerations := psaPod(t, m, ns)
			tolerations.set("spec.tolerations", []any{map[string]any{"key": "k", "operator": "Exists"}})
			tolerations.set("spec.activeDeadlineSeconds", int64(60))
			image := psaPod(t, m, ns)
			image.app()["image"] = "nginx:1.28"
			initImage := psaPod(t, m, ns)
			initImage.init()["image"] = "busybox:1.37"
			ephemeral := psaPod(t, m, ns)
			ephemeral.add("ephemeralContainers", map[string]any{"name": "debug", "image": "busybox", "securityContext": map[string]any{"privileged": true}})
			for _, u := range []struct {
				name string
				pod  obj
				sub  string
			}{{"labels", labels, ""}, {"tolerations", tolerations, ""}, {"image", image, ""}, {"init-image", initImage, ""},
				{"ephemeral", ephemeral, "ephemeralcontainers"}, {"status", image, "status"}, {"no-change", base, ""}} {
				cases = append(cases, diffCase{name: "update " + u.name + " " + ns + "/" + m.name, op: "UPDATE", object: u.pod, oldObject: base, sub: u.sub})
			}
		}
		w := psaWorkload(psaPod(t, muts[2], ns), 1)
		cases = append(cases, diffCase{name: "scale " + ns, op: "UPDATE", object: w, oldObject: w, sub: "scale"})
		cases = append(cases, diffCase{name: "update deployment " + ns, op: "UPDATE", object: psaWorkload(psaPod(t, muts[6], ns), 0), oldObject: psaWorkload(psaPod(t, muts[0], ns), 0)})
	}
	// Namespaces: creates and updates with valid, invalid and changed labels.
	labelSets := []map[string]string{
		nil,
		{psaapi.EnforceLevelLabel: "restricted"},
		{psaapi.EnforceLevelLabel: "baseline", psaapi.EnforceVersionLabel: "v1.25"},
		{psaapi.EnforceLevelLabel: "restricted", psaapi.EnforceVersionLabel: "v1.25"},
		{psaapi.EnforceLevelLabel: "privileged"},
		{psaapi.AuditLevelLabel: "restricted", psaapi.WarnLevelLabel: "baseline"},
		{psaapi.EnforceLevelLabel: "strict"},
		{psaapi.EnforceVersionLabel: "1.25", psaapi.WarnLevelLabel: "nope"},
		{psaapi.AuditVersionLabel: "latest", psaapi.AuditLevelLabel: "baseline"},
	}
	nsObj := func(name string, labels map[string]string) obj {
		md := map[string]any{"name": name}
		if labels != nil {
			l := map[string]any{}
			for k, v := range labels {
				l[k] = v
			}
			md["labels"] = l
		}
		return obj{"apiVersion": "v1", "kind": "Namespace", "metadata": md}
	}
	for _, name := range []string{"fresh", "exempt-ns", "kube-system"} {
		for i, ls := range labelSets {
			cases = append(cases, diffCase{name: fmt.Sprintf("namespace create %s %d", name, i), op: "CREATE", object: nsObj(name, ls), namespace: name})
			for j, old := range labelSets {
				if (i+j)%3 == 0 || i == 0 || j == 0 {
					cases = append(cases, diffCase{name: fmt.Sprintf("namespace update %s %d->%d", name, j, i), op: "UPDATE",
						object: nsObj(name, ls), oldObject: nsObj(name, old), namespace: name})
				}
			}
		}
		cases = append(cases, diffCase{name: "namespace status " + name, op: "UPDATE", object: nsObj(name, labelSets[6]), oldObject: nsObj(name, nil), sub: "status", namespace: name})
	}
	return cases
}

type noMetrics struct{}

func (noMetrics) RecordEvaluation(metrics.Decision, psaapi.LevelVersion, metrics.Mode, psaapi.Attributes) {
}
func (noMetrics) RecordExemption(psaapi.Attributes)   {}
func (noMetrics) RecordError(bool, psaapi.Attributes) {}

type staticNamespaces map[string]*corev1.Namespace

func (s staticNamespaces) GetNamespace(_ context.Context, name string) (*corev1.Namespace, error) {
	if ns, ok := s[name]; ok {
		return ns, nil
	}
	return nil, fmt.Errorf("namespace %q not found", name)
}

type noPods struct{}

func (noPods) ListPods(context.Context, string) ([]*corev1.Pod, error) { return nil, nil }

// upstreamPSA builds the admission library's Admission as kube-apiserver's
// PodSecurity plugin does (configuration, default checks, default pod
// spec extractor).
func upstreamPSA(t testing.TB, config string, namespaces []psaNamespace) *admission.Admission {
	var cfg *admissionapi.PodSecurityConfiguration
	var err error
	if config == "" {
		cfg, err = load.LoadFromData(nil)
	} else {
		cfg, err = load.LoadFromData([]byte(config))
	}
	if err != nil {
		t.Fatal(err)
	}
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	getter := staticNamespaces{}
	for _, ns := range namespaces {
		getter[ns.name] = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.name, Labels: ns.labels}}
	}
	a := &admission.Admission{
		Configuration:    cfg,
		Evaluator:        eval,
		Metrics:          noMetrics{},
		PodSpecExtractor: admission.DefaultPodSpecExtractor{},
		NamespaceGetter:  getter,
		PodLister:        noPods{},
	}
	if err := a.CompleteConfiguration(); err != nil {
		t.Fatal(err)
	}
	if err := a.ValidateConfiguration(); err != nil {
		t.Fatal(err)
	}
	return a
}

func arbiterPSA(t testing.TB, config string, namespaces []psaNamespace) *engine.PolicySet {
	var objs []*manifest.Object
	if config != "" {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(config), &m); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, manifest.NewObject("config.yaml", m))
	}
	for _, ns := range namespaces {
		labels := map[string]any{}
		for k, v := range ns.labels {
			labels[k] = v
		}
		objs = append(objs, manifest.NewObject("namespaces.yaml", map[string]any{
			"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns.name, "labels": labels}}))
	}
	ps, err := engine.Compile(objs, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// decodeTyped decodes an object as kube-apiserver does (the client-go
// scheme's deserializer: the typed v1 object).
func decodeTyped(t testing.TB, o obj) runtime.Object {
	if o == nil {
		return nil
	}
	data, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := kubescheme.Codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		t.Fatalf("decoding %s: %v", data, err)
	}
	return out
}

type psaOutcome struct {
	Allowed     bool
	Code        int32
	Reason      string
	Message     string
	Warnings    []string
	Annotations map[string]string
}

func (o psaOutcome) String() string {
	b, _ := json.MarshalIndent(o, "", "  ")
	return string(b)
}

func runUpstream(t testing.TB, a *admission.Admission, c diffCase) psaOutcome {
	object := decodeTyped(t, c.object)
	gvk := object.GetObjectKind().GroupVersionKind()
	gvr := arbadmission.ResourceFor(gvk)
	attrs := &psaapi.AttributesRecord{
		Name:        c.object.m("metadata")["name"].(string),
		Namespace:   c.namespace,
		Kind:        gvk,
		Resource:    gvr,
		Subresource: c.sub,
		Operation:   admissionv1.Operation(c.op),
		Object:      object,
		OldObject:   decodeTyped(t, c.oldObject),
		Username:    c.user,
	}
	if attrs.Namespace == "" {
		attrs.Namespace, _ = c.object.m("metadata")["namespace"].(string)
	}
	resp := a.Validate(context.Background(), attrs)
	out := psaOutcome{Allowed: resp.Allowed, Warnings: resp.Warnings}
	if resp.Result != nil && !resp.Allowed {
		out.Code, out.Reason, out.Message = resp.Result.Code, string(resp.Result.Reason), resp.Result.Message
	}
	if len(resp.AuditAnnotations) > 0 {
		out.Annotations = map[string]string{}
		for k, v := range resp.AuditAnnotations {
			out.Annotations[psaapi.AuditAnnotationPrefix+k] = v
		}
	}
	return out
}

func runArbiter(ps *engine.PolicySet, c diffCase) (psaOutcome, *engine.Decision) {
	req := &arbadmission.Request{Operation: c.op, Object: c.object, OldObject: c.oldObject, SubResource: c.sub,
		Namespace: c.namespace, UserInfo: arbadmission.UserInfo{Username: c.user}, Mode: arbadmission.ModeAdmission}
	req.Fill()
	d := ps.Evaluate(context.Background(), req, nil)
	out := psaOutcome{Allowed: d.Allowed, Warnings: d.Warnings, Annotations: d.AuditAnnotations}
	if !d.Allowed {
		out.Code, out.Reason, out.Message = d.Code, d.Reason, d.Message
	}
	if len(out.Annotations) == 0 {
		out.Annotations = nil
	}
	return out, d
}

func TestPSADifferential(t *testing.T) {
	namespaces := psaNamespaces()
	cases := psaDiffCases(t, namespaces)
	total, denied, warned, annotated := 0, 0, 0, 0
	for _, config := range []string{psaDiffConfig, ""} {
		name := "with-config"
		if config == "" {
			name = "without-config"
		}
		t.Run(name, func(t *testing.T) {
			up := upstreamPSA(t, config, namespaces)
			ps := arbiterPSA(t, config, namespaces)
			labelled := map[string]bool{}
			for _, ns := range namespaces {
				labelled[ns.name] = engineHasPSALabels(ns.labels)
			}
			failures := 0
			for _, c := range cases {
				want := runUpstream(t, up, c)
				got, d := runArbiter(ps, c)
				if config == "" && c.namespace == "" && !labelled[nsOf(c)] {
					// Without a configuration Pod Security is off in an
					// unlabelled namespace: kube-apiserver admits with the
					// audit annotation enforce-policy: privileged:latest,
					// Arbiter says nothing.
					if want.Annotations["pod-security.kubernetes.io/enforce-policy"] == "privileged:latest" && len(want.Annotations) == 1 {
						want.Annotations = nil
					}
				}
				total++
				if !want.Allowed {
					denied++
				}
				if len(want.Warnings) > 0 {
					warned++
				}
				if len(want.Annotations) > 0 {
					annotated++
				}
				if !reflect.DeepEqual(normalizeOutcome(got), normalizeOutcome(want)) {
					failures++
					if failures <= 20 {
						t.Errorf("%s:\narbiter:  %s\nupstream: %s", c.name, got, want)
					}
					continue
				}
				checkPSAResults(t, c, d)
			}
			if failures > 0 {
				t.Errorf("%d of %d cases differ", failures, len(cases))
			}
		})
	}
	t.Logf("%d decisions compared (%d cases x 2 configurations): %d denied, %d with warnings, %d with audit annotations", total, len(cases), denied, warned, annotated)
	if len(cases) < 200 {
		t.Fatalf("only %d cases", len(cases))
	}
	checkPSACoverage(t, cases)
}

func nsOf(c diffCase) string {
	ns, _ := c.object.m("metadata")["namespace"].(string)
	return ns
}

func engineHasPSALabels(labels map[string]string) bool {
	for k := range labels {
		if strings.HasPrefix(k, psaapi.AuditAnnotationPrefix) {
			return true
		}
	}
	return false
}

func normalizeOutcome(o psaOutcome) psaOutcome {
	if len(o.Warnings) == 0 {
		o.Warnings = nil
	}
	if len(o.Annotations) == 0 {
		o.Annotations = nil
	} else {
		o.Annotations = maps.Clone(o.Annotations)
	}
	return o
}

// checkPSAResults checks that Arbiter's results agree with its decision:
// a denial has a failing result whose modes include enforce.
func checkPSAResults(t *testing.T, c diffCase, d *engine.Decision) {
	t.Helper()
	for _, r := range d.Results {
		if r.PolicyKind != psa.KindPodSecurity || r.Source != outcome.SourcePodSecurity {
			t.Errorf("%s: result %+v is not a Pod Security result", c.name, r)
		}
	}
	if d.Allowed {
		return
	}
	for _, r := range d.Results {
		if (r.Result == outcome.Fail || r.Result == outcome.Error) && slices.Contains(r.Actions, "Deny") {
			return
		}
	}
	t.Errorf("%s: denied without a failing Deny result: %+v", c.name, d.Results)
}

// checkPSACoverage requires that every version of every Pod Security
// Standards check both allows and forbids some Pod (or pod template) of
// the cases, and that every level and check version has a namespace.
func checkPSACoverage(t *testing.T, cases []diffCase) {
	type key struct {
		id      policy.CheckID
		version string
	}
	allowed, forbidden := map[key]bool{}, map[key]bool{}
	for _, c := range cases {
		var meta *metav1.ObjectMeta
		var spec *corev1.PodSpec
		switch o := decodeTyped(t, c.object).(type) {
		case *corev1.Pod:
			meta, spec = &o.ObjectMeta, &o.Spec
		default:
			m, s, err := admission.DefaultPodSpecExtractor{}.ExtractPodSpec(o)
			if err != nil || s == nil {
				continue
			}
			meta, spec = m, s
		}
		for _, check := range policy.DefaultChecks() {
			for _, v := range check.Versions {
				k := key{check.ID, v.MinimumVersion.String()}
				if v.CheckPod(meta, spec).Allowed {
					allowed[k] = true
				} else {
					forbidden[k] = true
				}
			}
		}
	}
	versions := map[string]bool{}
	for _, v := range psaVersions {
		versions[v] = true
	}
	for _, check := range policy.DefaultChecks() {
		for _, v := range check.Versions {
			k := key{check.ID, v.MinimumVersion.String()}
			if !allowed[k] || !forbidden[k] {
				t.Errorf("check %s %s: allowed by some case %v, forbidden by some case %v", k.id, k.version, allowed[k], forbidden[k])
			}
			if !versions[k.version] {
				t.Errorf("check %s %s: no namespace at that version", k.id, k.version)
			}
		}
	}
}
