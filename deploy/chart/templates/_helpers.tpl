{{/* Labels of every object. */}}
{{- define "arbiter.labels" -}}
app.kubernetes.io/name: arbiter
app.kubernetes.io/part-of: arbiter
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* Selector labels of a component: (dict "ctx" $ "component" "webhook"). */}}
{{- define "arbiter.selector" -}}
app.kubernetes.io/name: arbiter
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "arbiter.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
{{- end }}

{{/* DNS name of a Service in the release's namespace. */}}
{{- define "arbiter.svc" -}}
{{ .name }}.{{ .ctx.Release.Namespace }}.svc
{{- end }}

{{/* The namespaces no webhook is called for: the release's and the values'. */}}
{{- define "arbiter.excludedNamespaces" -}}
{{- $ns := list .Release.Namespace -}}
{{- range .Values.webhook.excludedNamespaces }}{{ if not (has . $ns) }}{{ $ns = append $ns . }}{{ end }}{{ end -}}
{{- toJson $ns -}}
{{- end }}

{{- define "arbiter.validate" -}}
{{- if not (has .Values.mode (list "push" "kube")) }}{{ fail (printf "values: mode %q: want push or kube" .Values.mode) }}{{ end }}
{{- if not (has .Values.tls.source (list "certManager" "generate" "existing")) }}{{ fail (printf "values: tls.source %q: want certManager, generate or existing" .Values.tls.source) }}{{ end }}
{{- if not (has .Values.webhook.failurePolicy (list "Fail" "Ignore")) }}{{ fail (printf "values: webhook.failurePolicy %q: want Fail or Ignore" .Values.webhook.failurePolicy) }}{{ end }}
{{- if not (has .Values.kube.webhooks (list "static" "managed")) }}{{ fail (printf "values: kube.webhooks %q: want static or managed" .Values.kube.webhooks) }}{{ end }}
{{- if and (eq .Values.kube.webhooks "managed") (ne .Values.mode "kube") }}{{ fail "values: kube.webhooks managed needs mode kube" }}{{ end }}
{{- if and (eq .Values.tls.source "existing") (not .Values.tls.caBundle) }}{{ fail "values: tls.source existing needs tls.caBundle" }}{{ end }}
{{- range $k, $pdb := dict "followers" .Values.followers.podDisruptionBudget "kube" .Values.kube.podDisruptionBudget "webhook" .Values.webhook.podDisruptionBudget }}
{{- if and (hasKey $pdb "minAvailable") (hasKey $pdb "maxUnavailable") (not (kindIs "invalid" $pdb.minAvailable)) (not (kindIs "invalid" $pdb.maxUnavailable)) }}{{ fail (printf "values: %s.podDisruptionBudget: minAvailable and maxUnavailable are both set (set the other to null)" $k) }}{{ end }}
{{- end }}
{{- if or (lt (int .Values.webhook.timeoutSeconds) 1) (gt (int .Values.webhook.timeoutSeconds) 30) }}{{ fail (printf "values: webhook.timeoutSeconds %v: want 1 to 30" .Values.webhook.timeoutSeconds) }}{{ end }}
{{- end }}

{{/*
The generated certificates (tls.source generate), made once per render and
shared by the templates: a dict of PEMs. The CA is read back from the
Secret arbiter-ca when it exists (an upgrade), so the webhooks' caBundle
and every replica's trust survive upgrades; the leaf certificates are new
at every upgrade (the processes reload them).
*/}}
{{- define "arbiter.generatedTLS" -}}
{{- if not (hasKey .Values "_arbiterTLS") -}}
{{- $ns := .Release.Namespace -}}
{{- $ca := dict -}}
{{- $old := lookup "v1" "Secret" $ns "arbiter-ca" -}}
{{- if and $old (hasKey ($old.data | default dict) "tls.crt") -}}
{{- $ca = buildCustomCert (index $old.data "tls.crt") (index $old.data "tls.key") -}}
{{- else -}}
{{- $ca = genCA "arbiter-ca" (int .Values.tls.caDays) -}}
{{- end -}}
{{- $days := int .Values.tls.certDays -}}
{{- $server := genSignedCert "arbiter-server" nil (list (printf "arbiter-primary.%s.svc" $ns) (printf "arbiter-primary.%s.svc.cluster.local" $ns) (printf "arbiter-decision.%s.svc" $ns) (printf "arbiter-decision.%s.svc.cluster.local" $ns)) $days $ca -}}
{{- $webhook := genSignedCert (printf "arbiter-webhook.%s.svc" $ns) .Values.tls.webhookIPAddresses (list (printf "arbiter-webhook.%s.svc" $ns) (printf "arbiter-webhook.%s.svc.cluster.local" $ns)) $days $ca -}}
{{- $client := genSignedCert "arbiter-webhook" nil nil $days $ca -}}
{{- $admin := genSignedCert "arbiter-admin" nil nil $days $ca -}}
{{- $_ := set .Values "_arbiterTLS" (dict "ca" $ca.Cert "caKey" $ca.Key "server" $server "webhook" $webhook "client" $client "admin" $admin) -}}
{{- end -}}
{{- end }}

