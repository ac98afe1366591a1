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

{{/* The image of a component: pass (list . "worker"). */}}
{{- define "toolgate.image" -}}
{{- $ctx := index . 0 -}}
{{- $tag := default $ctx.Chart.AppVersion $ctx.Values.image.tag -}}
{{- if $ctx.Values.image.registry -}}
{{ printf "%s/%s:%s" (trimSuffix "/" $ctx.Values.image.registry) (index . 1) $tag }}
{{- else -}}
{{ printf "toolgate/%s:%s" (index . 1) $tag }}
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
