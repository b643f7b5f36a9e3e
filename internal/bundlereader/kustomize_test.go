package bundlereader

import (
	"context"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/manifest"
)

// TestKustomizeAndOverlayFallback: a fleet.yaml whose kustomize.dir has no
// kustomization or whose yaml.overlays name no directory is read as in
// Rancher Fleet instead of failing the read: the options are kept as
// written (the agent then deploys plain YAML, the chart's output
// unkustomized, without the overlay; internal/agent/deployer's
// TestRenderKustomizeDirWithoutKustomization), and each is a warning
// naming the options file. The bundle's files are those of the same
// bundle without kustomize: nothing more is picked up.
func TestKustomizeAndOverlayFallback(t *testing.T) {
	const cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"
	chart := map[string]string{
		"chart/Chart.yaml":         "apiVersion: v2\nname: c\nversion: 0.1.0\n",
		"chart/templates/cm.yaml":  cm,
		"overlays/prod/patch.yaml": "kind: Ignored\n",
	}
	cases := []struct {
		name  string
		files map[string]string
		// kustomize is the bundle's kustomize.dir ("" for none), targets
		// the customizations' ("" for none).
		kustomize string
		targets   []string
		overlays  []string
		resources []string
		warnings  []string
	}{
		{
			name: "root dir without kustomization",
			files: map[string]string{
				"fleet.yaml":             "kustomize:\n  dir: overlays/prod\n",
				"a.yaml":                 cm,
				"overlays/prod/cm.yaml":  cm,
				"notes.txt":              "x",
				".hidden/secret.yaml":    cm,
				"overlays/prod/.keep.md": "",
			},
			kustomize: "overlays/prod",
			resources: []string{"a.yaml", "notes.txt", "overlays/prod/cm.yaml"},
			warnings:  []string{`fleet.yaml: kustomize.dir "overlays/prod" has no kustomization.yaml: deployed as plain YAML, as Rancher Fleet does`},
		},
		{
			name:      "root dir that does not exist, bundle in a subdirectory",
			files:     map[string]string{"app/fleet.yaml": "kustomize:\n  dir: nope\n", "app/a.yaml": cm},
			kustomize: "nope",
			resources: []string{"a.yaml"},
			warnings:  []string{`app/fleet.yaml: kustomize.dir "nope" has no kustomization.yaml: deployed as plain YAML, as Rancher Fleet does`},
		},
		{
			name:      "chart with a dir without kustomization",
			files:     mergeFiles(chart, map[string]string{"fleet.yaml": "helm:\n  chart: chart\nkustomize:\n  dir: overlays/prod\n"}),
			kustomize: "overlays/prod",
			resources: []string{"chart/Chart.yaml", "chart/templates/cm.yaml", "overlays/prod/patch.yaml"},
			warnings:  []string{`fleet.yaml: kustomize.dir "overlays/prod" has no kustomization.yaml: the chart's output is deployed without kustomize, as Rancher Fleet does`},
		},
		{
			// The agent builds no kustomization, not even the root's,
			// as Rancher's does.
			name: "root dir without kustomization, kustomization at the root",
			files: map[string]string{
				"fleet.yaml":         "kustomize:\n  dir: nope\n",
				"kustomization.yaml": "resources: [a.yaml]\n",
				"a.yaml":             cm,
			},
			kustomize: "nope",
			resources: []string{"a.yaml", "kustomization.yaml"},
			warnings:  []string{`fleet.yaml: kustomize.dir "nope" has no kustomization.yaml: deployed as plain YAML, as Rancher Fleet does`},
		},
		{
			name: "customization dir without kustomization",
			files: map[string]string{
				"fleet.yaml":                  "targetCustomizations:\n- name: prod\n  clusterGroup: prod\n  kustomize:\n    dir: envs/prod\n- name: dev\n  clusterGroup: dev\n  kustomize:\n    dir: envs/dev\n",
				"a.yaml":                      cm,
				"envs/prod/cm.yaml":           cm,
				"envs/dev/kustomization.yaml": "resources: [../../a.yaml]\n",
			},
			targets:   []string{"envs/prod", "envs/dev"},
			resources: []string{"a.yaml", "envs/dev/kustomization.yaml", "envs/prod/cm.yaml"},
			warnings:  []string{`fleet.yaml: target "prod": kustomize.dir "envs/prod" has no kustomization.yaml: deployed as plain YAML, as Rancher Fleet does`},
		},
		{
			name: "customization dir without kustomization, valid root dir",
			files: map[string]string{
				"fleet.yaml":              "kustomize:\n  dir: base\ntargetCustomizations:\n- name: prod\n  clusterGroup: prod\n  kustomize:\n    dir: envs/prod\n",
				"base/kustomization.yaml": "resources: [cm.yaml]\n",
				"base/cm.yaml":            cm,
			},
			kustomize: "base",
			targets:   []string{"envs/prod"},
			resources: []string{"base/cm.yaml", "base/kustomization.yaml"},
			warnings:  []string{`fleet.yaml: target "prod": kustomize.dir "envs/prod" has no kustomization.yaml: deployed as plain YAML, as Rancher Fleet does`},
		},
		{
			name: "AllMatches customization dir without kustomization, another valid",
			files: map[string]string{
				"fleet.yaml":                  "targetCustomizationMode: AllMatches\ntargetCustomizations:\n- name: all\n  clusterGroup: all\n  kustomize:\n    dir: envs/all\n- name: prod\n  clusterGroup: prod\n  kustomize:\n    dir: envs/prod\n",
				"envs/all/kustomization.yaml": "resources: [cm.yaml]\n",
				"envs/all/cm.yaml":            cm,
			},
			targets:   []string{"envs/all", "envs/prod"},
			resources: []string{"envs/all/cm.yaml", "envs/all/kustomization.yaml"},
			warnings:  []string{`fleet.yaml: target "prod": kustomize.dir "envs/prod" has no kustomization.yaml: deployed as plain YAML, as Rancher Fleet does`},
		},
		{
			name:      "valid dirs need no fallback",
			files:     map[string]string{"fleet.yaml": "kustomize:\n  dir: base\n", "base/kustomization.yml": "resources: [cm.yaml]\n", "base/cm.yaml": cm},
			kustomize: "base",
			resources: []string{"base/cm.yaml", "base/kustomization.yml"},
		},
		{
			name: "overlays that do not exist",
			files: map[string]string{
				"fleet.yaml":                 "yaml:\n  overlays: [prod, nope]\ntargetCustomizations:\n- name: dev\n  clusterGroup: dev\n  yaml:\n    overlays: [dev]\n",
				"a.yaml":                     cm,
				"overlays/prod/a_patch.yaml": "metadata:\n  labels: {env: prod}\n",
			},
			targets:   []string{""},
			overlays:  []string{"prod", "nope"},
			resources: []string{"a.yaml", "overlays/prod/a_patch.yaml"},
			warnings: []string{
				`fleet.yaml: yaml.overlays: overlay "nope" not found (no files under overlays/nope/): ignored, as Rancher Fleet does`,
				`fleet.yaml: target "dev": yaml.overlays: overlay "dev" not found (no files under overlays/dev/): ignored, as Rancher Fleet does`,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeRepo(t, tc.files)
			var warnings []string
			b, err := readOne(t, dir, Options{Warn: func(m string) { warnings = append(warnings, m) }})
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if got := kustomizeDirOf(b.Spec.BundleDeploymentOptions); got != tc.kustomize {
				t.Errorf("kustomize.dir = %q, want %q", got, tc.kustomize)
			}
			var targets []string
			for _, tg := range b.Spec.Targets {
				if tg.Name != "default" {
					targets = append(targets, kustomizeDirOf(tg.BundleDeploymentOptions))
				}
			}
			if !reflect.DeepEqual(targets, tc.targets) {
				t.Errorf("targets' kustomize.dir = %q, want %q", targets, tc.targets)
			}
			var overlays []string
			if y := b.Spec.YAML; y != nil {
				overlays = y.Overlays
			}
			if !reflect.DeepEqual(overlays, tc.overlays) {
				t.Errorf("yaml.overlays = %q, want %q (kept as written)", overlays, tc.overlays)
			}
			var names []string
			for n := range resourceNames(b) {
				names = append(names, n)
			}
			sort.Strings(names)
			if !reflect.DeepEqual(names, tc.resources) {
				t.Errorf("resources = %q, want %q", names, tc.resources)
			}
			if !reflect.DeepEqual(warnings, tc.warnings) {
				t.Errorf("warnings = %q\nwant %q", warnings, tc.warnings)
			}
		})
	}
}

