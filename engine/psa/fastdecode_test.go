package psa

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// fastDecode accepts an input only when it gives what the JSON decoder
// gives for the projection; project keeps everything the checks read.
// Inputs: every Pod and workload of the golden cases, and a base Pod with
// each field of the projection (and a few outside it) set to values of
// every JSON type.
func TestFastDecodeMatchesJSON(t *testing.T) {
	var pods []map[string]any
	for _, glob := range []string{"../testdata/psa/*.yaml", "../testdata/pss/*.yaml"} {
		files, _ := filepath.Glob(glob)
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			docs, err := manifest.Parse(f, data)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range docs {
				if d.Kind() == "Pod" {
					pods = append(pods, d.Object)
				} else if path, ok := templatePaths[resourceOf(d.Kind())]; ok {
					if tpl, ok := lookup(d.Object, path).(map[string]any); ok {
						pods = append(pods, tpl)
					}
				}
			}
		}
	}
	if len(pods) < 20 {
		t.Fatalf("only %d pods", len(pods))
	}
	golden := len(pods)
	base := `{"metadata":{"name":"p","annotations":{"a":"b"}},"spec":{
	  "hostNetwork":true,"hostUsers":false,"runtimeClassName":"kata","os":{"name":"linux"},
	  "securityContext":{"runAsUser":1000,"runAsNonRoot":true,"fsGroup":5,"seccompProfile":{"type":"Localhost","localhostProfile":"p.json"},
	    "seLinuxOptions":{"type":"container_t","level":"s0"},"appArmorProfile":{"type":"RuntimeDefault"},
	    "windowsOptions":{"hostProcess":false,"runAsUserName":"u"},"sysctls":[{"name":"kernel.shm_rmid_forced","value":"1"}]},
	  "volumes":[{"name":"v","configMap":{"name":"c"}},{"name":"h","hostPath":{"path":"/"}}],
	  "containers":[{"name":"c","image":"i","env":[{"name":"X"}],
	    "securityContext":{"privileged":false,"allowPrivilegeEscalation":false,"capabilities":{"add":["NET_BIND_SERVICE"],"drop":["ALL"]},
	      "procMount":"Default","runAsUser":1,"runAsNonRoot":true,"seccompProfile":{"type":"RuntimeDefault"},"seLinuxOptions":{"user":"u"},
	      "appArmorProfile":{"type":"Localhost","localhostProfile":"x"},"windowsOptions":{"gmsaCredentialSpec":"s"}},
	    "ports":[{"containerPort":80,"hostPort":8080,"name":"http"}],
	    "livenessProbe":{"httpGet":{"port":80,"host":"h"},"periodSeconds":3},"readinessProbe":{"tcpSocket":{"port":"http"}},"startupProbe":{"exec":{"command":["x"]}},
	    "lifecycle":{"postStart":{"httpGet":{"port":1,"host":"x"}},"preStop":{"tcpSocket":{"port":2,"host":"y"}}}}],
	  "initContainers":[{"name":"i","image":"j"}],
	  "ephemeralContainers":[{"name":"e","image":"k","securityContext":{"privileged":true}}]}}`
	paths := []string{
		"metadata", "metadata.annotations", "metadata.annotations.a", "metadata.labels", "spec",
		"spec.hostNetwork", "spec.hostPID", "spec.hostIPC", "spec.hostUsers", "spec.runtimeClassName", "spec.os", "spec.os.name",
		"spec.securityContext", "spec.securityContext.runAsUser", "spec.securityContext.runAsNonRoot", "spec.securityContext.fsGroup",
		"spec.securityContext.seccompProfile", "spec.securityContext.seccompProfile.type", "spec.securityContext.seccompProfile.localhostProfile",
		"spec.securityContext.seLinuxOptions", "spec.securityContext.seLinuxOptions.type", "spec.securityContext.appArmorProfile",
		"spec.securityContext.appArmorProfile.type", "spec.securityContext.windowsOptions", "spec.securityContext.windowsOptions.hostProcess",
		"spec.securityContext.windowsOptions.runAsUserName", "spec.securityContext.sysctls", "spec.securityContext.sysctls.0",
		"spec.securityContext.sysctls.0.name", "spec.volumes", "spec.volumes.0", "spec.volumes.0.name", "spec.volumes.0.configMap",
		"spec.volumes.1.hostPath", "spec.volumes.0.nfs", "spec.volumes.0.bogus",
		"spec.containers", "spec.containers.0", "spec.containers.0.name", "spec.containers.0.image", "spec.containers.0.env",
		"spec.containers.0.securityContext", "spec.containers.0.securityContext.privileged", "spec.containers.0.securityContext.allowPrivilegeEscalation",
		"spec.containers.0.securityContext.capabilities", "spec.containers.0.securityContext.capabilities.add", "spec.containers.0.securityContext.capabilities.add.0",
		"spec.containers.0.securityContext.capabilities.drop", "spec.containers.0.securityContext.procMount", "spec.containers.0.securityContext.runAsUser",
		"spec.containers.0.securityContext.runAsNonRoot", "spec.containers.0.securityContext.seccompProfile", "spec.containers.0.securityContext.seLinuxOptions.user",
		"spec.containers.0.securityContext.appArmorProfile.localhostProfile", "spec.containers.0.securityContext.windowsOptions.gmsaCredentialSpec",
		"spec.containers.0.ports", "spec.containers.0.ports.0", "spec.containers.0.ports.0.hostPort", "spec.containers.0.ports.0.containerPort",
		"spec.containers.0.livenessProbe", "spec.containers.0.livenessProbe.httpGet", "spec.containers.0.livenessProbe.httpGet.host",
		"spec.containers.0.readinessProbe.tcpSocket", "spec.containers.0.readinessProbe.tcpSocket.host", "spec.containers.0.startupProbe",
		"spec.containers.0.lifecycle", "spec.containers.0.lifecycle.postStart", "spec.containers.0.lifecycle.preStop.tcpSocket.host",
		"spec.initContainers", "spec.initContainers.0.image", "spec.ephemeralContainers", "spec.ephemeralContainers.0",
		"spec.ephemeralContainers.0.securityContext.privileged",
	}
	values := []any{nil, true, false, "s", "", int64(0), int64(7), int64(1) << 40, float64(1.5), float64(2), map[string]any{}, map[string]any{"host": "h"}, []any{}, []any{"x"}, []any{map[string]any{}}}
	for _, p := range paths {
		for _, v := range values {
			var m map[string]any
			if err := json.Unmarshal([]byte(base), &m); err != nil {
				t.Fatal(err)
			}
			m = intify(m).(map[string]any)
			if !set(m, strings.Split(p, "."), v) {
				t.Fatalf("path %s not in the base pod", p)
			}
			pods = append(pods, m)
		}
	}
	fast, slow := 0, 0
	for i, pod := range pods {
		var meta metav1.ObjectMeta
		var spec corev1.PodSpec
		ferr := fastDecode(pod, &meta, &spec)
		var want corev1.PodTemplateSpec
		jerr := decode(project(pod), &want)
		if ferr != nil {
			if i < golden && jerr == nil {
				t.Errorf("golden pod %d is well-formed but not decoded fast: %v", i, pod)
			}
			slow++
			continue
		}
		fast++
		if jerr != nil {
			t.Errorf("pod %d: fast decoding accepted what JSON refuses (%v): %v", i, jerr, pod)
			continue
		}
		if !reflect.DeepEqual(meta, want.ObjectMeta) || !reflect.DeepEqual(spec, want.Spec) {
			g, _ := json.Marshal(corev1.PodTemplateSpec{ObjectMeta: meta, Spec: spec})
			w, _ := json.Marshal(want)
			t.Errorf("pod %d: fast %s\njson %s\ninput %v", i, g, w, pod)
		}
	}
	t.Logf("%d inputs (%d from the golden cases): %d decoded fast, %d left to the JSON decoder", len(pods), golden, fast, slow)
}

func resourceOf(kind string) (gr struct{ Group, Resource string }) {
	for r := range templatePaths {
		if strings.EqualFold(strings.TrimSuffix(r.Resource, "s"), kind) {
			return struct{ Group, Resource string }{r.Group, r.Resource}
		}
	}
	return
}

func lookup(m map[string]any, path []string) any {
	var cur any = m
	for _, k := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

func set(m any, path []string, v any) bool {
	for i, k := range path {
		last := i == len(path)-1
		switch c := m.(type) {
		case map[string]any:
			if last {
				c[k] = v
				return true
			}
			if _, ok := c[k]; !ok {
				return false
			}
			m = c[k]
		case []any:
			idx := int(k[0] - '0')
			if idx >= len(c) {
				return false
			}
			if last {
				c[idx] = v
				return true
			}
			m = c[idx]
		default:
			return false
		}
	}
	return false
}

func intify(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = intify(e)
		}
	case []any:
		for i, e := range t {
			t[i] = intify(e)
		}
	case float64:
		if t == float64(int64(t)) {
			return int64(t)
		}
	}
	return v
}
