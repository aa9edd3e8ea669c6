{{/* The release's full name: the release name, with the chart's name unless it holds it. */}}
{{- define "a2a-gateway.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels every resource of the release carries. */}}
{{- define "a2a-gateway.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The gateway pods' selector (component keeps the Redis pods out of it). */}}
{{- define "a2a-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end -}}

{{/* The in-release Redis pod's selector. */}}
{{- define "a2a-gateway.redisSelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: redis
{{- end -}}

{{- define "a2a-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "a2a-gateway.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "a2a-gateway.redisName" -}}
{{- printf "%s-redis" (include "a2a-gateway.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The Secret and key holding the in-release Redis password. */}}
{{- define "a2a-gateway.redisSecretName" -}}
{{- default (include "a2a-gateway.redisName" .) .Values.redis.auth.existingSecret -}}
{{- end -}}

{{- define "a2a-gateway.redisSecretKey" -}}
{{- if .Values.redis.auth.existingSecret -}}
{{- .Values.redis.auth.existingSecretKey -}}
{{- else -}}
redis-password
{{- end -}}
{{- end -}}

{{/* Fails on values that would put a credential into the rendered manifests, or that
contradict each other. */}}
{{- define "a2a-gateway.checkValues" -}}
{{- $credentials := `^[a-z0-9+.-]+://[^/@]*:[^/@]*@` -}}
{{- range $name, $value := .Values.settings -}}
{{- if and (hasKey $.Values.secretKeys $name) (index $.Values.secretKeys $name) -}}
{{- fail (printf "%s is in both settings and secretKeys: keep one" $name) -}}
{{- end -}}
{{- if regexMatch $credentials (toString $value) -}}
{{- fail (printf "settings.%s holds a password: put the URL into a Secret (secretKeys)" $name) -}}
{{- end -}}
{{- end -}}
{{- if hasKey .Values.settings "A2A_GATEWAY_REDIS_URL" -}}
{{- fail "set the Redis URL with redis.enabled, redis.url or redis.existingSecret, not in settings" -}}
{{- end -}}
{{- if regexMatch $credentials .Values.redis.url -}}
{{- fail "redis.url holds a password: put the URL into a Secret (redis.existingSecret)" -}}
{{- end -}}
{{- if and .Values.redis.enabled (or .Values.redis.url .Values.redis.existingSecret) -}}
{{- fail "redis.enabled runs a server in the release; redis.url and redis.existingSecret name an external one: set one of them" -}}
{{- end -}}
{{- if and .Values.redis.url .Values.redis.existingSecret -}}
{{- fail "redis.url and redis.existingSecret both name the external server: set one" -}}
{{- end -}}
{{- end -}}

{{/* The gateway's variables (the serving container and the migrate init container). A
variable may name only those defined before it in $(NAME), so REDIS_PASSWORD comes first. */}}
{{- define "a2a-gateway.env" -}}
{{- if .Values.redis.enabled }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "a2a-gateway.redisSecretName" . }}
      key: {{ include "a2a-gateway.redisSecretKey" . }}
- name: A2A_GATEWAY_REDIS_URL
  value: {{ printf "redis://:$(REDIS_PASSWORD)@%s:6379/0" (include "a2a-gateway.redisName" .) | quote }}
{{- else if .Values.redis.existingSecret }}
- name: A2A_GATEWAY_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.existingSecret }}
      key: {{ .Values.redis.existingSecretKey }}
{{- else if .Values.redis.url }}
- name: A2A_GATEWAY_REDIS_URL
  value: {{ .Values.redis.url | quote }}
{{- end }}
{{- range $name, $key := .Values.secretKeys }}
{{- if $key }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ $.Values.existingSecret }}
      key: {{ $key }}
{{- end }}
{{- end }}
{{- range $name, $value := .Values.settings }}
{{- if ne (toString $value) "" }}
- name: {{ $name }}
  value: {{ toString $value | quote }}
{{- end }}
{{- end }}
- name: A2A_GATEWAY_REPLICA_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: A2A_GATEWAY_ENDPOINTS_FILE
  value: /etc/a2a-gateway/endpoints.yaml
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "a2a-gateway.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}
