package bundlereader

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	chartv2 "helm.sh/helm/v4/pkg/chart/v2"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/testenv/helmrepo"
)

func readOne(t *testing.T, dir string, opts Options) (*fleet.Bundle, error) {
	t.Helper()
	bs, err := Read(context.Background(), "test", dir, nil, opts)
	if err != nil {
		return nil, err
	}
	if len(bs) != 1 {
		t.Fatalf("got %d bundles, want 1", len(bs))
	}
	return bs[0], nil
}

func resourceNames(b *fleet.Bundle) map[string]string {
	out := map[string]string{}
	for _, r := range b.Spec.Resources {
		out[r.Name] = r.Encoding
	}
	return out
}

func mustHaveChart(t *testing.T, b *fleet.Bundle, h *fleet.HelmOptions, name, version string) {
	t.Helper()
	if h == nil || !strings.HasPrefix(h.Chart, ".chart/") || !strings.HasSuffix(h.Chart, "/"+name) {
		t.Fatalf("helm.chart = %+v, want .chart/<hash>/%s", h, name)
	}
	if h.Version != version || h.Repo != "" {
		t.Errorf("helm version %q repo %q, want %q and no repo", h.Version, h.Repo, version)
	}
	res := resourceNames(b)
	for _, f := range []string{"Chart.yaml", "templates/cm.yaml"} {
		if _, ok := res[h.Chart+"/"+f]; !ok {
			t.Errorf("resource %s/%s missing; have %v", h.Chart, f, res)
		}
	}
}

