package bundlereader

// kustomize.dir and yaml.overlays that name nothing in the bundle. Rancher
// Fleet deploys such a bundle: its agent uses kustomize only when
// kustomization.yaml exists at kustomize.dir (else the bundle is plain YAML,
// or a chart whose output is not kustomized), and applies only the overlay
// files it finds; this project's agent does the same. Refusing the bundle
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

// kustomizeDir is o's kustomize.dir, cleaned; "" when unset. A directory
// outside the bundle is an error.
func kustomizeDir(prefix string, o fleet.BundleDeploymentOptions) (string, error) {
	if o.Kustomize == nil || o.Kustomize.Dir == "" {
		return "", nil
	}
	d := path.Clean(filepath.ToSlash(o.Kustomize.Dir))
	if path.IsAbs(d) || d == ".." || strings.HasPrefix(d, "../") {
		return "", fmt.Errorf("%skustomize.dir %q must be inside the bundle", prefix, o.Kustomize.Dir)
	}
	return d, nil
}

// kustomizeWarnings checks that every kustomize.dir (root options and each
// target) stays inside the bundle, and reports each one without a
// kustomization. The option is kept: the agent then deploys without
// kustomize, as Rancher Fleet's does (plain YAML with its overlays, or a
// chart's output as rendered), so the deploymentID is the one Rancher
// computes too.
func kustomizeWarnings(files []file, root fleet.BundleDeploymentOptions, targets []fleet.BundleTarget) ([]string, error) {
	var warnings []string
	check := func(prefix string, o fleet.BundleDeploymentOptions, chart bool) error {
		dir, err := kustomizeDir(prefix, o)
		if err != nil || dir == "" || hasKustomization(files, dir) {
			return err
		}
		what := "deployed as plain YAML"
		if chart {
			what = "the chart's output is deployed without kustomize"
		}
		warnings = append(warnings, fmt.Sprintf("%skustomize.dir %q has no kustomization.yaml: %s, as Rancher Fleet does", prefix, o.Kustomize.Dir, what))
		return nil
	}
	if err := check("", root, usesChart(&root, nil)); err != nil {
		return nil, err
	}
	for i := range targets {
		t := &targets[i]
		if err := check(targetLabel(i, *t)+": ", t.BundleDeploymentOptions, usesChart(&root, t)); err != nil {
			return nil, err
		}
	}
	return warnings, nil
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
