package bundlereader

import (
	"context"
	"reflect"
	"strings"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// drivenRepo is the layout Fleet's docs use for a driven scan: one kustomize
// directory deployed twice with an options file per environment, a plain
// manifest directory with its own fleet.yaml, and one without any.
func drivenRepo(t *testing.T) string {
	t.Helper()
	return writeRepo(t, map[string]string{
		"driven/kustomize/base/kustomization.yaml":          "resources: [cm.yaml]\n",
		"driven/kustomize/base/cm.yaml":                     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\n",
		"driven/kustomize/overlays/dev/kustomization.yaml":  "resources: [../../base]\nnamePrefix: dev-\n",
		"driven/kustomize/overlays/test/kustomization.yaml": "resources: [../../base]\nnamePrefix: test-\n",
		"driven/kustomize/dev.yaml":                         "defaultNamespace: dev\nkustomize:\n  dir: overlays/dev\n",
		"driven/kustomize/test.yaml":                        "defaultNamespace: test\nkustomize:\n  dir: overlays/test\nlabels:\n  env: test\n",
		"driven/simple/fleet.yaml":                          "defaultNamespace: simple\n",
		"driven/simple/cm.yaml":                             "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: simple}\n",
		"driven/simple/sub/fleet.yaml":                      "{}\n",
		"driven/simple/sub/cm.yaml":                         "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: sub}\n",
		"driven/bare/cm.yaml":                               "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bare}\n",
		"driven/kustomize/broken.yaml":                      "defaultNamespace: [\n",
		"empty/.fleetignore":                                "*\n",
	})
}

func TestReadDriven(t *testing.T) {
	dir := drivenRepo(t)
	bs, err := ReadDriven(context.Background(), "repo", dir, []fleet.BundlePath{
		{Base: "driven/kustomize", Options: "dev.yaml"},
		{Base: "driven/kustomize", Options: "test.yaml"},
		{Base: "driven/simple"},
		{Base: "driven/bare/"},
	}, Options{Namespace: "ws", Labels: map[string]string{fleet.RepoLabel: "repo"}})
	if err != nil {
		t.Fatal(err)
	}
	got := bundleNames(bs)
	want := []string{"repo-driven-bare", "repo-driven-kustomize-dev", "repo-driven-kustomize-test", "repo-driven-simple"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("bundles = %q, want %q", got, want)
	}
	byName := map[string]*fleet.Bundle{}
	for _, b := range bs {
		byName[b.Name] = b
		if b.Namespace != "ws" || b.Labels[fleet.RepoLabel] != "repo" {
			t.Errorf("%s: namespace %q, labels %v", b.Name, b.Namespace, b.Labels)
		}
	}

	dev, test := byName["repo-driven-kustomize-dev"], byName["repo-driven-kustomize-test"]
	if dev.Spec.DefaultNamespace != "dev" || dev.Spec.Kustomize == nil || dev.Spec.Kustomize.Dir != "overlays/dev" {
		t.Errorf("dev options not from dev.yaml: %+v", dev.Spec.BundleDeploymentOptions)
	}
	if test.Spec.DefaultNamespace != "test" || test.Spec.Kustomize == nil || test.Spec.Kustomize.Dir != "overlays/test" || test.Labels["env"] != "test" {
		t.Errorf("test options not from test.yaml: %+v, labels %v", test.Spec.BundleDeploymentOptions, test.Labels)
	}
	// Each overlay bundle carries the whole directory except the options
	// files listed for it; a file no entry names stays a resource.
	devRes := keys(resourceNames(dev))
	wantDev := []string{"base/cm.yaml", "base/kustomization.yaml", "broken.yaml", "overlays/dev/kustomization.yaml", "overlays/test/kustomization.yaml"}
	if !reflect.DeepEqual(devRes, wantDev) {
		t.Errorf("dev resources = %v, want %v", devRes, wantDev)
	}

	// The default options file is fleet.yaml. Unlike a scan, and as in
	// Rancher Fleet, a sub-directory with a fleet.yaml of its own is part of
	// the bundle; that fleet.yaml is not a resource (Rancher ships it).
	simple := byName["repo-driven-simple"]
	if simple.Spec.DefaultNamespace != "simple" {
		t.Errorf("simple: fleet.yaml not read: %+v", simple.Spec.BundleDeploymentOptions)
	}
	if got, want := keys(resourceNames(simple)), []string{"cm.yaml", "sub/cm.yaml"}; !reflect.DeepEqual(got, want) {
		t.Errorf("simple resources = %v, want %v", got, want)
	}
	if got := keys(resourceNames(byName["repo-driven-bare"])); !reflect.DeepEqual(got, []string{"cm.yaml"}) {
		t.Errorf("bare resources = %v", got)
	}
}

// TestReadDrivenNames: a name in the options file wins, and two
// entries that would be one bundle are refused rather than one overwriting
// the other.
func TestReadDrivenNames(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"app/cm.yaml":  "kind: ConfigMap\n",
		"app/one.yaml": "name: shared\n",
		"app/two.yml":  "name: shared\n",
		"app/own.yaml": "name: mine\n",
	})
	bs, err := ReadDriven(context.Background(), "repo", dir, []fleet.BundlePath{{Base: "app", Options: "own.yaml"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := bundleNames(bs); !reflect.DeepEqual(got, []string{"mine"}) {
		t.Errorf("bundles = %q, want the options file's name", got)
	}
	_, err = ReadDriven(context.Background(), "repo", dir, []fleet.BundlePath{{Base: "app", Options: "one.yaml"}, {Base: "app", Options: "two.yml"}}, Options{})
	if err == nil || !strings.Contains(err.Error(), `both named "shared"`) {
		t.Errorf("duplicate names: err = %v", err)
	}
}

func TestReadDrivenErrors(t *testing.T) {
	dir := drivenRepo(t)
	tests := map[string]struct {
		bundles []fleet.BundlePath
		want    string
	}{
		"nothing listed":        {nil, "no bundles listed"},
		"missing base":          {[]fleet.BundlePath{{Base: "nope"}}, `bundle base "nope" does not exist`},
		"base is a file":        {[]fleet.BundlePath{{Base: "driven/bare/cm.yaml"}}, "is not a directory"},
		"absolute base":         {[]fleet.BundlePath{{Base: "/etc"}}, "must be relative"},
		"base escapes the repo": {[]fleet.BundlePath{{Base: "../.."}}, "outside the repository"},
		"missing options file":  {[]fleet.BundlePath{{Base: "driven/kustomize", Options: "prod.yaml"}}, "options file driven/kustomize/prod.yaml does not exist"},
		"options outside repo":  {[]fleet.BundlePath{{Base: "driven/kustomize", Options: "../../../x.yaml"}}, `options file "../../../x.yaml" is outside the repository`},
		"absolute options":      {[]fleet.BundlePath{{Base: "driven/kustomize", Options: "/etc/passwd"}}, "must be relative to the bundle directory"},
		"options is a dir":      {[]fleet.BundlePath{{Base: "driven/kustomize", Options: "overlays/dev"}}, "is a directory"},
		"options is the base":   {[]fleet.BundlePath{{Base: "driven/kustomize", Options: "."}}, "is a directory"},
		"bad options file":      {[]fleet.BundlePath{{Base: "driven/kustomize", Options: "broken.yaml"}}, "driven/kustomize/broken.yaml"},
		"every entry empty":     {[]fleet.BundlePath{{Base: "empty"}}, "no resources to deploy in any listed bundle (empty)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			bs, err := ReadDriven(context.Background(), "repo", dir, tc.bundles, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if bs != nil {
				t.Errorf("a failed read returned %d bundles", len(bs))
			}
		})
	}
}
