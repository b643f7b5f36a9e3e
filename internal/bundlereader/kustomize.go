package bundlereader

// kustomize.dir and yaml.overlays that name nothing in the bundle, or a
// kustomize.dir outside it. Rancher Fleet deploys such a bundle: its agent
// uses kustomize only when kustomization.yaml exists at kustomize.dir among
// the bundle's files (else the bundle is plain YAML, or a chart whose
// output is not kustomized), and applies only the overlay files it finds;
// this project's agent does the same. Refusing the bundle
// would fail the whole GitRepo (a read is all or nothing), so a fleet.yaml
// written for Rancher reads the same here, and each such option is
// reported as a warning instead of silently.

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/manifest"
)

func hasKustomization(files []file, dir string) bool {
	for _, n := range manifest.KustomizationNames {
		if hasFile(files, path.Join(dir, n)) {
			return true
		}
	}
	return false
}

// kustomizeDir is o's kustomize.dir as Rancher Fleet's agent resolves it
// among the bundle's files (its DetermineStyle joins and cleans the path,
// then drops a leading "/"): "" when unset, "." for the bundle root, "x"
// for "/x" or "x/". outside reports a dir that cleans to ".." or "../…",
// which names no file of the bundle. Nothing is ever read at that path:
// the bundle holds only the files under its own directory.
func kustomizeDir(o fleet.BundleDeploymentOptions) (dir string, outside bool) {
	if o.Kustomize == nil || o.Kustomize.Dir == "" {
		return "", false
	}
	d := strings.TrimPrefix(path.Clean(filepath.ToSlash(o.Kustomize.Dir)), "/")
	if d == "" {
		d = "."
	}
	return d, d == ".." || strings.HasPrefix(d, "../")
}

// anyKustomization tells whether any file of the bundle is a kustomization
// (by the suffix of its name, as Rancher's agent checks before it runs
// kustomize at all).
func anyKustomization(files []file) bool {
	for _, f := range files {
		for _, n := range manifest.KustomizationNames {
			if strings.HasSuffix(f.name, n) {
				return true
			}
		}
	}
	return false
}

// kustomizeWarnings reports every kustomize.dir (root options and each
// target) that the agent will not build: one without a kustomization, one
// outside the bundle, and an absolute one (read inside the bundle). None
// fails the read, as none fails Rancher Fleet's: the option is kept as
// written, so the deploymentID is the one Rancher computes too, and the
// agent deploys what Rancher's does (plain YAML with its overlays, or a
// chart's output as rendered; a dir outside a bundle that holds a
// kustomization fails its deployments, on the agent only).
func kustomizeWarnings(files []file, root fleet.BundleDeploymentOptions, targets []fleet.BundleTarget) []string {
	var warnings []string
	check := func(prefix string, o fleet.BundleDeploymentOptions, chart bool) {
		if w := kustomizeWarning(files, o, chart); w != "" {
			warnings = append(warnings, prefix+w)
		}
	}
	check("", root, usesChart(&root, nil))
	for i := range targets {
		t := &targets[i]
		check(targetLabel(i, *t)+": ", t.BundleDeploymentOptions, usesChart(&root, t))
	}
	return warnings
}

// kustomizeWarning is the warning for o's kustomize.dir, "" for none.
func kustomizeWarning(files []file, o fleet.BundleDeploymentOptions, chart bool) string {
	dir, outside := kustomizeDir(o)
	if dir == "" {
		return ""
	}
	what := "deployed as plain YAML"
	if chart {
		what = "the chart's output is deployed without kustomize"
	}
	written := o.Kustomize.Dir
	switch {
	case outside && anyKustomization(files):
		return fmt.Sprintf("kustomize.dir %q is outside the bundle, whose files alone reach the agent: "+
			"its deployments fail, as in Rancher Fleet", written)
	case outside:
		return fmt.Sprintf("kustomize.dir %q is outside the bundle, whose files alone reach the agent: "+
			"%s, as Rancher Fleet does", written, what)
	case hasKustomization(files, dir):
		if path.IsAbs(path.Clean(filepath.ToSlash(written))) {
			return fmt.Sprintf("kustomize.dir %q is absolute: read as %q inside the bundle, as Rancher Fleet does", written, dir)
		}
		return ""
	}
	return fmt.Sprintf("kustomize.dir %q has no kustomization.yaml: %s, as Rancher Fleet does", written, what)
}

// usesChart tells whether the root options, merged with t if any, deploy a
// chart (helm.chart is propagated into targets that set helm).
func usesChart(root *fleet.BundleDeploymentOptions, t *fleet.BundleTarget) bool {
	if t != nil && t.Helm != nil && t.Helm.Chart != "" {
		return true
	}
	return root.Helm != nil && root.Helm.Chart != ""
}

// overlayWarnings reports each yaml.overlays name without files under
// overlays/<name>/: as in Rancher Fleet it is kept and applies nothing.
func overlayWarnings(files []file, root fleet.BundleDeploymentOptions, targets []fleet.BundleTarget) []string {
	var warnings []string
	check := func(prefix string, o fleet.BundleDeploymentOptions) {
		if o.YAML == nil {
			return
		}
		for _, ov := range o.YAML.Overlays {
			dir := path.Join("overlays", ov) + "/"
			found := false
			for _, f := range files {
				found = found || strings.HasPrefix(f.name, dir)
			}
			if !found {
				warnings = append(warnings, fmt.Sprintf("%syaml.overlays: overlay %q not found (no files under overlays/%s/): ignored, as Rancher Fleet does", prefix, ov, ov))
			}
		}
	}
	check("", root)
	for i, t := range targets {
		check(targetLabel(i, t)+": ", t.BundleDeploymentOptions)
	}
	return warnings
}
