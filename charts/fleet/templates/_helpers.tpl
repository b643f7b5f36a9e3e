{{/*
Image reference with the optional registry prefix and appVersion as default
tag. global.cattle.systemDefaultRegistry takes the place of the registry the
repository names (see "fleet.repositoryPath"), so that
ghcr.io/fleetgo/fleet-agent becomes <registry>/fleetgo/fleet-agent.
*/}}
{{- define "fleet.image" -}}
{{- $img := index . 0 -}}{{- $root := index . 1 -}}
{{- $reg := $root.Values.global.cattle.systemDefaultRegistry -}}
{{- $tag := $img.tag | default $root.Chart.AppVersion -}}
{{- if $reg -}}{{ printf "%s/%s:%s" (trimSuffix "/" $reg) (include "fleet.repositoryPath" $img.repository) $tag }}{{- else -}}{{ printf "%s:%s" $img.repository $tag }}{{- end -}}
{{- end -}}

{{/*
A repository without its registry host. As in Docker's reference grammar
(and fleet-controller's privateRepoURL rule, registration.imagePath), the
first path segment names a registry only when more follow and it has a "."
or ":" or is "localhost": rancher/fleet-agent has none.
*/}}
{{- define "fleet.repositoryPath" -}}
{{- regexReplaceAll "^(localhost|[^/]*[.:][^/]*)/(.+)$" (toString .) "${2}" -}}
{{- end -}}

{{/*
global.cattle.imagePullSecrets as a pod's imagePullSecrets list (or
nothing), taking Secret names and, as Rancher's charts do, {name: x}
references; a repeated name is listed once.
*/}}
{{- define "fleet.imagePullSecrets" -}}
{{- $names := list -}}
{{- range . -}}
{{- if kindIs "map" . -}}
{{- if not .name }}{{ fail (printf "global.cattle.imagePullSecrets: %v has no name; give Secret names or {name: <secret>}" .) }}{{ end -}}
{{- $names = append $names (toString .name) -}}
{{- else if not (kindIs "invalid" .) -}}
{{- $names = append $names (toString .) -}}
{{- end -}}
{{- end -}}
{{- range uniq $names }}
- name: {{ . | quote }}
{{- end -}}
{{- end -}}

{{/*
Whether a duration value is valid: a Go duration (1.5h, 15m, 1h30m) or 0;
the regular expression "fleet.durationRegex" is shared by the checks of
validate.yaml.
*/}}
{{- define "fleet.durationRegex" -}}
^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$
{{- end -}}

{{/*
A duration value as fleet-controller should get it: "" when unset or zero
(0, 0s, 0.0h...), which Rancher's chart takes as the default, else the value
as a string.
*/}}
{{- define "fleet.duration" -}}
{{- $d := ternary "" (toString .) (kindIs "invalid" .) -}}
{{- if regexMatch "[1-9]" $d }}{{ $d }}{{ end -}}
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
