{{/* The chart's name. */}}
{{- define "toolgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the prefix of every object. */}}
{{- define "toolgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "toolgate.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "toolgate.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "toolgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "toolgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: toolgate
{{- end }}

{{/* Selector labels of one component (worker, approver): pass (list . "worker"). */}}
{{- define "toolgate.selector" -}}
{{- $ctx := index . 0 -}}
app.kubernetes.io/name: {{ include "toolgate.name" $ctx }}
app.kubernetes.io/instance: {{ $ctx.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* The image of a component: pass (list . "worker"). A digest in
image.digests pins it (repository@sha256:...), the tag kept for people. */}}
{{- define "toolgate.image" -}}
{{- $ctx := index . 0 -}}
{{- $name := index . 1 -}}
{{- $tag := default $ctx.Chart.AppVersion $ctx.Values.image.tag -}}
{{- $repo := printf "toolgate/%s" $name -}}
{{- if $ctx.Values.image.registry -}}
{{- $repo = printf "%s/%s" (trimSuffix "/" $ctx.Values.image.registry) $name -}}
{{- end -}}
{{- $digest := get (default dict $ctx.Values.image.digests) $name -}}
{{- if $digest -}}
{{ printf "%s:%s@%s" $repo $tag $digest }}
{{- else -}}
{{ printf "%s:%s" $repo $tag }}
{{- end }}
{{- end }}

{{/* Scheduling of a component's pods: priorityClassName and
topologySpreadConstraints (each given the component's selector when it
names none). Pass (list . "worker" .Values.worker). */}}
{{- define "toolgate.podScheduling" -}}
{{- $ctx := index . 0 -}}
{{- $component := index . 1 -}}
{{- $v := index . 2 -}}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $v.topologySpreadConstraints }}
topologySpreadConstraints:
{{- range . }}
{{- $c := deepCopy . }}
{{- if not $c.labelSelector }}
{{- $_ := set $c "labelSelector" (dict "matchLabels" (include "toolgate.selector" (list $ctx $component) | fromYaml)) }}
{{- end }}
  - {{- toYaml $c | nindent 4 }}
{{- end }}
{{- end }}
{{- end }}

{{/* The NATS URL the services connect to. */}}
{{- define "toolgate.natsURL" -}}
{{- if and .Values.nats.enabled (or (not .Values.nats.url) (eq .Values.nats.url "nats://nats:4222")) -}}
{{ printf "nats://%s-nats:4222" .Release.Name }}
{{- else -}}
{{ required "nats.url: the NATS cluster's client URL (or nats.enabled: true)" .Values.nats.url }}
{{- end }}
{{- end }}

{{/* The service account's name. */}}
{{- define "toolgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ default (include "toolgate.fullname" .) .Values.serviceAccount.name }}
{{- else -}}
{{ default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The ConfigMap of the policy, empty when there is none. */}}
{{- define "toolgate.policyConfigMap" -}}
{{- if .Values.policy.existingConfigMap -}}
{{ .Values.policy.existingConfigMap }}
{{- else if .Values.policy.inline -}}
{{ include "toolgate.fullname" . }}-policy
{{- end }}
{{- end }}

{{/* The container securityContext both services share: nothing added,
everything dropped, a read-only root. */}}
{{- define "toolgate.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
{{- end }}

{{/* OTEL_* environment. */}}
{{- define "toolgate.otelEnv" -}}
{{- range $k, $v := .Values.otel }}
- name: {{ $k }}
  value: {{ $v | quote }}
{{- end }}
{{- end }}

{{/* The workspace's claim: empty for a pod's own emptyDir (mode perPod).
Mode shared needs a ReadWriteMany claim (existingClaim, or the one the
chart makes); perPod refuses more than one worker, whose calls of one agent
would land on different workspaces. */}}
{{- define "toolgate.workspaceClaim" -}}
{{- $w := .Values.worker -}}
{{- $ws := $w.workspace -}}
{{- if eq $ws.mode "shared" -}}
{{- if $ws.existingClaim -}}
{{ $ws.existingClaim }}
{{- else if $ws.claim.create -}}
{{ include "toolgate.fullname" . }}-workspace
{{- else -}}
{{ fail "worker.workspace.mode shared: set worker.workspace.existingClaim (a ReadWriteMany claim) or worker.workspace.claim.create" }}
{{- end -}}
{{- else if or (gt (int $w.replicas) 1) $w.autoscaling.enabled $w.autoscaling.keda.enabled -}}
{{ fail "worker.workspace.mode perPod with more than one worker: consecutive calls of one agent would land on different workspaces; use mode shared (a ReadWriteMany volume every worker mounts) or one worker" }}
{{- end -}}
{{- end }}

{{/* The NATS server pods' selector, for the NetworkPolicies. */}}
{{- define "toolgate.natsPeer" -}}
{{- $np := .Values.networkPolicy -}}
{{- if $np.nats -}}
{{ toYaml $np.nats }}
{{- else if .Values.nats.enabled -}}
- podSelector:
    matchLabels:
      app.kubernetes.io/name: nats
      app.kubernetes.io/instance: {{ .Release.Name }}
{{- else -}}
{{ fail "networkPolicy.nats: the peers (podSelector, namespaceSelector or ipBlock) of the NATS cluster at nats.url" }}
{{- end -}}
{{- end }}
