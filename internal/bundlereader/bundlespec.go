package bundlereader

// Assembling a bundle's spec from fleet.yaml and the reader's options:
// chart properties propagated to customizations, values files, Helm
// credentials by path, command-line/GitRepo options, targets and labels
// (kustomize.go: kustomize.dir and overlays). read.go reads the bundles
// with these.

import (
	"fmt"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// propagateHelm copies the root chart, repo and version into customizations
// that set helm but not those fields, as Fleet does.
func propagateHelm(root *fleet.HelmOptions, targets []fleet.BundleTarget) {
	if root == nil {
		return
	}
	for i := range targets {
		h := targets[i].Helm
		if h == nil {
			continue
		}
		if h.Chart == "" {
			h.Chart = root.Chart
		}
		if h.Repo == "" {
			h.Repo = root.Repo
		}
		if h.Version == "" {
			h.Version = root.Version
		}
	}
}

// authForPath picks the credentials of a bundle directory (relative to the
// root) from helmSecretNameForPaths / --helm-credentials-by-path-file as
// Rancher Fleet does: the entry of that exact path, else the first key in
// lexical order that matches it as a filepath.Match pattern (Fleet's
// examples use keys such as apps/*_charts). Keys are cleaned the way
// paths are ("./a/" and "/a" are "a").
func authForPath(byPath map[string]HelmAuth, rel string) (HelmAuth, bool, error) {
	if len(byPath) == 0 {
		return HelmAuth{}, false, nil
	}
	clean := func(k string) string {
		k = strings.TrimLeft(filepath.ToSlash(k), "/")
		if k == "" {
			return "."
		}
		return path.Clean(k)
	}
	keys := make([]string, 0, len(byPath))
	for k, a := range byPath {
		if clean(k) == rel {
			return a, true, nil
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ok, err := path.Match(clean(k), rel)
		if err != nil {
			return HelmAuth{}, false, fmt.Errorf("helm credentials by path: invalid pattern %q: %w", k, err)
		}
		if ok {
			return byPath[k], true, nil
		}
	}
	return HelmAuth{}, false, nil
}

// mergeValuesFiles reads helm.valuesFiles (relative to the bundle) and, as
// Rancher Fleet does, merges each in order over helm.values: the files
// win, the last one most. The files inside the bundle are added to drop
// (names relative to the bundle), since they are no resources.
func mergeValuesFiles(fs *fsys, dir, prefix string, h *fleet.HelmOptions, drop map[string]bool) error {
	if h == nil || len(h.ValuesFiles) == 0 {
		return nil
	}
	merged := map[string]interface{}{}
	if h.Values != nil {
		merged = mergeMaps(merged, h.Values.Data)
	}
	for _, vf := range h.ValuesFiles {
		p := filepath.Join(dir, filepath.FromSlash(vf))
		if filepath.IsAbs(vf) || !fs.inside(p) {
			return fmt.Errorf("%shelm.valuesFiles: %q is outside the repository", prefix, vf)
		}
		data, err := fs.readFile(p)
		if err != nil {
			return fmt.Errorf("%shelm.valuesFiles: %w", prefix, err)
		}
		values := map[string]interface{}{}
		if err := yaml.Unmarshal(data, &values); err != nil {
			return fmt.Errorf("%shelm.valuesFiles: %s: invalid YAML: %w", prefix, vf, err)
		}
		merged = mergeMaps(merged, values)
		if r := path.Clean(filepath.ToSlash(vf)); r != ".." && !strings.HasPrefix(r, "../") {
			drop[r] = true
		}
	}
	h.Values = &fleet.GenericMap{Data: merged}
	h.ValuesFiles = nil
	return nil
}

// mergeMaps merges b into a recursively; b wins.
func mergeMaps(a, b map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]interface{}); ok {
			if am, ok := out[k].(map[string]interface{}); ok {
				out[k] = mergeMaps(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// applyOptions applies the command-line/GitRepo options over fleet.yaml.
func applyOptions(spec *fleet.BundleSpec, o *Options) {
	if o.ServiceAccount != "" {
		spec.ServiceAccount = o.ServiceAccount
	}
	if o.TargetNamespace != "" {
		spec.TargetNamespace = o.TargetNamespace
	}
	spec.Paused = spec.Paused || o.Paused
	spec.KeepResources = spec.KeepResources || o.KeepResources
	spec.DeleteNamespace = spec.DeleteNamespace || o.DeleteNamespace
	if o.CorrectDrift != nil && o.CorrectDrift.Enabled {
		cd := *o.CorrectDrift
		spec.CorrectDrift = &cd
	}
	// Always the GitRepo's value, 0 included, as in Rancher Fleet: it feeds
	// the deploymentID, which must match Rancher's for the same repository.
	spec.ForceSyncGeneration = o.SyncGeneration
}

// assembleTargets builds targets and restrictions as Fleet's reader does
// (reference §3.1). As in Rancher Fleet, overrideTargets replaces the
// GitRepo's targets whenever fleet.yaml sets it, also to an empty list
// (override non-nil): the bundle then has no restrictions and, without
// targets of its own, the default target.
func assembleTargets(targets []fleet.BundleTarget, override []GitTarget, o *Options) ([]fleet.BundleTarget, []fleet.BundleTargetRestriction) {
	var restrictions []fleet.BundleTargetRestriction
	if override != nil {
		for _, t := range override {
			targets = append(targets, fleet.BundleTarget{Name: t.Name, ClusterName: t.ClusterName, ClusterSelector: t.ClusterSelector,
				ClusterGroup: t.ClusterGroup, ClusterGroupSelector: t.ClusterGroupSelector})
			restrictions = append(restrictions, fleet.BundleTargetRestriction{Name: t.Name, ClusterName: t.ClusterName, ClusterSelector: t.ClusterSelector,
				ClusterGroup: t.ClusterGroup, ClusterGroupSelector: t.ClusterGroupSelector})
		}
	} else {
		for _, t := range o.Targets {
			targets = append(targets, *t.DeepCopy())
		}
		for _, r := range o.TargetRestrictions {
			restrictions = append(restrictions, *r.DeepCopy())
		}
	}
	if len(targets) == 0 {
		targets = []fleet.BundleTarget{{Name: "default", ClusterGroup: "default"}}
	}
	for i := range targets {
		if targets[i].Name == "" {
			targets[i].Name = fmt.Sprintf("target%03d", i)
		}
	}
	return targets, restrictions
}

func mergeLabels(a, b map[string]string) map[string]string {
	if len(a) == 0 && len(b) == 0 {
		return nil
	}
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}
