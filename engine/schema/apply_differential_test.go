package schema

import (
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
)

// A converter pair: Arbiter's and the reference one kube-apiserver (or the
// Kyverno CLI) would use for the same kind.
type converterPair struct {
	ours, ref managedfields.TypeConverter
}

var (
	pairsOnce sync.Once
	pairs     map[string]converterPair
)

func converterPairs(t testing.TB) map[string]converterPair {
	pairsOnce.Do(func() {
		crd := mustJSON(t, fixtureCRD)
		ours, err := NewCRDConverter(crd)
		if err != nil {
			t.Fatal(err)
		}
		pairs = map[string]converterPair{
			// client-go's applyconfigurations.NewTypeConverter(scheme).
			"builtin": {Builtin(), clientGoTypeConverter},
			// kube-apiserver's OpenAPI v3 for the CRD → managedfields.
			"crd":     {ours, referenceCRDConverter(t, crd)},
			"deduced": {Deduced(), managedfields.NewDeducedTypeConverter()},
			"nil":     {nil, nil},
		}
	})
	return pairs
}

type applyCase struct {
	name string
	conv string // builtin, crd, deduced, nil
	obj  string // YAML or JSON
	ac   string
}

const podHead = "apiVersion: v1\nkind: Pod\n"
const deployHead = "apiVersion: apps/v1\nkind: Deployment\n"
const widgetHead = "apiVersion: example.com/v1\nkind: Widget\n"

func podCase(name, ac string) applyCase {
	return applyCase{name: "pod/" + name, conv: "builtin", obj: fixturePod, ac: podHead + ac}
}

func deployCase(name, ac string) applyCase {
	return applyCase{name: "deployment/" + name, conv: "builtin", obj: fixtureDeployment, ac: deployHead + ac}
}

const fixtureWidget = `
apiVersion: example.com/v1
kind: Widget
metadata:
  name: w
  namespace: ns
  labels: {a: "1"}
  finalizers: [x]
spec:
  size: 3
  color: red
  port: 8080
  ports:
  - {port: 80, protocol: TCP, name: http, tags: [a, b]}
  - {port: 53, protocol: UDP, name: dns}
  owners: [alice, bob]
  pairs:
  - {a: x, v: "1"}
  - {a: x, b: y, v: "2"}
  args: [x, y]
  atomicList: [{a: "1"}]
  selector: {app: w, tier: t}
  params: {p1: v1, p2: v2}
  atomicParams: {q: "1"}
  nested:
    inner:
      value: v
      list:
      - {name: a, value: "1"}
      - {name: b, value: "2"}
  template:
    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: cm
      labels: {x: y}
    data: {k: v}
  config:
    anything: [1, 2]
    deep: {x: 1}
status:
  ready: false
  conditions:
  - {type: Ready, status: "False"}
`

func widgetCase(name, ac string) applyCase {
	return applyCase{name: "crd/" + name, conv: "crd", obj: fixtureWidget, ac: widgetHead + ac}
}

