package drift

import (
	"encoding/json"
	"fmt"
)

// podSpecPaths are where each kind with a pod template keeps its pod spec.
var podSpecPaths = map[string][]string{
	"Pod":                   {"spec"},
	"Deployment":            {"spec", "template", "spec"},
	"StatefulSet":           {"spec", "template", "spec"},
	"DaemonSet":             {"spec", "template", "spec"},
	"ReplicaSet":            {"spec", "template", "spec"},
	"ReplicationController": {"spec", "template", "spec"},
	"Job":                   {"spec", "template", "spec"},
	"CronJob":               {"spec", "jobTemplate", "spec", "template", "spec"},
}

// maskEnvValues replaces, in the merge patch of an object of kind, each
// literal env value (env[].value) of its pod spec's containers,
// initContainers and ephemeralContainers with the placeholder "(redacted)";
// the env names, and everything else, stay.
//
// A JSON merge patch replaces lists whole, so any drift in one container
// (an image changed by hand) puts every container, with its desired env,
// into the patch that status shows (modifiedStatus[].patch, copied to the
// Bundle and the GitRepo). Env values often come from Helm values (a
// password, a token), which the manager keeps in a Secret precisely so
// that readers of Bundles cannot see them. The rest of the patch stays, to
// show what drifted; which env var changed is still told by its name.
// Kinds are matched by name only, whatever their group: masking too much
// costs nothing.
func maskEnvValues(kind string, patch []byte) ([]byte, error) {
	path, ok := podSpecPaths[kind]
	if !ok {
		return patch, nil
	}
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, fmt.Errorf("masking env values in a %s's patch: invalid JSON", kind)
	}
	var spec any = m
	for _, k := range path {
		p, ok := spec.(map[string]any)
		if !ok {
			return patch, nil
		}
		spec = p[k]
	}
	ps, ok := spec.(map[string]any)
	if !ok {
		return patch, nil
	}
	changed := false
	for _, list := range []string{"containers", "initContainers", "ephemeralContainers"} {
		containers, _ := ps[list].([]any)
		for _, c := range containers {
			cm, _ := c.(map[string]any)
			env, _ := cm["env"].([]any)
			for _, e := range env {
				em, _ := e.(map[string]any)
				if v, ok := em["value"].(string); ok && v != "" {
					em["value"] = redacted
					changed = true
				}
			}
		}
	}
	if !changed {
		return patch, nil
	}
	return json.Marshal(m)
}
