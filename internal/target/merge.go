package target

import (
	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// clearValue in a customization's defaultNamespace or namespace removes the
// base value instead of replacing it.
const clearValue = "-"

// Merge returns base with custom applied the way Fleet does: set scalars in
// custom win, "-" clears a namespace, maps are merged (deeply for Helm
// values), lists with a natural key are merged by that key with custom
// winning, other lists are appended.
func Merge(base, custom fleet.BundleDeploymentOptions) fleet.BundleDeploymentOptions {
	out := *base.DeepCopy()
	c := custom.DeepCopy()
	switch c.DefaultNamespace {
	case "":
	case clearValue:
		out.DefaultNamespace = ""
	default:
		out.DefaultNamespace = c.DefaultNamespace
	}
	switch c.TargetNamespace {
	case "":
	case clearValue:
		out.TargetNamespace = ""
	default:
		out.TargetNamespace = c.TargetNamespace
	}
	if c.ServiceAccount != "" {
		out.ServiceAccount = c.ServiceAccount
	}
	if c.ForceSyncGeneration != 0 {
		out.ForceSyncGeneration = c.ForceSyncGeneration
	}
	if c.Kustomize != nil {
		if out.Kustomize == nil {
			out.Kustomize = &fleet.KustomizeOptions{}
		}
		if c.Kustomize.Dir != "" {
			out.Kustomize.Dir = c.Kustomize.Dir
		}
	}
	if c.Helm != nil {
		if out.Helm == nil {
			out.Helm = &fleet.HelmOptions{}
		}
		mergeHelm(out.Helm, c.Helm)
	}
	if c.YAML != nil {
		if out.YAML == nil {
			out.YAML = &fleet.YAMLOptions{}
		}
		out.YAML.Overlays = append(out.YAML.Overlays, c.YAML.Overlays...)
	}
	if c.Diff != nil {
		if out.Diff == nil {
			out.Diff = &fleet.DiffOptions{}
		}
		out.Diff.ComparePatches = mergeByKey(out.Diff.ComparePatches, c.Diff.ComparePatches, func(p fleet.ComparePatch) string {
			return p.APIVersion + "|" + p.Kind + "|" + p.Namespace + "|" + p.Name
		})
	}
	if c.KeepResources {
		out.KeepResources = true
	}
	if c.DeleteCRDResources {
		out.DeleteCRDResources = true
	}
	if c.DeleteNamespace {
		out.DeleteNamespace = true
	}
	if c.IgnoreOptions != nil {
		if out.IgnoreOptions == nil {
			out.IgnoreOptions = &fleet.IgnoreOptions{}
		}
		out.IgnoreOptions.Conditions = append(out.IgnoreOptions.Conditions, c.IgnoreOptions.Conditions...)
	}
	if c.CorrectDrift != nil {
		out.CorrectDrift = c.CorrectDrift
	}
	out.NamespaceLabels = mergeStringMap(out.NamespaceLabels, c.NamespaceLabels)
	out.NamespaceAnnotations = mergeStringMap(out.NamespaceAnnotations, c.NamespaceAnnotations)
	if len(c.DownstreamResources) > 0 {
		out.DownstreamResources = mergeByKey(out.DownstreamResources, c.DownstreamResources, func(d fleet.DownstreamResource) string {
			return d.Kind + "|" + d.Name
		})
	}
	if c.CreateNamespace != nil {
		out.CreateNamespace = c.CreateNamespace
	}
	return out
}

func mergeHelm(out, c *fleet.HelmOptions) {
	if c.Chart != "" {
		out.Chart = c.Chart
	}
	if c.Repo != "" {
		out.Repo = c.Repo
	}
	if c.ReleaseName != "" {
		out.ReleaseName = c.ReleaseName
	}
	if c.Version != "" {
		out.Version = c.Version
	}
	// As in Rancher Fleet, a negative timeout turns the base's off (0: the
	// agent then does not wait for resources) for the clusters the
	// customization matches; 0 means "not set" and keeps the base's.
	switch {
	case c.TimeoutSeconds > 0:
		out.TimeoutSeconds = c.TimeoutSeconds
	case c.TimeoutSeconds < 0:
		out.TimeoutSeconds = 0
	}
	if c.MaxHistory > 0 {
		out.MaxHistory = c.MaxHistory
	}
	if c.Values != nil {
		var base map[string]interface{}
		if out.Values != nil {
			base = out.Values.Data
		}
		out.Values = &fleet.GenericMap{Data: MergeMaps(base, c.Values.Data)}
	}
	if len(c.ValuesFrom) > 0 {
		out.ValuesFrom = mergeByKey(out.ValuesFrom, c.ValuesFrom, valuesFromKey)
	}
	if len(c.ValuesFiles) > 0 {
		out.ValuesFiles = append(out.ValuesFiles, c.ValuesFiles...)
	}
	out.TemplateValues = mergeStringMap(out.TemplateValues, c.TemplateValues)
	out.Force = out.Force || c.Force
	out.TakeOwnership = out.TakeOwnership || c.TakeOwnership
	out.Atomic = out.Atomic || c.Atomic
	out.WaitForJobs = out.WaitForJobs || c.WaitForJobs
	out.DisablePreProcess = out.DisablePreProcess || c.DisablePreProcess
	out.DisableDNS = out.DisableDNS || c.DisableDNS
	out.SkipSchemaValidation = out.SkipSchemaValidation || c.SkipSchemaValidation
	out.DisableDependencyUpdate = out.DisableDependencyUpdate || c.DisableDependencyUpdate
}

func valuesFromKey(v fleet.ValuesFrom) string {
	if r := v.ConfigMapKeyRef; r != nil {
		return "configmap|" + r.Namespace + "|" + r.Name + "|" + r.Key
	}
	if r := v.SecretKeyRef; r != nil {
		return "secret|" + r.Namespace + "|" + r.Name + "|" + r.Key
	}
	return ""
}

// mergeByKey keeps base's order, replaces entries custom has a key for and
// appends custom's new entries.
func mergeByKey[T any](base, custom []T, key func(T) string) []T {
	idx := map[string]int{}
	out := append([]T(nil), base...)
	for i, b := range out {
		idx[key(b)] = i
	}
	for _, c := range custom {
		if i, ok := idx[key(c)]; ok {
			out[i] = c
			continue
		}
		idx[key(c)] = len(out)
		out = append(out, c)
	}
	return out
}

func mergeStringMap(base, custom map[string]string) map[string]string {
	if len(custom) == 0 {
		return base
	}
	out := make(map[string]string, len(base)+len(custom))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range custom {
		out[k] = v
	}
	return out
}

// MergeMaps deep-merges b over a: nested maps are merged, anything else in b
// replaces a's value. Neither input is modified.
func MergeMaps(a, b map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]interface{}); ok {
			if am, ok := out[k].(map[string]interface{}); ok {
				out[k] = MergeMaps(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}
