{{- define "fleet-agent.image" -}}
{{- $reg := .Values.global.cattle.systemDefaultRegistry -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if $reg -}}{{ printf "%s/%s:%s" (trimSuffix "/" $reg) .Values.image.repository $tag }}{{- else -}}{{ printf "%s:%s" .Values.image.repository $tag }}{{- end -}}
{{- end -}}

{{- define "fleet-agent.labels" -}}
app: fleet-agent
app.kubernetes.io/name: fleet-agent
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/*
The manager's CA as PEM. apiServerCA may be PEM or, as copied from a
kubeconfig's certificate-authority-data, base64 of PEM.
*/}}
{{- define "fleet-agent.apiServerCA" -}}
{{- $ca := .Values.apiServerCA | default "" | trim -}}
{{- if and $ca (not (contains "-----BEGIN" $ca)) -}}{{- $ca = b64dec $ca -}}{{- end -}}
{{- $ca -}}
{{- end -}}