{{/* The PEM CA bundle of the webhook configurations (generate, existing). */}}
{{- define "arbiter.caBundle" -}}
{{- if eq .Values.tls.source "generate" -}}
{{- include "arbiter.generatedTLS" . -}}
{{- .Values._arbiterTLS.ca | b64enc -}}
{{- else if eq .Values.tls.source "existing" -}}
{{- .Values.tls.caBundle -}}
{{- end -}}
{{- end }}

{{/* The server container's common part: image, env, ports, probes, resources, mounts. */}}
{{- define "arbiter.serverContainer" -}}
image: {{ include "arbiter.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
env:
  - name: POD_NAME
    valueFrom:
      fieldRef:
        fieldPath: metadata.name
  - name: POD_NAMESPACE
    valueFrom:
      fieldRef:
        fieldPath: metadata.namespace
  - name: POD_IP
    valueFrom:
      fieldRef:
        fieldPath: status.podIP
  - name: GOMEMLIMIT
    valueFrom:
      resourceFieldRef:
        resource: limits.memory
ports:
  - name: grpc
    containerPort: {{ .Values.server.grpcPort }}
    protocol: TCP
  - name: metrics
    containerPort: {{ .Values.server.metricsPort }}
    protocol: TCP
# /readyz answers 200 while the gRPC health of the DecisionService is
# SERVING: the store is loaded and, on a follower, synced and within the
# lag bound (the kubelet's grpc probes cannot speak TLS).
startupProbe:
  httpGet:
    path: /readyz
    port: metrics
  periodSeconds: 2
  failureThreshold: 150
readinessProbe:
  httpGet:
    path: /readyz
    port: metrics
  periodSeconds: 5
  failureThreshold: 2
# Alive is not ready: a replica busy catching up is not killed.
livenessProbe:
  httpGet:
    path: /healthz
    port: metrics
  periodSeconds: 10
  failureThreshold: 6
resources:
  {{- toYaml .Values.server.resources | nindent 2 }}
securityContext:
  {{- toYaml .Values.containerSecurityContext | nindent 2 }}
volumeMounts:
  - name: data
    mountPath: /var/lib/arbiter
  - name: tls
    mountPath: /etc/arbiter/tls
    readOnly: true
  - name: config
    mountPath: /etc/arbiter/config
    readOnly: true
{{- end }}

{{/* The server flags every replica takes. */}}
{{- define "arbiter.serverArgs" -}}
- serve
- --listen=0.0.0.0:{{ .Values.server.grpcPort }}
- --data=/var/lib/arbiter
- --replica-id=$(POD_NAME)
- --shutdown-timeout={{ .Values.server.shutdownTimeout }}
- --tls-cert=/etc/arbiter/tls/tls.crt
- --tls-key=/etc/arbiter/tls/tls.key
- --tls-client-ca=/etc/arbiter/tls/ca.crt
- --config=/etc/arbiter/config/arbiter.yaml
- --metrics-listen=0.0.0.0:{{ .Values.server.metricsPort }}
- --log-level={{ .Values.server.logLevel }}
{{- end }}

{{/* Pod-level settings of the server pods. */}}
{{- define "arbiter.serverPod" -}}
serviceAccountName: arbiter-server
automountServiceAccountToken: {{ eq .Values.mode "kube" }}
terminationGracePeriodSeconds: {{ .Values.server.terminationGracePeriodSeconds }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.server.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.server.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.server.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "arbiter.serverVolumes" -}}
- name: tls
  secret:
    secretName: arbiter-server-tls
- name: config
  configMap:
    name: arbiter-server-config
{{- end }}

{{/* Spread a component's pods over nodes and zones. */}}
{{- define "arbiter.spread" -}}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "arbiter.selector" . | nindent 8 }}
{{- if ne .component "webhook" }}
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "arbiter.selector" . | nindent 8 }}
{{- end }}
{{- end }}
