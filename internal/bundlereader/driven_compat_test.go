package bundlereader

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// These tests pin the driven scan to Rancher Fleet's behaviour (fleet apply
// --driven-scan, integrationtests/cli/apply "Fleet apply driven"): a
// driven bundle is every file under its base, nested fleet.yaml
// directories included (but no fleet.yaml itself: a deliberate difference); an empty entry is skipped with a warning; an
// options file may lie outside the base.

// nestedOptionsRepo keeps each overlay's options next to the overlay, as
// fleet.yaml, which the classic scan reads as bundles of their own.
func nestedOptionsRepo(t *testing.T) string {
	t.Helper()
	return writeRepo(t, map[string]string{
		"app/base/kustomization.yaml":         "resources: [cm.yaml]\n",
		"app/base/cm.yaml":                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\n",
		"app/overlays/dev/kustomization.yaml": "resources: [../../base]\nnamePrefix: dev-\n",
		"app/overlays/dev/fleet.yaml":         "defaultNamespace: dev\nkustomize:\n  dir: overlays/dev\n",
		"app/overlays/prd/kustomization.yaml": "resources: [../../base]\nnamePrefix: prd-\n",
		"app/overlays/prd/fleet.yaml":         "defaultNamespace: prd\nkustomize:\n  dir: overlays/prd\n",
		"app/overlays/prd/.fleetignore":       "notes.yaml\n",
		"app/overlays/prd/notes.yaml":         "ignored: true\n",
		"app/overlays/.hidden/cm.yaml":        "kind: ConfigMap\n",
		// Rancher's driven_fleet_yaml_subfolder fixture: a fleet.yaml one
		// level down, and no options named.
		"helm/test/fleet.yaml": "helm:\n  chart: ./chart\n",
		"helm/test/cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: test}\n",
	})
}

