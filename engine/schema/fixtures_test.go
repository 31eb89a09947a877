package schema

import (
	"encoding/json"
	"testing"

	"go.yaml.in/yaml/v3"

	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// mustJSON decodes JSON or YAML (1.2: y and n are strings) as Kubernetes
// decodes unstructured objects (integers as int64).
func mustJSON(t testing.TB, src string) map[string]any {
	t.Helper()
	var doc any
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	if doc == nil {
		doc = map[string]any{}
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	var m map[string]any
	if err := utiljson.Unmarshal(js, &m); err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	return m
}

// fixturePod is a realistic Pod, as the API server would send it.
const fixturePod = `
apiVersion: v1
kind: Pod
metadata:
  name: web-7d9c8b6f5-x2x4k
  namespace: shop
  generateName: web-7d9c8b6f5-
  uid: 6a4b2c9e-1f0a-4d5e-9b8c-7a6d5e4f3b2a
  resourceVersion: "123456"
  creationTimestamp: "2026-01-02T03:04:05Z"
  labels:
    app: web
    pod-template-hash: 7d9c8b6f5
    tier: frontend
  annotations:
    kubectl.kubernetes.io/restartedAt: "2026-01-01T00:00:00Z"
    prometheus.io/scrape: "true"
  ownerReferences:
  - apiVersion: apps/v1
    kind: ReplicaSet
    name: web-7d9c8b6f5
    uid: 0b1c2d3e-4f5a-6b7c-8d9e-0f1a2b3c4d5e
    controller: true
    blockOwnerDeletion: true
  finalizers:
  - example.com/cleanup
  managedFields:
  - manager: kube-controller-manager
    operation: Update
    apiVersion: v1
    time: "2026-01-02T03:04:05Z"
    fieldsType: FieldsV1
    fieldsV1:
      f:metadata:
        f:labels:
          .: {}
          f:app: {}
spec:
  serviceAccountName: web
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 30
  dnsPolicy: ClusterFirst
  restartPolicy: Always
  schedulerName: default-scheduler
  nodeSelector:
    kubernetes.io/os: linux
  securityContext:
    runAsNonRoot: true
    fsGroup: 2000
    seccompProfile:
      type: RuntimeDefault
  imagePullSecrets:
  - name: regcred
  tolerations:
  - key: node.kubernetes.io/not-ready
    operator: Exists
    effect: NoExecute
    tolerationSeconds: 300
  affinity:
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              app: web
  topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        app: web
  initContainers:
  - name: init-config
    image: busybox:1.36
    command: ["sh", "-c", "cp /src/* /dst/"]
    volumeMounts:
    - name: config
      mountPath: /dst
  containers:
  - name: web
    image: registry.example.com/shop/web:1.4.2
    imagePullPolicy: IfNotPresent
    args: ["--port=8080", "--log-level=info"]
    ports:
    - name: http
      containerPort: 8080
      protocol: TCP
    - name: metrics
      containerPort: 9090
      protocol: TCP
    env:
    - name: LOG_FORMAT
      value: json
    - name: POD_NAME
      valueFrom:
        fieldRef:
          apiVersion: v1
          fieldPath: metadata.name
    - name: DB_PASSWORD
      valueFrom:
        secretKeyRef:
          name: db
          key: password
    envFrom:
    - configMapRef:
        name: web-env
    resources:
      requests:
        cpu: 100m
        memory: 128Mi
      limits:
        memory: 256Mi
    readinessProbe:
      httpGet:
        path: /healthz
        port: http
      periodSeconds: 10
    livenessProbe:
      httpGet:
        path: /healthz
        port: 8080
      initialDelaySeconds: 5
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities:
        drop: ["ALL"]
    volumeMounts:
    - name: config
      mountPath: /etc/web
      readOnly: true
    - name: tmp
      mountPath: /tmp
    terminationMessagePath: /dev/termination-log
    terminationMessagePolicy: File
  - name: sidecar
    image: registry.example.com/proxy:2.0
    ports:
    - containerPort: 15001
    resources:
      requests:
        cpu: 10m
  volumes:
  - name: config
    configMap:
      name: web-config
      defaultMode: 420
      items:
      - key: app.yaml
        path: app.yaml
  - name: tmp
    emptyDir: {}
  - name: token
    projected:
      sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: 3600
status:
  phase: Pending
  qosClass: Burstable
`

const fixtureDeployment = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
  labels:
    app: web
spec:
  replicas: 3
  revisionHistoryLimit: 10
  selector:
    matchLabels:
      app: web
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 25%
      maxUnavailable: 1
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: registry.example.com/shop/web:1.4.2
        args: ["--port=8080"]
        ports:
        - containerPort: 8080
        env:
        - name: A
          value: "1"
`

// fixtureCRD defines example.com Widgets (v1 and v2 served, v0 not), with
// map-lists, sets, atomic and granular maps, int-or-string, embedded
// resources and preserved unknown fields.
const fixtureCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    kind: Widget
    listKind: WidgetList
    plural: widgets
    singular: widget
  versions:
  - name: v0
    served: false
    storage: false
    schema:
      openAPIV3Schema:
        type: object
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          metadata:
            type: object
            properties:
              name:
                type: string
                maxLength: 40
          spec:
            type: object
            properties:
              size:
                type: integer
              color:
                type: string
                enum: [red, blue]
              port:
                x-kubernetes-int-or-string: true
              ports:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [port, protocol]
                items:
                  type: object
                  required: [port]
                  properties:
                    port:
                      type: integer
                    protocol:
                      type: string
                      default: TCP
                    name:
                      type: string
                    tags:
                      type: array
                      items:
                        type: string
              pairs:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [a, b]
                items:
                  type: object
                  properties:
                    a:
                      type: string
                    b:
                      type: string
                    v:
                      type: string
              owners:
                type: array
                x-kubernetes-list-type: set
                items:
                  type: string
              args:
                type: array
                items:
                  type: string
              atomicList:
                type: array
                x-kubernetes-list-type: atomic
                items:
                  type: object
                  properties:
                    a:
                      type: string
              selector:
                type: object
                x-kubernetes-map-type: atomic
                properties:
                  app:
                    type: string
                  tier:
                    type: string
              params:
                type: object
                additionalProperties:
                  type: string
              atomicParams:
                type: object
                x-kubernetes-map-type: atomic
                additionalProperties:
                  type: string
              nested:
                type: object
                properties:
                  inner:
                    type: object
                    properties:
                      value:
                        type: string
                      list:
                        type: array
                        x-kubernetes-list-type: map
                        x-kubernetes-list-map-keys: [name]
                        items:
                          type: object
                          properties:
                            name:
                              type: string
                            value:
                              type: string
              template:
                type: object
                x-kubernetes-embedded-resource: true
                x-kubernetes-preserve-unknown-fields: true
              config:
                type: object
                x-kubernetes-preserve-unknown-fields: true
              nullableField:
                type: string
                nullable: true
          status:
            type: object
            properties:
              ready:
                type: boolean
              conditions:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [type]
                items:
                  type: object
                  properties:
                    type:
                      type: string
                    status:
                      type: string
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
        properties:
          spec:
            type: object
            properties:
              items:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [id]
                items:
                  type: object
                  properties:
                    id:
                      type: integer
                    v:
                      type: string
`
