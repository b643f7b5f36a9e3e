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
{{- with include "fleet.extraMeta" .Values.extraLabels }}
{{ . }}
{{- end }}
{{- end -}}

{{/*
extraLabels or extraAnnotations of the controller as YAML, values as
strings. Either a flat map (team: x) or, as in Rancher's chart, one map
per component (fleetController: {team: x}, gitjob: {...}, helmops: {...}),
of which only fleetController applies: this chart has no other component.
*/}}
{{- define "fleet.extraMeta" -}}
{{- $out := dict -}}
{{- range $k, $v := . -}}
{{- if kindIs "map" $v -}}
{{- if eq $k "fleetController" -}}
{{- range $k2, $v2 := $v -}}
{{- if not (kindIs "invalid" $v2) }}{{ $_ := set $out $k2 (toString $v2) }}{{ end -}}
{{- end -}}
{{- end -}}
{{- else if not (kindIs "invalid" $v) -}}
{{- $_ := set $out $k (toString $v) -}}
{{- end -}}
{{- end -}}
{{- if $out }}{{ toYaml $out }}{{ end -}}
{{- end -}}

{{/*
The controller container's resources as YAML. Either requests/limits as
they are or, as in Rancher's chart, per component: fleetController's
replace the defaults; the other components' (fleetCleanup, gitjob,
helmops...) have no container here and are dropped.
*/}}
{{- define "fleet.resources" -}}
{{- $r := . | default dict -}}
{{- if kindIs "map" $r.fleetController -}}
{{- $r = $r.fleetController -}}
{{- end -}}
{{- $out := dict -}}
{{- range $k := list "requests" "limits" "claims" -}}
{{- if hasKey $r $k }}{{ $_ := set $out $k (get $r $k) }}{{ end -}}
{{- end -}}
{{- if $out }}{{ toYaml $out }}{{ end -}}
{{- end -}}