func TestReadDrivenNestedFleetYAML(t *testing.T) {
	dir := nestedOptionsRepo(t)
	bs, err := ReadDriven(context.Background(), "repo", dir, []fleet.BundlePath{
		{Base: "app", Options: "overlays/dev/fleet.yaml"},
		{Base: "app", Options: "overlays/prd/fleet.yaml"},
		{Base: "helm"},
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*fleet.Bundle{}
	for _, b := range bs {
		byName[b.Name] = b
	}
	// Names as Rancher Fleet builds them: NAME/base/options-without-ext.
	if got, want := bundleNames(bs), []string{"repo-app-overlays-dev-fleet", "repo-app-overlays-prd-fleet", "repo-helm"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("bundles = %q, want %q", got, want)
	}

	tests := map[string]struct {
		bundle, namespace, kustomizeDir string
		resources                       []string
	}{
		// The overlay directories are part of the bundle although each has
		// a fleet.yaml; the options files the list names for app are not
		// resources, and .fleetignore and hidden files stay out as ever.
		"dev overlay": {
			bundle: "repo-app-overlays-dev-fleet", namespace: "dev", kustomizeDir: "overlays/dev",
			resources: []string{"base/cm.yaml", "base/kustomization.yaml", "overlays/dev/kustomization.yaml", "overlays/prd/kustomization.yaml"},
		},
		"prd overlay": {
			bundle: "repo-app-overlays-prd-fleet", namespace: "prd", kustomizeDir: "overlays/prd",
			resources: []string{"base/cm.yaml", "base/kustomization.yaml", "overlays/dev/kustomization.yaml", "overlays/prd/kustomization.yaml"},
		},
		// As Rancher's "fleet file in a subfolder and no specified config
		// path": the nested fleet.yaml is not the options, and its
		// directory is part of the bundle. Unlike Rancher (which ships it
		// as a resource), the fleet.yaml itself is left out: among raw
		// manifests the agent would refuse it as an object without a kind.
		"nested fleet.yaml, no options": {bundle: "repo-helm", resources: []string{"test/cm.yaml"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := byName[tc.bundle]
			if got := keys(resourceNames(b)); !reflect.DeepEqual(got, tc.resources) {
				t.Errorf("resources = %v, want %v", got, tc.resources)
			}
			if b.Spec.DefaultNamespace != tc.namespace {
				t.Errorf("defaultNamespace = %q, want %q", b.Spec.DefaultNamespace, tc.namespace)
			}
			gotDir := ""
			if b.Spec.Kustomize != nil {
				gotDir = b.Spec.Kustomize.Dir
			}
			if gotDir != tc.kustomizeDir {
				t.Errorf("kustomize.dir = %q, want %q", gotDir, tc.kustomizeDir)
			}
			if tc.kustomizeDir == "" && b.Spec.Helm != nil {
				t.Errorf("the nested fleet.yaml was read as options: helm %+v", b.Spec.Helm)
			}
		})
	}
}

// TestClassicScanKeepsNestedBundlesOut: the classic scan is unchanged: a
// directory with a fleet.yaml is a bundle of its own, outside its parent's.
func TestClassicScanKeepsNestedBundlesOut(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"app/cm.yaml":        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\n",
		"app/sub/fleet.yaml": "defaultNamespace: sub\n",
		"app/sub/cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: sub}\n",
	})
	bs, err := Read(context.Background(), "repo", dir, []string{"app"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := bundleNames(bs), []string{"repo-app", "repo-app-sub"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("bundles = %q, want %q", got, want)
	}
	for _, b := range bs {
		if got := keys(resourceNames(b)); !reflect.DeepEqual(got, []string{"cm.yaml"}) {
			t.Errorf("%s resources = %v, want only its own cm.yaml", b.Name, got)
		}
	}
}

// TestReadDrivenIgnoredOptionsFile: Rancher Fleet's advice for keeping
// options files out of the bundle is a .fleetignore; an ignored options
// file must still define its bundle.
func TestReadDrivenIgnoredOptionsFile(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"app/cm.yaml":      "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\n",
		"app/dev.yaml":     "defaultNamespace: dev\n",
		"app/.fleetignore": "dev.yaml\n",
	})
	bs, err := ReadDriven(context.Background(), "repo", dir, []fleet.BundlePath{{Base: "app", Options: "dev.yaml"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 1 || bs[0].Name != "repo-app-dev" || bs[0].Spec.DefaultNamespace != "dev" {
		t.Fatalf("bundles %q, options %+v", bundleNames(bs), bs[0].Spec.BundleDeploymentOptions)
	}
	if got := keys(resourceNames(bs[0])); !reflect.DeepEqual(got, []string{"cm.yaml"}) {
		t.Errorf("resources = %v", got)
	}
}

// TestReadDrivenSkipsEmptyEntries: as in Rancher Fleet, an entry without
// resources is skipped with a warning (its old Bundle is then pruned), and
// the others are still built; only a list where every entry is empty fails.
func TestReadDrivenSkipsEmptyEntries(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"app/cm.yaml":          "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\n",
		"gone/fleet.yaml":      "defaultNamespace: gone\n",
		"ignored/.fleetignore": "*.yaml\n",
		"ignored/cm.yaml":      "kind: ConfigMap\n",
	})
	var warnings []string
	opts := Options{Warn: func(msg string) { warnings = append(warnings, msg) }}
	bs, err := ReadDriven(context.Background(), "repo", dir, []fleet.BundlePath{
		{Base: "gone"}, {Base: "app"}, {Base: "ignored"},
	}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := bundleNames(bs); !reflect.DeepEqual(got, []string{"repo-app"}) {
		t.Errorf("bundles = %q, want only repo-app", got)
	}
	want := []string{"bundle gone: no resources to deploy; skipped", "bundle ignored: no resources to deploy; skipped"}
	if !reflect.DeepEqual(warnings, want) {
		t.Errorf("warnings = %q, want %q", warnings, want)
	}

	warnings = nil
	bs, err = ReadDriven(context.Background(), "repo", dir, []fleet.BundlePath{{Base: "gone"}, {Base: "ignored"}}, opts)
	if err == nil || !strings.Contains(err.Error(), "no resources to deploy in any listed bundle (gone, ignored)") || bs != nil {
		t.Errorf("all empty: bundles %q, err %v", bundleNames(bs), err)
	}
}

// TestReadDrivenWarnsNestedBases: a listed base inside another listed base
// is part of both bundles (the outer one holds every file under it); the
// read says so, so that users whose layout relied on such a directory
// staying out (it has a fleet.yaml) notice, and a .fleetignore in the
// outer base keeps them apart without touching the inner bundle.
func TestReadDrivenWarnsNestedBases(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"apps/cm.yaml":         "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: apps}\n",
		"apps/web/fleet.yaml":  "defaultNamespace: web\n",
		"apps/web/cm.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\n",
		"apps/other/cm.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\n",
		"ignored/.fleetignore": "web/\n",
		"ignored/cm.yaml":      "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ignored}\n",
		"ignored/web/cm.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: iweb}\n",
	})
	var warnings []string
	opts := Options{Warn: func(msg string) { warnings = append(warnings, msg) }}
	bs, err := ReadDriven(context.Background(), "repo", dir, []fleet.BundlePath{
		{Base: "apps"}, {Base: "apps/web"}, {Base: "ignored"}, {Base: "ignored/web"},
	}, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"bundle apps holds apps/web, listed as a bundle of its own: its files are part of both (.fleetignore it in apps to keep them apart)",
	}
	if !reflect.DeepEqual(warnings, want) {
		t.Errorf("warnings = %q, want %q", warnings, want)
	}
	res := map[string][]string{}
	for _, b := range bs {
		res[b.Name] = keys(resourceNames(b))
	}
	for name, want := range map[string][]string{
		"repo-apps":        {"cm.yaml", "other/cm.yaml", "web/cm.yaml"},
		"repo-apps-web":    {"cm.yaml"},
		"repo-ignored":     {"cm.yaml"},
		"repo-ignored-web": {"cm.yaml"},
	} {
		if !reflect.DeepEqual(res[name], want) {
			t.Errorf("%s resources = %v, want %v", name, res[name], want)
		}
	}
}