func TestChartFromHTTPRepository(t *testing.T) {
	srv := helmrepo.New(t, helmrepo.Options{})
	for _, v := range []string{"1.0.0", "1.2.0", "2.0.0"} {
		srv.Publish(t, helmrepo.Chart(t, "mychart", v))
	}
	dir := writeRepo(t, map[string]string{"fleet.yaml": `
helm:
  repo: ` + srv.URL + `
  chart: mychart
  version: "^1.0"
targetCustomizations:
- name: v2
  clusterGroup: next
  helm:
    version: 2.0.0
- name: values-only
  clusterGroup: other
  helm:
    values: {a: b}
`})
	b, err := readOne(t, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustHaveChart(t, b, b.Spec.Helm, "mychart", "1.2.0")
	mustHaveChart(t, b, b.Spec.Targets[0].Helm, "mychart", "2.0.0")
	if b.Spec.Targets[0].Helm.Chart == b.Spec.Helm.Chart {
		t.Error("different versions must be stored under different paths")
	}
	if got := b.Spec.Targets[1].Helm; got.Chart != b.Spec.Helm.Chart || got.Version != "1.2.0" {
		t.Errorf("values-only customization got chart %q %q, want the root chart", got.Chart, got.Version)
	}

	t.Run("chart URL", func(t *testing.T) {
		dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: " + srv.URL + "/mychart-1.0.0.tgz\n"})
		b, err := readOne(t, dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		mustHaveChart(t, b, b.Spec.Helm, "mychart", "1.0.0")
	})
	t.Run("missing version", func(t *testing.T) {
		dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + srv.URL + "\n  chart: mychart\n  version: '>=3'\n"})
		_, err := readOne(t, dir, Options{})
		if err == nil || !strings.Contains(err.Error(), `chart "mychart" version ">=3" not found`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("missing chart", func(t *testing.T) {
		dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + srv.URL + "\n  chart: nope\n"})
		_, err := readOne(t, dir, Options{})
		if err == nil || !strings.Contains(err.Error(), `chart "nope" not found`) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestChartRepositoryAuthAndTLS(t *testing.T) {
	srv := helmrepo.New(t, helmrepo.Options{Username: "alice", Password: "s3cret", TLS: true})
	srv.Publish(t, helmrepo.Chart(t, "secure", "0.1.0"))
	dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + srv.URL + "\n  chart: secure\n"})
	good := HelmAuth{Username: "alice", Password: "s3cret", CABundle: srv.CAPEM()}

	cases := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "unknown CA", opts: Options{Auth: HelmAuth{Username: "alice", Password: "s3cret"}}, wantErr: "certificate"},
		{name: "no credentials", opts: Options{Auth: HelmAuth{CABundle: srv.CAPEM()}}, wantErr: "401 Unauthorized (check the Helm credentials)"},
		{name: "wrong password", opts: Options{Auth: HelmAuth{Username: "alice", Password: "x", CABundle: srv.CAPEM()}}, wantErr: "401"},
		{name: "regex excludes repo", opts: Options{Auth: good, HelmRepoURLRegex: "^https://elsewhere"}, wantErr: "401"},
		{name: "private CA", opts: Options{Auth: good}},
		{name: "insecure", opts: Options{Auth: HelmAuth{Username: "alice", Password: "s3cret", InsecureSkipTLS: true}}},
		{name: "regex matches", opts: Options{Auth: good, HelmRepoURLRegex: "^https://127"}},
		{name: "by path", opts: Options{AuthByPath: map[string]HelmAuth{".": good}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := readOne(t, dir, tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("error leaks the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mustHaveChart(t, b, b.Spec.Helm, "secure", "0.1.0")
		})
	}
	t.Run("chart URL with basic auth", func(t *testing.T) {
		dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: " + srv.URL + "/secure-0.1.0.tgz\n"})
		if _, err := readOne(t, dir, Options{Auth: HelmAuth{CABundle: srv.CAPEM()}}); err == nil || !strings.Contains(err.Error(), "401") {
			t.Fatalf("err = %v, want 401", err)
		}
		b, err := readOne(t, dir, Options{Auth: good})
		if err != nil {
			t.Fatal(err)
		}
		mustHaveChart(t, b, b.Spec.Helm, "secure", "0.1.0")
	})
}

func TestChartFromOCIRegistry(t *testing.T) {
	host := ociRegistry(t, "", "", helmrepo.Chart(t, "ocichart", "1.0.0"), helmrepo.Chart(t, "ocichart", "1.1.0"))
	cases := []struct {
		name, fleetYAML, version string
	}{
		{name: "constraint", fleetYAML: "helm:\n  chart: oci://" + host + "/charts/ocichart\n  version: '~1.0.0'\n", version: "1.0.0"},
		{name: "latest", fleetYAML: "helm:\n  chart: oci://" + host + "/charts/ocichart\n", version: "1.1.0"},
		{name: "exact", fleetYAML: "helm:\n  chart: oci://" + host + "/charts/ocichart\n  version: 1.1.0\n", version: "1.1.0"},
		{name: "oci repo", fleetYAML: "helm:\n  repo: oci://" + host + "/charts\n  chart: ocichart\n  version: 1.0.0\n", version: "1.0.0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := readOne(t, writeRepo(t, map[string]string{"fleet.yaml": tc.fleetYAML}), Options{Auth: HelmAuth{BasicHTTP: true}})
			if err != nil {
				t.Fatal(err)
			}
			mustHaveChart(t, b, b.Spec.Helm, "ocichart", tc.version)
		})
	}
	t.Run("basic auth", func(t *testing.T) {
		host := ociRegistry(t, "bob", "pw", helmrepo.Chart(t, "private", "0.2.0"))
		dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: oci://" + host + "/charts/private\n  version: 0.2.0\n"})
		if _, err := readOne(t, dir, Options{Auth: HelmAuth{BasicHTTP: true}}); err == nil {
			t.Fatal("pull without credentials succeeded")
		}
		b, err := readOne(t, dir, Options{Auth: HelmAuth{BasicHTTP: true, Username: "bob", Password: "pw"}})
		if err != nil {
			t.Fatal(err)
		}
		mustHaveChart(t, b, b.Spec.Helm, "private", "0.2.0")
	})
}

func TestChartDependencies(t *testing.T) {
	srv := helmrepo.New(t, helmrepo.Options{})
	srv.Publish(t, helmrepo.Chart(t, "dep", "1.0.0"))
	srv.Publish(t, helmrepo.Chart(t, "parent", "1.0.0", &chartv2.Dependency{Name: "dep", Version: "1.x", Repository: srv.URL}))
	files := map[string]string{
		"fleet.yaml":                "helm:\n  chart: chart\n",
		"chart/Chart.yaml":          "apiVersion: v2\nname: local\nversion: 0.1.0\ndependencies:\n- name: dep\n  version: 1.0.0\n  repository: " + srv.URL + "\n- name: sibling\n  version: 0.1.0\n  repository: file://../sibling\n",
		"chart/templates/cm.yaml":   "kind: ConfigMap\n",
		"sibling/Chart.yaml":        "apiVersion: v2\nname: sibling\nversion: 0.1.0\n",
		"sibling/templates/cm.yaml": "kind: ConfigMap\n",
	}
	b, err := readOne(t, writeRepo(t, files), Options{})
	if err != nil {
		t.Fatal(err)
	}
	res := resourceNames(b)
	for _, want := range []string{"chart/charts/dep/Chart.yaml", "chart/charts/dep/templates/cm.yaml", "chart/charts/sibling/Chart.yaml"} {
		if _, ok := res[want]; !ok {
			t.Errorf("dependency file %s missing: %v", want, res)
		}
	}
	t.Run("disableDependencyUpdate", func(t *testing.T) {
		files["fleet.yaml"] = "helm:\n  chart: chart\n  disableDependencyUpdate: true\n"
		b, err := readOne(t, writeRepo(t, files), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := resourceNames(b)["chart/charts/dep/Chart.yaml"]; ok {
			t.Error("dependency downloaded although disabled")
		}
	})
	t.Run("from repository", func(t *testing.T) {
		dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + srv.URL + "\n  chart: parent\n"})
		b, err := readOne(t, dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := resourceNames(b)[b.Spec.Helm.Chart+"/charts/dep/Chart.yaml"]; !ok {
			t.Errorf("dependency of a downloaded chart missing: %v", resourceNames(b))
		}
	})
}

func TestChartZipBombRefused(t *testing.T) {
	srv := helmrepo.New(t, helmrepo.Options{})
	srv.PutFile("bomb-1.0.0.tgz", zipBomb(t, 8<<20))
	dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: " + srv.URL + "/bomb-1.0.0.tgz\n"})
	_, err := readOne(t, dir, Options{Limits: Limits{MaxChartUncompressed: 2 << 20, MaxFileSize: 16 << 20}})
	if err == nil || !strings.Contains(err.Error(), "zip bomb") {
		t.Fatalf("err = %v, want a zip bomb error", err)
	}
	_, err = readOne(t, dir, Options{Limits: Limits{MaxFileSize: 1 << 20}})
	if err == nil || !strings.Contains(err.Error(), "larger than the limit") {
		t.Fatalf("err = %v, want a file size error", err)
	}
}

func TestChartBadRepositoryContent(t *testing.T) {
	cases := []struct{ name, index, fleetYAML, want string }{
		{name: "nil entries", index: "apiVersion: v1\nentries:\n  x: [null, {name: x}]\n", want: `chart "x" not found`},
		{name: "not a helm repo", index: "<html>hello</html>", want: "invalid index.yaml"},
		{name: "no apiVersion", index: "entries: {}\n", want: "no apiVersion"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(tc.index)) }))
			defer srv.Close()
			_, err := readOne(t, writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + srv.URL + "\n  chart: x\n"}), Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	_, err := readOne(t, writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: https://example.invalid\n"}), Options{})
	if err == nil || !strings.Contains(err.Error(), "helm.chart is empty") {
		t.Fatalf("repo without chart: err = %v", err)
	}
}

func TestChartUnreachableRepository(t *testing.T) {
	srv := helmrepo.New(t, helmrepo.Options{})
	url := srv.URL
	srv.Close()
	dir := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + url + "\n  chart: x\n"})
	_, err := readOne(t, dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "cannot reach "+url+"/index.yaml") {
		t.Fatalf("err = %v", err)
	}
}