func applyCases() []applyCase {
	cs := []applyCase{
		// Pods: metadata.
		podCase("label-new", "metadata: {labels: {team: payments}}"),
		podCase("label-overwrite", "metadata: {labels: {app: api}}"),
		podCase("label-empty-value", `metadata: {labels: {app: ""}}`),
		podCase("label-null", "metadata: {labels: {app: null}}"),
		podCase("labels-empty-map", "metadata: {labels: {}}"),
		podCase("labels-null", "metadata: {labels: null}"),
		podCase("annotation-new", `metadata: {annotations: {"example.com/injected": "true"}}`),
		podCase("labels-and-annotations", `metadata: {labels: {a: b, c: d}, annotations: {e: f}}`),
		podCase("label-not-a-string", "metadata: {labels: {a: 1}}"),
		podCase("labels-a-list", "metadata: {labels: [a]}"),
		podCase("finalizer-add", "metadata: {finalizers: [example.com/other]}"),
		podCase("finalizer-existing", "metadata: {finalizers: [example.com/cleanup]}"),
		podCase("finalizer-duplicate", "metadata: {finalizers: [a, a]}"),
		podCase("owner-reference", "metadata: {ownerReferences: [{apiVersion: v1, kind: Node, name: n, uid: u1}]}"),
		podCase("managed-fields", "metadata: {managedFields: [{manager: m}]}"),
		podCase("name-change", "metadata: {name: other}"),
		podCase("metadata-unknown-field", "metadata: {bogus: 1}"),
		podCase("empty-apply-configuration", ""),
		podCase("empty-spec", "spec: {}"),
		podCase("null-spec", "spec: null"),
		// Pods: containers (a map-list keyed by name).
		podCase("container-image", "spec: {containers: [{name: web, image: web:2}]}"),
		podCase("container-same-image", "spec: {containers: [{name: web, image: 'registry.example.com/shop/web:1.4.2'}]}"),
		podCase("container-add", "spec: {containers: [{name: logger, image: fluent-bit:3}]}"),
		podCase("container-add-two", "spec: {containers: [{name: a, image: a}, {name: b, image: b}]}"),
		podCase("containers-reordered", "spec: {containers: [{name: sidecar, image: p:3}, {name: web, image: w:3}]}"),
		podCase("container-between", "spec: {containers: [{name: web}, {name: middle, image: m}, {name: sidecar}]}"),
		podCase("container-no-name", "spec: {containers: [{image: x}]}"),
		podCase("container-duplicate", "spec: {containers: [{name: web}, {name: web}]}"),
		podCase("container-name-only", "spec: {containers: [{name: web}]}"),
		podCase("containers-empty", "spec: {containers: []}"),
		podCase("containers-null", "spec: {containers: null}"),
		podCase("container-security-context", "spec: {containers: [{name: web, securityContext: {runAsNonRoot: true, runAsUser: 1000}}]}"),
		podCase("container-security-context-override", "spec: {containers: [{name: web, securityContext: {allowPrivilegeEscalation: true}}]}"),
		podCase("container-security-context-new", "spec: {containers: [{name: sidecar, securityContext: {privileged: false}}]}"),
		podCase("container-capabilities-drop", "spec: {containers: [{name: web, securityContext: {capabilities: {drop: [NET_RAW]}}}]}"),
		podCase("container-capabilities-add", "spec: {containers: [{name: sidecar, securityContext: {capabilities: {add: [NET_ADMIN]}}}]}"),
		podCase("container-seccomp", "spec: {containers: [{name: web, securityContext: {seccompProfile: {type: Localhost, localhostProfile: p.json}}}]}"),
		podCase("container-security-context-unknown", "spec: {containers: [{name: web, securityContext: {bogus: true}}]}"),
		podCase("container-security-context-wrong-type", "spec: {containers: [{name: web, securityContext: {runAsUser: abc}}]}"),
		podCase("container-args", "spec: {containers: [{name: web, args: ['--debug']}]}"),
		podCase("container-command", "spec: {containers: [{name: web, command: [/bin/sh]}]}"),
		podCase("container-args-and-label", "metadata: {labels: {x: y}}\nspec: {containers: [{name: web, args: [a]}, {name: sidecar, command: [b]}]}"),
		podCase("env-add", "spec: {containers: [{name: web, env: [{name: NEW, value: v}]}]}"),
		podCase("env-override", "spec: {containers: [{name: web, env: [{name: LOG_FORMAT, value: text}]}]}"),
		podCase("env-value-from", "spec: {containers: [{name: web, env: [{name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]}]}"),
		podCase("env-switch-to-value-from", "spec: {containers: [{name: web, env: [{name: LOG_FORMAT, valueFrom: {configMapKeyRef: {name: c, key: k}}}]}]}"),
		podCase("env-no-name", "spec: {containers: [{name: web, env: [{value: v}]}]}"),
		podCase("env-from", "spec: {containers: [{name: web, envFrom: [{secretRef: {name: s}}]}]}"),
		podCase("ports-add", "spec: {containers: [{name: web, ports: [{containerPort: 8443, name: https}]}]}"),
		podCase("ports-existing-default-protocol", "spec: {containers: [{name: web, ports: [{containerPort: 8080, name: web}]}]}"),
		podCase("ports-udp", "spec: {containers: [{name: web, ports: [{containerPort: 8080, protocol: UDP}]}]}"),
		podCase("ports-no-key", "spec: {containers: [{name: web, ports: [{name: x}]}]}"),
		podCase("resources-limit", "spec: {containers: [{name: web, resources: {limits: {cpu: 500m}}}]}"),
		podCase("resources-request-override", "spec: {containers: [{name: sidecar, resources: {requests: {cpu: 20m, memory: 32Mi}}}]}"),
		podCase("resources-int-quantity", "spec: {containers: [{name: web, resources: {limits: {cpu: 1}}}]}"),
		podCase("volume-mount-add", "spec: {containers: [{name: web, volumeMounts: [{name: cache, mountPath: /cache}]}]}"),
		podCase("volume-mount-override", "spec: {containers: [{name: web, volumeMounts: [{name: tmp, mountPath: /tmp, readOnly: true}]}]}"),
		podCase("probe", "spec: {containers: [{name: web, readinessProbe: {periodSeconds: 5}}]}"),
		podCase("probe-exec-command", "spec: {containers: [{name: web, livenessProbe: {exec: {command: [true]}}}]}"),
		podCase("image-pull-policy", "spec: {containers: [{name: web, imagePullPolicy: Always}, {name: sidecar, imagePullPolicy: Always}]}"),
		podCase("init-container-add", "spec: {initContainers: [{name: init-2, image: busybox}]}"),
		podCase("init-container-security", "spec: {initContainers: [{name: init-config, securityContext: {runAsNonRoot: true}}]}"),
		podCase("ephemeral-container", "spec: {ephemeralContainers: [{name: debug, image: busybox}]}"),
		// Pods: the pod spec.
		podCase("pod-security-context", "spec: {securityContext: {runAsUser: 1000, runAsGroup: 3000}}"),
		podCase("pod-security-context-seccomp", "spec: {securityContext: {seccompProfile: {type: Unconfined}}}"),
		podCase("pod-security-context-sysctls", "spec: {securityContext: {sysctls: [{name: net.core.somaxconn, value: '1024'}]}}"),
		podCase("pod-security-context-supplemental", "spec: {securityContext: {supplementalGroups: [1, 2]}}"),
		podCase("pod-security-context-empty", "spec: {securityContext: {}}"),
		podCase("pod-security-context-null", "spec: {securityContext: null}"),
		podCase("volumes-add", "spec: {volumes: [{name: cache, emptyDir: {medium: Memory}}]}"),
		podCase("volumes-override", "spec: {volumes: [{name: tmp, emptyDir: {sizeLimit: 1Gi}}]}"),
		podCase("volumes-config-map-items", "spec: {volumes: [{name: config, configMap: {items: [{key: b, path: b}]}}]}"),
		podCase("volumes-config-map-mode", "spec: {volumes: [{name: config, configMap: {defaultMode: 256}}]}"),
		podCase("volumes-projected-sources", "spec: {volumes: [{name: token, projected: {sources: [{configMap: {name: x}}]}}]}"),
		podCase("tolerations", "spec: {tolerations: [{key: k, operator: Exists}]}"),
		podCase("node-selector", "spec: {nodeSelector: {disk: ssd}}"),
		podCase("node-name", "spec: {nodeName: node-1}"),
		podCase("priority-class", "spec: {priorityClassName: high, priority: 1000}"),
		podCase("service-account", "spec: {serviceAccountName: other, automountServiceAccountToken: true}"),
		podCase("image-pull-secrets", "spec: {imagePullSecrets: [{name: other}]}"),
		podCase("host-aliases", "spec: {hostAliases: [{ip: 10.0.0.1, hostnames: [a]}]}"),
		podCase("affinity-node", "spec: {affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: k, operator: In, values: [v]}]}]}}}}"),
		podCase("affinity-pod-anti", "spec: {affinity: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 1, podAffinityTerm: {topologyKey: zone}}]}}}"),
		podCase("topology-spread", "spec: {topologySpreadConstraints: [{maxSkew: 2, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}]}"),
		podCase("readiness-gates", "spec: {readinessGates: [{conditionType: x}]}"),
		podCase("dns-config", "spec: {dnsConfig: {nameservers: [1.1.1.1]}}"),
		podCase("dns-config-options", "spec: {dnsConfig: {options: [{name: ndots, value: '2'}]}}"),
		podCase("termination-grace-float", "spec: {terminationGracePeriodSeconds: 10.5}"),
		podCase("termination-grace-string", "spec: {terminationGracePeriodSeconds: '10'}"),
		podCase("spec-unknown-field", "spec: {bogus: true}"),
		podCase("runtime-class", "spec: {runtimeClassName: gvisor}"),
		podCase("os", "spec: {os: {name: linux}}"),
		podCase("scheduling-gates", "spec: {schedulingGates: [{name: g}]}"),
		podCase("resource-claims", "spec: {resourceClaims: [{name: c, resourceClaimName: rc}]}"),
		podCase("status-phase", "status: {phase: Running}"),
		podCase("status-conditions", "status: {conditions: [{type: Ready, status: 'True'}]}"),
		podCase("spec-and-status", "spec: {nodeName: n}\nstatus: {hostIP: 10.0.0.2}"),
		// The apply configuration's kind and the converter.
		{name: "pod/gvk-mismatch", conv: "builtin", obj: fixturePod, ac: "apiVersion: v1\nkind: ConfigMap\ndata: {a: b}"},
		{name: "pod/no-gvk", conv: "builtin", obj: fixturePod, ac: "metadata: {labels: {a: b}}"},
		{name: "pod/version-mismatch", conv: "builtin", obj: fixturePod, ac: "apiVersion: v2\nkind: Pod\nmetadata: {labels: {a: b}}"},
		{name: "pod/nil-converter", conv: "nil", obj: fixturePod, ac: podHead + "metadata: {labels: {a: b}}"},
		{name: "pod/nil-converter-gvk-mismatch", conv: "nil", obj: fixturePod, ac: "apiVersion: v1\nkind: Service"},
		{name: "pod/live-unknown-field", conv: "builtin", obj: podHead + "metadata: {name: p}\nspec: {bogus: 1, containers: [{name: a}]}", ac: podHead + "metadata: {labels: {a: b}}"},
		{name: "pod/live-wrong-type", conv: "builtin", obj: podHead + "metadata: {name: p, labels: {a: 1}}", ac: podHead + "metadata: {labels: {b: c}}"},
		{name: "pod/live-duplicate-containers", conv: "builtin", obj: podHead + "spec: {containers: [{name: a, image: x}, {name: a, image: y}]}", ac: podHead + "spec: {containers: [{name: a, image: z}]}"},
		{name: "pod/live-duplicate-other", conv: "builtin", obj: podHead + "spec: {containers: [{name: a, image: x}, {name: a, image: y}]}", ac: podHead + "spec: {containers: [{name: b, image: z}]}"},
		{name: "pod/live-minimal", conv: "builtin", obj: podHead + "metadata: {name: p}", ac: podHead + "spec: {containers: [{name: a, image: b, securityContext: {runAsNonRoot: true}}]}"},
		{name: "pod/live-no-gvk", conv: "builtin", obj: "metadata: {name: p}", ac: podHead + "metadata: {labels: {a: b}}"},
		{name: "pod/unregistered-kind", conv: "builtin", obj: "apiVersion: example.com/v1\nkind: Pod", ac: "apiVersion: example.com/v1\nkind: Pod"},
		{name: "pod/list-kind", conv: "builtin", obj: "apiVersion: v1\nkind: PodList\nitems: []", ac: "apiVersion: v1\nkind: PodList\nitems: []"},
		// Deployments.
		deployCase("replicas", "spec: {replicas: 5}"),
		deployCase("template-label", "spec: {template: {metadata: {labels: {version: v2}}}}"),
		deployCase("template-annotation", "spec: {template: {metadata: {annotations: {a: b}}}}"),
		deployCase("template-container-image", "spec: {template: {spec: {containers: [{name: web, image: web:2}]}}}"),
		deployCase("template-container-env", "spec: {template: {spec: {containers: [{name: web, env: [{name: B, value: '2'}]}]}}}"),
		deployCase("template-container-security", "spec: {template: {spec: {containers: [{name: web, securityContext: {runAsNonRoot: true}}]}}}"),
		deployCase("template-container-args", "spec: {template: {spec: {containers: [{name: web, args: [x]}]}}}"),
		deployCase("selector", "spec: {selector: {matchLabels: {app: web, x: y}}}"),
		deployCase("strategy-max-surge-int", "spec: {strategy: {rollingUpdate: {maxSurge: 2}}}"),
		deployCase("strategy-recreate", "spec: {strategy: {type: Recreate}}"),
		deployCase("template-tolerations", "spec: {template: {spec: {tolerations: [{operator: Exists}]}}}"),
		deployCase("paused-and-labels", "metadata: {labels: {x: y}}\nspec: {paused: true}"),
		// ConfigMaps and Namespaces.
		{name: "configmap/data-add", conv: "builtin", obj: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: '1'}", ac: "apiVersion: v1\nkind: ConfigMap\ndata: {b: '2'}"},
		{name: "configmap/data-override", conv: "builtin", obj: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: '1'}", ac: "apiVersion: v1\nkind: ConfigMap\ndata: {a: '3'}"},
		{name: "configmap/data-new", conv: "builtin", obj: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}", ac: "apiVersion: v1\nkind: ConfigMap\ndata: {a: x}\nbinaryData: {b: AAE=}"},
		{name: "configmap/immutable", conv: "builtin", obj: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: '1'}", ac: "apiVersion: v1\nkind: ConfigMap\nimmutable: true"},
		{name: "configmap/data-not-string", conv: "builtin", obj: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}", ac: "apiVersion: v1\nkind: ConfigMap\ndata: {a: 1}"},
		{name: "namespace/label", conv: "builtin", obj: "apiVersion: v1\nkind: Namespace\nmetadata: {name: ns, labels: {kubernetes.io/metadata.name: ns}}", ac: "apiVersion: v1\nkind: Namespace\nmetadata: {labels: {pod-security.kubernetes.io/enforce: restricted}}"},
		{name: "namespace/finalizers", conv: "builtin", obj: "apiVersion: v1\nkind: Namespace\nmetadata: {name: ns}\nspec: {finalizers: [kubernetes]}", ac: "apiVersion: v1\nkind: Namespace\nspec: {finalizers: [other]}"},
		{name: "namespace/annotations", conv: "builtin", obj: "apiVersion: v1\nkind: Namespace\nmetadata: {name: ns}", ac: "apiVersion: v1\nkind: Namespace\nmetadata: {annotations: {a: b}}"},
		{name: "service/ports", conv: "builtin", obj: "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80, protocol: TCP}], selector: {app: a}}", ac: "apiVersion: v1\nkind: Service\nspec: {ports: [{port: 443, protocol: TCP, name: https}]}"},
		{name: "service/selector", conv: "builtin", obj: "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {selector: {app: a}}", ac: "apiVersion: v1\nkind: Service\nspec: {selector: {tier: t}}"},
		// A custom resource (kube-apiserver's CRD schema).
		widgetCase("label", "metadata: {labels: {b: '2'}}"),
		widgetCase("size", "spec: {size: 4}"),
		widgetCase("size-wrong-type", "spec: {size: big}"),
		widgetCase("unknown-field", "spec: {bogus: 1}"),
		widgetCase("port-int-or-string", "spec: {port: http}"),
		widgetCase("ports-add-default-key", "spec: {ports: [{port: 443, name: https}]}"),
		widgetCase("ports-override", "spec: {ports: [{port: 80, protocol: TCP, name: web}]}"),
		widgetCase("ports-override-defaulted", "spec: {ports: [{port: 80, name: web}]}"),
		widgetCase("ports-missing-key", "spec: {ports: [{name: x}]}"),
		widgetCase("ports-item-tags", "spec: {ports: [{port: 53, protocol: UDP, tags: [c]}]}"),
		widgetCase("pairs-other-key-same-value", "spec: {pairs: [{b: x, v: '3'}]}"),
		widgetCase("pairs-partial-key", "spec: {pairs: [{a: x, v: '4'}]}"),
		widgetCase("pairs-full-key", "spec: {pairs: [{b: y, a: x, v: '5'}, {a: z}]}"),
		widgetCase("pairs-no-key", "spec: {pairs: [{v: '6'}]}"),
		widgetCase("owners-set", "spec: {owners: [carol, alice]}"),
		widgetCase("owners-duplicate", "spec: {owners: [carol, carol]}"),
		widgetCase("args", "spec: {args: [z]}"),
		widgetCase("atomic-list", "spec: {atomicList: [{a: '2'}]}"),
		widgetCase("atomic-struct", "spec: {selector: {tier: u}}"),
		widgetCase("granular-map", "spec: {params: {p3: v3, p1: w1}}"),
		widgetCase("atomic-map", "spec: {atomicParams: {r: '2'}}"),
		widgetCase("nested-list-map", "spec: {nested: {inner: {list: [{name: c, value: '3'}, {name: a, value: '0'}]}}}"),
		widgetCase("nested-value", "spec: {nested: {inner: {value: w}}}"),
		widgetCase("embedded-metadata-label", "spec: {template: {metadata: {labels: {z: w}}}}"),
		widgetCase("embedded-data", "spec: {template: {data: {k2: v2}}}"),
		widgetCase("embedded-unknown", "spec: {template: {spec: {anything: [1]}}}"),
		widgetCase("preserved", "spec: {config: {deep: {y: 2}, more: true}}"),
		widgetCase("preserved-list", "spec: {config: {anything: [3]}}"),
		widgetCase("nullable", "spec: {nullableField: null}"),
		widgetCase("status", "status: {ready: true, conditions: [{type: Ready, status: 'True'}, {type: Synced, status: 'True'}]}"),
		widgetCase("metadata-owner", "metadata: {ownerReferences: [{apiVersion: v1, kind: X, name: x, uid: u}]}"),
		widgetCase("metadata-finalizers", "metadata: {finalizers: [y]}"),
		{name: "crd/v2", conv: "crd", obj: "apiVersion: example.com/v2\nkind: Widget\nmetadata: {name: w}\nspec: {items: [{id: 1, v: a}], extra: {x: [1]}}\nother: 1", ac: "apiVersion: example.com/v2\nkind: Widget\nspec: {items: [{id: 2, v: b}, {id: 1, v: c}], extra: {y: [2]}}\nother: 2"},
		{name: "crd/v2-list", conv: "crd", obj: "apiVersion: example.com/v2\nkind: Widget\nmetadata: {name: w}\nspec: {extra: {x: [1]}}", ac: "apiVersion: example.com/v2\nkind: Widget\nspec: {extra: {x: [2]}}"},
		{name: "crd/unserved-version", conv: "crd", obj: "apiVersion: example.com/v0\nkind: Widget\nmetadata: {name: w}", ac: "apiVersion: example.com/v0\nkind: Widget\nspec: {a: 1}"},
		{name: "crd/unknown-version", conv: "crd", obj: "apiVersion: example.com/v9\nkind: Widget\nmetadata: {name: w}", ac: "apiVersion: example.com/v9\nkind: Widget\nspec: {a: 1}"},
		// The deduced converter: granular maps, atomic lists.
		{name: "deduced/label", conv: "deduced", obj: fixtureWidget, ac: widgetHead + "metadata: {labels: {b: '2'}}"},
		{name: "deduced/nested-map", conv: "deduced", obj: fixtureWidget, ac: widgetHead + "spec: {selector: {x: y}, nested: {inner: {value: z}}}"},
		{name: "deduced/list", conv: "deduced", obj: fixtureWidget, ac: widgetHead + "spec: {owners: [z]}"},
		{name: "deduced/containers", conv: "deduced", obj: fixturePod, ac: podHead + "spec: {containers: [{name: web, image: x}]}"},
		{name: "deduced/pod-label", conv: "deduced", obj: fixturePod, ac: podHead + "metadata: {labels: {x: y}}"},
		{name: "deduced/scalar-over-map", conv: "deduced", obj: fixtureWidget, ac: widgetHead + "spec: {selector: 1}"},
		{name: "deduced/map-over-scalar", conv: "deduced", obj: fixtureWidget, ac: widgetHead + "spec: {size: {a: 1}}"},
		{name: "deduced/null", conv: "deduced", obj: fixtureWidget, ac: widgetHead + "spec: {params: null}"},
	}
	return cs
}