func kustomizeDirOf(o fleet.BundleDeploymentOptions) string {
	if o.Kustomize == nil {
		return ""
	}
	return o.Kustomize.Dir
}

func mergeFiles(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// TestKustomizeDirOutsideTheBundle: a kustomize.dir outside the bundle's
// directory (as Rancher Fleet resolves it among the bundle's files) does
// not fail the read: the Bundle keeps the option as written, holds only
// the files under its directory (a real kustomization at that path on disk,
// in the repository or beside it, is never read) and the read warns,
// naming the fleet.yaml and the dir. "/x" is "x" inside the bundle.
func TestKustomizeDirOutsideTheBundle(t *testing.T) {
	const cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"
	const leak = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: leak\n"
	outside := map[string]string{
		// Beside the repository and inside it, outside the bundle.
		"outside/kustomization.yaml":   "resources: [secret.yaml]\n",
		"outside/secret.yaml":          leak,
		"repo/base/kustomization.yaml": "resources: [secret.yaml]\n",
		"repo/base/secret.yaml":        leak,
	}
	cases := []struct {
		name      string
		files     map[string]string
		dir       string
		resources []string
		warning   string
	}{
		{
			name:      "sibling directory with a kustomization",
			files:     map[string]string{"repo/app/a.yaml": cm},
			dir:       "../base",
			resources: []string{"a.yaml"},
			warning:   `app/fleet.yaml: kustomize.dir "../base" is outside the bundle, whose files alone reach the agent: deployed as plain YAML, as Rancher Fleet does`,
		},
		{
			name:      "directory beside the repository",
			files:     map[string]string{"repo/app/a.yaml": cm},
			dir:       "../../outside",
			resources: []string{"a.yaml"},
			warning:   `app/fleet.yaml: kustomize.dir "../../outside" is outside the bundle, whose files alone reach the agent: deployed as plain YAML, as Rancher Fleet does`,
		},
		{
			name:      "dir that climbs out through a subdirectory, chart",
			files:     map[string]string{"repo/app/chart/Chart.yaml": "apiVersion: v2\nname: c\nversion: 0.1.0\n", "repo/app/chart/templates/cm.yaml": cm},
			dir:       "chart/../../base",
			resources: []string{"chart/Chart.yaml", "chart/templates/cm.yaml"},
			warning:   `app/fleet.yaml: kustomize.dir "chart/../../base" is outside the bundle, whose files alone reach the agent: the chart's output is deployed without kustomize, as Rancher Fleet does`,
		},
		{
			name:      "bundle with a kustomization of its own",
			files:     map[string]string{"repo/app/a.yaml": cm, "repo/app/dev/kustomization.yaml": "resources: [../a.yaml]\n"},
			dir:       "../base",
			resources: []string{"a.yaml", "dev/kustomization.yaml"},
			warning:   `app/fleet.yaml: kustomize.dir "../base" is outside the bundle, whose files alone reach the agent: its deployments fail, as in Rancher Fleet`,
		},
		{
			name:      "absolute dir is inside the bundle",
			files:     map[string]string{"repo/app/base/kustomization.yaml": "resources: [a.yaml]\n", "repo/app/base/a.yaml": cm},
			dir:       "/base",
			resources: []string{"base/a.yaml", "base/kustomization.yaml"},
			warning:   `app/fleet.yaml: kustomize.dir "/base" is absolute: read as "base" inside the bundle, as Rancher Fleet does`,
		},
		{
			name:      "absolute dir without a kustomization in the bundle",
			files:     map[string]string{"repo/app/a.yaml": cm},
			dir:       "/base",
			resources: []string{"a.yaml"},
			warning:   `app/fleet.yaml: kustomize.dir "/base" has no kustomization.yaml: deployed as plain YAML, as Rancher Fleet does`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files := mergeFiles(outside, tc.files)
			fy := "kustomize:\n  dir: " + tc.dir + "\n"
			if _, ok := tc.files["repo/app/chart/Chart.yaml"]; ok {
				fy += "helm:\n  chart: chart\n"
			}
			files["repo/app/fleet.yaml"] = fy
			root := writeRepo(t, files)
			var warnings []string
			bs, err := Read(context.Background(), "test", filepath.Join(root, "repo"), []string{"app"},
				Options{Warn: func(m string) { warnings = append(warnings, m) }})
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if len(bs) != 1 {
				t.Fatalf("got %d bundles, want 1", len(bs))
			}
			b := bs[0]
			if got := kustomizeDirOf(b.Spec.BundleDeploymentOptions); got != tc.dir {
				t.Errorf("kustomize.dir = %q, want %q as written", got, tc.dir)
			}
			var names []string
			for n := range resourceNames(b) {
				names = append(names, n)
			}
			sort.Strings(names)
			if !reflect.DeepEqual(names, tc.resources) {
				t.Errorf("resources = %q, want %q (nothing from outside the bundle)", names, tc.resources)
			}
			for _, r := range b.Spec.Resources {
				if content, err := manifest.Decode(r); err != nil || strings.Contains(content, "leak") {
					t.Errorf("resource %s holds a file from outside the bundle", r.Name)
				}
			}
			if !reflect.DeepEqual(warnings, []string{tc.warning}) {
				t.Errorf("warnings = %q\nwant %q", warnings, tc.warning)
			}
		})
	}
}
