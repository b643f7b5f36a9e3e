package bundlereader

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/target"
	"github.com/fleetgo/fleet/internal/testenv/helmrepo"
)

// TestTargetNamespaceForcedOnEveryTarget: a GitRepo's targetNamespace
// (fleet apply --target-namespace) forces every resource into one
// namespace, whatever namespace a fleet.yaml customization sets or clears
// with "-": what each cluster gets is Merge(bundle options, its target).
func TestTargetNamespaceForcedOnEveryTarget(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
		"fleet.yaml": `namespace: mine
targetCustomizations:
- name: other
  clusterGroup: a
  namespace: elsewhere
- name: cleared
  clusterGroup: b
  namespace: "-"
- name: plain
  clusterGroup: c
`,
	})
	b, err := readOne(t, dir, Options{TargetNamespace: "forced", Targets: []fleet.BundleTarget{{Name: "repo", ClusterGroup: "all"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Spec.Targets) != 4 {
		t.Fatalf("targets %+v", b.Spec.Targets)
	}
	for _, tg := range b.Spec.Targets {
		if got := target.Merge(b.Spec.BundleDeploymentOptions, tg.BundleDeploymentOptions).TargetNamespace; got != "forced" {
			t.Errorf("target %s deploys into %q, want the forced namespace", tg.Name, got)
		}
	}

	// Without a forced namespace the customizations still apply.
	b, err = readOne(t, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := target.Merge(b.Spec.BundleDeploymentOptions, b.Spec.Targets[1].BundleDeploymentOptions).TargetNamespace; got != "" {
		t.Errorf(`"-" customization: namespace %q, want none`, got)
	}
}

// TestValuesFilesWinOverValues: as in Rancher Fleet, helm.valuesFiles are
// merged in order over the inline values (the files win) and are no
// resources of the bundle, at the root and per customization.
func TestValuesFilesWinOverValues(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
		"fleet.yaml": `helm:
  values: {replicas: 1, image: {tag: a, pull: Always}, inline: kept}
  valuesFiles: [prod.yaml, ./values/last.yaml]
targetCustomizations:
- name: edge
  clusterGroup: edge
  helm:
    values: {replicas: 5}
    valuesFiles: [values/edge.yaml]
`,
		"prod.yaml":        "replicas: 3\nimage: {tag: b}\nlast: prod\n",
		"values/last.yaml": "last: last\n",
		"values/edge.yaml": "replicas: 7\n",
	})
	b, err := readOne(t, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	v := b.Spec.Helm.Values.Data
	got := fmt.Sprintf("%v %v %v %v", v["replicas"], v["image"], v["inline"], v["last"])
	if want := "3 map[pull:Always tag:b] kept last"; got != want {
		t.Errorf("values %v, want %s (replicas, image, inline, last)", v, want)
	}
	if r := b.Spec.Targets[0].Helm.Values.Data["replicas"]; fmt.Sprint(r) != "7" {
		t.Errorf("customization replicas %v, want 7 from its values file", r)
	}
	res := resourceNames(b)
	for _, f := range []string{"prod.yaml", "values/last.yaml", "values/edge.yaml"} {
		if _, ok := res[f]; ok {
			t.Errorf("values file %s is a resource: %v", f, res)
		}
	}
	if _, ok := res["cm.yaml"]; !ok {
		t.Errorf("cm.yaml missing: %v", res)
	}
}

// TestPathsWithLeadingSlash: a GitRepo path "/app" is "app", as in Rancher
// Fleet, and "/" is the root.
func TestPathsWithLeadingSlash(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
		"cm.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: root}\n",
	})
	read := func(paths ...string) []*fleet.Bundle {
		t.Helper()
		bs, err := Read(context.Background(), "test", dir, paths, Options{})
		if err != nil {
			t.Fatalf("paths %q: %v", paths, err)
		}
		return bs
	}
	if a, b := read("/app"), read("app"); !reflect.DeepEqual(a, b) {
		t.Errorf("/app gives %v, app gives %v", bundleNames(a), bundleNames(b))
	}
	if a, b := read("/"), read("."); !reflect.DeepEqual(a, b) {
		t.Errorf("/ gives %v, . gives %v", bundleNames(a), bundleNames(b))
	}
	if _, err := Read(context.Background(), "test", dir, []string{"/../x"}, Options{}); err == nil {
		t.Error("a path out of the repository was accepted")
	}
}

// TestFleetYAMLCannotClaimOwnerLabels: the labels by which the manager
// finds a Bundle's owner, shard or deployments are dropped from a
// fleet.yaml with a warning: with fleet-helm-name a GitRepo's Bundle would
// be pruned by that HelmOp's next build.
func TestFleetYAMLCannotClaimOwnerLabels(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
		"fleet.yaml": "labels:\n  team: blue\n  " + fleet.HelmOpLabel + ": web\n  " + fleet.ShardLabel + ": other\n  " +
			fleet.RepoLabel + ": someone-else\n",
	})
	var warnings []string
	b, err := readOne(t, dir, Options{Labels: map[string]string{fleet.RepoLabel: "mine"}, Warn: func(m string) { warnings = append(warnings, m) }})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"team": "blue", fleet.RepoLabel: "mine"}
	if !reflect.DeepEqual(b.Labels, want) {
		t.Errorf("labels %v, want %v", b.Labels, want)
	}
	joined := strings.Join(warnings, "\n")
	for _, k := range []string{fleet.HelmOpLabel, fleet.ShardLabel, fleet.RepoLabel} {
		if !strings.Contains(joined, k) {
			t.Errorf("no warning for %s: %q", k, warnings)
		}
	}
}

// TestAuthByPathGlobs: helmSecretNameForPaths / --helm-credentials-by-path-
// file keys are matched as in Rancher Fleet: the exact path first, then the
// keys in lexical order as filepath.Match patterns.
func TestAuthByPathGlobs(t *testing.T) {
	srv := helmrepo.New(t, helmrepo.Options{Username: "alice", Password: "s3cret"})
	srv.Publish(t, helmrepo.Chart(t, "app", "1.0.0"))
	dir := writeRepo(t, map[string]string{"a/x/fleet.yaml": "helm:\n  repo: " + srv.URL + "\n  chart: app\n"})
	good := HelmAuth{Username: "alice", Password: "s3cret"}
	bad := HelmAuth{Username: "alice", Password: "wrong"}
	cases := []struct {
		name   string
		byPath map[string]HelmAuth
		ok     bool
	}{
		{name: "glob", byPath: map[string]HelmAuth{"a/*": good}, ok: true},
		{name: "glob with ./", byPath: map[string]HelmAuth{"./a/*": good}, ok: true},
		{name: "glob elsewhere", byPath: map[string]HelmAuth{"b/*": good}},
		{name: "exact wins", byPath: map[string]HelmAuth{"a/*": bad, "a/x": good}, ok: true},
		{name: "first key in lexical order", byPath: map[string]HelmAuth{"a/?": bad, "a/*": good}, ok: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(context.Background(), "test", dir, []string{"a/x"}, Options{AuthByPath: tc.byPath})
			if tc.ok && err != nil {
				t.Fatal(err)
			}
			if !tc.ok && (err == nil || !strings.Contains(err.Error(), "401")) {
				t.Fatalf("err = %v, want 401", err)
			}
		})
	}
	if _, err := Read(context.Background(), "test", dir, []string{"a/x"}, Options{AuthByPath: map[string]HelmAuth{"a/[": good}}); err == nil ||
		!strings.Contains(err.Error(), "invalid pattern") {
		t.Fatalf("bad pattern: err = %v", err)
	}
}