// TestApplyConfigurationDifferential runs every case through ApplyConfiguration
// and through the reference: k8s.io/apiserver's patch.ApplyStructuredMergeDiff
// (allowAtomic false) or Kyverno's guard-free copy (allowAtomic true), each
// with its own converter (client-go's for built-ins, the apiextensions
// OpenAPI builder's for the CRD). Same object, same error text.
func TestApplyConfigurationDifferential(t *testing.T) {
	ps := converterPairs(t)
	n := 0
	outcomes := map[bool]int{}
	for _, c := range applyCases() {
		for _, allowAtomic := range []bool{false, true} {
			name := c.name
			if allowAtomic {
				name += "/allowAtomic"
			}
			n++
			t.Run(name, func(t *testing.T) {
				p := ps[c.conv]
				obj := mustJSON(t, c.obj)
				ac := mustJSON(t, c.ac)
				objCopy := runtime.DeepCopyJSON(obj)
				acCopy := runtime.DeepCopyJSON(ac)
				got, gerr := ApplyConfiguration(p.ours, obj, ac, allowAtomic)
				if !reflect.DeepEqual(obj, objCopy) {
					t.Fatal("obj was modified")
				}
				if !reflect.DeepEqual(ac, acCopy) {
					t.Fatal("the apply configuration was modified")
				}
				ref := upstreamApply
				if allowAtomic {
					ref = kyvernoApply
				}
				want, werr := ref(p.ref, runtime.DeepCopyJSON(obj), runtime.DeepCopyJSON(ac))
				outcomes[werr == nil]++
				if !sameError(gerr, werr) {
					t.Fatalf("error:\n got  %v\n want %v", gerr, werr)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("object:\n got  %v\n want %v", got, want)
				}
			})
		}
	}
	t.Logf("%d cases: %d merged, %d errors", n, outcomes[true], outcomes[false])
	if n < 100 {
		t.Errorf("only %d cases", n)
	}
}

const atomicsPrefix = "invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: "

// sameError: the same text, except that upstream lists the atomic paths of
// one map in Go's map order, which varies: those lists compare as sets.
func sameError(got, want error) bool {
	if (got == nil) != (want == nil) {
		return false
	}
	if got == nil {
		return true
	}
	g, w := got.Error(), want.Error()
	// Several validation errors: structured-merge-diff lists them in the
	// order it walks maps, which varies.
	if strings.Contains(g, "errors:\n") && strings.Contains(w, "errors:\n") {
		gl, wl := strings.Split(g, "\n"), strings.Split(w, "\n")
		sort.Strings(gl)
		sort.Strings(wl)
		return reflect.DeepEqual(gl, wl)
	}
	if strings.HasPrefix(g, atomicsPrefix) && strings.HasPrefix(w, atomicsPrefix) {
		gp := strings.Split(strings.TrimPrefix(g, atomicsPrefix), ", ")
		wp := strings.Split(strings.TrimPrefix(w, atomicsPrefix), ", ")
		sort.Strings(gp)
		sort.Strings(wp)
		return reflect.DeepEqual(gp, wp)
	}
	return g == w
}
