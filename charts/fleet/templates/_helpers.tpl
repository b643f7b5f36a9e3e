{{/* Image reference with the optional registry prefix and appVersion as default tag. */}}
{{- define "fleet.image" -}}
{{- $img := index . 0 -}}{{- $root := index . 1 -}}
{{- $reg := $root.Values.global.cattle.systemDefaultRegistry -}}
{{- $tag := $img.tag | default $root.Chart.AppVersion -}}
{{- if $reg -}}{{ printf "%s/%s:%s" (trimSuffix "/" $reg) $img.repository $tag }}{{- else -}}{{ printf "%s:%s" $img.repository $tag }}{{- end -}}
{{- end -}}

{{- define "fleet.labels" -}}
app.kubernetes.io/name: fleet-controller
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- range $k, $v := .Values.extraLabels }}
{{ $k }}: {{ $v | quote }}
{{- end }}
{{- end -}}