// TestReadDrivenOptionsOutsideBase: an options file may lie outside its
// base, anywhere in the repository; the bundle is named from the joined,
// cleaned path, as Rancher Fleet's filepath.Join(name, base, options)
// does. One leaving the repository, directly or through a link, is refused.
func TestReadDrivenOptionsOutsideBase(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"apps/web/cm.yaml":      "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\n",
		"shared/dev.yaml":       "defaultNamespace: dev\n",
		"shared/prd.yaml":       "defaultNamespace: prd\n",
		"shared/named.yaml":     "name: web-named\ndefaultNamespace: named\n",
		"apps/web/overlay.yaml": "defaultNamespace: own\n",
	})
	outside := filepath.Join(t.TempDir(), "secret.yaml")
	if err := os.WriteFile(outside, []byte("defaultNamespace: leaked\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "shared", "link.yaml")); err != nil {
		t.Fatal(err)
	}

	tests := map[string]struct {
		options, name, namespace string
		resources                []string
	}{
		// The base's files only: overlay.yaml is not named for this bundle,
		// so it is a resource, as any file under the base.
		"sibling directory":      {options: "../../shared/dev.yaml", name: "repo-shared-dev", namespace: "dev", resources: []string{"cm.yaml", "overlay.yaml"}},
		"not cleaned as written": {options: "./../.././shared/prd.yaml", name: "repo-shared-prd", namespace: "prd", resources: []string{"cm.yaml", "overlay.yaml"}},
		"name in options wins":   {options: "../../shared/named.yaml", name: "web-named", namespace: "named", resources: []string{"cm.yaml", "overlay.yaml"}},
		"inside base as before":  {options: "overlay.yaml", name: "repo-apps-web-overlay", namespace: "own", resources: []string{"cm.yaml"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			bs, err := ReadDriven(context.Background(), "repo", dir, []fleet.BundlePath{{Base: "apps/web", Options: tc.options}}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(bs) != 1 || bs[0].Name != tc.name || bs[0].Spec.DefaultNamespace != tc.namespace {
				t.Fatalf("bundles %q, options %+v; want %s in namespace %s", bundleNames(bs), bs[0].Spec.BundleDeploymentOptions, tc.name, tc.namespace)
			}
			if got := keys(resourceNames(bs[0])); !reflect.DeepEqual(got, tc.resources) {
				t.Errorf("resources = %v, want %v", got, tc.resources)
			}
		})
	}

	refused := map[string]struct{ options, want string }{
		"leaves the repository": {options: "../../../elsewhere.yaml", want: "is outside the repository"},
		"link out of the repo":  {options: "../../shared/link.yaml", want: "points outside the repository"},
	}
	for name, tc := range refused {
		t.Run(name, func(t *testing.T) {
			bs, err := ReadDriven(context.Background(), "repo", dir, []fleet.BundlePath{{Base: "apps/web", Options: tc.options}}, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) || bs != nil {
				t.Fatalf("bundles %q, err %v; want an error with %q", bundleNames(bs), err, tc.want)
			}
			if strings.Contains(err.Error(), "leaked") {
				t.Errorf("the error shows the outside file's content: %v", err)
			}
		})
	}
}
