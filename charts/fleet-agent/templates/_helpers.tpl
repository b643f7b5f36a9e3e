{{/*
The agent image: global.cattle.systemDefaultRegistry takes the place of the
registry the repository names (ghcr.io/fleetgo/fleet-agent becomes
<registry>/fleetgo/fleet-agent), the tag defaults to appVersion. As in
Docker's reference grammar (and fleet-controller's privateRepoURL rule), the
first path segment names a registry only when more follow and it has a "."
or ":" or is "localhost": rancher/fleet-agent has none.
*/}}
{{- define "fleet-agent.image" -}}
{{- $img := .Values.image | default dict -}}
{{- $repo := $img.repository | default "ghcr.io/fleetgo/fleet-agent" -}}
{{- $reg := dig "cattle" "systemDefaultRegistry" "" (.Values.global | default dict) -}}
{{- $tag := $img.tag | default .Chart.AppVersion -}}
{{- if $reg -}}
{{- $repo = printf "%s/%s" (trimSuffix "/" $reg) (regexReplaceAll "^(localhost|[^/]*[.:][^/]*)/(.+)$" $repo "${2}") -}}
{{- end -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}

{{/*
global.cattle.imagePullSecrets as a pod's imagePullSecrets list (or
nothing), taking Secret names and, as Rancher's charts do, {name: x}
references; a repeated name is listed once.
*/}}
{{- define "fleet-agent.imagePullSecrets" -}}
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
A duration value as the agent should get it: "" when unset or zero (0, 0s,
0.0h...), which means the default, else the value as a string. validate.yaml
refuses what is no Go duration.
*/}}
{{- define "fleet-agent.duration" -}}
{{- $d := ternary "" (toString .) (kindIs "invalid" .) -}}
{{- if regexMatch "[1-9]" $d }}{{ $d }}{{ end -}}
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
