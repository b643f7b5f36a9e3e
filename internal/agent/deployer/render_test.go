package deployer

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/manifest"
)

func mf(t *testing.T, files map[string]string) *manifest.Manifest {
	t.Helper()
	var res []fleet.BundleResource
	for n, c := range files {
		res = append(res, fleet.BundleResource{Name: n, Content: c})
	}
	m, err := manifest.New(res)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func chartData(t *testing.T, files map[string]string, opts fleet.BundleDeploymentOptions) string {
	t.Helper()
	c, err := Render("b", mf(t, files), opts)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range c.Files {
		out = append(out, f.Name+"="+string(f.Data))
	}
	return strings.Join(out, "\n")
}

func TestRenderOverlays(t *testing.T) {
	files := map[string]string{
		"a.yaml":                   "kind: ConfigMap\napiVersion: v1\nmetadata: {name: a}\ndata: {x: '1', y: '2'}\n",
		"b.json":                   `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"b"}}`,
		"overlays/o1/a_patch.yaml": "data: {x: '9', y: null}\n",
		"overlays/o2/b.json":       `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"b2"}}`,
		"notes.txt":                "ignored",
	}
	got := chartData(t, files, fleet.BundleDeploymentOptions{YAML: &fleet.YAMLOptions{Overlays: []string{"o1", "o2"}}})
	for _, want := range []string{"x: \"9\"", "name: b2"} {
		if !strings.Contains(got, want) {
			t.Fatalf("missing %q in\n%s", want, got)
		}
	}
	for _, bad := range []string{"y: \"2\"", "ignored", "name: b\n"} {
		if strings.Contains(got, bad) {
			t.Fatalf("unexpected %q in\n%s", bad, got)
		}
	}
	_, err := Render("b", mf(t, map[string]string{"overlays/o/x_patch.yaml": "a: b"}), fleet.BundleDeploymentOptions{YAML: &fleet.YAMLOptions{Overlays: []string{"o"}}})
	if !errors.Is(err, ErrRender) {
		t.Fatalf("patch of a missing file: err = %v", err)
	}
}

func TestRenderKustomizeDir(t *testing.T) {
	files := map[string]string{
		"k/kustomization.yaml": "namespace: kns\nresources: [cm.yaml]\n",
		"k/cm.yaml":            "kind: ConfigMap\napiVersion: v1\nmetadata: {name: a}\n",
		"other.yaml":           "kind: ConfigMap\napiVersion: v1\nmetadata: {name: other}\n",
	}
	got := chartData(t, files, fleet.BundleDeploymentOptions{Kustomize: &fleet.KustomizeOptions{Dir: "k"}})
	if !strings.Contains(got, "namespace: kns") || strings.Contains(got, "other") {
		t.Fatalf("kustomize output:\n%s", got)
	}
	_, err := Render("b", mf(t, map[string]string{"kustomization.yaml": "resources: [missing.yaml]\n"}), fleet.BundleDeploymentOptions{})
	if !errors.Is(err, ErrRender) {
		t.Fatalf("bad kustomization: err = %v", err)
	}
}

func TestRenderChartNotFound(t *testing.T) {
	_, err := Render("b", mf(t, map[string]string{"a.yaml": "x: y"}), fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: ".chart/x/c"}})
	if !errors.Is(err, ErrRender) || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("err = %v", err)
	}
}

func TestPostRendererNamespaces(t *testing.T) {
	in := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: other}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n---\n" +
		"apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec: {group: example.com, scope: Namespaced, names: {kind: Widget}}\n"
	p := &postRenderer{bdName: "bd", releaseNamespace: "rel", keepCRDs: true}
	out, err := p.Run(bytes.NewBufferString(in))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := ObjectsOf(out.String())
	if err != nil {
		t.Fatal(err)
	}
	if objs[0].GetNamespace() != "other" || objs[1].GetNamespace() != "rel" || objs[2].GetNamespace() != "" {
		t.Fatalf("namespaces %q %q %q", objs[0].GetNamespace(), objs[1].GetNamespace(), objs[2].GetNamespace())
	}
	if objs[2].GetAnnotations()[ResourcePolicyAnnotation] != "keep" || objs[0].GetLabels()[SetHashLabel] != SetHash("bd") {
		t.Fatalf("metadata %v %v", objs[2].GetAnnotations(), objs[0].GetLabels())
	}
	p = &postRenderer{bdName: "bd", releaseNamespace: "t", targetNamespace: "t"}
	if _, err := p.Run(bytes.NewBufferString(in)); !errors.Is(err, ErrNamespace) {
		t.Fatalf("CRD with namespace set: err = %v", err)
	}
}

func TestReleaseNameAndNamespace(t *testing.T) {
	long := strings.Repeat("a", 70)
	if n := ReleaseName(long, fleet.BundleDeploymentOptions{}); len(n) > 53 {
		t.Fatalf("release name %q too long", n)
	}
	if n := ReleaseName("x", fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{ReleaseName: "y"}}); n != "y" {
		t.Fatal(n)
	}
	for _, tc := range []struct {
		opts fleet.BundleDeploymentOptions
		want string
	}{
		{fleet.BundleDeploymentOptions{}, "default"},
		{fleet.BundleDeploymentOptions{DefaultNamespace: "d"}, "d"},
		{fleet.BundleDeploymentOptions{DefaultNamespace: "d", TargetNamespace: "t"}, "t"},
	} {
		if got := ReleaseNamespace(tc.opts); got != tc.want {
			t.Fatalf("namespace %q, want %q", got, tc.want)
		}
	}
}
