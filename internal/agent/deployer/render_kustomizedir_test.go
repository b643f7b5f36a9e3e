package deployer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestKustomizeDirOutsideTheBundle: kustomize.dir is resolved among the
// bundle's resources as Rancher Fleet's agent resolves it ("/x" is "x").
// One outside them ("../x") names no kustomization: the bundle deploys as
// plain YAML with its overlays (a chart as rendered), and a real
// kustomization at that path on the agent's disk (relative to its working
// directory, or absolute) is never built. A bundle that holds a
// kustomization of its own fails with a render error, as in Rancher, and
// what is deployed stays.
func TestKustomizeDirOutsideTheBundle(t *testing.T) {
	ctx := context.Background()
	down := downstream(t)
	d := newTestDeployer(t)

	// A kustomization on disk where "../base" and the absolute dir point,
	// seen from the agent's working directory.
	disk := t.TempDir()
	writeDisk(t, filepath.Join(disk, "base", "kustomization.yaml"), "namePrefix: disk-\nresources: [cm.yaml]\n")
	writeDisk(t, filepath.Join(disk, "base", "cm.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: leak}\n")
	writeDisk(t, filepath.Join(disk, "work", ".keep"), "")
	t.Chdir(filepath.Join(disk, "work"))

	plain := map[string]string{
		"a.yaml":                   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {x: '1'}\n",
		"overlays/o1/a_patch.yaml": "data: {x: '9'}\n",
	}
	chart := map[string]string{
		"chart/Chart.yaml":        "apiVersion: v2\nname: c\nversion: 0.1.0\n",
		"chart/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {x: '1'}\n",
	}
	withBase := map[string]string{
		"base/kustomization.yaml": "namePrefix: base-\nresources: [cm.yaml]\n",
		"base/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {x: '5'}\n",
	}
	cases := []struct {
		ns    string
		files map[string]string
		dir   string
		helm  bool
		// name and x are the ConfigMap deployed and its data.x.
		name, x string
	}{
		{ns: "kout-parent", files: plain, dir: "../base", name: "a", x: "9"},
		{ns: "kout-deep", files: plain, dir: "sub/../../../base", name: "a", x: "9"},
		{ns: "kout-disk-abs", files: plain, dir: filepath.Join(disk, "base"), name: "a", x: "9"},
		{ns: "kout-chart", files: chart, dir: "../base", helm: true, name: "a", x: "1"},
		{ns: "kout-abs", files: withBase, dir: "/base", name: "base-a", x: "5"},
	}
	for _, tc := range cases {
		opts := fleet.BundleDeploymentOptions{DefaultNamespace: tc.ns,
			Kustomize: &fleet.KustomizeOptions{Dir: tc.dir}, YAML: &fleet.YAMLOptions{Overlays: []string{"o1"}}}
		if tc.helm {
			opts.Helm = &fleet.HelmOptions{Chart: "chart"}
		}
		if _, err := deployFiles(t, d, tc.ns, tc.files, opts); err != nil {
			t.Errorf("kustomize.dir %q: %v", tc.dir, err)
			continue
		}
		cms, err := down.Clientset.CoreV1().ConfigMaps(tc.ns).List(ctx, metav1.ListOptions{LabelSelector: SetHashLabel})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, cm := range cms.Items {
			got = append(got, cm.Name+"="+cm.Data["x"])
		}
		if len(got) != 1 || got[0] != tc.name+"="+tc.x {
			t.Errorf("kustomize.dir %q: ConfigMaps %q, want only %s=%s", tc.dir, got, tc.name, tc.x)
		}
	}

	// A bundle with a kustomization of its own: its deployment fails
	// before anything downstream changes.
	files := map[string]string{"dev/kustomization.yaml": "resources: [../a.yaml]\n"}
	for k, v := range plain {
		files[k] = v
	}
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: "kout-parent", Kustomize: &fleet.KustomizeOptions{Dir: "../base"}}
	_, err := deployFiles(t, d, "kout-parent", files, opts)
	if !errors.Is(err, ErrRender) || !strings.Contains(err.Error(), `kustomize.dir "../base" is outside the bundle`) {
		t.Fatalf("bundle with a kustomization, kustomize.dir outside: err = %v, want a render error naming the dir", err)
	}
	cm, err := down.Clientset.CoreV1().ConfigMaps("kout-parent").Get(ctx, "a", metav1.GetOptions{})
	if err != nil || cm.Data["x"] != "9" {
		t.Fatalf("after the failed deploy: ConfigMap a %v (%v), want it kept with x=9", cm.Data, err)
	}
	for _, ns := range []string{"kout-parent", "kout-disk-abs"} {
		for _, n := range []string{"leak", "disk-leak"} {
			if _, err := down.Clientset.CoreV1().ConfigMaps(ns).Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("ConfigMap %s/%s from the kustomization on disk: err = %v, want NotFound", ns, n, err)
			}
		}
	}
}

func writeDisk(t *testing.T, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
