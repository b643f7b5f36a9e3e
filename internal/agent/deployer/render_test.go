package deployer

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	"k8s.io/apimachinery/pkg/api/equality"

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

// render is the chart Deploy installs for a bundle, before its objects get
// the agent's rules: the bundle's own chart, or one synthesized from its
// manifests.
func render(name string, m *manifest.Manifest, opts fleet.BundleDeploymentOptions) (*chart.Chart, error) {
	src, err := renderSource(m, opts)
	if err != nil || src.chart != nil {
		return src.chart, err
	}
	return synthesizeChart(name, src.docs)
}

func chartData(t *testing.T, files map[string]string, opts fleet.BundleDeploymentOptions) string {
	t.Helper()
	c, err := render("b", mf(t, files), opts)
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
	_, err := render("b", mf(t, map[string]string{"overlays/o/x_patch.yaml": "a: b"}), fleet.BundleDeploymentOptions{YAML: &fleet.YAMLOptions{Overlays: []string{"o"}}})
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
	_, err := render("b", mf(t, map[string]string{"kustomization.yaml": "resources: [missing.yaml]\n"}), fleet.BundleDeploymentOptions{})
	if !errors.Is(err, ErrRender) {
		t.Fatalf("bad kustomization: err = %v", err)
	}
}

// TestRenderKustomizeDirWithoutKustomization: as in Rancher Fleet, a
// kustomize.dir without a kustomization deploys the bundle without
// kustomize (overlays applied), and does not fall back to a kustomization
// at the bundle root.
func TestRenderKustomizeDirWithoutKustomization(t *testing.T) {
	files := map[string]string{
		"kustomization.yaml":       "namespace: rootns\nresources: [a.yaml]\n",
		"a.yaml":                   "kind: ConfigMap\napiVersion: v1\nmetadata: {name: a}\ndata: {x: '1'}\n",
		"overlays/o1/a_patch.yaml": "data: {x: '9'}\n",
	}
	for _, dir := range []string{"missing", "overlays"} {
		got := chartData(t, files, fleet.BundleDeploymentOptions{
			Kustomize: &fleet.KustomizeOptions{Dir: dir},
			YAML:      &fleet.YAMLOptions{Overlays: []string{"o1"}},
		})
		a, _, _ := strings.Cut(got[strings.Index(got, "manifests/a.yaml="):], "\n\n")
		if !strings.Contains(a, "name: a") || !strings.Contains(a, `x: "9"`) || strings.Contains(a, "namespace: rootns") {
			t.Fatalf("kustomize.dir %q: want plain YAML with the overlay, not the root kustomization:\n%s", dir, got)
		}
	}
}

func TestRenderChartNotFound(t *testing.T) {
	_, err := render("b", mf(t, map[string]string{"a.yaml": "x: y"}), fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: ".chart/x/c"}})
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

// TestPreRenderMatchesPostRender: for a synthesized chart the agent applies
// its rules to the files before Helm (preRender) instead of in Helm's
// post-renderer; both must yield the same objects, with the bundle's CRDs
// deciding the scope of kinds in other files, and the same refusals.
func TestPreRenderMatchesPostRender(t *testing.T) {
	crd := "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\n" +
		"spec: {group: example.com, scope: %s, names: {kind: Widget}}\n"
	docs := func(scope string) []namedDoc {
		return []namedDoc{
			{name: "a.yaml", content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: other, labels: {app: x}}\ndata: {k: v}\n" +
				"---\n# only a comment\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: ns1, namespace: bogus}\n"},
			{name: "list.yaml", content: "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Secret\n  metadata: {name: s}\n" +
				"- apiVersion: example.com/v1\n  kind: Widget\n  metadata: {name: w1}\n"},
			{name: "crd.yaml", content: fmt.Sprintf(crd, scope)},
			{name: "empty.yaml", content: "\n"},
		}
	}
	cases := []struct {
		name  string
		p     postRenderer
		scope string
	}{
		{name: "release namespace", p: postRenderer{bdName: "bd", releaseNamespace: "rel", keepCRDs: true}, scope: "Namespaced"},
		{name: "cluster-scoped custom kind", p: postRenderer{bdName: "bd2", releaseNamespace: "rel"}, scope: "Cluster"},
		{name: "target namespace refuses cluster-scoped objects", p: postRenderer{bdName: "bd", releaseNamespace: "t", targetNamespace: "t"}, scope: "Namespaced"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stream bytes.Buffer
			for _, d := range docs(tc.scope) {
				stream.WriteString("---\n" + d.content)
			}
			post := tc.p
			postOut, postErr := post.Run(&stream)
			pre := tc.p
			preDocs, crds, preErr := pre.preRender(docs(tc.scope))
			if (postErr != nil) != (preErr != nil) || postErr != nil && !errors.Is(preErr, ErrNamespace) {
				t.Fatalf("post-render err %v, pre-render err %v", postErr, preErr)
			}
			if postErr != nil {
				return
			}
			var joined strings.Builder
			for _, d := range preDocs {
				joined.WriteString(d.content)
			}
			want, err := ObjectsOf(postOut.String())
			if err != nil {
				t.Fatal(err)
			}
			got, err := ObjectsOf(joined.String())
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 5 || !equality.Semantic.DeepEqual(got, want) {
				t.Fatalf("pre-render objects differ from post-render:\n got %v\nwant %v", got, want)
			}
			if len(crds) != 1 || crds[0].GetName() != "widgets.example.com" {
				t.Errorf("CRDs %v, want widgets.example.com", crds)
			}
			if len(preDocs) != 4 || preDocs[1].name != "list.yaml" || strings.TrimSpace(preDocs[3].content) != "" {
				t.Errorf("files not kept in order with their names: %v", preDocs)
			}
			w := got[3] // the Widget
			wantNS := map[string]string{"Namespaced": "rel", "Cluster": ""}[tc.scope]
			if w.GetKind() != "Widget" || w.GetNamespace() != wantNS || got[1].GetNamespace() != "" ||
				w.GetLabels()[SetHashLabel] != SetHash(tc.p.bdName) || w.GetAnnotations()[SetIDAnnotation] != SetID(tc.p.bdName) {
				t.Errorf("widget %s ns %q labels %v annotations %v; namespace object ns %q", w.GetKind(), w.GetNamespace(),
					w.GetLabels(), w.GetAnnotations(), got[1].GetNamespace())
			}
		})
	}
}
